"""The jitllm engine instance and factory (the BLIS engine contract): a model on one CUDA
device and, when the pool names its machine, on several of its devices and its host.

Plan (``docs/upstream/jitllm.md`` §1-§3): the device's budget is its free memory (the
runtime's total less the CUDA context) less jitllm's headroom, or ``-devices
cuda:0=BYTES``; the batched step's scratch is reserved first (taken as the
Environment's activation peak of a 512-row step: an assumption, jitllm measures it).
Blocks are offered in order (at most ``-gpu-layers``) to the devices ``-devices`` names,
each with its budget and the scratch, and placed by
:func:`~blis_jitllm.placement.place_blocks` with the history of one full context and the
head as the plan's extra; the head rule (:func:`~blis_jitllm.placement.place_head`)
decides where the output head runs. Blocks the device does not take, and the head when
it stays home, run on the machine's host CPU within the host's weight budget
(``-maxmem``; else ``-host-mem``; else 8/10 of the machine's memory), the embedding
always there. Such a plan has parts (:class:`~blis_core.contracts.plan.PlanPart`): runs
of blocks on the device or the host, in order, each device part reached over the
machine's link (the hidden state goes home between devices). What each device has left
holds its KV pool: pages of ``P`` positions of every attention layer on it, float32 K
and V; admission reads the tightest pool. The host's blocks keep their history in the
host memory the weights leave.

Weights: a ``-load`` file named like a llama.cpp GGUF takes llama.cpp's tensor types
(``gguf:<FILE TYPE>``), else the checkpoint's 16-bit weights.

Steps (``server/batch.go``; :class:`~blis_jitllm.step_loop.StepLoop`): one iteration of
the step loop runs as one step shape when its units run jointly, or as one shape per
unit, one after another, when the measured choice runs them separately. A token
sampled at the start of an iteration is the client's at the end of the step before it,
so a step's outcome carries the tokens the next iteration samples and the rows it
retires; the rows stay in the loop, counted by admission, until that iteration starts.
A row's KV pages are taken as it writes positions; the pool grows by doubling (else
exactly) and keeps released pages. Where it cannot grow, rows' oldest wholly written
pages go home (``kvevict.go``: other rows first, in the order they were admitted) and
every later pass of such a row streams them back over the device's link, alone. With
``-relocate`` (on in ``jitllmd serve``) the highest block goes
home with its history before any history does, the seam following the KV, and a step
carries the placement it ran on (``StepShape.parts``, lowered once at the load, or over
several devices, where the card that refused first offers its highest block to a later
card, the first time a step needs it: :class:`Spread`); its weights do not cross the
link: the block joins the host pager's pages (below the plan's host blocks) and the next
pass reads it from the disk. Blocks come back, lowest first, when room returns, each
read through the pager before the card takes it and its page then dropped. When neither
frees room the run stops with that reason; so does a host history beyond the host's
memory.

Mixture-of-experts models (:mod:`blis_jitllm.moe`): blocks that fit are resident; a
block that with its routed bank exceeds every device's whole budget is auto-streamed
(its base on the card, with the card's one shared plain bank of one token's expert
sheets, charged to the card once, and an expert cache from the room placement leaves)
and every pass uploads the sheets its rows select that the cache does not hold over the
device's link. A mixture block on the host is paged by the host pager as ``jitllmd
serve`` pages it: its shared part (attention, norms, router, shared experts) is a block
page, each routed expert a page of its own, and expert pages are given up first, least
recently used; a pass reads the experts its rows chose that the pager does not hold
(:class:`~blis_jitllm.paging.BudgetPager`). Streamed blocks beside blocks on the host
share that pager: their routed experts are its expert pages (their block pages were
dropped when the cards took them), and each pass's fills claim there the experts their
device's expert cache missed, reading those it does not hold over the disk. With no
block on the host and their host copy beyond the host's weight budget, the pager of
``-relocate`` holds their expert pages and a pass whose fills read runs with the disk on
the embedding's host part. Without ``-warm`` the first request's session marks the
streamed blocks and arms the stream trial: it runs as with ``-warm`` (its first pass's
fills claiming each streamed block's whole selection, the caches cold) until that
session's 33rd pass of one token (the trial's ``seamWarmup`` past), where the trial's
timed, migrating runs are refused by name. Refused by name too: streamed blocks that,
with no block on the host, lie beyond the host's weight budget where that pager is not
modelled (no disk, a budget below a page).
``-relocate`` moves resident mixture blocks as it moves dense ones: one sent home brings
its shared part into the host pager as a block page and its routed experts as expert
pages; taken back, its whole bank goes up again, read through the pager where not held;
spilled to a later card, its bank goes up an expert page at a time through the pager and
stays there. Auto-streamed blocks move too (by the several-device rules, on one device
as well): one sent home releases its base and expert cache (the card's shared plain bank
stays) and runs on the host, its shared part faulted in through the pager beside the
expert pages it kept; a spill or an offer back streams it again, with the cache
``AutoStream`` recorded where the card has room, else the card's shared plain bank
(made, and charged once, where the card holds none yet).

Lone matvecs (:mod:`blis_jitllm.lone_matvec`, ``docs/upstream/jitllm.md`` §9 "Lone
matvecs"): a pass of one row (``State.mv``) offers the cards each raw (F16, BF16, F32)
matrix of the blocks on the host and of a host head, one at a time; each session's
first 63 offers on a card are served, then its average weight bytes per offer against
3300 KiB decides all or nothing (``mvPays``); a card with room makes a copy, charged to
its budget (its pool has that much less to grow into), one without it declines for good
and the offer walks on to the next card. The pass then reads those matrices on their
cards, a crossing of ~59 µs each (``StepShape.parts``); a quantised GGUF's weights are
never offered, and a pass of several rows offers nothing. Refused by name: the host
pager giving up a block page while the cards hold copies (``Forget`` and the uploads
again).

Kernels: every layer is priced as ``jitllm:generated`` (jitllm's own measured rates
where ``measured-jitllm.yaml`` has them, the floor elsewhere, and the Result says no
serving run backs them), except that a pass of more rows than the decode matvec carries
runs its projections on the batched twin, ``jitllm:tiled``
(:mod:`blis_jitllm.kernels`: the plan holds each placement on both, and a step names the
one its rows take); host work is keyed ``jitllm-2026.12.3``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from blis_core.contracts.catalog import AttentionKind, MachineSpec, ModelArchitecture
from blis_core.contracts.engine import (
    EnginePoolSpec,
    Environment,
    FinishedRequest,
    StepOutcome,
    TokenEmission,
)
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.plan import (
    GraphMode,
    KVBudget,
    LayerKind,
    ParallelLayout,
    PlanPart,
    PoolPlan,
)
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape

from blis_jitllm.budgets import device_budget, host_budget
from blis_jitllm.kernels import MATVEC_KERNEL, runs_tiled, tiled_parts
from blis_jitllm.kv import (
    DeviceKVRoom,
    grown_layer_pages,
    host_layer_position_bytes,
    host_page_positions,
    kv_room,
    page_bytes,
    page_positions,
    parked_host_bytes,
)
from blis_jitllm.lone_matvec import (
    HEAD,
    CardCopies,
    Key,
    Matrix,
    MatVecSample,
    block_matrices,
    lone_parts,
)
from blis_jitllm.memcache import MemCache
from blis_jitllm.moe import (
    ExpertBank,
    MixtureOffer,
    offer_mixture,
    pass_upload_sheets,
    plain_bank,
)
from blis_jitllm.paging import BudgetPager, frames_cross
from blis_jitllm.placement import Device, Placement, place_blocks, place_head
from blis_jitllm.priority import MAPPING as PRIORITY_MAPPING
from blis_jitllm.priority import jitllm_priority, row_priority
from blis_jitllm.settings import FLAGS, JitllmSettings, resolve_settings
from blis_jitllm.step_loop import MAX_STEP_ROWS, Row, StepLoop, Unit
from blis_jitllm.version import ENGINE, ENGINE_KIND, PLUGIN_VERSION, UPSTREAM_RELEASE

__all__ = ["METRIC_NAMES", "JitllmEngine", "JitllmEngineFactory", "PoolFacts"]

#: the ``/metrics`` samples (``server/metrics.go``) a scrape gives, without the model label
METRIC_NAMES = (
    "jitllm_models_loaded",
    "jitllm_sessions",
    "jitllm_generates_total",
    "jitllm_tokens_generated_total",
    "jitllm_tokens_prefilled_total",
    "jitllm_prefill_seconds_sum",
    "jitllm_prefill_seconds_count",
    "jitllm_decode_seconds_sum",
    "jitllm_decode_seconds_count",
)
_KERNEL = MATVEC_KERNEL
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2}


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """What the plan phase decided that the running engine needs."""

    device_layers: tuple[int, ...]
    """per device that holds blocks (with ``-relocate`` over several devices, per device
    ``-devices`` names, 0 for one the placement left empty): the attention layers whose
    KV its pool holds"""
    kv_limits: tuple[int, ...]
    """per such device: the bytes its KV pool may take after blocks, head and scratch"""
    page: int
    """``P``: positions a KV page holds."""
    device_blocks: int = 0
    host_blocks: int = 0
    head_on_device: bool = True
    host_limit_bytes: int = 0
    """the host's weight budget (0: no machine)"""
    host_weight_bytes: int = 0
    """what the host holds: the embedding, blocks and head that run there"""
    host_position_bytes: int = 0
    """KV bytes one position takes in the blocks on the host (their host pages' K and V,
    :func:`~blis_jitllm.kv.host_layer_position_bytes`)"""
    host_kv_limit_bytes: int = 0
    """host memory left for their history: the machine's less the host's weights"""
    host_page_budget: int = 0
    """bytes the host pager holds the host's blocks in (0: no pager: no host block, or no
    disk to read one from); at least their sum where the budget holds them all"""
    host_block_sizes: tuple[int, ...] = ()
    """the host's block pages in scan order, for the pager: a mixture block's shared
    part (attention, norms, router, shared experts), whose routed experts are pages of
    their own"""
    host_block_banks: tuple[ExpertBank | None, ...] = ()
    """per host block page, the routed bank held in expert pages (None: a dense block);
    empty where no mixture block is on the host"""
    page_link: str | None = None
    """the link the pager reads blocks over (the machine's disk)"""
    devices: int = 1
    """the devices the pool runs on"""
    paging_parts: int = 0
    """the plan's parts that read over a link before they run (a step's page_in_bytes)"""
    pager_slot: int | None = None
    """which of them carries the host pager's reads"""
    device_slots: tuple[int | None, ...] = ()
    """per device with a pool: which of them carries its KV streamed back from the host"""
    relocate: tuple[tuple[int, int], ...] = ()
    """``-relocate`` on one device: the blocks it may send home, highest first, each with
    its charge; ``placements[k]`` is the placement with ``k`` of them home"""
    relocate_off: str = ""
    """why ``-relocate`` is not modelled for this placement ("" where it is)"""
    spread: Spread | None = None
    """``-relocate`` over several devices (None where the pool is not so): each block's
    device at the load and the placements a step may run on as blocks move"""
    pager_sizes: tuple[int, ...] = ()
    """the host pager's pages in block order: the blocks ``-relocate`` may send home
    (lowest first), then the plan's host blocks; its page ``len(relocate) - k`` is the
    block ``relocate[k - 1]`` (a mixture block's page its shared part)"""
    pager_banks: tuple[ExpertBank | None, ...] = ()
    """per page of ``pager_sizes``, the routed bank held in expert pages (None: a dense
    block); empty where no page has one"""
    placements: tuple[Placed, ...] = ()
    """per count of blocks sent home by ``-relocate`` on one device (0 to
    ``len(relocate)``; 0 the plan's own ``parts``, the same tuple): the placement a step
    then runs on, on the decode matvec and on the batched twin, and which of its paging
    parts carry the pager's reads and each device's link"""
    layer_position_bytes: int = 0
    """KV bytes one position takes in one layer on a device (float32 K and V)"""
    host_layer_position_bytes: int = 0
    """KV bytes one position takes in one layer's host pages: float32 K and V where the
    load opened a device, float16 where it opened none
    (:func:`~blis_jitllm.kv.host_layer_position_bytes`)"""
    host_page: int = 256
    """positions a host KV page holds (:func:`~blis_jitllm.kv.host_page_positions`)"""
    cache_limit: int = 0
    """the memory prefix cache's bound (0: off)"""
    cache_position_bytes: int = 0
    """what one position of every attention layer takes in it (and in a parked State's
    host pages): the host pages' width"""
    logits_bytes: int = 0
    quantized: bool = False
    """the weights are a quantized file (a few rows share the decode matvec, ``groupMV``)"""
    mixture: bool = False
    """a mixture model: where ``-relocate`` is not modelled (``relocate_off``) a pool that
    cannot grow stops the run rather than send history home first"""
    expert_bank: ExpertBank | None = None
    """the routed bank of an auto-streamed block (None: no block is streamed)"""
    expert_streams: tuple[tuple[int, int], ...] = ()
    """per device with a pool: its auto-streamed blocks and the sheets of each one's
    expert cache (0: the plain bank of one token's selection)"""
    pager_fills: tuple[tuple[int, int], ...] = ()
    """auto-streamed blocks beside host blocks: per one, its page in the host pager
    (expert pages only) and the sheets of its device's expert cache; each pass's fills
    claim the experts the cache missed through the pager (empty: no such pager)"""
    stream_caches: tuple[int | None, ...] = ()
    """``-relocate`` beside auto-streamed blocks (over the devices, :class:`Spread`): per
    block, the expert cache's sheets ``AutoStream`` recorded for it (``autoStream[li]``,
    0 for the plain bank; None: not streamed), which an offer back or a spill makes again
    where the card has room (``prepLayer`` -> ``cacheSlotsFor``); empty where no block is
    streamed"""
    stream_banks: tuple[int, ...] = ()
    """``-relocate`` beside auto-streamed blocks: per device with a pool (every device,
    :class:`Spread`), the bytes of its one shared plain bank (``sharedCompact``: charged
    once, with the first block on the plain bank it prepared, refunded by no release;
    0: none yet); empty where no block is streamed"""
    disk: Placed | None = None
    """``-relocate`` with the host pager where the plan's own placement runs no host
    block: that placement with the machine's disk as the page link of its embedding's
    host part (:func:`_with_disk`), which a step runs on when an offer back or a spill
    read a block from the disk before it (None elsewhere)"""
    lone: LoneFacts | None = None
    """the host's raw matrices a single-row pass offers the cards (lone matvecs,
    :mod:`~blis_jitllm.lone_matvec`; None: none is offered)"""

    @property
    def layer_page_bytes(self) -> int:
        """One KV page of one layer on a device."""
        return self.page * self.layer_position_bytes


@dataclass(frozen=True, slots=True)
class LoneFacts:
    """What the engine needs to serve lone matvecs (:mod:`~blis_jitllm.lone_matvec`):
    the raw matrices a single-row pass offers (the host blocks', in block order, then
    the output head's where it runs on the host), and the devices in the order
    ``GPU.MatVec`` asks them (``-devices``' order)."""

    blocks: tuple[tuple[Matrix, ...], ...]
    """per block, its raw matrices in the order its forward offers them"""
    head: tuple[Matrix, ...]
    """the output head's, where it stays home (offered last); empty where it is on a card"""
    owner: tuple[int | None, ...]
    """per block, its device in the plan (None: the host)"""
    held: tuple[int | None, ...]
    """per device asked: its index among the devices the engine keeps a pool for, whose
    room is its KV limit less its pool when the copies are made (None: no pool)"""
    rooms: tuple[int, ...]
    """per device asked without a pool: its budget less the scratch (0 for the others)"""
    hardware: str
    link: str
    host: str


