"""Which device kernel a pass's matrix-vector products run on, by the rows it carries
(``jit/gpu/tier/rows.go@13082588``, ``docs/upstream/jitllm.md`` §4.1).

A pass of several rows on a device is one ragged step (``LayersRows``): every block's
weights are read once for all its rows. Each projection runs ``ragStepMV``'s choice:

* one row: the decode matvec (``jitllm:generated``), a row's own forward;
* two to :data:`GROUP_TOK_MAX` rows of quantized weights: ``groupMV``, the decode matvec
  with every row's token in one thread (the same kernel and rate, so the same key);
* more rows, or two and more of 16-bit weights (``groupMV`` declines float formats): the
  batched ("tiled") twin over the step's rows (``ragMV``: GemmVolta's staged tiles on an
  sm_70 card), key :data:`TILED_KERNEL`, whose weight reads jitllm measured slower than
  the decode matvec's on a V100 (~530 against ~730 GB/s, ``docs/perf/current.md@05d794dd``).

The engine lowers each placement twice, its accelerator parts' projections keyed
``jitllm:generated`` and then :data:`TILED_KERNEL` (:func:`tiled_parts`), and a step
carries the one its rows run on (``StepShape.parts``). Not modelled: the twin's padding
of the rows to its grain (8 rows on a card without an integer matrix instruction), its
f16 conversion and Reduce launches, and a host part's own batched path (host parts keep
their kernels).
"""

from __future__ import annotations

from collections.abc import Sequence

from blis_core.contracts.plan import LayerKind, PlanPart

__all__ = [
    "GROUP_TOK_MAX",
    "MATVEC_KERNEL",
    "PROJECTION_KINDS",
    "TILED_KERNEL",
    "runs_tiled",
    "tiled_parts",
]

#: ``groupTokMax``: the widest step the decode matvec carries every row of in one thread
GROUP_TOK_MAX = 4
#: the decode matvec (and ``groupMV``, the same kernel over a few rows)
MATVEC_KERNEL = "jitllm:generated"
#: the batched twin a pass of more rows runs its projections on
TILED_KERNEL = "jitllm:tiled"
#: the layer kinds whose products ``ragStepMV`` chooses for: q/k/v, the attention
#: output, the FFN's projections and the output head
PROJECTION_KINDS = frozenset(
    {LayerKind.QKV_PROJ, LayerKind.O_PROJ, LayerKind.MLP, LayerKind.LOGITS}
)


def runs_tiled(rows: int, quantized: bool) -> bool:
    """Whether a device pass of ``rows`` token rows runs its projections on the batched
    twin: more than :data:`GROUP_TOK_MAX` rows, or two or more when the weights are not
    quantized (``groupKern`` refuses float formats). ``rows`` counts every row of the
    pass, prompt rows included (a prompt chunk rides the same ragged step). Refuses a
    negative count."""
    if rows < 0:
        raise ValueError(f"rows {rows}: a pass carries zero or more rows")
    if rows < 2:
        return False
    return rows > GROUP_TOK_MAX or not quantized


def tiled_parts(parts: Sequence[PlanPart], accelerator: str) -> tuple[PlanPart, ...]:
    """``parts`` with the projections of every part on ``accelerator`` keyed
    :data:`TILED_KERNEL`; the host's parts, the other layers, links and page links as
    they were. The placement is the same, so a step's ``page_in_bytes`` keep their
    slots."""
    out = []
    for part in parts:
        if part.hardware != accelerator:
            out.append(part)
            continue
        layers = tuple(
            layer.model_copy(update={"impl": TILED_KERNEL})
            if layer.kind in PROJECTION_KINDS and layer.impl == MATVEC_KERNEL
            else layer
            for layer in part.layers
        )
        out.append(part.model_copy(update={"layers": layers}))
    return tuple(out)
