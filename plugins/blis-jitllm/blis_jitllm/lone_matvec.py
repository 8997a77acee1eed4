"""Lone matvecs: a host block's raw weights multiplied on a card one matrix at a time
(``docs/upstream/jitllm.md`` §5 "When ``jitllmd serve`` serves a lone matvec", §9 "Lone
matvecs").

In ``jitllmd serve`` a host block's projection goes through ``State.mv``
(``engine/model/forward.go@00860835``, index id 71457336842): a weight the ``.jlm``
holds packed (every quantised tensor) is read in place by the host and never offered; a
raw one (F32, F16, BF16) is offered to the cards (``GPU.MatVec``, index id
70885171611), which ask each card in turn. ``devTier.matVec``
(``jit/gpu/tier``, index id 70877689194) first asks ``mvPays``: per session, each offer
adds its weight's bytes to the session's sample on that card; the first
:data:`MV_SAMPLE` - 1 offers are served whatever the sample says ("the sample is taken
by serving"), the :data:`MV_SAMPLE`-th settles the verdict, all or nothing, by the
sample's average bytes per offer (integer division) against :data:`MV_MIN_BYTES`, and
the verdict never moves again (``TestMVPays``, ``TestMVPaysDoesNotDrift``, index id
71051660541). A declined verdict is ``tooSmall``, which stops the walk over the cards
(the verdict judges the model, not a card). Then ``resident(-1, ...)``: a copy of the
weight on the card keyed by its address, made once where the card's budget has room
and charged to it; where it has none the key is kept as a decline ("declines from here
on; the CPU keeps this tensor") and the offer is ``noRoom``, which walks on to the next
card (whose own sample counts the offer too). A copy is refunded only by ``Forget``,
when the host pager recycles the frame the weight lived in.

Only a pass of one row offers (``State.mv``); a pass of several rows runs ``MatMul`` on
the batched path (§9).

The port (2026-12-06): :func:`block_matrices` lists a block's raw matrices in the
order its forward offers them; :class:`CardCopies` plays each single-row pass's offers
under the session's samples (:class:`MatVecSample`, one per card) against the copies and
declines the cards keep, making a copy where a card has room now; :func:`lone_parts`
prices the pass with the served matrices on their cards, one crossing each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from blis_core.contracts.catalog import ModelArchitecture
from blis_core.contracts.plan import LayerKind, MatVec, PlanPart

__all__ = [
    "HEAD",
    "IN_MOE",
    "MV_MIN_BYTES",
    "MV_SAMPLE",
    "CardCopies",
    "Key",
    "MatVecSample",
    "Matrix",
    "block_matrices",
    "lone_parts",
]

#: ``mvSample``: the offers a session's sample takes on a card before its verdict
MV_SAMPLE = 64
#: ``mvMinBytes``: the average weight bytes per offer at which a lone matvec pays (3300
#: KiB; ``WithMinMatVecBytes`` / ``JITLLM_MV_MIN_KB`` move it, no ``jitllmd serve`` flag)
MV_MIN_BYTES = 3300 << 10


@dataclass(slots=True)
class MatVecSample:
    """``mvState``: one session's running sample on one card."""

    seen: int = 0
    offers: int = 0
    verdict: int = 0
    """0 while sampling; 1 serves every later offer; -1 declines every one"""

    def pays(self, nbytes: int, minimum: int = MV_MIN_BYTES) -> bool:
        """``mvPays``: whether this offer of ``nbytes`` weight bytes is served."""
        if self.verdict == 0:
            self.seen += nbytes
            self.offers += 1
            if self.offers < MV_SAMPLE:
                return True
            self.verdict = 1 if self.seen // self.offers >= minimum else -1
        return self.verdict > 0


@dataclass(frozen=True, slots=True)
class Matrix:
    """One raw weight a host block's forward offers: ``rows`` x ``cols`` of ``nbytes``."""

    block: int
    name: str
    rows: int
    cols: int
    nbytes: int