@dataclass(frozen=True, slots=True)
class Placed:
    """One placement a step may run on: its parts on the decode matvec and on the
    batched twin (:func:`~blis_jitllm.kernels.tiled_parts`), and its paging parts."""

    parts: tuple[PlanPart, ...]
    tiled: tuple[PlanPart, ...]
    slots: PartSlots


@dataclass(slots=True)
class Spread:
    """``-relocate`` over several devices (``model.go*`` ``relocateUntil``,
    ``relocationVictim``, ``reclaim``; ``jit/gpu/tier/multi.go`` ``SpillAfter``,
    ``PrepLayer``, ``ReleaseLayers``; ``docs/upstream/jitllm.md`` §1.8): a card's
    blocks move one at a time, each to a later card or home, so the placements a step
    runs on are too many to list in the plan; each is lowered the first time a step
    needs it (``place``) and kept, and the step carries it (``StepShape.parts``)."""

    owner: tuple[int | None, ...]
    """per block, its device at the load (an index into the pool's devices; None: the
    host)"""
    charges: tuple[int, ...]
    """per block, what a device charges for it"""
    share: tuple[int, ...] | None
    """``planShares``' device for each offered block (None: fill-first), where an
    offer back starts when it is beyond the cursor"""
    cursor: int
    """``PrepLayer``'s cursor after the load: the device holding the highest placed
    block"""
    place: Callable[[tuple[int | None, ...]], Placed]
    """the placement of an owner tuple (the plan's own lowering, run by run)"""
    host: str = ""
    """the machine's host CPU (the embedding's part)"""
    storage: str = ""
    """the machine's disk, which the host pager reads the blocks over"""
    _seen: dict[tuple[int | None, ...], Placed] = field(default_factory=dict)
    _disk: dict[tuple[int | None, ...], Placed] = field(default_factory=dict)

    def at(self, owner: tuple[int | None, ...]) -> Placed:
        """The placement of ``owner``, lowered once and then the same objects, so the
        cost model finds its compiled form by identity."""
        got = self._seen.get(owner)
        if got is None:
            got = self._seen[owner] = self.place(owner)
        return got

    def with_disk(self, owner: tuple[int | None, ...]) -> Placed:
        """The placement of ``owner`` with the machine's disk on its embedding's host
        part (:func:`_with_disk`), for a step whose spill or offer back read a block from
        the disk where ``owner`` leaves no block on the host; made once, as :meth:`at`."""
        got = self._disk.get(owner)
        if got is None:
            got = self._disk[owner] = _with_disk(self.at(owner), self.host, self.storage)
        return got


@dataclass(frozen=True, slots=True)
class PartSlots:
    """Where a step's ``page_in_bytes`` go on one placement: its paging parts' count,
    the one the host pager reads over (``None``: the placement runs no host block), and
    per device with a pool the one its link carries (KV streamed back, blocks and
    history moved)."""

    paging: int
    pager: int | None
    devices: tuple[int | None, ...]


def _with_disk(placed: Placed, host: str, storage: str) -> Placed:
    """``placed``, which runs no block on the host (its paging parts read nothing from
    the disk), with the machine's disk ``storage`` as the page link of the embedding's
    host part, the first, which the embedding always runs on; where the placement is one
    part on the card (the embedding priced there), a host part of no layers before it
    carries the link. A spill or an offer back reads its block through the host pager
    (``Ensure``, ``offerRange`` -> ``pageIn``) before the pass that follows, which a
    step on this placement prices over the disk as the pager's other reads (the
    ``page_in`` family); its other terms, and so the pass's price, are ``placed``'s.
    Its paging parts: the host part's first, then ``placed``'s."""
    assert placed.slots.pager is None

    def disk(parts: tuple[PlanPart, ...]) -> tuple[PlanPart, ...]:
        first = parts[0]
        if first.hardware == host and first.link is None:
            assert first.page_link is None
            return (first.model_copy(update={"page_link": storage}), *parts[1:])
        return (PlanPart(hardware=host, layers=(), page_link=storage), *parts)

    slots = placed.slots
    return Placed(
        disk(placed.parts),
        disk(placed.tiled),
        PartSlots(
            slots.paging + 1, 0, tuple(x + 1 if x is not None else None for x in slots.devices)
        ),
    )


def _refuse(path: str, value: object, cause: str) -> InputRefused:
    return InputRefused.one(path, value, cause, ENGINE)


def _check_model(pool: str, model: ModelArchitecture, weights: str | None) -> None:
    why = None
    if model.attention not in (AttentionKind.MHA, AttentionKind.GQA) or model.layer_types:
        why = f"{model.attention.value} attention"
    elif weights is None and model.dtype not in _DTYPE_BYTES:
        why = f"{model.dtype} weights (a .jlm converted from a 16-bit checkpoint or a GGUF only)"
    if why is not None:
        raise _refuse(
            f"deployment.pools.{pool}.model", model.hf_id, f"not modelled by blis-jitllm yet: {why}"
        )


def _not_relocated(why_not: str) -> str:
    """Why a pool that cannot grow is not relieved by ``-relocate`` here."""
    return (
        "jitllm would send a block home as the history grows (-relocate), which "
        f"blis-jitllm does not model for this placement: {why_not}"
    )


def _expert_banks(model: ModelArchitecture) -> list[ExpertBank | None]:
    """Each block's routed-expert bank in the model's 16-bit weights (a GGUF mixture is
    refused by the memory arithmetic): an expert's sheets are its gate, up and down
    matrices; the leading dense blocks have none."""
    moe = model.moe
    assert moe is not None
    sheet = 3 * model.hidden_size * moe.expert_intermediate_size * _DTYPE_BYTES[model.dtype]
    bank = ExpertBank(moe.num_experts, moe.experts_per_token, sheet)
    return [None if i < moe.first_dense_layers else bank for i in range(model.num_layers)]


def _bank_short(li: int, d: int) -> str:
    """Why a streamed block whose base fits device ``d`` but not beside the plain bank
    it would make there is not modelled (``docs/upstream/jitllm.md`` §9 "The plain
    bank's refusal")."""
    return (
        f"device {d} has room for auto-streamed block {li}'s base but not for the shared "
        "plain bank it would make there: prepLayer admits the base, uploads the "
        "attention's matrices, then asks sharedCompact for each bank matrix beside those "
        "alone, and on a refusal declines the block leaving those matrices charged to the "
        "card (it frees nothing), or else takes it past its budget; neither is modelled "
        "by blis-jitllm (a -devices budget that holds the block's base and the bank, or "
        "not its base, is)"
    )


#: ``seamWarmup``: the decoded tokens the stream trial lets pass before its first arm
#: (``defaultOpts``, the options file, index id 70976574358; ``seamStep``,
#: ``engine/model``, index ids 70918342597 and 71142928070)
STREAM_TRIAL_WARMUP = 32


def _check_stream_host(
    spec: EnginePoolSpec,
    settings: JitllmSettings,
    machine: MachineSpec | None,
    offer: MixtureOffer,
    blocks: list[int],
    home: int,
    source: str,
    reloc: _Relocation | None = None,
) -> None:
    """A streamed block's fill reads the experts its card's cache missed from the host
    pager's copy (``streamBank.fill`` -> ``prefetchSelected`` ->
    ``Model.ensureBlockSelected``: ``EnsurePage`` of each listed expert's page;
    ``jit/gpu/tier/layer.go``, index id 70896709668; ``engine/model/model.go``, index
    id 70873937373). Where the host's weight budget holds every streamed block beside
    the embedding (and a host head) the load preloads them and nothing is read. Past
    it, with no block on the host, the pager of ``-relocate`` (``reloc``, whose pages
    are every block's, :func:`_spread_relocation`) holds the streamed blocks' expert
    pages and the fills read those it does not hold from the disk, priced on the
    embedding's host part (:func:`_with_disk`). Refused by name: no machine, and past
    the budget where that pager is not modelled (no disk, a budget below one page,
    pages whose frames cross, every card holding one block: ``reloc.why_not``)."""
    streamed = sum(b for b, st in zip(blocks, offer.streamed, strict=True) if st)
    if machine is None:
        raise _refuse(
            f"deployment.pools.{spec.pool}.machine",
            None,
            "auto-streamed mixture blocks upload their experts from the host's copy: name "
            "the machine the pool runs on (its host memory holds the banks)",
        )
    if reloc is None or reloc.spread:
        return
    limit = settings.maxmem or settings.host_mem or host_budget(machine.host_memory_bytes)
    if streamed + home > limit:
        raise InputRefused.one(
            "engine.args.maxmem",
            settings.maxmem,
            f"the auto-streamed blocks' host copy ({(streamed + home) / 2**30:.2f} GiB with the "
            f"embedding and head) exceeds the host's weight budget ({limit / 2**30:.2f} "
            "GiB): their fills would claim the experts their cards' caches missed through "
            "the host pager's expert pages, reading the rest from the disk, which "
            f"blis-jitllm models only with the pager of -relocate, not here: {reloc.why_not}",
            source,
        )


def _weight_bytes(env: Environment, request: LoweringRequest, n: int) -> tuple[list[int], int, int]:
    """Bytes of each block, of the token embedding and of the output head (final norm
    and output matrix) in the pool's weight format, from the memory arithmetic."""

    def part(start: int, end: int, embedding: bool, head: bool) -> int:
        sub = env.lower(
            request.model_copy(
                update={"layer_range": (start, end), "embedding": embedding, "head": head}
            )
        )
        return sub.resident_weight_bytes or 0

    blocks = [part(i, i + 1, False, False) for i in range(n)]
    return blocks, part(0, 0, True, False), part(0, 0, False, True)


@dataclass(frozen=True, slots=True)
class _Parts:
    """A split plan's parts and, among its paging parts (those with a page link, in
    order), which one carries the host pager's reads and which each device's KV
    streamed back from the host."""

    parts: tuple[PlanPart, ...]
    pager_slot: int | None
    device_slots: tuple[int | None, ...]


def _parts(
    env: Environment,
    request: LoweringRequest,
    owner: tuple[int | None, ...],
    head_device: int | None,
    device: str,
    host: str,
    link: str,
    page_link: str | None,
    devices: int,
) -> _Parts:
    """Runs of consecutive blocks by processor, in order: the embedding looked up on the
    host first, the head last where it was placed, the residual back on the host at every
    change of device (jitllm has no peer-to-peer path). The first run of host blocks reads
    the pager's page-ins over ``page_link``; each device's first run of blocks reads the
    KV history it sent home back over ``link``."""
    n = len(owner)
    runs: list[tuple[int | None, int, int]] = []  # (device or None, start, end)
    for i, o in enumerate(owner):
        if runs and runs[-1][0] == o:
            runs[-1] = (o, runs[-1][1], i + 1)
        else:
            runs.append((o, i, i + 1))
    if not runs or runs[0][0] is not None:
        runs.insert(0, (None, 0, 0))
    if runs[-1][0] != head_device:
        runs.append((head_device, n, n))
    first: dict[int | None, int] = {}
    for k, (o, a, b) in enumerate(runs):
        if b > a:
            first.setdefault(o, k)
    parts = []
    slots: dict[int | None, int] = {}
    for k, (o, start, end) in enumerate(runs):
        sub = env.lower(
            request.model_copy(
                update={
                    "layer_range": (start, end),
                    "embedding": k == 0,
                    "head": k == len(runs) - 1,
                }
            )
        )
        reads = None
        if first.get(o) == k:
            reads = link if o is not None else page_link
        if reads is not None:
            slots[o] = len(slots)
        parts.append(
            PlanPart(
                hardware=device if o is not None else host,
                layers=sub.layers,
                link=link if o is not None else None,
                page_link=reads,
            )
        )
    return _Parts(tuple(parts), slots.get(None), tuple(slots.get(d) for d in range(devices)))


def _device_indexes(
    spec: EnginePoolSpec, settings: JitllmSettings, machine: MachineSpec | None
) -> list[int]:
    """The devices ``-devices`` names, checked against what the machine holds (one
    device of the pool's kind without a machine)."""
    if settings.host_only:
        return []
    held = 1
    if machine is not None:
        held = sum(a.count for a in machine.accelerators if a.hardware == spec.hardware)
    wanted = list(range(held)) if settings.all_devices else [i for i, _ in settings.devices]
    beyond = [i for i in wanted if i >= held]
    if beyond:
        where = (
            f"machine {machine.id} holds {held} {spec.hardware}"
            if machine is not None
            else "a pool without a machine has one device: name the machine for more"
        )
        raise _refuse("engine.args.devices", spec.args.get("devices"), where)
    return wanted


def _no_kv_room(
    settings: JitllmSettings,
    blocks: list[int],
    rooms: list[int],
    per_block: int,
    names: str,
    source: str,
    why: str,
) -> InputRefused:
    """Devices filled with blocks that leave a pool no KV page: the refusal names why
    ``-relocate`` is not modelled there and the ``-gpu-layers`` that leaves each device,
    filled in turn, room for one context of its blocks' history (and for the head:
    ``rooms`` are each device's room less it)."""
    fit = 0
    for room in rooms:
        taken = 0
        while fit < len(blocks) and taken + blocks[fit] + per_block <= room:
            taken += blocks[fit] + per_block
            fit += 1
    return InputRefused.one(
        "engine.args.gpu-layers",
        settings.gpu_layers,
        f"the blocks placed on {names} leave no room for a page of KV history: jitllm "
        f"would move blocks off the card as the history grows (-relocate), and {why}; "
        f"gpu-layers {fit} leaves room for one context of {settings.max_seq} positions",
        source,
    )


def _plan(
    spec: EnginePoolSpec, env: Environment
) -> tuple[PoolPlan, PoolFacts, JitllmSettings, ModelArchitecture]:
    if spec.layout != ParallelLayout():
        raise _refuse(
            f"deployment.pools.{spec.pool}.layout",
            spec.layout.model_dump(),
            "jitllm splits a model by blocks across devices, not by tensor, pipeline, data "
            "or expert parallelism: give it several devices with -devices",
        )
    model = env.model(spec.model)
    hw = env.hardware(spec.hardware)
    settings = resolve_settings(spec.args, model.max_position_embeddings)
    _check_model(spec.pool, model, settings.weights)
    machine = env.machine(spec.machine) if spec.machine is not None else None
    p = page_positions(settings.max_seq)
    indexes = _device_indexes(spec, settings, machine)
    kv_row = model.num_kv_heads * model.head_dim
    # a session of a load that opened a device keeps its host pages in float32 (the
    # attached device steps the float16 cache down), one with none in float16
    host_layer = host_layer_position_bytes(kv_row, bool(indexes), settings.kv_f16)
    request = LoweringRequest(
        engine=ENGINE,
        model=model.hf_id,
        hardware=hw.id,
        layout=spec.layout,
        kv_cache_dtype=_kv_dtype(kv_row, host_layer, bool(indexes)),
        block_size=p,
        max_num_batched_tokens=MAX_STEP_ROWS,
        max_num_seqs=settings.width or MAX_STEP_ROWS,
        max_model_len=settings.max_seq,
        impls=dict.fromkeys(LayerKind, _KERNEL),
        host_work=f"{ENGINE_KIND}-{UPSTREAM_RELEASE}",
        steps_in_flight=1,
        quantization=settings.weights,
    )
    try:
        partial = env.lower(request)
    except InputRefused as err:
        if err.errors[0].path != "quantization":
            raise
        raise _refuse("engine.args.load", spec.args.get("load"), err.errors[0].cause) from None
    n = model.num_layers
    blocks, embedding, head = _weight_bytes(env, request, n)
    if model.tie_word_embeddings:
        head = embedding + head  # the head reads the embedding matrix: charged where it runs
    free = env.device_memory_bytes(hw.id) - env.non_torch_bytes(partial)
    given = dict(settings.devices)
    budgets = [device_budget(free, given.get(i)) for i in indexes]
    scratch = env.activation_peak_bytes(partial, MAX_STEP_ROWS)
    offered = 0 if not indexes else n if settings.gpu_layers < 0 else min(settings.gpu_layers, n)
    history_per_block = page_bytes(kv_row, 1) * settings.max_seq
    devices = [
        Device(f"cuda:{i}", b.limit, 1.0, used=scratch)
        for i, b in zip(indexes, budgets, strict=True)
    ]
    source = f"{ENGINE} pool for {model.hf_id} on {hw.id}"
    mixture: MixtureOffer | None = None
    banks: list[ExpertBank | None] = [None] * n
    stream_home: int | None = None  # streamed blocks and none on the host: the host's rest
    if model.moe is None:
        placed = place_blocks(blocks[:offered], devices, extra=offered * history_per_block + head)
        placed = Placement(
            placed.devices, placed.owner + (None,) * (n - offered), placed.used, placed.share
        )
        ruled = place_head(placed, head, blocks, blocks)
    else:
        banks = _expert_banks(model)
        mixture = offer_mixture(
            blocks,
            banks,
            devices,
            offered,
            extra=offered * history_per_block + head,
            first_pages=2 * page_bytes(kv_row, page_positions(settings.max_seq)),
        )
        for li, d in mixture.placement.bank_short:
            raise InputRefused.one(
                "engine.args.devices", spec.args.get("devices"), _bank_short(li, d), source
            )
        ruled = place_head(mixture.placement, head, mixture.charges, mixture.reads)
        if any(mixture.streamed) and all(o is not None for o in ruled.placement.owner):
            home = embedding + (0 if ruled.device is not None else head)
            _check_stream_host(spec, settings, machine, mixture, blocks, home, source)
            stream_home = home
    placement = ruled.placement
    owner = placement.owner
    on_device = sum(1 for o in owner if o is not None)
    head_on_device = ruled.device is not None
    host_sizes = tuple(b for b, o in zip(blocks, owner, strict=True) if o is None)
    host_weights = embedding + sum(host_sizes) + (0 if head_on_device else head)
    # the host pager's pages: a block's page, less its routed bank in a mixture block,
    # whose experts are each a page of their own (``File.measureExtents`` skips the
    # expert-paged banks)
    host_banks = tuple(k for k, o in zip(banks, owner, strict=True) if o is None)
    host_pages = tuple(
        b - (k.bytes if k is not None else 0) for b, k in zip(host_sizes, host_banks, strict=True)
    )
    # auto-streamed blocks beside host blocks: the one pager also holds their routed
    # experts as expert pages (their block pages were dropped when the cards took them,
    # ``releaseLayer`` keeping the expert pages: ``keepExperts``), which their fills
    # claim; they are its pages of size 0 (no block page), in block order
    fills: tuple[tuple[int, int], ...] = ()
    streamed_banks = 0
    if mixture is not None and host_sizes and any(mixture.streamed):
        paged = [i for i, o in enumerate(owner) if o is None or mixture.streamed[i]]
        host_banks = tuple(banks[i] for i in paged)
        host_pages = tuple(
            0 if owner[i] is not None else blocks[i] - (k.bytes if k is not None else 0)
            for i, k in zip(paged, host_banks, strict=True)
        )
        fills = tuple(
            (page, mixture.caches[o])
            for page, (i, o) in enumerate((i, owner[i]) for i in paged)
            if o is not None
        )
        streamed_banks = sum(
            k.bytes for i, k in zip(paged, host_banks, strict=True) if owner[i] is not None and k
        )
    sheets = sorted({k.sheet for k in host_banks if k is not None})
    if not sheets:
        host_banks = ()
    host_limit = 0
    page_budget = 0
    page_link: str | None = None
    over = False  # the host's blocks exceed its budget: the pager evicts from the start
    split = on_device < n or not head_on_device or len({o for o in owner}) > 1
    if split:
        parts = _Parts((), None, ())
    else:
        # every block and the head on one device: one part, no crossing to price; it
        # reads back over its link the KV history it sends home
        stream = hw.pcie_fabric
        if machine is not None:
            stream = next(a.link for a in machine.accelerators if a.hardware == hw.id)
        only = PlanPart(hardware=hw.id, layers=partial.layers, page_link=stream)
        parts = _Parts(
            (only,), None, tuple(0 if d == owner[0] else None for d in range(len(devices)))
        )
    if split:
        where = f"{n - on_device} of {n} blocks" + ("" if head_on_device else " and the head")
        if machine is None:
            why = "; ".join(f"{b.limit / 2**30:.2f} GiB ({b.why})" for b in budgets) or "cpu"
            raise InputRefused.one(
                f"deployment.pools.{spec.pool}.machine",
                None,
                f"{where} run on the host (weights on {hw.id}: {why}): name the machine the "
                "pool runs on (its host CPU and memory), e.g. a catalog machine that holds "
                "this accelerator",
                source,
            )
        host_limit = settings.maxmem or settings.host_mem or host_budget(machine.host_memory_bytes)
        # the host pager: the embedding and a host head stay resident, the blocks are
        # paged from the model file through what the budget has left. jitllm has no
        # paging-off mode (``File.SetBudget``): where the budget holds every host block
        # it evicts nothing until applyPageBudget narrows it below them
        page_budget = host_limit - (host_weights - sum(host_sizes)) if host_sizes else 0
        page_link = machine.storage if host_sizes else None
        over = host_weights + streamed_banks > host_limit
        for sheet in sheets:
            crossing = frames_cross(host_pages, sheet)
            if crossing is not None:
                raise _refuse(f"deployment.pools.{spec.pool}.model", model.hf_id, crossing)
        if over:
            refusal = None
            largest = max(host_pages + tuple(sheets))
            where += f" beside {len(fills)} auto-streamed blocks' experts" if fills else ""
            if page_link is None:
                refusal = f"machine {machine.id} names no disk to page the model file from"
            elif page_budget < largest:
                refusal = (
                    f"{max(page_budget, 0) / 2**30:.2f} GiB is left for paging beside the "
                    f"embedding and head, less than one "
                    + ("block" if not sheets else "page (a block's shared part or an expert)")
                    + f" ({largest / 2**30:.2f} GiB)"
                )
            if refusal is not None:
                raise InputRefused.one(
                    "engine.args.maxmem",
                    settings.maxmem,
                    f"{where} run on the host, {host_weights / 2**30:.2f} GiB of weights in a "
                    f"budget of {host_limit / 2**30:.2f} GiB: {refusal}",
                    source,
                )
        link = next(a.link for a in machine.accelerators if a.hardware == hw.id)
        parts = _parts(
            env, request, owner, ruled.device, hw.id, machine.host, link, page_link, len(devices)
        )
    layer_page = page_bytes(kv_row, p)
    pooled = [d for d in range(len(devices)) if any(o == d for o in owner)]
    # -relocate (on in jitllmd serve): with one device, blocks go home one at a time, the
    # highest first, when its pool can neither grow nor send history home; each is then
    # read through the host pager like the plan's host blocks (its page was dropped when
    # the card took it), where the machine names a disk to read it from; a mixture
    # block's shared part as a block page, its routed experts as expert pages
    streamed = mixture is not None and any(
        st for st, o in zip(mixture.streamed, owner, strict=True) if o is not None
    )
    reloc = _relocation(
        machine,
        pooled,
        owner,
        blocks,
        settings,
        embedding,
        head,
        head_on_device,
        host_pages,
        banks=banks if mixture is not None else None,
        host_banks=host_banks,
        names=tuple(d.name for d in devices),
        streamed=streamed,
    )
    if stream_home is not None:
        # every block on a card: past the host's budget the streamed blocks' fills read
        # through -relocate's pager, where it is modelled
        assert mixture is not None
        _check_stream_host(spec, settings, machine, mixture, blocks, stream_home, source, reloc)
    relocate = reloc.relocate
    paging = sum(1 for x in parts.parts if x.page_link is not None)
    # per count of blocks sent home (0: the plan's own), its parts and paging parts
    lowered = [(parts.parts, PartSlots(paging, parts.pager_slot, parts.device_slots))]
    if relocate:
        assert machine is not None
        host_limit = host_limit or reloc.host_limit
        if reloc.page_budget:
            page_budget, page_link = reloc.page_budget, machine.storage
        link = next(a.link for a in machine.accelerators if a.hardware == hw.id)
        moved = list(owner)
        for i, _ in relocate:
            moved[i] = None
            at = _parts(
                env,
                request,
                tuple(moved),
                ruled.device,
                hw.id,
                machine.host,
                link,
                page_link,  # the pager's part, where the machine names a disk
                len(devices),
            )
            paging = sum(1 for x in at.parts if x.page_link is not None)
            lowered.append((at.parts, PartSlots(paging, at.pager_slot, at.device_slots)))
    spread: Spread | None = None
    if reloc.spread:
        # over several devices each card moves its own blocks, to a later card or home:
        # a step names the placement it runs on (StepShape.parts), lowered as it comes
        assert machine is not None
        host_limit = host_limit or reloc.host_limit
        page_budget, page_link = reloc.page_budget, machine.storage
        link = next(a.link for a in machine.accelerators if a.hardware == hw.id)
        host_cpu, pager_link, named = machine.host, page_link, len(devices)

        def place(at: tuple[int | None, ...]) -> Placed:
            got = _parts(env, request, at, ruled.device, hw.id, host_cpu, link, pager_link, named)
            paging = sum(1 for x in got.parts if x.page_link is not None)
            return Placed(
                got.parts,
                tiled_parts(got.parts, hw.id),
                PartSlots(paging, got.pager_slot, got.device_slots),
            )

        highest = max(i for i, o in enumerate(owner) if o is not None)
        assert page_link is not None  # _spread_relocation models only a machine's disk
        spread = Spread(
            owner,
            # what a block charges its device: a streamed block its base and cache (the
            # device's one plain bank is its own, charged once: ``stream_banks``)
            tuple(mixture.charges) if mixture is not None else tuple(blocks),
            placement.share,
            owner[highest] or 0,
            place,
            host=machine.host,
            storage=page_link,
        )
    device_layers = tuple(sum(1 for o in owner if o == d) for d in pooled)
    kv_limits = tuple(
        budgets[d].limit - placement.used[d] - (head if ruled.device == d else 0) for d in pooled
    )
    pages = [
        lim // (layer_page * layers) - 1
        for lim, layers in zip(kv_limits, device_layers, strict=True)
    ]
    # the devices the engine keeps a pool for: those that hold blocks, and over several
    # devices with -relocate every device -devices names, since a spill may reach a card
    # the placement left empty (its budget less the scratch reserved on every device;
    # its pool opens with its first block)
    held = list(range(len(devices))) if spread is not None else pooled
    held_layers = tuple(sum(1 for o in owner if o == d) for d in held)
    held_limits = tuple(
        budgets[d].limit - placement.used[d] - (head if ruled.device == d else 0) for d in held
    )
    lone = _lone_facts(
        settings,
        model,
        machine,
        hw.id,
        owner,
        head_on_device,
        [
            budgets[d].limit - placement.used[d] - (head if ruled.device == d else 0)
            for d in range(len(devices))
        ],
        held,
    )
    if any(x < 1 for x in pages) and streamed and spread is None:
        names = ", ".join(devices[d].name for d, x in zip(pooled, pages, strict=True) if x < 1)
        raise InputRefused.one(
            "engine.args.devices",
            spec.args.get("devices"),
            f"the mixture blocks placed on {names} (with their expert caches) leave no room "
            f"for a page of KV history: {_not_relocated(reloc.why_not)}",
            source,
        )
    if any(x < 1 for x in pages) and not relocate and spread is None:
        names = ", ".join(devices[d].name for d, x in zip(pooled, pages, strict=True) if x < 1)
        rooms = [b.limit - scratch - head for b in budgets]
        per_block = history_per_block + layer_page  # and the pool's dummy page
        raise _no_kv_room(settings, blocks, rooms, per_block, names, source, reloc.why_not)
    host_page = host_page_positions(model.max_position_embeddings)
    host_position = (n - on_device) * host_layer
    host_kv_limit = 0
    if machine is not None and (host_position or relocate or spread):
        # with -relocate, room for the history of every block that may go home; their
        # weights are the pager's (within its budget) where the machine names a disk
        moved_weights = sum(c for _, c in relocate)
        if spread is not None:
            moved_weights = sum(b for b, o in zip(blocks, owner, strict=True) if o is not None)
        if reloc.page_budget or streamed_banks:
            # the pager's pages: those blocks, or the streamed blocks' experts (over the
            # devices counted already: every block on a card, its bank with it)
            banks_home = streamed_banks if spread is None else 0
            resident = min(host_weights + moved_weights + banks_home, host_limit)
        else:
            resident = min(host_weights, host_limit) + moved_weights
        host_kv_limit = max((settings.host_mem or machine.host_memory_bytes) - resident, 0)
    # each placement also with its device projections on the batched twin, which a
    # pass of more rows than the decode matvec carries runs, lowered once here so that
    # a step hands the same tuples again (the cost model finds them by identity)
    placements = tuple(
        Placed(
            at,
            tiled_parts(at, hw.id),
            PartSlots(x.paging, x.pager, tuple(x.devices[d] for d in held)),
        )
        for at, x in lowered
    )
    # the plan's own placement where it runs no host block beside a pager (-relocate):
    # a step after an offer back or a spill that read a block from the disk runs it
    # with the disk on the embedding's host part, the read priced there
    disk: Placed | None = None
    if page_budget and page_link is not None and parts.pager_slot is None:
        assert machine is not None
        disk = _with_disk(placements[0], machine.host, page_link)
    on_card = sum(placement.used[d] - scratch for d in pooled) + (head if head_on_device else 0)
    plan = partial.model_copy(
        update={
            "max_num_seqs": settings.width or MAX_STEP_ROWS,
            "resident_weight_bytes": on_card,
            "activation_peak_bytes": scratch,
            "kv_budget": KVBudget(
                num_gpu_blocks=max(min(pages), 0),
                block_size_tokens=p,
                kv_bytes=sum(
                    max(x, 0) * layer_page * layers
                    for x, layers in zip(pages, device_layers, strict=True)
                ),
                available_bytes=sum(kv_limits),
            )
            if pooled
            else _host_kv_budget(host_kv_limit, host_position, host_page),
            "parts": parts.parts,
        }
    )
    facts = PoolFacts(
        held_layers,
        held_limits,
        p,
        device_blocks=on_device,
        host_blocks=n - on_device,
        head_on_device=head_on_device,
        host_limit_bytes=host_limit,
        host_weight_bytes=host_weights if host_limit else 0,
        host_position_bytes=host_position if machine is not None else 0,
        host_kv_limit_bytes=host_kv_limit,
        host_page_budget=page_budget if page_link is not None else 0,
        host_block_sizes=host_pages if page_budget and page_link is not None else (),
        host_block_banks=host_banks if page_budget and page_link is not None else (),
        pager_sizes=(reloc.pager_sizes if reloc.page_budget else host_pages)
        if page_budget and page_link is not None
        else (),
        pager_banks=(reloc.pager_banks if reloc.page_budget else host_banks)
        if page_budget and page_link is not None
        else (),
        page_link=page_link,
        devices=len(pooled),
        paging_parts=sum(1 for x in parts.parts if x.page_link is not None),
        pager_slot=parts.pager_slot,
        device_slots=tuple(parts.device_slots[d] for d in held),
        relocate=relocate,
        relocate_off=reloc.why_not,
        spread=spread,
        placements=placements,
        layer_position_bytes=page_bytes(kv_row, 1),
        host_layer_position_bytes=host_layer,
        host_page=host_page,
        cache_limit=_cache_limit(settings, machine, host_weights),
        cache_position_bytes=n * host_layer,
        logits_bytes=model.vocab_size * 4,
        quantized=settings.weights is not None,
        mixture=mixture is not None,
        expert_bank=next(
            (b for b, st in zip(_expert_banks(model), mixture.streamed, strict=True) if st),
            None,
        )
        if mixture is not None
        else None,
        pager_fills=fills if page_budget and page_link is not None else (),
        expert_streams=tuple(
            (
                sum(1 for o, st in zip(owner, mixture.streamed, strict=True) if o == d and st),
                mixture.caches[d],
            )
            for d in held
        )
        if mixture is not None
        else (),
        stream_caches=tuple(
            mixture.caches[o] if st and o is not None else None
            for st, o in zip(mixture.streamed, owner, strict=True)
        )
        if mixture is not None and spread is not None and streamed
        else (),
        stream_banks=tuple(mixture.banks[d] for d in held)
        if mixture is not None and spread is not None and streamed
        else (),
        disk=disk,
        lone=lone,
    )
    return plan, facts, settings, model