def block_matrices(model: ModelArchitecture, block: int, width: int) -> tuple[Matrix, ...]:
    """A block's raw matrices in the order its forward multiplies them, each ``width``
    bytes a weight: q, k, v, o, then a dense FFN's gate, up and down; a mixture block's
    F32 router (4 bytes a weight, ``JIT.MatVec``: "Mixture routers ... ride here") and
    its shared expert's gate, up and down (``sharedExpertOut``: ``s.mv``; its one-logit
    F32 gate is ``MatVecHost``, never offered), its routed banks never (an expert
    bank's sheet is not offered). The router's and the shared expert's are
    :data:`IN_MOE` (the lowering prices their reads inside the MoE layer)."""
    h, d = model.hidden_size, model.head_dim
    q, kv = model.num_attention_heads * d, model.num_kv_heads * d
    shapes: list[tuple[str, int, int, int]] = [
        ("q", q, h, width),
        ("k", kv, h, width),
        ("v", kv, h, width),
        ("o", h, q, width),
    ]
    moe = model.moe
    if moe is None or block < moe.first_dense_layers:
        ffn = model.intermediate_size if moe is None else moe.dense_intermediate_size
        shapes += [("gate", ffn, h, width), ("up", ffn, h, width), ("down", h, ffn, width)]
    else:
        shapes.append(("router", moe.num_experts, h, 4))
        if moe.num_shared_experts:
            sw = moe.shared_expert_intermediate_size
            shapes += [
                ("shared_gate", sw, h, width),
                ("shared_up", sw, h, width),
                ("shared_down", h, sw, width),
            ]
    return tuple(Matrix(block, name, r, c, r * c * w) for name, r, c, w in shapes)


#: a copy's identity on a card: block, matrix name and the block's stint on the host (the
#: frame its weights live in: ``resident`` keys a lone matvec's copy by its address)
Key = tuple[int, str, int]


@dataclass(slots=True)
class CardCopies:
    """The copies the cards hold of the host's raw matrices and the declines they keep
    (``devTier.res``: a key once declined stays declined, "declines from here on; the
    CPU keeps this tensor"), over ``cards`` devices in the order ``GPU.MatVec`` asks
    them."""

    cards: int
    held: dict[Key, int] = field(default_factory=dict)
    """each copy's card"""
    nbytes: dict[Key, int] = field(default_factory=dict)
    declined: dict[Key, set[int]] = field(default_factory=dict)
    _memo: dict[tuple[int, ...], tuple[int | None, ...]] = field(default_factory=dict)

    def offer_pass(
        self,
        matrices: Sequence[tuple[Matrix, Key]],
        samples: list[MatVecSample],
        room: Callable[[int], int],
        charge: Callable[[int, int], None],
        minimum: int = MV_MIN_BYTES,
    ) -> tuple[int | None, ...]:
        """One single-row pass's offers of ``matrices`` (each with its key) under one
        session's ``samples`` (one per card): per matrix, the card that serves it (None:
        the host). Each offer walks the cards in order (``GPU.MatVec``): the card's
        sample (``mvPays``; a declined verdict, ``tooSmall``, stops the walk), then its
        copy (served), a decline it keeps (``noRoom``: the next card), else ``room(card)``
        (the copy made where it fits, ``charge(card, bytes)``: served; else a decline
        kept: the next card). A session whose samples have all settled meets the same
        answer until a copy, a decline or a forgotten block changes it."""
        verdicts = tuple(x.verdict for x in samples)
        settled = all(v != 0 for v in verdicts)
        if settled and verdicts in self._memo:
            return self._memo[verdicts]
        changed = False
        served: list[int | None] = []
        for m, key in matrices:
            at = None
            for j, sample in enumerate(samples):
                if not sample.pays(m.nbytes, minimum):
                    break
                held = self.held.get(key)
                if held == j:
                    at = j
                    break
                if j in self.declined.get(key, ()):
                    continue
                changed = True
                if held is None and room(j) >= m.nbytes:
                    self.held[key] = j
                    self.nbytes[key] = m.nbytes
                    charge(j, m.nbytes)
                    at = j
                    break
                self.declined.setdefault(key, set()).add(j)
            served.append(at)
        mask = tuple(served)
        if changed:
            self._memo.clear()
        elif settled:
            self._memo[verdicts] = mask
        return mask

    def forget(self, blocks: set[int], charge: Callable[[int, int], None]) -> None:
        """``Forget`` of the frames ``blocks``' weights lived in: their copies dropped
        and refunded (``charge`` of a negative count), their declines dropped."""
        for key in [k for k in self.held if k[0] in blocks]:
            charge(self.held.pop(key), -self.nbytes.pop(key))
        for key in [k for k in self.declined if k[0] in blocks]:
            del self.declined[key]
        self._memo.clear()