@dataclass(frozen=True, slots=True)
class _Relocation:
    """What ``-relocate`` comes to for a placement: the blocks it may send home
    (highest first, with their charges), the host budget and the pager that reads them
    (``page_budget`` 0: no pager for them), or why it is not modelled."""

    relocate: tuple[tuple[int, int], ...] = ()
    host_limit: int = 0
    page_budget: int = 0
    pager_sizes: tuple[int, ...] = ()
    pager_banks: tuple[ExpertBank | None, ...] = ()
    """per page of ``pager_sizes``, the routed bank held in expert pages (None: a dense
    block); empty where no page has one"""
    why_not: str = ""
    spread: bool = False
    """modelled over several devices: the pager's pages are every block, in block
    order (:func:`_spread_relocation`)"""


def _relocation(
    machine: MachineSpec | None,
    pooled: list[int],
    owner: tuple[int | None, ...],
    blocks: list[int],
    settings: JitllmSettings,
    embedding: int,
    head: int,
    head_on_device: bool,
    host_sizes: tuple[int, ...],
    banks: list[ExpertBank | None] | None = None,
    host_banks: tuple[ExpertBank | None, ...] = (),
    names: tuple[str, ...] = (),
    streamed: bool = False,
) -> _Relocation:
    """``-relocate`` on one device (``model.go*`` ``relocateUntil``, ``relocateHome``):
    every block on the card but the first may go home, the highest first. Once home a
    block runs on the host and is faulted in through the host pager on every pass that
    reaches it (``engine/model/batch.go`` ``rowsHost`` -> ``Model.pageIn``; its page was
    dropped when the card took it: ``offerRange`` -> ``releaseLayer`` ->
    ``File.DropPage``), so the pager's pages are those blocks, lowest first, then the
    plan's host blocks, in one budget: the host's weight budget less the embedding and a
    host head. Where the machine names no disk the port runs no pager: the blocks sent
    home must then fit the budget beside the host's weights, and read nothing (as the
    host blocks there). Not modelled, with the reason: no machine, one block on the
    card, a pager whose budget holds no such block. Several devices (``names``, the
    devices ``-devices`` names) are :func:`_spread_relocation`'s, and so are
    auto-streamed blocks on a card (``streamed``), on one device too: their pages are
    in the pager while they are on the card (their expert pages, which their fills
    claim), so the pager's pages are every block's.

    A mixture model's block (``banks``: each block's routed bank, None for a dense
    one; ``host_banks``: those of the plan's host pages, empty where none has one) goes
    home as the host pager holds any host mixture block: its shared part (the block
    less its bank, as ``File.measureExtents`` skips the expert-paged banks) is a block
    page and each routed expert a page of its own. Not modelled, with the reason: a
    pager budget below one such page, and pages whose frames ``File.take`` would cross
    (:func:`~blis_jitllm.paging.frames_cross`)."""
    if machine is None:
        return _Relocation(
            why_not="the pool names no machine, whose host would run the blocks sent home"
        )
    if not pooled:
        return _Relocation(why_not="no block is on a device")
    if len(pooled) > 1 or len(names) > 1 or streamed:
        # auto-streamed blocks on a card (``streamed``): the pager's pages are every
        # block's, whose streamed blocks' expert pages the fills claim, on one device too
        return _spread_relocation(
            machine, pooled, owner, blocks, settings, embedding, head, head_on_device, banks, names
        )
    mine = [i for i, o in enumerate(owner) if o == pooled[0]]
    relocate = tuple((i, blocks[i]) for i in reversed(mine[1:]))  # the first stays
    if not relocate:
        return _Relocation(
            why_not="the card holds one block, which blis-jitllm keeps there (sending it "
            "home demotes every block)"
        )
    limit = settings.maxmem or settings.host_mem or host_budget(machine.host_memory_bytes)
    host_resident = embedding + (0 if head_on_device else head)
    if machine.storage is None:
        if host_resident + sum(host_sizes) + sum(c for _, c in relocate) > limit:
            return _Relocation(
                why_not=f"machine {machine.id} names no disk to page the blocks sent home "
                f"from, and the host's weight budget ({limit / 2**30:.2f} GiB) does not hold "
                "them beside its own weights"
            )
        return _Relocation(relocate, limit)
    page_budget = limit - host_resident
    home = tuple(reversed(relocate))  # the pager's order: the lowest first
    moved_banks = tuple(banks[i] if banks else None for i, _ in home)
    sizes = (
        tuple(c - (k.bytes if k else 0) for (_, c), k in zip(home, moved_banks, strict=True))
        + host_sizes
    )
    pager_banks = moved_banks + (host_banks or (None,) * len(host_sizes))
    why_not, pager_banks = _pager_holds(page_budget, sizes, pager_banks, "send home")
    if why_not:
        return _Relocation(why_not=why_not)
    return _Relocation(relocate, limit, page_budget, sizes, pager_banks)


def _lone_facts(
    settings: JitllmSettings,
    model: ModelArchitecture,
    machine: MachineSpec | None,
    device: str,
    owner: tuple[int | None, ...],
    head_on_device: bool,
    rooms: list[int],
    held: list[int],
) -> LoneFacts | None:
    """What a single-row pass offers the cards (``State.mv`` -> ``JIT.MatVec`` ->
    ``GPU.MatVec``; :mod:`~blis_jitllm.lone_matvec`): every block's raw matrices (those
    of the blocks on the host when the pass runs are offered) and the output head's
    where it stays home; None where nothing is offered: no device, no machine (so no
    host), or weights the converter packs (a quantised GGUF: read in place by the host,
    never offered). ``rooms``: per device ``-devices`` names, its budget less what the
    placement put there (blocks, head, scratch)."""
    raw = settings.weights is None or settings.weights in ("gguf:F16", "gguf:BF16")
    if not raw or not rooms or machine is None:
        return None
    width = 2  # F16 or BF16, a checkpoint's or a GGUF's
    head: tuple[Matrix, ...] = ()
    if not head_on_device:
        h, vocab = model.hidden_size, model.vocab_size
        head = (Matrix(model.num_layers, HEAD, vocab, h, vocab * h * width),)
    link = next(a.link for a in machine.accelerators if a.hardware == device)
    where = {d: k for k, d in enumerate(held)}
    return LoneFacts(
        tuple(block_matrices(model, li, width) for li in range(model.num_layers)),
        head,
        owner,
        tuple(where.get(d) for d in range(len(rooms))),
        tuple(0 if d in where else max(r, 0) for d, r in enumerate(rooms)),
        device,
        link,
        machine.host,
    )


def _pager_holds(
    page_budget: int,
    sizes: tuple[int, ...],
    banks: tuple[ExpertBank | None, ...],
    moves: str,
) -> tuple[str, tuple[ExpertBank | None, ...]]:
    """Whether the host pager of ``-relocate`` can page the blocks it would ``moves``:
    its budget holds the largest page (a block, or a mixture block's shared part or an
    expert) and no two page sizes make ``File.take`` reuse one's frame for the other
    (:func:`~blis_jitllm.paging.frames_cross`). Returns why not ("" where it can) and
    the pages' banks (empty where no page has one)."""
    sheets = sorted({k.sheet for k in banks if k is not None})
    if not sheets:
        banks = ()
    largest = max(sizes + tuple(sheets))
    if page_budget < largest:
        page = "block" if not sheets else "page (a block's shared part or an expert)"
        return (
            f"the host pager's budget ({max(page_budget, 0) / 2**30:.2f} GiB beside "
            f"the embedding and head) holds less than one {page} ({largest / 2**30:.2f} GiB)",
            banks,
        )
    for sheet in sheets:
        crossing = frames_cross(sizes, sheet)
        if crossing is not None:
            return f"the blocks it would {moves}: {crossing}", banks
    return "", banks


def _spread_relocation(
    machine: MachineSpec,
    pooled: list[int],
    owner: tuple[int | None, ...],
    blocks: list[int],
    settings: JitllmSettings,
    embedding: int,
    head: int,
    head_on_device: bool,
    banks: list[ExpertBank | None] | None,
    names: tuple[str, ...],
) -> _Relocation:
    """``-relocate`` over the several devices ``names`` (``model.go*``
    ``relocateUntil``; ``multi.go`` ``SpillAfter``): the card whose pool cannot grow
    gives up its highest block, to a later card that holds it (a spill) or else home;
    the port keeps each card's lowest block there, as on one device. A block's
    weights come from the host pager whichever way it goes (a spill's upload is read
    through it, ``Ensure``; a block home is faulted in through it), so the pager's
    pages are every block in block order, in the budget the host's weight budget leaves
    beside the embedding and a host head. A device ``-devices`` names that the
    placement leaves without a block is in the router's list all the same (``GPU.devs``:
    ``Placed`` counts a block-less device as 0; ``planShares`` takes the fewest devices
    that hold the need, fill-first the first that have room), so a spill or an offer
    back may reach it: its pool opens with its first block (``kvPages``: "made on first
    use"). Not modelled, with the reason: a machine that names no disk, every card
    holding one block, and a pager budget below the largest page.

    A mixture model's pages (``banks``: each block's routed bank, None for a dense
    one) are each block's shared part (``File.measureExtents`` skips the expert-paged
    banks) and each routed expert a page of its own, as on one device: a block sent
    home is paged by the host mixture blocks' rules, and a spill or an offer back
    hands the card its bank through ``Model.bankWeight``'s ``Sheet``, an expert page at
    a time through the pager. Not modelled, with the reason: pages whose frames
    ``File.take`` would cross (:func:`~blis_jitllm.paging.frames_cross`).

    An auto-streamed block (``docs/upstream/jitllm.md`` §1.7 "Read 2026-12-06") moves
    as any block: home it releases its base, bank and cache and runs on the host, its
    shared part faulted in beside the expert pages it kept; a spill or an offer back
    streams it again (``JitllmEngine._offer``)."""
    if machine.storage is None:
        return _Relocation(
            why_not=f"the blocks are on {len(pooled)} devices and machine {machine.id} "
            "names no disk: a block spilled to the next card is read through the host "
            "pager (Ensure), which blis-jitllm models only over a disk"
        )
    if all(sum(1 for o in owner if o == d) < 2 for d in pooled):
        return _Relocation(
            why_not="every card holds one block, which blis-jitllm keeps there (sending "
            "it home leaves the card without a block)"
        )
    limit = settings.maxmem or settings.host_mem or host_budget(machine.host_memory_bytes)
    page_budget = limit - embedding - (0 if head_on_device else head)
    pager_banks = tuple(banks) if banks is not None else ()
    sizes = tuple(
        b - (k.bytes if k is not None else 0)
        for b, k in zip(blocks, pager_banks or (None,) * len(blocks), strict=True)
    )
    why_not, pager_banks = _pager_holds(page_budget, sizes, pager_banks, "move")
    if why_not:
        return _Relocation(why_not=why_not)
    return _Relocation((), limit, page_budget, sizes, pager_banks, spread=True)


def _kv_dtype(kv_row: int, host_layer: int, device_attached: bool) -> str:
    """The KV dtype the plan's attention layers read their history at (its KV groups'
    bytes a position): float32 K and V on a device and in the host pages of a load
    that opened one; on a load that opened none, the host pages' own width, float16
    where :func:`~blis_jitllm.kv.host_layer_position_bytes` says so.

    ``newStateRange`` (``engine/model/forward.go@00860835``; the same code in
    ``engine/model/model.go``, index id 70872396232) generates the host's attention
    kernels for the cache's width (``JIT.AddAttnKV(hdK, hdV, stride, want)``, then
    ``kvl.elem = 2`` when ``want``), and ``nn.KVWidthPaysOff``
    (``engine/nn/attn.go@635f1f30``) says of the binary16 cache "An f16
    cache halves the bytes the attention walk reads": the kernels read the packed
    halves, widening each in the load. A device's pool is float32 K and V whatever the
    host chose (``SetDeviceLayers`` steps the host cache down before the device
    attaches), so a plan with a device keeps float32 throughout."""
    if not device_attached and host_layer == kv_row * 2 * 2:
        return "float16"
    return "float32"


def _segments(request: InferenceRequest) -> tuple[tuple[str, int], ...]:
    """The prompt as the memory prefix cache keys it: (content, tokens) per segment."""
    return tuple((s.content_key, s.num_tokens) for s in request.prompt)


def _cache_limit(settings: JitllmSettings, machine: MachineSpec | None, host_weights: int) -> int:
    """``storeLimit``: ``-mem-cache-max``, else an eighth of the model's host share less
    its weights there (with nothing else loaded, the bound on the host memory available
    gives the same); 0 when the cache is off or the pool names no machine to hold it."""
    if not settings.mem_cache or machine is None:
        return 0
    if settings.mem_cache_max:
        return settings.mem_cache_max
    total = settings.maxmem or settings.host_mem or host_budget(machine.host_memory_bytes)
    return max((total - host_weights) // 8, 1)


def _host_kv_budget(limit: int, position: int, p: int) -> KVBudget:
    """With every block on the host the history lives in host pages of ``p`` positions
    (:func:`~blis_jitllm.kv.host_page_positions`: 256 unless the model's own context is
    shorter; ``-max-seq`` does not clip it): as many as the memory the weights leave
    holds."""
    pages = limit // (p * position)
    return KVBudget(
        num_gpu_blocks=pages,
        block_size_tokens=p,
        kv_bytes=pages * p * position,
        available_bytes=limit,
    )


@dataclass(slots=True)
class _Times:
    """What ``/metrics`` needs of one generate (simulated microseconds)."""

    prompt_start: int | None = None
    prompt_done: int | None = None


class JitllmEngine:
    """One ``jitllmd`` serving one model wholly on one device."""

    def __init__(self, plan: PoolPlan, facts: PoolFacts, settings: JitllmSettings) -> None:
        self._plan = plan
        self._facts = facts
        self._settings = settings
        self.loop = StepLoop(
            width=settings.width,
            prompt_chunk=settings.prompt_chunk,
            step_prompt_tokens=settings.step_prompt_tokens,
            step_cost=settings.step_cost,
            joint_steps=settings.joint_steps,
            kv_room=self._kv_room,
            max_seq=settings.max_seq,
            park=self._park_row,
            resume=self._resume_row,
        )
        # KV bytes parks and resumes move at the next admission, per device with a pool
        self._swap = [0] * len(facts.device_layers)
        self._swaps = (0, 0)
        self._cache: MemCache | None = None
        if facts.cache_limit:
            self._cache = MemCache(
                facts.cache_limit, facts.host_page, facts.cache_position_bytes, facts.logits_bytes
            )
        self._uploads: dict[str, int] = {}  # restored positions a row's first pass uploads
        # -relocate beside auto-streamed blocks: each streamed block on a card now, with
        # its expert cache's sheets there (0: the plain bank), and what it charges there
        self._streams: dict[int, int] = {
            li: cache for li, cache in enumerate(facts.stream_caches) if cache is not None
        }
        self._stream_charges: dict[int, int] = {}
        # per device, its one shared plain bank's bytes (0: none yet), never refunded
        self._stream_banks = list(facts.stream_banks)
        self._pager: BudgetPager | None = None
        self._pager_reads = 0  # bytes an offer back to the card read through the pager
        if facts.host_page_budget:
            # its pages: the blocks -relocate may send home, then the plan's host blocks
            self._pager = BudgetPager(
                facts.host_page_budget,
                facts.pager_sizes or facts.host_block_sizes,
                facts.pager_banks if facts.pager_sizes else facts.host_block_banks,
            )
            # a budget that holds every host page (a mixture block's expert pages too)
            # starts with them all: the server's load preloads the pages (``LoadModel``:
            # ``model.WithPreload``, ``server/engine.go`` index id 70901474045;
            # ``File.Preload`` runs where the budget holds every page) and nothing
            # evicts them; else the warm-up generate is one pass of one token from empty
            # over several devices the pager's pages are every block: its scan is the
            # blocks on the host, in block order, and the auto-streamed blocks on the
            # cards (whose fills claim their experts there)
            scan = (
                _host_scan(facts.spread.owner, self._streams) if facts.spread is not None else None
            )
            if _host_pages_fit(facts):
                if self._streams:
                    # a streamed block's expert pages without its block page (dropped
                    # when the card took it, ``releaseLayer`` keeping the experts)
                    for li in scan or ():
                        bank = facts.pager_banks[li]
                        if li in self._streams and bank is not None:
                            self._pager.fill(li, bank.experts)
                        else:
                            self._pager.preload(pages=(li,))
                else:
                    self._pager.preload(len(facts.relocate), scan)
            elif settings.warm:
                # the warm-up's token finds every device expert cache cold: each
                # streamed block's fill claims its whole selection
                self._pager.run_pass(len(facts.relocate), 1, scan, self._fill_claims(1, cold=True))
        # per device with a pool: pages a layer, the dummy included; 0 where the device
        # holds no block yet (over several devices, a card the placement left empty,
        # whose pool opens with its first block: ``kvPages``, made on first use)
        self._pool_pages = [1 if layers else 0 for layers in facts.device_layers]
        # -relocate: blocks sent home so far, and what the devices hold now
        self._moved = 0
        self._layers = list(facts.device_layers)
        self._limits = list(facts.kv_limits)
        self._host_position = facts.host_position_bytes
        self._migrated = 0  # KV and weight bytes a relocation moves, read by the next pass
        self._room_changed = False
        # -relocate over several devices: each block's device now (None: the host), the
        # blocks it sent home (``moved``), PrepLayer's cursor, the bytes each device's
        # link carries for the moves (read by the next pass) and the placement of now
        # (None: the plan's own)
        spread = facts.spread
        self._owner: list[int | None] = list(spread.owner) if spread is not None else []
        self._gone_home: set[int] = set()
        self._cursor = spread.cursor if spread is not None else 0
        self._moves = [0] * len(facts.device_layers)
        self._scan = _host_scan(spread.owner, self._streams) if spread is not None else []
        self._placed: Placed | None = None
        # ``-warm false`` with auto-streamed blocks: the first session to attach is the
        # one whose offer marks them (``SetDeviceLayers``: ``s.autoStreamed > 0``) and so
        # arms the stream trial (``initStreamTrial``); its decode passes are counted, and
        # the trial's first act (after ``seamWarmup``) is refused by name. ``-warm`` (the
        # default) gives the marking to the warm-up's session, which never reaches it.
        streamed = any(blocks for blocks, _ in facts.expert_streams) or bool(self._streams)
        self._trial_open = streamed and not settings.warm
        self._trial_row: str | None = None
        self._trial_decoded = 0
        # and without the warm-up, the first pass's fills find every device expert cache
        # cold: each streamed block claims its whole selection through the pager
        paged = self._pager is not None and not _host_pages_fit(facts)
        self._cold_fills = streamed and not settings.warm and paged
        # lone matvecs (facts.lone): what a single-row pass offers (the blocks on the
        # host now, in block order, then a host head), each session's samples (one per
        # device asked), the copies the cards hold and the declines they keep (keyed by
        # block, matrix and the block's stint on the host: its frame's address)
        lone = facts.lone
        self._lone_host: tuple[int, ...] | None = None  # None: no single-row pass yet
        self._lone_offers: tuple[tuple[Matrix, Key], ...] = ()
        self._lone_gen: dict[int, int] = {}
        self._lone_samples: dict[str, list[MatVecSample]] = {}
        self._lone_copies = CardCopies(len(lone.held) if lone is not None else 0)
        self._lone_free = list(lone.rooms) if lone is not None else []
        self._lone_outs = 0  # the pager's block evictions seen at the last check
        self._lone_parts: dict[tuple[int, tuple[int | None, ...]], tuple[PlanPart, ...]] = {}
        #: per device asked (``-devices``' order): the bytes of the copies it holds
        self.lone_charged = [0] * len(lone.held) if lone is not None else []
        self.spilled = 0  # ``devSpilled``
        self.relocated = 0  # ``devRelocated``
        self.reclaimed = 0  # ``devReclaimed``
        self._held: dict[str, int] = {}
        # per device with a pool: the oldest pages each row sent home (never brought back)
        self._home: list[dict[str, int]] = [{} for _ in facts.device_layers]
        # per row: the positions of its host blocks' history; and the host pages all rows
        # hold, each allocated whole when its first position is written (``kvPages.grow``)
        self._host_positions: dict[str, int] = {}
        self._host_pages = 0
        # per row parked at least once and not yet retired: the snapshot ``parkLocked``'s
        # ``refresh`` took of its parked State, which every re-division counts
        self._park_snaps: dict[str, int] = {}
        self._requests: dict[str, InferenceRequest] = {}
        self._times: dict[str, _Times] = {}
        self._sent: dict[str, int] = {}
        self._reported: set[str] = set()
        self._aborted: list[FinishedRequest] = []
        self._passes: list[list[Unit]] = []
        self._in_flight: tuple[StepShape, list[Unit]] | None = None
        self._iteration_start_us = 0
        self._step_id = 0
        self._metrics: dict[str, float] = dict.fromkeys(METRIC_NAMES, 0.0)
        self._metrics["jitllm_models_loaded"] = 1.0

    @property
    def plan(self) -> PoolPlan:
        """The run-phase plan."""
        return self._plan

    @property
    def input_boundary(self) -> Mapping[str, str]:
        """Requests and cancels are read when the loop next admits and samples."""
        return {"arrival": "next_schedule", "abort": "next_schedule"}

    # -- KV ----------------------------------------------------------------------------

    def _kv_room(self) -> tuple[int, int]:
        """``KVRoom``: on each device with a pool its free pages less one plus what its
        budget lets every layer grow by, the fewest over the devices, in positions; a page
        of 0 when no block (no KV pool) is on a device. Pages sent home are free."""
        f = self._facts
        if not f.device_layers:
            return 0, 0
        total = sum(self._held.values())
        rooms = [
            DeviceKVRoom(
                # a device with no block has no pool and is not asked (``owners``)
                free_pages=(pages - 1 - (total - sum(home.values())),) if layers else (),
                page_bytes=(f.layer_page_bytes * layers,),  # its layers grow alike
                grow_bytes=max(limit - pages * f.layer_page_bytes * layers, 0),
            )
            for pages, layers, limit, home in zip(
                self._pool_pages, self._layers, self._limits, self._home, strict=True
            )
        ]
        return kv_room(rooms, f.page), f.page

    def _take_pages(self, units: list[Unit]) -> None:
        """Give each unit's row the pages of the positions it writes, growing each
        device's pool, or, where it cannot grow, sending rows' oldest written pages home
        (``evictForRoom``); the blocks on the host keep their rows' history in the host's
        memory."""
        f = self._facts
        if not f.device_layers:
            if self._host_position:
                self._take_host(units)
            return
        p = f.page
        need = dict(self._held)
        for u in units:
            end = u.start + u.tokens
            need[u.row.request_id] = max(need.get(u.row.request_id, 0), -(-end // p))
        callers = {u.row.request_id for u in units}
        for d in range(len(self._pool_pages)):
            self._fit(d, need, callers)
        self._held = need
        if self._host_position:
            self._take_host(units)

    def _fit(self, d: int, need: dict[str, int], callers: set[str]) -> None:
        """Room for the pass on device ``d``: grow the pool; else, with ``-relocate``, send
        the highest block home and try again (``relocateFor``: the seam follows the KV);
        else send rows' written history home (``evictForRoom``)."""
        f = self._facts
        if not self._layers[d]:
            return  # no block there yet: ``ReserveKV`` asks only the devices that hold one
        while True:
            pages, layers, limit = self._pool_pages[d], self._layers[d], self._limits[d]
            home = self._home[d]
            want = sum(need.values()) - sum(home.values()) + 1
            if want <= pages:
                return
            grown = grown_layer_pages(
                pages,
                want,
                room_bytes=(limit - pages * f.layer_page_bytes * layers) // layers,
                page=f.layer_page_bytes,
                limit=limit // f.layer_page_bytes // layers,
            )
            if grown is not None:
                self._pool_pages[d] = grown
                return
            if self._moved < len(f.relocate):
                self._relocate_one(d, need)
                continue
            if f.spread is not None and self._relocate_from(d, need, callers):
                continue
            if f.mixture and not f.relocate and f.spread is None:
                raise SimulationError(
                    f"{ENGINE}: the KV pool of device {d} cannot grow for the pass: "
                    + _not_relocated(f.relocate_off)
                )
            if self._evict(d, need, want - pages + 1, callers) <= 1:
                return
            raise SimulationError(
                f"{ENGINE}: the KV pool of device {d} cannot grow and its rows have no "
                "wholly written page left to send home; jitllm would move a block off the "
                "card (-relocate)"
                + (
                    ", and every block but the card's lowest has gone (to a later card or "
                    "home): it would send that one home too, leaving the card without a "
                    "block, which is not modelled by blis-jitllm"
                    if f.spread is not None
                    else f", and {f.relocate_off}"
                    if not f.relocate
                    else ", and every block but the first has gone: it would demote every "
                    "block to the host, which is not modelled by blis-jitllm"
                )
            )

    def _relocate_one(self, d: int, need: dict[str, int]) -> None:
        """``relocateHome``: the highest block left on the device goes home with its
        KV history (``migrateKV``, over the device's link); its weights' room goes to
        the pool. The weights do not cross: the card's copy is released
        (``ReleaseLayers``) and the next pass faults the block in through the host
        pager (``rowsHost`` -> ``pageIn``), from the model file, since its page was
        dropped when the card took it; a mixture block's routed experts are then expert
        pages of the pager, read as the passes' rows choose them (``ensureExperts``)."""
        f = self._facts
        _, charge = f.relocate[self._moved]
        resident = sum(need.values()) - sum(self._home[d].values())
        self._moved += 1
        self._layers[d] -= 1
        self._limits[d] += charge
        self._host_position += f.host_layer_position_bytes
        self._migrated += resident * f.layer_page_bytes

    def _relocate_from(self, d: int, need: dict[str, int], callers: set[str]) -> bool:
        """``relocateUntil`` over several devices, one block: device ``d`` refused
        (``RefusalReporter``), so its highest block moves (``relocationVictim``; the
        port keeps the card's lowest block there and returns False when only that one
        is left). Its history comes home first over ``d``'s link (``migrateKV``); then
        ``SpillAfter`` arms a later card, unless ``d`` is the last device or another
        session (a row other than the pass's, or a second row) has history on the card
        (``sharedBeyond``), and the block is offered on from the next card
        (``PrepLayer``: the first that holds it resident beside its pool, the pool
        taking a page run for the new layer): the spill reads the block through the
        host pager (``Ensure``; its page then stays there, as the offer of a held block
        drops none; a mixture block's bank follows an expert page at a time,
        ``bankWeight``'s ``Sheet``, its pages staying too:
        :meth:`~blis_jitllm.paging.BudgetPager.bank_upload`), uploads it and its
        history over that card's link, and leaves the cursor there. Otherwise it goes
        home (``relocateHome``, remembered for ``reclaim``): the card's copy is
        released, the cursor goes back to the device holding the highest placed block
        (``ReleaseLayers``), and the next pass faults it in through the pager. Either
        way its room on ``d`` goes to the pool."""
        f = self._facts
        spread = f.spread
        assert spread is not None
        mine = [i for i, o in enumerate(self._owner) if o == d]
        if len(mine) < 2:
            return False
        li = mine[-1]
        # a streamed block releases its base and its expert cache (``ReleaseLayers``);
        # the device's shared plain bank stays charged (``sharedCompact``: refunded by
        # ``Close`` alone) and its record in ``autoStream`` stays (no deletion read)
        charge = self._stream_charges.pop(li, spread.charges[li])
        self._streams.pop(li, None)
        history = (sum(need.values()) - sum(self._home[d].values())) * f.layer_page_bytes
        self._moves[d] += history
        self._layers[d] -= 1
        self._limits[d] += charge
        target: tuple[int, int, int | None] | None = None
        if d < len(self._layers) - 1 and not self._shared(d, callers):
            target = next(
                (
                    (e, *got)
                    for e in range(d + 1, len(self._layers))
                    if (got := self._offer(e, li, need)) is not None
                ),
                None,
            )
        if target is not None:
            e, charge, cache = target
            self._open(e)
            self._take(li, e, charge, cache)
            self._moves[e] += self._upload(li, charge) + history
            if self._pager is not None:
                # ``Ensure``: the block's page, then a mixture block's bank an expert
                # page at a time (``bankWeight``'s ``Sheet``); nothing drops them. A
                # streamed block's bank is filled per token, not uploaded
                self._pager_reads += round(self._pager.touch(li, 0))
                if cache is None:
                    self._pager_reads += round(self._pager.bank_upload(li, keep=True))
            self._cursor = e
            self.spilled += 1
        else:
            self._owner[li] = None
            self._gone_home.add(li)
            self._host_position += f.host_layer_position_bytes
            self._cursor = self._tail()
            self.relocated += 1
        self._moved_now()
        return True

    def _offer(self, e: int, li: int, need: Mapping[str, int]) -> tuple[int, int | None] | None:
        """``prepLayer`` of block ``li`` on device ``e``: what it charges there and, for
        an auto-streamed block, its expert cache's sheets (None: a resident block), or
        None where ``e`` does not hold it beside its pool (:meth:`_holds`). A streamed
        block (``autoStream[li]`` set, kept since ``AutoStream``) is prepared streamed
        again: its base, and the cache of the size ``AutoStream`` recorded where the card
        has room for it beside what it holds (``cacheSlotsFor``: ``g.room``), else the
        plain bank of one token's selection: the device's one shared bank
        (``sharedCompact``), which the block does not pay for
        (:func:`~blis_jitllm.moe.streamed_charge`), and which a card that holds none yet
        makes, and is charged once, as it takes the block (:meth:`_take`), so it needs
        room beside the block for it. A block with its cache is charged its base and
        cache (``residentCompact``, the block's own) and makes no shared bank."""
        f = self._facts
        spread = f.spread
        assert spread is not None
        auto = f.stream_caches[li] if f.stream_caches else None
        if auto is None:
            charge = spread.charges[li]
            return (charge, None) if self._holds(e, charge, need) else None
        bank = f.pager_banks[li]
        assert bank is not None
        base = f.pager_sizes[li]
        room = self._limits[e] - self._pool_pages[e] * f.layer_page_bytes * self._layers[e]
        cache = auto if auto and base + auto * bank.sheet <= room else 0
        charge = base + cache * bank.sheet
        makes = plain_bank(bank) if not cache and not self._stream_banks[e] else 0
        if makes and not self._holds(e, charge + makes, need) and self._holds(e, charge, need):
            raise SimulationError(f"{ENGINE}: " + _bank_short(li, e))
        return (charge, cache) if self._holds(e, charge + makes, need) else None

    def _take(self, li: int, e: int, charge: int, cache: int | None) -> None:
        """Device ``e`` takes block ``li`` at ``charge`` (a streamed one with its cache's
        ``cache`` sheets; on the plain bank, 0, where the device holds no shared plain
        bank yet it makes one, charged to the device once: ``sharedCompact``)."""
        self._owner[li] = e
        self._layers[e] += 1
        self._limits[e] -= charge
        if cache == 0 and not self._stream_banks[e]:
            bank = self._facts.pager_banks[li]
            assert bank is not None
            self._stream_banks[e] = plain_bank(bank)
            self._limits[e] -= self._stream_banks[e]
        if cache is not None:
            self._streams[li] = cache
            self._stream_charges[li] = charge

    def _upload(self, li: int, charge: int) -> int:
        """The weight bytes a card taking block ``li`` uploads over its link: the whole
        block, or a streamed block's base (its bank is filled per token, the new cache
        starting empty: the port counts a warm cache's misses only)."""
        if li in self._streams:
            return self._facts.pager_sizes[li]
        return charge

    def _shared(self, d: int, callers: set[str]) -> bool:
        """``sharedBeyond``: a session other than the one moving the block has history
        on device ``d``. Each row is a session of its own (the server's joint step is
        ``LayersSessions`` across sessions), so: a row outside the pass, or a second
        row, holds pages there."""
        home = self._home[d]
        holders = {rid for rid, pages in self._held.items() if pages - home.get(rid, 0) > 0}
        return len(holders) > 1 or bool(holders - callers)

    def _holds(self, e: int, charge: int, need: Mapping[str, int]) -> bool:
        """Device ``e`` takes a block of ``charge`` resident beside its pool, which
        grows a layer for it (``prepLayer``'s first pass; automatic placement never
        pages a block). A device that holds no block has no pool yet: the block's layer
        would open it, so it must hold the pages the rows ``need`` there and the dummy
        page, and at least the two pages ``permBytes`` charges a fresh layer
        (``pagedLayerBytes``: a dummy and one per session seat, ``-sessions`` 1)."""
        f = self._facts
        if not self._pool_pages[e]:
            want = sum(need.values()) - sum(self._home[e].values()) + 1
            return max(want, 2) * f.layer_page_bytes <= self._limits[e] - charge
        layers = self._layers[e] + 1
        return self._pool_pages[e] * f.layer_page_bytes * layers <= self._limits[e] - charge

    def _open(self, e: int) -> None:
        """A block lands on device ``e``: a device that held none opens its pool
        (``kvPages``) with the dummy page, the page size ``P`` of every pool (the rule is
        the context's, the same on every card); the pass's room grows it as any pool."""
        if not self._pool_pages[e]:
            self._pool_pages[e] = 1

    def _tail(self) -> int:
        """``GPU.tail``: the device holding the highest placed block."""
        return next(o for o in reversed(self._owner) if o is not None)

    def _moved_now(self) -> None:
        """After a move: the host's blocks in block order (the pager's scan) and the
        placement a step now runs on."""
        spread = self._facts.spread
        assert spread is not None
        owner = tuple(self._owner)
        self._scan = _host_scan(owner, self._streams)
        self._placed = None if owner == spread.owner else spread.at(owner)

    def _reclaim_spread(self) -> None:
        """``reclaim`` over several devices: the blocks sent home are offered back,
        lowest first, until one is not taken. Each offer reads the block through the
        pager (``pageIn``) and goes to ``PrepLayer``, which walks the devices from its
        cursor (or from the block's planned device, ``share``, when that is further):
        the first that holds it beside its pool takes it, its weights and history
        crossing that card's link (a mixture block's bank read through the pager an
        expert page at a time, ``bankWeight``), its pages dropped, and the cursor stays
        there. The offer ends by handing the free frames back (``TrimFree``)."""
        f = self._facts
        spread = f.spread
        assert spread is not None
        self._room_changed = False
        pager = self._pager
        share = spread.share
        for li in sorted(self._gone_home):
            if pager is not None:
                self._pager_reads += round(pager.touch(li, 0))
            start = self._cursor
            if share is not None and li < len(share) and share[li] > start:
                start = share[li]
            target = next(
                (
                    (e, *got)
                    for e in range(start, len(self._layers))
                    if (got := self._offer(e, li, self._held)) is not None
                ),
                None,
            )
            if target is None:
                break
            e, charge, cache = target
            self._open(e)
            resident = sum(self._held.values()) - sum(self._home[e].values())
            self._gone_home.discard(li)
            self._take(li, e, charge, cache)
            self._host_position -= f.host_layer_position_bytes
            self._moves[e] += self._upload(li, charge) + resident * f.layer_page_bytes
            self._cursor = e
            self.reclaimed += 1
            if pager is not None:
                if cache is None:
                    # a mixture block's bank goes up an expert page at a time, each
                    # read through the pager where it is not held (``bankWeight``)
                    self._pager_reads += round(pager.bank_upload(li))
                # a streamed block keeps its expert pages (``releaseLayer``'s
                # ``keepExperts``), its fills claiming them again
                pager.drop(li, keep_experts=cache is not None)
        self._moved_now()
        if pager is not None:
            pager.trim_free()

    def _where(self, tiled: bool, disk: bool = False) -> tuple[PartSlots, tuple[PlanPart, ...]]:
        """The placement a step runs on now: its paging parts, and its parts
        (``StepShape.parts``) on the batched twin where ``tiled``, else on the decode
        matvec, empty for the plan's own parts there. With ``-relocate`` on one device
        the placement lowered at the load for the blocks sent home
        (``PoolFacts.placements``); over several devices, where blocks moved, the one
        :class:`Spread` lowered. With ``disk`` (the pager read blocks for the step)
        where the placement runs no block on the host, the same placement with the
        machine's disk on its embedding's host part (:func:`_with_disk`), so the read is
        priced over the disk. The same placement is the same tuple each time."""
        f = self._facts
        placed = self._placed
        if placed is None:
            placed = f.placements[self._moved]
            if disk and placed.slots.pager is None and f.disk is not None:
                placed = f.disk
            elif not tiled and not self._moved:
                return placed.slots, ()  # the plan's own placement
        elif disk and placed.slots.pager is None and f.spread is not None:
            placed = f.spread.with_disk(tuple(self._owner))
        return placed.slots, placed.tiled if tiled else placed.parts

    def _reclaim(self) -> None:
        """``reclaim``: once room came back (a row left), offer the blocks sent home back,
        lowest first, keeping each only while the pool still fits beside it. An offer
        reads the block through the host pager first (``offerRange`` -> ``pageIn``: a
        hit, or a read from the model file that may evict), also for the block the card
        then declines ("offering a block the card cannot hold reads its page for
        nothing"); a block the card takes crosses its link with its history and gives
        its page up (``releaseLayer`` -> ``DropPage``), and the offer ends by handing
        every free frame back (``TrimFree``). A mixture block's offer reads its shared
        part's page; taken, its bank is assembled an expert page at a time through the
        pager (``bankWeight``: the pages not held read from the model file,
        :meth:`~blis_jitllm.paging.BudgetPager.bank_upload`) and every page of it is
        dropped."""
        f = self._facts
        if f.spread is not None:
            self._reclaim_spread()
            return
        self._room_changed = False
        pager = self._pager
        while self._moved:
            _, charge = f.relocate[self._moved - 1]
            page = len(f.relocate) - self._moved  # its page in the pager
            if pager is not None:
                # ``pageIn``: the block's page (a mixture block's banks are not in it)
                self._pager_reads += round(pager.touch(page, 0))
            layers = self._layers[0] + 1
            if self._pool_pages[0] * f.layer_page_bytes * layers > self._limits[0] - charge:
                break
            resident = sum(self._held.values()) - sum(self._home[0].values())
            self._moved -= 1
            self._layers[0] = layers
            self._limits[0] -= charge
            self._host_position -= f.host_layer_position_bytes
            self._migrated += charge + resident * f.layer_page_bytes
            if pager is not None:
                # a mixture block's bank goes up an expert page at a time, each read
                # through the pager where it is not held (``bankWeight``)
                self._pager_reads += round(pager.bank_upload(page))
                pager.drop(page)
        if pager is not None:
            pager.trim_free()

    def _evict(self, d: int, need: dict[str, int], short: int, callers: set[str]) -> int:
        """``evictForRoom`` on device ``d``: free ``short`` pages (the want and one spare)
        by sending wholly written pages home, oldest first, from the other rows in the
        order they were admitted, the rows that asked last; a page index goes home in
        every layer the device holds. Returns the pages still short."""
        p = self._facts.page
        home = self._home[d]
        rows = self.loop.rows
        order = [r for r in rows if r.request_id not in callers] + [
            r for r in rows if r.request_id in callers
        ]
        for r in order:
            if short <= 0:
                break
            rid = r.request_id
            written = r.fed if r.prompting() else r.prompt_tokens + r.n
            evictable = min(need.get(rid, 0), written // p) - home.get(rid, 0)
            take = min(max(evictable, 0), short)
            if take:
                home[rid] = home.get(rid, 0) + take
                short -= take
        return short  # more than one (the spare): the want does not fit

    def _device_position_bytes(self) -> int:
        """KV bytes one position takes over the layers on the device (float32)."""
        return self._facts.layer_position_bytes * sum(self._layers)

    def _streamed(self, units: list[Unit]) -> list[int]:
        """Per device with a pool: the KV bytes a pass of ``units`` streams back from the
        host, every page its rows sent home, in every layer the device holds."""
        f = self._facts
        return [
            sum(home.get(u.row.request_id, 0) for u in units) * f.layer_page_bytes * layers
            for home, layers in zip(self._home, self._layers, strict=True)
        ]

    def _take_host(self, units: list[Unit]) -> None:
        """The pass's positions in the host blocks' history; a history beyond the host
        memory the weights leave stops the run, as nothing in ``jitllmd serve`` bounds
        it. Nothing spills: a ``model_id`` generate runs on an ephemeral session made
        with no KV store and no budget (``server/engine.go@ccdb11a9`` ``resolveSession``:
        ``CreateSession`` with the model id alone), so ``kvCache.trim`` never evicts its
        pages (``engine/model/kvpage.go@2e3f7300``: a zero budget never evicts), and
        ``-kv-cache`` is the prompt store only of sessions created with
        ``prompt_cache``; spilling under a budget is ``jitllm run``'s ``-kv-budget``
        (``cmd/jitllm/main.go@0358625``). Nor does the weight pager make room:
        ``applyPageBudget`` (``server/engine.go@00860835``) takes the sessions'
        histories out of its share only as their snapshots give them, and a request's
        snapshot is taken when its session is created (an empty history) and when its
        generate ends, just before ``CloseSession`` gives the history back
        (:meth:`_rebudget`). The history is held in whole host pages."""
        p = self._facts.host_page
        for u in units:
            rid = u.row.request_id
            end = u.start + u.tokens
            before = self._host_positions.get(rid, 0)
            if end > before:
                self._host_positions[rid] = end
                self._host_pages += -(-end // p) - -(-before // p)
        held = self._host_pages * p * self._host_position
        if held > self._facts.host_kv_limit_bytes:
            raise SimulationError(
                f"{ENGINE}: the history of the blocks on the host ({held / 2**30:.2f} GiB) "
                f"outgrows the host memory the weights leave "
                f"({self._facts.host_kv_limit_bytes / 2**30:.2f} GiB), and jitllmd serve "
                "would outgrow its host too: a generate gets no KV store or budget "
                "(-kv-cache serves only sessions created with prompt_cache), so no page "
                "spills to disk, and applyPageBudget takes a history out of the weight "
                "pager's budget only once its generate has ended (the session's snapshot "
                "is taken when it is created and when it finishes), so the pager never "
                "makes room for a history still growing; lower max-seq or max-batch, or "
                "give the host more memory (host-mem)"
            )

    def _rebudget(self, history: int, retired: bool = False) -> None:
        """Generates ended: ``applyPageBudget`` (``server/engine.go@00860835``) as their
        sessions refresh and close. ``history`` is the host history of every row retired
        since the last pass, charged together. Upstream, each row's goroutine wakes when
        the loop retires it (``stepLoop.finish`` closes ``r.done``; ``server/batch.go``,
        index id 70867434586, ``generateBatched``), publishes its snapshot (``refresh``:
        ``snapKV`` = ``KVBytes``) and re-divides: the share less the SUM of every
        registered session's ``snapKV``, at least one byte (``pagerBudget``), which
        evicts down to it at once (``BudgetPager.set_budget``). Only then does it send
        its Finished event and return, and ``Generate``'s deferred ``CloseSession``
        gives the history back (re-dividing again). The loop retires the rows of one
        iteration within microseconds of each other, while each one's window from
        ``refresh`` to ``CloseSession`` spans an HTTP write and the State's close, so
        each re-division counts the siblings that refreshed before it: the deepest is
        the share less their sum (the order of the goroutines is the scheduler's; this
        is the port's reading of it, not a sequence the code fixes). Evictions go in
        ``evictOne``'s fixed order and nothing is read in between, so the smaller
        budgets on the way change nothing: the sum is charged once and the share
        returns, reading nothing; the blocks evicted are read again as the next passes
        reach them. A running generate's history never shrinks the budget: its snapshot
        is the one ``CreateSession`` took, before it had any (still 0: ``RestorePrefix``
        runs after it and refreshes nothing), unless the fair scheduler parked it:
        ``parkLocked`` (``server/preempt.go``, index id 70975914774) ends with
        ``refresh``, so its snapshot is what its parked State holds
        (:func:`~blis_jitllm.kv.parked_host_bytes`), ``resumeLocked`` refreshes nothing,
        and that snapshot counts in every re-division until its generate ends
        (``_park_snaps``): the share after the sessions close is the share less them.
        ``retired``: some row retired (its own park snapshot gives way to its history)."""
        if self._pager is None or not (history or retired):
            return
        self._divide(history)

    def _divide(self, history: int = 0) -> None:
        """One re-division and, where ``history`` (the retired rows' histories) is given,
        the one after their sessions close: the share less the parked rows' snapshots
        and ``history``, at least one byte (``pagerBudget``). Also run where
        ``CreateSession`` and ``CloseSession`` re-divide with no history of their own
        (a request arriving, one withdrawn before it had a row)."""
        if self._pager is None:
            return
        share = self._facts.host_page_budget - sum(self._park_snaps.values())
        if history:
            self._pager.set_budget(max(share - history, 1))
        self._pager.set_budget(max(share, 1))

    # -- requests ------------------------------------------------------------------------

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        """A generate: queued for a row, or refused. Its integer priority goes out as
        ``jitllm_priority`` by BLIS's mapping (below 0 "high", else "normal";
        :mod:`blis_jitllm.priority`)."""
        n = request.input_tokens
        max_seq = self._settings.max_seq
        if n == 0:
            raise _refuse("request.prompt", 0, "the prompt is empty")
        if n >= max_seq:
            raise _refuse(
                "request.prompt",
                n,
                f"a prompt of {n} tokens leaves no room to generate in a context of {max_seq}",
            )
        limit = self._settings.max_queue
        if limit is not None and len(self._requests) >= limit:
            raise _refuse(
                "engine.args.max-queue",
                limit,
                f"HTTP 429: {limit} requests are running or waiting for this model",
            )
        max_tokens = min(request.max_output_tokens, max_seq - n)
        self._requests[request.request_id] = request
        self._times[request.request_id] = _Times()
        restored = 0
        if self._cache is not None:
            # RestorePrefix, before the request is queued: the store's pages of the
            # shared prefix go to the host, then up to every device layer
            restored = self._cache.lookup(_segments(request), n)
            if restored:
                self._uploads[request.request_id] = restored
        # ``jitllm_priority`` as BLIS maps the request's integer priority (BLIS's mapping,
        # :mod:`blis_jitllm.priority`), then ``rowPriority``
        prio = row_priority(jitllm_priority(request.priority))
        self.loop.submit(request.request_id, n, max_tokens, now_us * 1000, restored, prio)
        if self._park_snaps:
            self._divide()  # ``CreateSession`` re-divides: the parked rows' snapshots count
        self._metrics["jitllm_sessions"] = float(len(self._requests))

    def abort_request(self, request_id: str, now_us: int) -> None:
        """A client left: a waiting request is withdrawn, a row is retired at the next
        iteration."""
        if request_id not in self._requests or request_id in self._reported:
            return
        if self.loop.cancel(request_id):
            self._aborted.append(FinishedRequest(request_id, "abort", 0))
            self._forget(request_id)
            if self._park_snaps:
                self._divide()  # its session closes: ``CloseSession`` re-divides

    def _forget(self, request_id: str) -> None:
        self._requests.pop(request_id, None)
        self._times.pop(request_id, None)
        self._sent.pop(request_id, None)
        self._uploads.pop(request_id, None)
        self._lone_samples.pop(request_id, None)  # the session's samples close with it
        self._reported.discard(request_id)
        self._metrics["jitllm_sessions"] = float(len(self._requests))

    # -- steps ---------------------------------------------------------------------------

    def schedule(self, now_us: int) -> StepShape | None:
        """The next pass of the current iteration, or a new iteration's first."""
        if self._in_flight is not None:
            return None
        if not self._passes:
            # ``serve``: admit and iterate until a step runs or no row is left (an
            # iteration that only retired rows frees room for the next admission)
            history = 0  # host history of the rows retired before the next pass
            retired = False
            while True:
                nxt = self.loop.iterate(now_us * 1000)
                if nxt is None:
                    break
                it = nxt
                if self._trial_open and self._trial_row is None and it.admitted:
                    self._trial_row = it.admitted[0]
                history += self._retired(it.finished, now_us)
                retired = retired or bool(it.finished)
                swaps = (len(it.parked), len(it.resumed))
                if it.passes or any(swaps):
                    break
            self._rebudget(history, retired)
            if nxt is None:
                return None
            self._passes = list(it.passes)
            self._iteration_start_us = now_us
            if (self._moved or self._gone_home) and self._room_changed:
                self._reclaim()
            self._stream_trial()
            for units in self._passes:
                self._take_pages(units)
            if self._streams_too_many():
                # a call may stream one row's history back, no more: the device refuses
                # the joint shape and the rows run alone
                self._passes = self.loop.refuse_joint()
            if any(swaps):
                # parking and resuming rows (admission's own work, before the step) moves
                # their history between the devices and the host: timed on its own
                shape = self._swap_shape(swaps)
                self._in_flight = (shape, [])
                return shape
            for units in self._passes:
                for u in units:
                    t = self._times.get(u.row.request_id)
                    if t is not None and u.prompt and t.prompt_start is None:
                        t.prompt_start = now_us
        units = self._passes.pop(0)
        shape = self._shape(units)
        self._in_flight = (shape, units)
        return shape

    def _stream_trial(self) -> None:
        """``seamStep`` of the session whose offer marked the streamed blocks (``-warm
        false``): each of its passes of one token (``k == 1`` in the host step, a decode)
        counts; the pass after its ``seamWarmup``-th would be the trial's first act
        (``SetGPULayers`` of its incumbent arm, then timed runs of ``seamRun`` tokens
        with every block moved home and back between them, and a decision by the ratio
        of their wall-clock rates), which is refused by name. A session that closes
        before (its request retired or cancelled) takes its trial with it: the blocks
        stay marked, so no later session's offer asks ``AutoStream`` or arms one."""
        rid = self._trial_row
        if rid is None or not self._trial_open:
            return
        if rid not in self._requests:
            self._trial_open = False  # the session closed with its trial unstarted
            return
        for units in self._passes:
            for u in units:
                if u.row.request_id == rid and u.tokens == 1:
                    self._trial_decoded += 1
        if self._trial_decoded > STREAM_TRIAL_WARMUP:
            raise SimulationError(
                f"{ENGINE}: -warm false with auto-streamed blocks: the session that marked "
                f"them (request {rid!r}, the first to attach) decodes past the stream "
                f"trial's warm-up of {STREAM_TRIAL_WARMUP} tokens, so initStreamTrial would "
                "now run its timed runs of 24 tokens, moving every block home and back "
                "between them, and keep the host if its measured rate beats the streamed "
                "one by 5 % (ABBA over 3 rounds, the spread below 10 %); that wall-clock "
                "measurement is not modelled by blis-jitllm (-warm, the default, gives the "
                "marking to the warm-up's single decode step, which never reaches the trial)"
            )

    def _park_row(self, row: Row) -> None:
        """``parkRow``: the row's history on the devices goes home (its pages free), and
        ``parkLocked``'s ``refresh`` snapshots what its parked State holds on the host
        (one tail page a layer, :func:`~blis_jitllm.kv.parked_host_bytes`), which the
        pager's re-divisions count from the next one until the row retires."""
        rid = row.request_id
        if self._pager is not None:
            self._park_snaps[rid] = parked_host_bytes(
                row.fed + row.n, self._facts.cache_position_bytes, self._facts.host_page
            )
        pages = self._held.pop(rid, 0)
        for d, home in enumerate(self._home):
            resident = pages - home.pop(rid, 0)
            self._swap[d] += resident * self._facts.layer_page_bytes * self._layers[d]

    def _resume_row(self, row: Row) -> None:
        """``resumeRow``: its whole history comes back to the devices (its pages are
        taken again when it next runs)."""
        pages = -(-(row.fed + row.n) // self._facts.page) if self._facts.page else 0
        for d in range(len(self._swap)):
            self._swap[d] += pages * self._facts.layer_page_bytes * self._layers[d]

    def _swap_shape(self, swaps: tuple[int, int]) -> StepShape:
        """An admission's parks and resumes as a step of their own: no tokens, the
        history they move over each device's link."""
        self._step_id += 1
        self._swaps = swaps
        slots, parts = self._where(False)
        page_in = [0] * slots.paging
        for slot, num_bytes in zip(slots.devices, self._swap, strict=True):
            if slot is not None:
                page_in[slot] += num_bytes
        self._swap = [0] * len(self._swap)
        return StepShape(
            step_id=self._step_id,
            mode=StepMode.IDLE,
            seqs=(),
            padded_tokens=0,
            graph_mode=GraphMode.FULL,
            page_in_bytes=tuple(page_in) if any(page_in) else (),
            parts=parts,
        )

    def _streams_too_many(self) -> bool:
        """Whether the iteration's one joint pass has two or more rows with pages at home."""
        if len(self._passes) != 1 or len(self._passes[0]) < 2:
            return False
        rows = {u.row.request_id for u in self._passes[0]}
        return sum(1 for rid in rows if any(home.get(rid) for home in self._home)) >= 2

    def _retired(self, finished: list[tuple[str, str, int]], now_us: int) -> int:
        """Rows the iteration retired: their pages return to the pool; a cancelled one
        is reported as an abort at the next outcome. Returns the bytes of their host
        history in whole host pages (what ``KVBytes`` reports), which :meth:`_rebudget`
        charges together."""
        p = self._facts.host_page
        history = 0
        for rid, reason, n in finished:
            self._held.pop(rid, None)
            for home in self._home:
                home.pop(rid, None)
            self._room_changed = True
            # ``KVBytes``: the pages resident now, counted whole (``kvPages.bytes``); a
            # generate's session has no store and no budget, so none was evicted
            pages = -(-self._host_positions.pop(rid, 0) // p)
            self._host_pages -= pages
            self._park_snaps.pop(rid, None)
            history += pages * p * self._host_position
            if reason == "cancelled" and rid not in self._reported:
                self._retire(rid, now_us, n)
                # the client has the tokens it was sent, one more than were fed when the
                # cancel came at the instant a token was sampled (see the module doc)
                self._aborted.append(FinishedRequest(rid, "abort", self._sent.get(rid, 0)))
            self._forget(rid)
        return history

    def _shape(self, units: list[Unit]) -> StepShape:
        self._step_id += 1
        seqs = tuple(SeqChunk(u.tokens, u.start) for u in units)
        prompt = any(u.prompt for u in units)
        decode = any(not u.prompt for u in units)
        mode = (
            StepMode.MIXED
            if prompt and decode
            else StepMode.EXTEND_ONLY
            if prompt
            else StepMode.DECODE_ONLY
        )
        tokens = sum(u.tokens for u in units)
        # every pass runs every block: the host pager reads the blocks it does not hold,
        # each device the history its rows sent home
        f = self._facts
        read = 0
        if self._pager is not None:
            # the blocks sent home (the pages below the plan's host blocks) and those,
            # with the expert pages the pass's rows chose that the pager does not hold;
            # over several devices, the blocks on the host in block order; and what a
            # spill or an offer back read through the pager before the pass
            first = len(f.relocate) - self._moved
            scan = self._scan if f.spread is not None else None
            fills = self._fill_claims(tokens, cold=self._cold_fills)
            self._cold_fills = False
            read = round(self._pager.run_pass(first, tokens, scan, fills)) + self._pager_reads
            self._pager_reads = 0
        # where no block runs on the host the pass runs with the disk on the embedding's
        # host part, which carries what the pager read (a spill's or an offer's block)
        slots, parts = self._where(runs_tiled(tokens, f.quantized), disk=read > 0)
        if f.lone is not None:
            self._lone_pager()
        if f.lone is not None and len(units) == 1 and tokens == 1:
            served = self._lone_pass(units[0].row.request_id, parts)
            if served is not None:
                parts = served
        page_in = [0] * slots.paging
        if read:
            assert slots.pager is not None
            page_in[slots.pager] = read
        restored = sum(self._uploads.pop(u.row.request_id, 0) for u in units if u.prompt)
        streamed = self._streamed(units)
        experts = self._expert_uploads(tokens)
        for d, slot in enumerate(slots.devices):
            if slot is not None:
                upload = restored * self._facts.layer_position_bytes * self._layers[d]
                page_in[slot] += streamed[d] + upload + self._migrated + experts[d]
                page_in[slot] += self._moves[d]
                self._migrated = 0
                self._moves[d] = 0
        # a run of blocks goes to its device as one submission (jitllm reports one
        # submission a token with every block on the card), not one launch a kernel
        return StepShape(
            step_id=self._step_id,
            mode=mode,
            seqs=seqs,
            padded_tokens=tokens,
            graph_mode=GraphMode.FULL,
            page_in_bytes=tuple(page_in) if any(page_in) else (),
            parts=parts,
        )

    def _lone_pass(self, rid: str, parts: tuple[PlanPart, ...]) -> tuple[PlanPart, ...] | None:
        """A single-row pass of request ``rid``'s session (``State.mv``): each matrix of
        the blocks on the host now, in block order, then the head's where it stays home,
        offered to the cards in turn (:meth:`CardCopies.offer_pass
        <blis_jitllm.lone_matvec.CardCopies.offer_pass>`); the placement it runs on where
        it serves any (None: the host multiplies every one). ``parts``: the placement it
        would run on (:meth:`_where`; empty: the plan's own)."""
        f = self._facts
        lone = f.lone
        assert lone is not None
        if f.spread is not None:
            host = tuple(i for i, o in enumerate(self._owner) if o is None)
        else:
            gone = {li for li, _ in f.relocate[: self._moved]}
            host = tuple(i for i, o in enumerate(lone.owner) if o is None or i in gone)
        if host != self._lone_host:
            self._lone_moved(host)
        samples = self._lone_samples.get(rid)
        if samples is None:
            samples = self._lone_samples[rid] = [MatVecSample() for _ in lone.held]
        mask = self._lone_copies.offer_pass(
            self._lone_offers, samples, self._lone_room, self._lone_charge
        )
        if all(c is None for c in mask):
            return None
        key = (id(parts), mask)
        got = self._lone_parts.get(key)
        if got is None:
            base = parts or self._plan.parts
            got = self._lone_parts[key] = lone_parts(
                base,
                lone.host,
                lone.hardware,
                lone.link,
                tuple(m for m, _ in self._lone_offers),
                mask,
                _KERNEL,
            )
        return got

    def _lone_pager(self) -> None:
        """Refused by name: a pass after the host pager gave up a block page while the
        cards hold copies of lone matvecs (the recycled frame's ``Forget`` drops the
        copies of the weights it held, refunding them, and the next offer packs and
        uploads them again: not modelled). A pager that gives up only expert pages is
        modelled (an expert's sheets are never offered)."""
        outs = self._pager.page_outs if self._pager is not None else 0
        if outs > self._lone_outs and self._lone_copies.held:
            raise SimulationError(
                f"{ENGINE}: the host pager gave up {outs - self._lone_outs} block page(s) "
                "while the cards hold copies of the host's raw matrices (lone matvecs): a "
                "recycled frame's Forget drops the copies of the weights it held, which "
                "the next offer uploads again; not modelled by blis-jitllm (a host weight "
                f"budget, engine.args.maxmem {self._settings.maxmem}, that holds the "
                "host's blocks beside their histories pages none)"
            )
        self._lone_outs = outs

    def _lone_moved(self, host: tuple[int, ...]) -> None:
        """The blocks on the host are now ``host``: a block that left (a card took it
        back) gives up its frame, whose ``Forget`` refunds its matrices' copies and
        drops their declines (port: at once, where jitllm refunds them when the frame
        is next reused); one that came home is in a fresh frame, so its matrices are
        new weights to the cards."""
        lone = self._facts.lone
        assert lone is not None
        old, new = set(self._lone_host or ()), set(host)
        self._lone_copies.forget(old - new, self._lone_charge)
        for li in new - old:
            self._lone_gen[li] = self._lone_gen.get(li, 0) + 1
        self._lone_host = host
        self._lone_offers = tuple(
            (m, (m.block, m.name, self._lone_gen.get(m.block, 0)))
            for m in (*(m for li in host for m in lone.blocks[li]), *lone.head)
        )

    def _lone_room(self, d: int) -> int:
        """What device ``d`` (in ``-devices``' order) has for a copy now: its KV limit
        less its pool where the engine keeps one, else its room beside the scratch."""
        lone = self._facts.lone
        assert lone is not None
        k = lone.held[d]
        if k is None:
            return self._lone_free[d]
        pool = self._pool_pages[k] * self._facts.layer_page_bytes * self._layers[k]
        return self._limits[k] - pool

    def _lone_charge(self, d: int, nbytes: int) -> None:
        """Charge (or, negative, refund) device ``d``'s budget for copies: a device with
        a pool has that much less (more) for it to grow into."""
        lone = self._facts.lone
        assert lone is not None
        k = lone.held[d]
        if k is None:
            self._lone_free[d] -= nbytes
        else:
            self._limits[k] -= nbytes
        self.lone_charged[d] += nbytes

    def _fill_claims(self, tokens: int, cold: bool = False) -> dict[int, float]:
        """Per auto-streamed block in the host pager (its page), the experts a pass of
        ``tokens`` rows has its fill claim there (:func:`_fills`); where ``-relocate``
        moves streamed blocks, those on a card now (their pages are their blocks), each
        by its cache there."""
        f = self._facts
        caches = self._streams.items() if f.stream_caches else f.pager_fills
        return _fills(f.expert_bank, caches, tokens, cold)

    def _expert_uploads(self, tokens: int) -> list[int]:
        """Per device with a pool: the bytes of the expert sheets a pass of ``tokens``
        rows uploads over its link into its auto-streamed blocks
        (:func:`~blis_jitllm.moe.pass_upload_sheets`: what the rows select that the cache
        does not hold)."""
        f = self._facts
        bank = f.expert_bank
        if bank is None:
            return [0] * len(f.device_layers)
        if f.stream_caches:
            # -relocate moves streamed blocks: those on each card now, each with its cache
            up = [0.0] * len(f.device_layers)
            for li, cache in self._streams.items():
                d = self._owner[li]
                assert d is not None
                up[d] += bank.sheet * pass_upload_sheets(tokens, bank, cache)
            return [round(x) for x in up]
        return [
            round(blocks * bank.sheet * pass_upload_sheets(tokens, bank, cache))
            for blocks, cache in f.expert_streams
        ]

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        """A pass ended; after the iteration's last, the rows move on and the next
        iteration's samples and retirements are the client's."""
        if self._in_flight is None or self._in_flight[0].step_id != shape.step_id:
            raise AssertionError(f"step {shape.step_id} completed out of order")
        _, units = self._in_flight
        self._in_flight = None
        if shape.mode is StepMode.IDLE:  # the parks and resumes of an admission
            self.loop.swapped(*self._swaps, (now_us - self._iteration_start_us) * 1000)
            self._iteration_start_us = now_us
            return StepOutcome(step_id=shape.step_id)
        first = tuple(u.row.request_id for u in units if u.prompt and u.start == 0)
        if self._passes:
            return StepOutcome(step_id=shape.step_id, first_scheduled=first)
        self.loop.ran((now_us - self._iteration_start_us) * 1000)
        emitted: list[TokenEmission] = []
        finished: list[FinishedRequest] = list(self._aborted)
        self._aborted.clear()
        for r in self.loop.rows:
            self._after_step(r, now_us, emitted, finished)
        return StepOutcome(
            step_id=shape.step_id,
            first_scheduled=first,
            emitted=tuple(emitted),
            finished=tuple(finished),
        )

    def _after_step(
        self,
        r: Row,
        now_us: int,
        emitted: list[TokenEmission],
        finished: list[FinishedRequest],
    ) -> None:
        """What the next iteration's ``decodeUnits`` does for ``r`` at ``now_us``."""
        rid = r.request_id
        if r.prompting() or rid in self._reported:
            return
        t = self._times[rid]
        if t.prompt_done is None:
            t.prompt_done = now_us
            if self._cache is not None:
                # SealPrompt: the device layers' history comes down, the pages go in
                self._cache.seal(_segments(self._requests[rid]), r.prompt_tokens)
                self._migrated += r.prompt_tokens * self._device_position_bytes()
            self._metrics["jitllm_tokens_prefilled_total"] += r.prompt_tokens
        retirement = r.retirement()
        if retirement == "cancelled":
            return  # reported as an abort when the next iteration retires it
        if retirement == "max_tokens":
            self._reported.add(rid)
            self._retire(rid, now_us, r.n)
            finished.append(FinishedRequest(rid, "length", r.n))
            self._requests.pop(rid, None)
            self._metrics["jitllm_sessions"] = float(len(self._requests))
            return
        emitted.append(TokenEmission(rid, 1))
        self._sent[rid] = self._sent.get(rid, 0) + 1

    def _retire(self, rid: str, now_us: int, n: int) -> None:
        """``LoadedModel.finished``: the generate's tokens, prefill and decode times."""
        t = self._times.get(rid)
        m = self._metrics
        m["jitllm_generates_total"] += 1
        m["jitllm_tokens_generated_total"] += n
        m["jitllm_prefill_seconds_count"] += 1
        m["jitllm_decode_seconds_count"] += 1
        if t is not None and t.prompt_start is not None and t.prompt_done is not None:
            m["jitllm_prefill_seconds_sum"] += (t.prompt_done - t.prompt_start) / 1e6
            m["jitllm_decode_seconds_sum"] += (now_us - t.prompt_done) / 1e6

    def scrape(self) -> Mapping[str, float]:
        """``/metrics`` for the one model, its ``model`` label left out."""
        return dict(self._metrics)

    def num_unfinished(self) -> int:
        """Requests queued or in rows, not yet reported finished."""
        return len(self._requests)


def _host_scan(
    owner: tuple[int | None, ...], streams: Mapping[int, int] | None = None
) -> list[int]:
    """The blocks on the host, in block order: the pager's scan over several devices;
    with the auto-streamed blocks on the cards (``streams``), whose fills claim their
    experts through the pager, in their place."""
    return [i for i, o in enumerate(owner) if o is None or (streams and i in streams)]


def _fills(
    bank: ExpertBank | None,
    caches: Iterable[tuple[int, int]],
    tokens: int,
    cold: bool = False,
) -> dict[int, float]:
    """Per auto-streamed block in the host pager (its page, with the sheets of its
    device's expert cache in ``caches``), the experts a pass of ``tokens`` rows has its
    fill claim there: those the cache does not hold
    (:func:`~blis_jitllm.moe.pass_upload_sheets`, what the pass uploads; with ``cold``
    every one selected)."""
    if bank is None:
        return {}
    return {page: pass_upload_sheets(tokens, bank, 0 if cold else cache) for page, cache in caches}


def _host_pages_fit(facts: PoolFacts) -> bool:
    """The host pager's budget holds every page of the host's blocks: their block pages
    and every expert page of their banks; where every block is on a card beside
    auto-streamed blocks (``-relocate``'s pager over every block, none on the host),
    every expert page of the streamed blocks (their block pages were dropped)."""
    whole = sum(facts.host_block_sizes) + sum(
        k.bytes for k in facts.host_block_banks if k is not None
    )
    if not facts.host_block_sizes and facts.spread is not None and facts.stream_caches:
        whole = sum(
            k.bytes
            for k, cache in zip(facts.pager_banks, facts.stream_caches, strict=True)
            if k is not None and cache is not None
        )
    return whole <= facts.host_page_budget


def _streamed_pages(facts: PoolFacts) -> str:
    """Where every block is on a card beside auto-streamed blocks whose expert pages the
    host pager's budget does not all hold: what their fills read, and over what."""
    streamed = sum(1 for cache in facts.stream_caches if cache is not None)
    if not streamed or facts.host_block_sizes or _host_pages_fit(facts):
        return ""
    return (
        f"; the {streamed} auto-streamed blocks' routed experts are its expert pages, more "
        "than its budget holds: each pass's fills claim the experts their card's cache "
        f"missed, reading those it does not hold over {facts.page_link} (on the "
        "embedding's host part, no block running on the host), the warm-up's token "
        "claiming each block's whole selection"
    )


def _paging(facts: PoolFacts) -> dict[str, object]:
    """The host pager's budget and what it reads a pass of one token once past its first
    passes (the mean of 16 passes after two, after 64 where mixture blocks are on the
    host, their expert pages filling slowly); where the budget holds
    every host page, the slack a finished history may take before ``applyPageBudget``
    evicts. Mixture blocks on the host are described with their expert pages."""
    if not facts.host_page_budget:
        return {"host pager": "off: no host block, or no disk to page from"}
    if not facts.host_block_sizes:
        return {
            "host pager budget": facts.host_page_budget,
            "host pager": "holds the blocks -relocate sends home (none at the load), each "
            f"read over {facts.page_link} on the pass after it moves"
            + (
                " (a mixture block's shared part as a block page, each routed expert as a "
                "page of its own, read on the passes whose rows choose it)"
                if any(facts.pager_banks)
                else ""
            )
            + _streamed_pages(facts),
        }
    out: dict[str, object] = {"host pager budget": facts.host_page_budget}
    streamed = {page for page, _ in facts.pager_fills}
    mixed = [k for k in facts.host_block_banks if k is not None]
    if mixed:
        bank = mixed[0]
        out["host expert pages"] = (
            f"{len(mixed) - len(streamed)} mixture blocks on the host each page their shared part "
            f"(attention, norms, router) as a block page and each of their {bank.experts} "
            f"routed experts as a page of its own ({bank.sheet} bytes); expert pages are "
            "given up first, least recently used, then block pages (the most recently "
            f"used, then the lowest); a token reads the {bank.per_token} experts its router "
            "chose that are not held"
            + (
                f"; the {len(streamed)} auto-streamed blocks' experts are expert pages of the "
                "same pager, each pass's fills reading those their device's expert cache "
                "missed that it does not hold"
                if streamed
                else ""
            )
        )
    pager = BudgetPager(facts.host_page_budget, facts.host_block_sizes, facts.host_block_banks)
    slack = facts.host_page_budget - pager.total_bytes
    if slack >= 0:
        out["host pager"] = (
            "holds every host block"
            + (" and expert page" if mixed else "")
            + f"; histories ending together past {slack} bytes evict "
            + ("expert pages first, then blocks" if mixed else "blocks")
            + f", read again over {facts.page_link}"
        )
        return out
    fills = _fills(facts.expert_bank, facts.pager_fills, 1)
    for _ in range(64 if mixed else 2):
        pager.run_pass(fills=fills)
    before = pager.expert_page_ins
    steady = sum(pager.run_pass(fills=fills) for _ in range(16)) / 16
    out[f"page-in bytes a pass over {facts.page_link}"] = round(steady)
    if mixed:
        pages = (pager.expert_page_ins - before) / 16
        out["expert pages a decode pass reads"] = round(pages, 2)
        out["expert page-in bytes a decode pass"] = round(pages * mixed[0].sheet)
        held = [
            pager.expert_pages(i)
            for i, k in enumerate(facts.host_block_banks)
            if k and i not in streamed
        ]
        if held:
            out["expert pages a mixture block holds"] = round(sum(held) / len(held), 2)
    return out


def _experts(facts: PoolFacts) -> dict[str, object]:
    """Auto-streamed mixture blocks: how many each device holds, their expert caches and
    the sheets one decoded token uploads."""
    bank = facts.expert_bank
    if bank is None:
        return {}
    return {
        "auto-streamed blocks": [blocks for blocks, _ in facts.expert_streams],
        "expert cache sheets a block": [cache for _, cache in facts.expert_streams],
        "expert bytes a decode pass uploads": [
            round(blocks * bank.sheet * pass_upload_sheets(1, bank, cache))
            for blocks, cache in facts.expert_streams
        ],
    }


class JitllmEngineFactory:
    """EngineFactory for the jitllm snapshot of 2026-12-03."""

    kind = ENGINE_KIND
    upstream_release = UPSTREAM_RELEASE
    plugin_version = PLUGIN_VERSION

    def plan(self, spec: EnginePoolSpec, env: Environment) -> PoolPlan:
        """The run-phase plan: placement, device budget and KV pool (``blis plan``)."""
        return _plan(spec, env)[0]

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> JitllmEngine:
        """A running engine named ``instance``."""
        plan, facts, settings, _ = _plan(spec, env)
        return JitllmEngine(plan, facts, settings)

    def resolved_args(self, spec: EnginePoolSpec, env: Environment) -> Mapping[str, object]:
        """The flags ``jitllmd serve`` would run this pool with, and what placement and the
        KV pool came to (``blis plan``)."""
        plan, facts, s, _ = _plan(spec, env)
        budget = plan.kv_budget
        return {
            "max-batch": s.width or MAX_STEP_ROWS,
            "prompt-chunk": s.prompt_chunk,
            "step-prompt-tokens": s.step_prompt_tokens or "measured",
            "step-cost": s.step_cost or 4.0,
            "joint-steps": "auto" if s.joint_steps == "measured" else s.joint_steps,
            "max-seq": s.max_seq,
            "max-queue": s.max_queue if s.max_queue is not None else -1,
            "devices": facts.devices,
            "device blocks": facts.device_blocks,
            "host blocks": facts.host_blocks,
            "head": "device" if facts.head_on_device else "host",
            "host weight budget": facts.host_limit_bytes or "no machine",
            "host weights": facts.host_weight_bytes,
            **_paging(facts),
            "memory prefix cache": (
                f"on: {facts.cache_limit} bytes"
                if facts.cache_limit
                else "off (-no-mem-cache)"
                if not s.mem_cache
                else "off: the pool names no machine, whose host memory holds it"
            ),
            "relocate": (
                f"on over {len(facts.device_layers)} device"
                + ("s" if len(facts.device_layers) > 1 else "")
                + ": a full card's highest block "
                "moves to the first later card that holds it (SpillAfter; not from the last "
                "card, nor while another row has history on the card) or else home, read "
                "through the host pager; the card's lowest block stays; blocks home come "
                "back lowest first when a row leaves, to the first card from PrepLayer's "
                "cursor that holds them"
                + (
                    f"; {empty} of them hold no block at the load, and each opens its KV "
                    "pool with the first block that reaches it"
                    if (empty := sum(1 for x in facts.device_layers if not x))
                    else ""
                )
                + (
                    "; a mixture block's shared part is a block page and its routed experts "
                    "expert pages: a spilled block's bank goes up an expert page at a time "
                    "through the pager (bankWeight), its pages staying there, one sent home "
                    "reads the experts its rows choose, and one taken back has the expert "
                    "pages not held read and then every page of it dropped"
                    if any(facts.pager_banks)
                    else ""
                )
                + (
                    f"; {sum(1 for c in facts.stream_caches if c is not None)} auto-streamed "
                    "blocks go as any block: one sent home releases its base and expert "
                    "cache (its card's shared plain bank stays) and runs on the host, its "
                    "shared part faulted in through the pager beside the expert pages it "
                    "kept there; one taken back, or "
                    "spilled, is streamed again (its base up the link), with the expert "
                    "cache AutoStream recorded where the card has room for it, else the "
                    "card's one shared plain bank"
                    if facts.stream_caches
                    else ""
                )
                if facts.spread is not None
                else f"on: up to {len(facts.relocate)} blocks go home as the history grows"
                + (", read through the host pager" if facts.pager_sizes else "")
                + (
                    " (a mixture block's shared part as a block page and its routed "
                    "experts as expert pages, read as its rows choose them; taken back, "
                    "its whole bank goes up again, the expert pages not held read first)"
                    if any(facts.pager_banks[: len(facts.relocate)])
                    else ""
                )
                if facts.relocate
                else f"not modelled for this placement: {facts.relocate_off}"
            )
            + (
                f"; what a spill or an offer back reads from the disk goes over "
                f"{facts.page_link} in the pass that follows, on the embedding's host part "
                "where no block runs on the host"
                if facts.spread is not None
                else f"; what an offer back reads from the disk goes over {facts.page_link} "
                "in the pass that follows, once every block is back on the card, on the "
                "embedding's host part (one of no layers where the card runs the embedding)"
                if facts.disk is not None and facts.relocate
                else ""
            ),
            **_experts(facts),
            "jitllm_priority": PRIORITY_MAPPING,
            "kv page positions": facts.page,
            "kv pages a layer": budget.num_gpu_blocks if budget is not None else 0,
        }

    def surface(self) -> Mapping[str, Mapping[str, str]]:
        """``blis surface jitllm``: every ``jitllmd serve`` flag with its status."""
        return {"flags": {name: status for name, (status, _) in FLAGS.items()}}