#: the name of the output head's matrix among a pass's offers (:func:`lone_parts`)
HEAD = "output"
#: the matrices whose reads the lowering prices inside a mixture block's MoE layer: a
#: served one adds its crossing alone (``MatVec.read`` False), one kept home nothing
IN_MOE = frozenset({"router", "shared_gate", "shared_up", "shared_down"})


def _grouped(matrices: list[Matrix], impl: str) -> tuple[MatVec, ...]:
    """``matrices`` as :class:`MatVec` runs of one shape each, in first-seen order."""
    counts: dict[tuple[int, int, bool], int] = {}
    for m in matrices:
        key = (m.rows, m.cols, m.name not in IN_MOE)
        counts[key] = counts.get(key, 0) + 1
    return tuple(
        MatVec(rows=r, cols=c, count=n, impl=impl, read=read) for (r, c, read), n in counts.items()
    )


def lone_parts(
    parts: tuple[PlanPart, ...],
    host: str,
    device: str,
    link: str,
    matrices: tuple[Matrix, ...],
    mask: tuple[int | None, ...],
    impl: str,
) -> tuple[PlanPart, ...]:
    """``parts`` for a single-row pass that serves the matrices ``mask`` puts on a card
    (``matrices`` are the host blocks', in block order, as the host's parts run them,
    then the output head's, :data:`HEAD`, where the host runs it): each host part
    holding a served matrix runs its blocks' projections (and its head) one matrix at a
    time (:attr:`~blis_core.contracts.plan.PlanPart.matvecs`: its layers stay, their
    GEMMs priced as its matvecs), those it keeps as its own matvecs, and is followed by
    a part per card that serves some, on ``device`` across ``link``, whose matvecs cross
    alone. A mixture block's MoE layer keeps its router's and shared expert's reads
    (:data:`IN_MOE`): served, they add their crossings alone. Every part keeps its page
    link, so a step's ``page_in_bytes`` keep their slots."""
    order = list(dict.fromkeys(m.block for m in matrices if m.name != HEAD))
    out: list[PlanPart] = []
    at = 0
    for part in parts:
        blocks = sum(x.count for x in part.layers if x.kind is LayerKind.QKV_PROJ)
        head = any(x.kind is LayerKind.LOGITS for x in part.layers)
        if part.hardware != host or part.link is not None or not (blocks or head):
            out.append(part)
            continue
        run = set(order[at : at + blocks])
        at += blocks
        mine = [
            (m, c)
            for m, c in zip(matrices, mask, strict=True)
            if (m.name == HEAD and head) or (m.name != HEAD and m.block in run)
        ]
        if all(c is None for _, c in mine):
            out.append(part)
            continue
        kept = [m for m, c in mine if c is None and m.name not in IN_MOE]
        out.append(part.model_copy(update={"matvecs": _grouped(kept, impl)}))
        for card in sorted({c for _, c in mine if c is not None}):
            on = [m for m, c in mine if c == card]
            out.append(PlanPart(hardware=device, layers=(), link=link, matvecs=_grouped(on, impl)))
    return tuple(out)
