"""Step pricing: a PoolPlan compiled once into per-kernel terms, a StepShape in one pass.

:func:`compile_plan` walks ``plan.layers`` (each repeated ``count`` times per pipeline
stage) and lowers every layer into kernels (terms): its primitive family, kernel
implementation, dtype and the work of one launch as linear functions of a few step
aggregates (padded tokens, decode KV tokens, prefill causal pairs …). It resolves each
term's registry entry once. :meth:`CompiledPlan.evaluate` then aggregates a StepShape
in one pass and prices every term with a handful of vector operations.

Work per rank (TP degree t, heads per rank hq, KV heads per rank hkv, head_dim d):

* GEMM ``(m, n, k)``: ``2mnk`` FLOPs; weights ``nk`` plus activations ``mk + mn`` bytes;
* attention decode: ``4 hq d`` FLOPs and ``kv_bytes`` per KV token read; prefill/extend:
  ``4 hq d`` FLOPs per causal (query, key) pair; MLA uses its latent sizes;
* norms, rotary, activation, residual adds: bytes read and written;
* TP all-reduce of ``tokens x hidden`` after attention and after the MLP/MoE, ring
  link bytes ``2 (t-1)/t`` of the message; logits all-gather; EP all-to-all;
  pipeline send/recv to the next stage;
* host work per step (plus a launch cost per kernel when the step is not graph-captured)
  and per new request.

Pipeline parallelism: a shape prices its stage (embedding on the first, logits and
sampling on the last, send/recv on all but the last). Data parallelism: token-bound
work at the largest ``dp_rank_tokens``, attention and host work at an even share of
``seqs`` across ranks (the ranks wait for the slowest in lockstep).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from blis_core.contracts.catalog import HardwareSpec, ModelArchitecture
from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import host_work_problem, impl_problem
from blis_core.contracts.plan import (
    GraphMode,
    LayerKind,
    LoweredLayer,
    MatVec,
    ParallelLayout,
    PoolPlan,
)
from blis_core.contracts.shape import StepMode, StepShape
from blis_core.cost import memory
from blis_core.cost.catalog import Catalog
from blis_core.cost.registry import CoefficientEntry, Registry, effective_rank
from blis_core.cost.roofline import entry_constants, link_bandwidth

__all__ = [
    "CompiledPlan",
    "StepEvaluation",
    "StepQuote",
    "Term",
    "compile_plan",
    "expected_tiled_rows",
]

#: grouped GEMM launches in an MoE layer's expert path (w13 and w2) of every path the
#: engine plugins count (blis_vllm/moe_backend.py, blis_sglang/moe_runner.py)
EXPERT_PATH_GEMMS = 2

# Step aggregates (indices into the aggregate vector).
ONE, T, S, SD, KD, QD, SP, NP, PP, KP, KDW, PPW, KPW, R, MOEF, NEWREQ, MOEP = range(17)
N_AGG = 17
AGG_NAMES = (
    "one", "padded_tokens", "seqs", "decode_seqs", "decode_kv_tokens", "decode_query_tokens",
    "prefill_seqs", "prefill_tokens", "prefill_pairs", "prefill_kv_tokens",
    "decode_kv_tokens_windowed", "prefill_pairs_windowed", "prefill_kv_tokens_windowed",
    "logit_rows", "moe_expert_fraction", "new_requests", "moe_tile_padded_tokens",
)  # fmt: skip

# Stage kinds: the only stage, first, middle, last.
ONLY, FIRST, MIDDLE, LAST = range(4)
_WHERE = {
    "all": (1, 1, 1, 1),
    "first": (1, 1, 0, 0),
    "last": (1, 0, 0, 1),
    "not_last": (0, 1, 1, 0),
}

Linear = dict[int, float]


@dataclass
class Term:
    """One kernel of the plan: family, impl, dtype key, and its per-launch work.

    ``launches`` is how many kernels one launch of the term issues (an MoE layer's expert
    path, :attr:`LoweredLayer.kernels`): its entry's fixed cost (``overhead_us``) is
    charged that many times, its work once."""

    family: str
    impl: str
    dtype: str
    layer: str
    count: int
    flops: Linear
    bytes_moved: Linear
    link_bytes: Linear = field(default_factory=dict)
    items: Linear = field(default_factory=dict)
    where: str = "all"
    ranks: int = 1
    hardware: str | None = None
    """the processor that runs it (a split plan's part); None: the plan's hardware"""
    link: str | None = None
    """the fabric its link bytes cross; None: the processor's scale-up, else PCIe"""
    launches: int = 1
    """kernels one launch of the term issues; the entry's overhead is charged per kernel"""


@dataclass(frozen=True, slots=True)
class StepEvaluation:
    """Per-term results of one step (for explain): seconds, ranks, bounds, works."""

    seconds: npt.NDArray[np.float64]
    ranks: npt.NDArray[np.int64]
    work: npt.NDArray[np.float64]
    total_s: float


@dataclass(frozen=True, slots=True)
class StepQuote:
    """Consecutive steps priced but not yet counted (:meth:`CompiledPlan.quote_seconds`):
    per step, the seconds of every term, whether each term's work is inside its covered
    range, and the step's total seconds."""

    seconds: list[list[float]]
    inside: list[list[bool]]
    totals: list[float]

    # NOTE: an explicit __init__ (the fields in order): compiled, the one `dataclasses`
    # writes would stay interpreted at every quote (tests/test_explicit_inits.py holds it
    # to the fields).
    def __init__(
        self, seconds: list[list[float]], inside: list[list[bool]], totals: list[float]
    ) -> None:
        object.__setattr__(self, "seconds", seconds)
        object.__setattr__(self, "inside", inside)
        object.__setattr__(self, "totals", totals)


class CompiledPlan:
    """A plan's pricing program: constant matrices plus resolved coefficient entries."""

    def __init__(
        self,
        plan: PoolPlan,
        model: ModelArchitecture,
        hw: HardwareSpec,
        terms: Sequence[Term],
        catalog: Catalog,
        registry: Registry,
        base_terms: int | None = None,
        draft_first_terms: int = 0,
    ) -> None:
        self.plan = plan
        self.terms = tuple(terms)
        n = len(self.terms)
        # Terms [0, n_base) price the target's forward pass and host work; with a draft
        # model, the next ``draft_first_terms`` its first pass (aggregate block 1) and
        # the rest its single-token passes summed over the step's passes (block 2).
        n_base = n if base_terms is None else base_terms
        self.n_base = n_base
        self.n_draft_first = draft_first_terms
        self.has_draft = n_base < n
        self.width = N_AGG * (3 if self.has_draft else 1)
        mat = np.zeros((4, n, self.width))
        for j, term in enumerate(self.terms):
            for row, lin in enumerate((term.flops, term.bytes_moved, term.link_bytes, term.items)):
                for idx, coef in lin.items():
                    mat[row, j, idx] = coef
        self.matrix = mat.reshape(4 * n, self.width)
        self.n = n
        # The matrix's nonzero coefficients row by row (a term's linear forms name a few
        # aggregates each: 34 of a dense 8B plan's 952 entries), for _work_of.
        self._nz_rows: list[int] = []
        self._nz_start: list[int] = [0]
        self._nz_col: list[int] = []
        self._nz_coef: list[float] = []
        dense: list[list[float]] = self.matrix.tolist()
        for r, coefs in enumerate(dense):
            for k, coef in enumerate(coefs):
                if coef != 0.0:
                    self._nz_col.append(k)
                    self._nz_coef.append(coef)
            if len(self._nz_col) > self._nz_start[-1]:
                self._nz_rows.append(r)
            self._nz_start.append(len(self._nz_col))
        self._all_js = list(range(n))
        # The terms whose work reads the decode attention's KV aggregate: the only ones
        # a decode span's next boundary prices differently (quote_advancing), and their
        # rows of the work vector that have coefficients.
        self._kd_js = [j for j in range(n) if bool(mat[:, j, KD].any())]
        self._kd_rows = [r for r in self._nz_rows if r % n in self._kd_js]
        # (hardware, link) -> the chip and its link bandwidth; one entry unless split
        chips: dict[tuple[str | None, str | None], tuple[HardwareSpec, float]] = {
            (None, None): (hw, link_bandwidth(catalog, hw))
        }
        inv = np.zeros((3, n))
        over = np.zeros(n)
        per_item = np.zeros(n)
        serial = np.zeros(n)
        lo = np.zeros((3, n))
        hi = np.full((3, n), np.inf)
        base = np.zeros(n, dtype=np.int64)
        out = np.zeros(n, dtype=np.int64)
        self.entries: list[CoefficientEntry] = []
        self.is_host = np.array([t.family.startswith("host") for t in self.terms])
        # Page-ins: per paging part a term whose link bytes are the step's page_in_bytes
        # for it, not a linear function of the aggregates (none: the plan pages nothing).
        self.page_js = [j for j, t in enumerate(self.terms) if t.family == "page_in"]
        self.is_page = np.array([t.family == "page_in" for t in self.terms])
        self.page_links = [str(self.terms[j].link) for j in self.page_js]
        self.page_in_totals = [0] * len(self.page_js)
        kernel_launch_s = 0.0
        host_j = -1
        for j, term in enumerate(self.terms):
            where_key = (term.hardware, term.link)
            found = chips.get(where_key)
            if found is None:
                thw = catalog.chip(term.hardware) if term.hardware is not None else hw
                bw = (
                    catalog.fabric(term.link).bandwidth_bytes_per_s
                    if term.link is not None
                    else link_bandwidth(catalog, thw)
                )
                found = chips[where_key] = (thw, bw)
            thw, link_bw = found
            entry = registry.best(
                term.family,
                term.impl,
                thw.id,
                term.dtype,
                term.ranks,
                catalog.die_siblings(thw.id),
            )
            if entry is None:
                raise InputRefused.one(
                    "cost_methods",
                    f"{term.family}/{term.impl}/{thw.id}/{term.dtype}",
                    "no selected cost method prices this kernel; install blis-cost-roofline "
                    "(the floor, cost method 'roofline') and select it",
                )
            self.entries.append(entry)
            c = entry_constants(entry, thw, term.dtype, link_bw)
            inv[:, j] = (c.s_per_flop, c.s_per_byte, c.s_per_link_byte)
            # The fixed cost is per kernel launch: a term that issues several kernels
            # (an MoE layer's expert path) pays it once per kernel, its work once.
            over[j] = c.overhead_s * term.launches
            if entry.family != term.family and term.launches > EXPERT_PATH_GEMMS:
                over[j] = _lent_gemm_overhead_s(registry, term, thw.id, c.overhead_s)
            per_item[j] = c.per_item_s
            serial[j] = c.serial
            for r, key in enumerate(("flops", "bytes_moved", "link_bytes")):
                if key in entry.covered:
                    lo[r, j], hi[r, j] = entry.covered[key]
            b = effective_rank(entry, thw.id, term.ranks, term.family)
            base[j] = b
            out[j] = max(b, int(CoefficientRank.TRANSFERRED)) if entry.method == "fitted" else b
            if term.family == "host_step":
                host_j = j
                kernel_launch_s = c.per_kernel_s
        self.inv, self.per_item, self.lo, self.hi = inv, per_item, lo, hi
        self.serial = serial
        self.any_serial = bool(serial.any())
        self.n3 = 3 * n
        finite = np.isfinite(hi)
        self.mid = np.where(finite, (lo + hi) / 2, 0.0)
        self.half = np.where(finite, (hi - lo) / 2, np.inf)
        # Per-term priced seconds inside / outside the entries' covered ranges, summed
        # one term at a time (the vectorised ``+=`` adds the same floats in the same order).
        self.acc_inside: list[float] = [0.0] * n
        self.acc_outside: list[float] = [0.0] * n
        self.base_rank, self.out_rank = base, out
        counts = np.array([[t.count * _WHERE[t.where][k] for t in self.terms] for k in range(4)])
        self.counts = counts.astype(np.float64)
        # Launch overhead by graph mode: eager launches every kernel; piecewise replays
        # graphs but launches attention eagerly; full graphs launch nothing per kernel.
        # The host's eager launch count is one per term, as for every layer (a term's
        # own ``launches`` are charged at the entry's overhead, not here), so the host
        # entries fitted with that count keep their prices.
        one_pass = self.terms[: n_base + draft_first_terms]
        kernels = float(
            sum(
                t.count
                for t in one_pass
                if t.family not in ("host_step", "host_request", "page_in")  # no launch
            )
        )
        attn = float(sum(t.count for t in one_pass if t.family.startswith("attention")))
        # Draft single-token passes: replayed as FULL graphs when the decode mode is FULL
        # and the batch fits a capture size, else launched eagerly (SpeculatorCudaGraph-
        # Manager with FULL_DECODE_ONLY / NONE, v1/worker/gpu/spec_decode).
        self.draft_decode_kernels = float(
            sum(
                t.count
                for t in self.terms[n_base + draft_first_terms :]
                if t.family not in ("host_step", "host_request")
            )
        )
        self.kernel_launch_s = kernel_launch_s
        self.host_j = host_j
        self.decode_slice = slice(n_base + draft_first_terms, n)
        gp = plan.graph_policy
        self.capture_sizes = gp.capture_sizes
        self.draft_decode_full = gp.decode_mode is GraphMode.FULL
        self.overhead: dict[GraphMode, npt.NDArray[np.float64]] = {}
        for mode, launches in (
            (GraphMode.NONE, kernels),
            (GraphMode.PIECEWISE, 2 * attn + 1),
            (GraphMode.FULL, 1.0),
        ):
            o = over.copy()
            if host_j >= 0:
                o[host_j] += kernel_launch_s * launches
            self.overhead[mode] = o
        # The same constants as Python floats, term by term, for price_seconds.
        self._inv_l: list[list[float]] = inv.tolist()
        self._per_item_l: list[float] = per_item.tolist()
        self._serial_l: list[float] = serial.tolist()
        self._is_host_l: list[bool] = [bool(h) for h in self.is_host]
        self._mid_l: list[list[float]] = self.mid.tolist()
        self._half_l: list[list[float]] = self.half.tolist()
        self._counts_l: list[list[float]] = self.counts.tolist()
        self._overhead_l: dict[GraphMode, list[float]] = {
            mode: o.tolist() for mode, o in self.overhead.items()
        }
        # Constants of the one-pass aggregation.
        self.dp = plan.layout.dp
        self.window = float(model.sliding_window or 0)
        self.has_window = any(g.attention == "sliding_window" for g in plan.kv_groups)
        moe = model.moe
        self.moe_keep = 1.0 - moe.experts_per_token / moe.num_experts if moe is not None else 1.0
        self.moe_token_mult = float(plan.layout.dp if plan.layout.ep > 1 else 1)
        # The expert GEMMs' tile padding (LoweredLayer.expert_tile_rows), without expert
        # parallelism: tokens -> tokens times the expected padded over routed rows.
        tiled = next((x for x in plan.layers if x.kind is LayerKind.MOE), None)
        self.moe_tiles: tuple[tuple[int, int], ...] = (
            tiled.expert_tile_rows
            if tiled is not None and moe is not None and plan.layout.ep == 1
            else ()
        )
        self.moe_experts = moe.num_experts if moe is not None else 0
        self.moe_top_k = moe.experts_per_token if moe is not None else 0
        self._moe_padded: dict[float, float] = {}
        self.max_tokens = plan.max_num_batched_tokens
        self.max_seqs = plan.max_num_seqs
        self.num_stages = plan.layout.pp

    # ------------------------------------------------------------------------------

    def aggregates(self, shape: StepShape, check_seqs: bool = True) -> list[float]:
        """Check ``shape`` against the plan and reduce it to the aggregate vector
        (:meth:`_aggregates`)."""
        return self._aggregates(shape, check_seqs)[0]

    def _aggregates(self, shape: StepShape, check_seqs: bool) -> tuple[list[float], int, int]:
        """Check ``shape`` against the plan and reduce it to the aggregate vector; with
        its scheduled tokens and its sequences' context tokens, summed.

        Refuses (InputRefused naming the shape's field, value and cause) padded tokens
        below the scheduled tokens, a stage count other than the plan's pipeline degree,
        a stage out of range, ``dp_rank_tokens`` of the wrong length, more sequences or
        scheduled tokens than the plan allows, and (``check_seqs``, or any step with a
        prefill) negative token counts; the decode hot path skips that last per-sequence scan.
        """
        seqs = shape.seqs
        n_seqs = len(seqs)
        # NOTE: one loop over the sequences for both sums and both minima: compiled, a
        # SeqChunk (same extension group) is read field by field without a call.
        sched = ctx_sum = 0
        least = 0
        for s in seqs:
            q = s.new_tokens
            c = s.context_tokens
            sched += q
            ctx_sum += c
            if q < least:
                least = q
            if c < least:
                least = c
        if shape.padded_tokens < sched:
            raise InputRefused.one(
                "shape.padded_tokens",
                shape.padded_tokens,
                f"below the {sched} scheduled tokens of shape.seqs",
            )
        pages = shape.page_in_bytes
        if pages and (len(pages) > len(self.page_js) or min(pages) < 0):
            raise InputRefused.one(
                "shape.page_in_bytes",
                pages,
                f"one count >= 0 for each of the plan's {len(self.page_js)} paging part(s) "
                "(PlanPart.page_link)",
            )
        if shape.num_stages != self.num_stages or not 0 <= shape.stage < shape.num_stages:
            raise InputRefused.one(
                "shape.num_stages",
                (shape.stage, shape.num_stages),
                f"plan has {self.num_stages} pipeline stage(s); stage must be in range",
            )
        dp = self.dp
        if shape.dp_rank_tokens and len(shape.dp_rank_tokens) != dp:
            raise InputRefused.one(
                "shape.dp_rank_tokens", shape.dp_rank_tokens, f"plan has dp={dp} ranks"
            )
        if n_seqs > self.max_seqs * dp:
            raise InputRefused.one(
                "shape.seqs", n_seqs, f"more sequences than max_num_seqs={self.max_seqs} x dp={dp}"
            )
        if sched > self.max_tokens * dp:
            raise InputRefused.one(
                "shape.seqs",
                sched,
                f"more scheduled tokens than max_num_batched_tokens={self.max_tokens} x dp={dp}",
            )
        if check_seqs and least < 0:
            bad = next(s for s in seqs if s.context_tokens < 0 or s.new_tokens < 0)
            raise InputRefused.one("shape.seqs", bad, "token counts must be >= 0")
        tokens = float(max(shape.dp_rank_tokens) if shape.dp_rank_tokens else shape.padded_tokens)
        a = [0.0] * N_AGG
        a[ONE] = 1.0
        a[T] = tokens
        a[S] = n_seqs / dp
        a[R] = n_seqs / dp
        w = self.window
        mode = shape.mode
        if mode is StepMode.DECODE_ONLY or mode is StepMode.VERIFY:
            a[SD] = n_seqs / dp
            a[QD] = sched / dp
            a[KD] = (ctx_sum + sched) / dp
            if self.has_window:
                a[KDW] = sum([min(s.context_tokens + s.new_tokens, w) for s in seqs]) / dp
        elif n_seqs:
            threshold = 1 + shape.num_spec_tokens
            sd = qd = kd = kdw = 0.0
            sp = np_ = pp = kp = ppw = kpw = newreq = 0.0
            for s in seqs:
                q, c = s.new_tokens, s.context_tokens
                if q < 0 or c < 0:
                    raise InputRefused.one("shape.seqs", s, "token counts must be >= 0")
                if q <= threshold and c > 0:
                    sd += 1
                    qd += q
                    kd += c + q
                    kdw += min(c + q, w)
                else:
                    sp += 1
                    np_ += q
                    pp += q * (c + (q + 1) / 2)
                    kp += c + q
                    ppw += q * min(c + (q + 1) / 2, w)
                    kpw += min(c, w) + q
                    if c == 0:
                        newreq += 1
            a[SD], a[QD], a[KD], a[KDW] = sd / dp, qd / dp, kd / dp, kdw / dp
            a[SP], a[NP], a[PP], a[KP] = sp / dp, np_ / dp, pp / dp, kp / dp
            a[PPW], a[KPW], a[NEWREQ] = ppw / dp, kpw / dp, newreq / dp
        a[MOEF] = 1.0 - self.moe_keep ** (tokens * self.moe_token_mult)
        a[MOEP] = self._moe_padded_tokens(tokens) if self.moe_tiles else tokens
        if self.has_draft:
            a += self._draft_aggregates(shape, a, sched, ctx_sum)
        return a, sched, ctx_sum

    def _draft_padded(self, n_seqs: int) -> int:
        """Launched tokens of a single-token draft pass over ``n_seqs`` sequences."""
        sizes = self.capture_sizes
        if self.draft_decode_full and sizes and n_seqs <= sizes[-1]:
            return sizes[bisect.bisect_left(sizes, n_seqs)]
        return n_seqs

    def _draft_aggregates(
        self, shape: StepShape, a: list[float], sched: int, ctx_sum: int
    ) -> list[float]:
        """Aggregate blocks 1 and 2 of a plan with a draft model.

        Block 1 (the first draft pass, ``draft_passes >= 1``) repeats the step's own
        aggregates: the drafter runs over the target's padded batch and attention
        metadata, with logits for one row per sequence. Block 2 sums the step's
        ``draft_passes - 1`` single-token passes: pass ``j`` runs one query per
        sequence over ``context + new + j`` KV tokens (drafted positions advance),
        padded to a capture size when replayed as a FULL graph.
        """
        passes = shape.draft_passes
        if passes < 0:
            raise InputRefused.one("shape.draft_passes", passes, "must be >= 0")
        first = a if passes >= 1 else [0.0] * N_AGG
        dec = [0.0] * N_AGG
        p = passes - 1
        n = len(shape.seqs)
        if p > 0 and n:
            padded = float(self._draft_padded(n))
            kv = p * (ctx_sum + sched) + n * p * (p + 1) / 2
            dec[ONE] = float(p)
            dec[T] = p * padded
            dec[S] = dec[R] = dec[SD] = dec[QD] = float(p * n)
            dec[KD] = dec[KDW] = float(kv)
            dec[MOEF] = p * (1.0 - self.moe_keep ** (padded * self.moe_token_mult))
            dec[MOEP] = p * (self._moe_padded_tokens(padded) if self.moe_tiles else padded)
        return [*first, *dec]

    def _moe_padded_tokens(self, tokens: float) -> float:
        """``tokens`` times the expert GEMMs' expected padded rows over their routed rows:
        each expert's rows ``Binomial(tokens, top_k / experts)`` padded up to the tile
        height the rule gives for ``tokens`` (memoised per token count)."""
        got = self._moe_padded.get(tokens)
        if got is None:
            m = int(tokens)
            tile = self.moe_tiles[-1][1]
            for bound, rows in self.moe_tiles:
                if m <= bound:
                    tile = rows
                    break
            p = self.moe_top_k / self.moe_experts
            routed = m * self.moe_top_k
            padded = self.moe_experts * expected_tiled_rows(m, p, tile)
            got = self._moe_padded[tokens] = tokens * (padded / routed) if routed else tokens
        return got

    def _overhead(self, shape: StepShape) -> npt.NDArray[np.float64]:
        """Per-launch overhead of every term for ``shape`` (graph mode, draft passes)."""
        base = self.overhead[shape.graph_mode]
        p = shape.draft_passes - 1
        if not self.has_draft or p <= 0:
            return base
        o = base.copy()
        o[self.decode_slice] *= p
        if self.host_j >= 0:
            sizes = self.capture_sizes
            eager = not (self.draft_decode_full and sizes and len(shape.seqs) <= sizes[-1])
            launches = self.draft_decode_kernels if eager else 1.0
            o[self.host_j] += self.kernel_launch_s * launches * p
        return o

    def price_seconds(self, shape: StepShape) -> float:
        """Seconds of ``shape`` (the hot path), adding per-term seconds to the running
        totals :attr:`acc_inside` / :attr:`acc_outside` (inside / outside covered ranges).
        Gives the figure :meth:`evaluate` gives (up to the order of a term's last two
        additions); the vectorised form it replaced to the bit
        (``tests/cost/test_pricing.py``)."""
        if shape.mode is StepMode.IDLE:
            ev = self.evaluate(shape)
            acc = self.acc_inside
            for j, sec in enumerate(ev.seconds.tolist()):
                acc[j] += sec
            return ev.total_s
        seconds, inside, all_inside = self._term_seconds(shape)
        for k, num_bytes in enumerate(shape.page_in_bytes):
            self.page_in_totals[k] += num_bytes
        self._count(seconds, inside, all_inside)
        return pairwise_sum(seconds, 0, self.n)

    def _term_seconds(self, shape: StepShape) -> tuple[list[float], list[bool], bool]:
        """Each term's seconds for ``shape`` (not IDLE), whether its work is inside the
        entry's covered ranges, and whether every term's is."""
        return self._term_seconds_at(self.aggregates(shape, check_seqs=False), shape)

    def _term_seconds_at(
        self, agg: list[float], shape: StepShape
    ) -> tuple[list[float], list[bool], bool]:
        """:meth:`_term_seconds` of ``shape`` whose aggregate vector is ``agg``.

        The work vector is :meth:`_work_of`'s; then each term's IEEE operations in the
        order of the vectorised form this replaced, one term at a time in plain floats
        (numpy's per-call cost on arrays of a few terms was most of a step's price)."""
        return self._term_seconds_of(self._work_of(agg), shape)

    def _term_seconds_of(
        self, w: list[float], shape: StepShape
    ) -> tuple[list[float], list[bool], bool]:
        """:meth:`_term_seconds` of ``shape`` whose work vector is ``w`` (page-ins not
        yet written in)."""
        n = self.n
        n2 = 2 * n
        for k, num_bytes in enumerate(shape.page_in_bytes):
            w[n2 + self.page_js[k]] = float(num_bytes)
        over = self._overhead_l[shape.graph_mode]
        if self.has_draft and shape.draft_passes > 1:
            over = self._overhead(shape).tolist()
        counts = self._counts_l[self.stage_kind(shape)]
        seconds = [0.0] * n
        inside = [False] * n
        all_inside = self._fill_terms(w, self._all_js, over, counts, seconds, inside)
        return seconds, inside, all_inside

    def _work_of(self, agg: list[float]) -> list[float]:
        """Each term's flops, bytes, link bytes and items (``matrix @ agg``), as floats:
        each row the sum, from 0.0 in the order of the aggregates, of its nonzero
        coefficients times their aggregates (the one definition of a step's work:
        :meth:`evaluate` reads it too)."""
        work = [0.0] * (4 * self.n)
        self._work_rows(agg, work, self._nz_rows)
        return work

    def _work_rows(self, agg: list[float], work: list[float], rows: list[int]) -> None:
        """Write rows ``rows`` of the work vector of ``agg`` into ``work`` (as
        :meth:`_work_of` makes them)."""
        start, col, coef = self._nz_start, self._nz_col, self._nz_coef
        for r in rows:
            total = 0.0
            for i in range(start[r], start[r + 1]):
                total += coef[i] * agg[col[i]]
            work[r] = total

    def _fill_terms(
        self,
        w: list[float],
        js: list[int],
        over: list[float],
        counts: list[float],
        seconds: list[float],
        inside: list[bool],
    ) -> bool:
        """Write the seconds of the terms ``js`` for the work ``w`` into ``seconds`` and
        whether each is inside its entry's covered ranges into ``inside``; whether all of
        ``js`` are."""
        n = self.n
        n2 = 2 * n
        n3 = 3 * n
        inv_f, inv_b, inv_l = self._inv_l
        mid_f, mid_b, mid_l = self._mid_l
        half_f, half_b, half_l = self._half_l
        per_item = self._per_item_l
        serial = self._serial_l
        is_host = self._is_host_l
        all_inside = True
        for j in js:
            f = w[j]
            b = w[n + j]
            lk = w[n2 + j]
            c = f * inv_f[j]
            m = b * inv_b[j]
            x = lk * inv_l[j]
            per = m if m > c else c
            if x > per:
                per = x
            if serial[j]:
                per = per + serial[j] * (((c + m) + x) - per)
            per += w[n3 + j] * per_item[j]
            launched = f != 0.0 or b != 0.0 or lk != 0.0 or is_host[j]
            per += over[j] * (1.0 if launched else 0.0)
            seconds[j] = per * counts[j]
            ins = (
                abs(f - mid_f[j]) <= half_f[j]
                and abs(b - mid_b[j]) <= half_b[j]
                and abs(lk - mid_l[j]) <= half_l[j]
            )
            inside[j] = ins
            if not ins:
                all_inside = False
        return all_inside

    def _count(self, seconds: list[float], inside: list[bool], all_inside: bool) -> None:
        """Add one step's per-term seconds to the running totals."""
        acc_in = self.acc_inside
        if all_inside:
            for j, sec in enumerate(seconds):
                acc_in[j] += sec
            return
        acc_out = self.acc_outside
        for j, sec in enumerate(seconds):
            if inside[j]:
                acc_in[j] += sec
            else:
                acc_out[j] += sec

    def quote_seconds(self, shapes: Sequence[StepShape]) -> StepQuote | None:
        """The seconds :meth:`price_seconds` gives each of ``shapes``, counted nowhere
        (:meth:`count_quote` counts a prefix of them); ``None`` for shapes it does not
        quote (an ``IDLE`` step, a step on a placement of its own, ``parts``, which
        another compiled plan prices; a draft model, a plan that pages): the same
        computation, so the same figures to the bit."""
        if (
            not shapes
            or self.has_draft
            or bool(self.page_js)
            or any(s.mode is StepMode.IDLE or s.parts for s in shapes)
        ):
            return None
        quote = StepQuote([], [], [])
        for shape in shapes:
            self._quote_step(quote, self.aggregates(shape, check_seqs=False), shape)
        return quote

    def _quote_step(self, quote: StepQuote, agg: list[float], shape: StepShape) -> None:
        """Append the step ``shape`` with aggregates ``agg`` to ``quote``."""
        sec, ins, _ = self._term_seconds_at(agg, shape)
        quote.seconds.append(sec)
        quote.inside.append(ins)
        quote.totals.append(pairwise_sum(sec, 0, self.n))

    def quote_advancing(self, first: StepShape, count: int) -> StepQuote | None:
        """What :meth:`quote_seconds` gives for ``count`` decode steps: ``first`` and each
        next one with every sequence's context one token longer (a decode span's
        boundaries, :class:`~blis_core.contracts.engine.DecodeSpan`), without their
        shapes. Only the decode attention's KV aggregate moves, by one token a sequence
        a step, an exact sum of integers, so every figure is the one the shapes give, to
        the bit. ``None`` where :meth:`quote_seconds` would be, and for other than a plain
        decode step or a plan with a sliding window (a per-sequence sum)."""
        if (
            count < 1
            or first.mode is not StepMode.DECODE_ONLY
            or self.has_draft
            or self.has_window
            or bool(self.page_js)
            or bool(first.dp_rank_tokens)
            or bool(first.parts)
        ):
            return None
        agg, sched, ctx_sum = self._aggregates(first, False)
        # The aggregate's own integers (``aggregates``: (ctx_sum + sched) / dp).
        base = ctx_sum + sched
        n_seqs = len(first.seqs)
        dp = self.dp
        quote = StepQuote([], [], [])
        agg[KD] = base / dp
        w = self._work_of(agg)
        sec, ins, _ = self._term_seconds_of(w, first)
        quote.seconds.append(sec)
        quote.inside.append(ins)
        quote.totals.append(pairwise_sum(sec, 0, self.n))
        # The next boundaries: only the terms that read the KV aggregate are priced
        # again, from their rows of the work vector made again (the same operations:
        # the same bits).
        over = self._overhead_l[first.graph_mode]
        counts = self._counts_l[self.stage_kind(first)]
        kd_js = self._kd_js
        n = self.n
        seconds, inside = sec, ins
        kd_rows = self._kd_rows
        for j in range(1, count):
            agg[KD] = (base + j * n_seqs) / dp
            self._work_rows(agg, w, kd_rows)
            seconds = seconds.copy()
            inside = inside.copy()
            self._fill_terms(w, kd_js, over, counts, seconds, inside)
            quote.seconds.append(seconds)
            quote.inside.append(inside)
            quote.totals.append(pairwise_sum(seconds, 0, n))
        return quote

    def count_quote(self, quote: StepQuote, count: int, start: int = 0) -> None:
        """Add steps ``start`` to ``count`` (excluded) of ``quote`` to the running totals,
        as that many :meth:`price_seconds` calls would."""
        # NOTE: each term's seconds added to the total its flag names, as _count does
        # (whether or not every flag is set, the same additions in the same order).
        acc_in = self.acc_inside
        acc_out = self.acc_outside
        quoted_seconds = quote.seconds
        quoted_inside = quote.inside
        for i in range(start, count):
            inside = quoted_inside[i]
            for j, sec in enumerate(quoted_seconds[i]):
                if inside[j]:
                    acc_in[j] += sec
                else:
                    acc_out[j] += sec

    def rank_seconds(self) -> list[float]:
        """Priced seconds per rank accumulated by :meth:`price_seconds`."""
        out = [0.0] * len(CoefficientRank)
        for j in range(self.n):
            out[int(self.base_rank[j])] += float(self.acc_inside[j])
            out[int(self.out_rank[j])] += float(self.acc_outside[j])
        return out

    def method_seconds(self) -> dict[str, float]:
        """Priced seconds per cost method (the provider of each term's entry)."""
        out: dict[str, float] = {}
        for j, entry in enumerate(self.entries):
            secs = float(self.acc_inside[j]) + float(self.acc_outside[j])
            if secs > 0.0:
                out[entry.provider] = out.get(entry.provider, 0.0) + secs
        return out

    def stage_kind(self, shape: StepShape) -> int:
        """ONLY, FIRST, MIDDLE or LAST for the shape's pipeline stage."""
        if shape.num_stages == 1:
            return ONLY
        if shape.stage == 0:
            return FIRST
        return LAST if shape.stage == shape.num_stages - 1 else MIDDLE

    def evaluate(self, shape: StepShape) -> StepEvaluation:
        """Price every term of ``shape``; seconds are per term, all launches included."""
        n = self.n
        work = np.array(self._work_of(self.aggregates(shape))).reshape(4, n)
        for k, num_bytes in enumerate(shape.page_in_bytes):
            work[2, self.page_js[k]] = float(num_bytes)
        roof = work[:3] * self.inv
        top = roof.max(axis=0)
        if self.any_serial:
            top = top + self.serial * (roof.sum(axis=0) - top)
        per_launch = top + self._overhead(shape) + work[3] * self.per_item
        launched = work[:3].any(axis=0) | self.is_host
        if shape.mode is StepMode.IDLE:  # host work, and whatever it pages in
            launched = self.is_host | (self.is_page & (work[2] > 0))
        per_launch = np.where(launched, per_launch, 0.0)
        seconds = per_launch * self.counts[self.stage_kind(shape)]
        inside = ((work[:3] >= self.lo) & (work[:3] <= self.hi)).all(axis=0)
        ranks = np.where(inside, self.base_rank, self.out_rank)
        return StepEvaluation(seconds, ranks, work, float(seconds.sum()))

    def work_of(self, j: int, ev: StepEvaluation, hardware: str) -> PrimitiveWork:
        """The PrimitiveWork of one launch of term ``j`` (for plugin methods and explain)."""
        t = self.terms[j]
        return PrimitiveWork(
            family=t.family,
            impl=t.impl,
            hardware=t.hardware or hardware,
            dtype=t.dtype,
            flops=float(ev.work[0, j]),
            bytes_moved=float(ev.work[1, j]),
            link_bytes=float(ev.work[2, j]),
            ranks=t.ranks,
            shape=(round(float(ev.work[3, j])),) if t.family.startswith("host") else (),
        )


# ----------------------------------------------------------------------------------
# Lowering a plan into terms.
# ----------------------------------------------------------------------------------


_PAIRWISE_BLOCK = 128
"""numpy's ``PW_BLOCKSIZE``: the longest run :func:`pairwise_sum` adds without splitting."""


def pairwise_sum(values: list[float], start: int, n: int) -> float:
    """The sum of ``values[start:start + n]`` exactly as numpy's ``add.reduce`` gives it
    for a contiguous float64 array (its pairwise summation, ``loops_utils.h``): fewer
    than 8 terms one by one from 0.0; up to 128 in eight interleaved partial sums joined
    pairwise, then the remainder one by one; longer runs split in two (the first half a
    multiple of 8) and each half summed so."""
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += values[i]
        return res
    if n <= _PAIRWISE_BLOCK:
        r0, r1, r2, r3 = values[start], values[start + 1], values[start + 2], values[start + 3]
        r4, r5, r6, r7 = values[start + 4], values[start + 5], values[start + 6], values[start + 7]
        i = 8
        stop = n - n % 8
        while i < stop:
            k = start + i
            r0 += values[k]
            r1 += values[k + 1]
            r2 += values[k + 2]
            r3 += values[k + 3]
            r4 += values[k + 4]
            r5 += values[k + 5]
            r6 += values[k + 6]
            r7 += values[k + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += values[start + i]
            i += 1
        return res
    half = n // 2
    half -= half % 8
    return pairwise_sum(values, start, half) + pairwise_sum(values, start + half, n - half)


def _gemm(
    layer: str,
    impl: str,
    dtype: str,
    count: int,
    n: float,
    k: float,
    wb: float,
    ab: float,
    rows: int = T,
    where: str = "all",
) -> Term:
    """A GEMM with ``rows`` x k activations against an n x k weight."""
    return Term(
        family="gemm", impl=impl, dtype=dtype, layer=layer, count=count,
        flops={rows: 2.0 * n * k},
        bytes_moved={ONE: n * k * wb, rows: (k + n) * ab},
        where=where,
    )  # fmt: skip


def _lent_gemm_overhead_s(registry: Registry, term: Term, hardware: str, gemm_s: float) -> float:
    """Fixed cost of an expert path priced by a dense GEMM entry lent to it
    (:data:`~blis_core.cost.registry.FAMILY_TRANSFER`): the GEMM's fixed cost is a GEMM
    launch's, paid by the path's ``EXPERT_PATH_GEMMS`` grouped GEMMs; its other launches
    (routing, alignment, activation, sum: small kernels, 1.6-2.4 us each on an H200,
    data/measurements/h200-kernels) pay the family floor's per-launch cost."""
    floor = registry.roofline(term.family, term.impl, hardware, term.dtype)
    small_s = 0.0 if floor is None else floor.param("overhead_us", 0.0) * 1e-6
    return gemm_s * EXPERT_PATH_GEMMS + small_s * (term.launches - EXPERT_PATH_GEMMS)


def _shift(term: Term, offset: int, prefix: str) -> Term:
    """``term`` reading the aggregate block at ``offset`` (a draft pass), renamed."""

    def moved(lin: Linear) -> Linear:
        return {k + offset: v for k, v in lin.items()}

    return Term(
        family=term.family,
        impl=term.impl,
        dtype=term.dtype,
        layer=f"{prefix}/{term.layer}",
        count=term.count,
        flops=moved(term.flops),
        bytes_moved=moved(term.bytes_moved),
        link_bytes=moved(term.link_bytes),
        items=moved(term.items),
        where=term.where,
        ranks=term.ranks,
        launches=term.launches,
    )


#: the layers whose GEMMs a part with lone matvecs runs as those matvecs
#: (:attr:`~blis_core.contracts.plan.PlanPart.matvecs`)
_MATVEC_KINDS = frozenset({LayerKind.QKV_PROJ, LayerKind.O_PROJ, LayerKind.MLP, LayerKind.LOGITS})


def _split_terms(
    plan: PoolPlan,
    hidden: float,
    lower: Callable[[Sequence[LoweredLayer]], list[Term]],
    matvec: Callable[[MatVec, str], Term],
) -> list[Term]:
    """The terms of a split plan: each part's layers on its own processor, in order, and
    for a part across a link the hidden state's two crossings a step (there and back, as
    float32: an assumption, jitllm's host kernels keep activations in float32). A part's
    lone matvecs (:attr:`~blis_core.contracts.plan.PlanPart.matvecs`) are one GEMM term
    each (``matvec``) in place of its projection layers' GEMMs, and on a part across a
    link one crossing each in place of the hidden state's: the activation up and the
    output back, float32."""
    if plan.layout != ParallelLayout():
        raise InputRefused.one(
            "plan.parts", len(plan.parts), "a split plan runs on one rank of each processor"
        )
    terms: list[Term] = []
    for i, part in enumerate(plan.parts):
        tag = f"part{i}:{part.hardware}"
        if part.matvecs:
            # its projections are its matvecs: their layers keep their other work
            lowered = [
                t
                for layer in part.layers
                for t in lower((layer,))
                if t.family != "gemm" or layer.kind not in _MATVEC_KINDS
            ]
        else:
            lowered = lower(part.layers)
        for t in lowered:
            terms.append(replace(t, hardware=part.hardware, layer=f"{tag}/{t.layer}"))
        for k, mv in enumerate(part.matvecs):
            problem = impl_problem(mv.impl)
            if problem is not None:
                raise InputRefused.one(f"plan.parts.{i}.matvecs.{k}.impl", mv.impl, problem)
            if mv.read:
                t = matvec(mv, f"{tag}/matvec{k}")
                terms.append(replace(t, hardware=part.hardware))
            if part.link is not None:
                terms.append(
                    Term(
                        "sendrecv",
                        "lone_matvec",
                        "bf16",
                        f"{tag}/matvec{k}/crossing",
                        mv.count,
                        {},
                        {},
                        {T: (mv.rows + mv.cols) * 4.0},
                        hardware=part.hardware,
                        link=part.link,
                    )
                )
        if part.page_link is not None:
            terms.append(
                Term(
                    "page_in",
                    "pager",
                    "bf16",
                    f"{tag}/page_in",
                    1,
                    {},
                    {},
                    {},
                    hardware=part.hardware,
                    link=part.page_link,
                )
            )
        if part.link is not None and not part.matvecs:
            terms.append(
                Term(
                    "sendrecv",
                    "host_crossing",
                    "bf16",
                    f"{tag}/crossing",
                    2,
                    {},
                    {},
                    {T: hidden * 4.0},
                    hardware=part.hardware,
                    link=part.link,
                )
            )
    return terms


def _check_names(plan: PoolPlan) -> None:
    problem = host_work_problem(plan.engine, plan.host_work)
    if problem is not None:
        raise InputRefused.one("plan.host_work", plan.host_work, problem)
    draft = plan.draft_policy.layers if plan.draft_policy is not None else ()
    for where, layers in (("plan.layers", plan.layers), ("plan.draft_policy.layers", draft)):
        for i, layer in enumerate(layers):
            problem = impl_problem(layer.impl)
            if problem is not None:
                raise InputRefused.one(f"{where}.{i}.impl", layer.impl, problem)
    every: list[tuple[str, tuple[LoweredLayer, ...]]] = [
        ("plan.layers", plan.layers),
        ("plan.draft_policy.layers", draft),
        *((f"plan.parts.{k}.layers", part.layers) for k, part in enumerate(plan.parts)),
    ]
    for where, layers in every:
        for i, layer in enumerate(layers):
            if layer.kernels != 1 and layer.kind is not LayerKind.MOE:
                raise InputRefused.one(
                    f"{where}.{i}.kernels",
                    layer.kernels,
                    f"only an MoE layer's kernel count is priced; a {layer.kind.value} layer "
                    "is priced as one launch",
                )
            if layer.expert_tile_rows and layer.kind is not LayerKind.MOE:
                raise InputRefused.one(
                    f"{where}.{i}.expert_tile_rows",
                    layer.expert_tile_rows,
                    f"only an MoE layer's expert GEMMs are tiled; a {layer.kind.value} layer "
                    "states none",
                )


def expected_tiled_rows(n: int, p: float, tile: int) -> float:
    """``E[ceil(X / tile) * tile]`` for ``X ~ Binomial(n, p)``: the rows one expert's GEMM
    computes when its routed rows are padded up to whole tiles. Summed over the
    probabilities within 12 standard deviations of the mean (the rest is below 1e-30)."""
    if n <= 0 or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return float(-(-n // tile) * tile)
    mean = n * p
    spread = 12.0 * math.sqrt(mean * (1.0 - p)) + 1.0
    lo, hi = max(0, int(mean - spread)), min(n, int(mean + spread) + 1)
    log_p, log_q = math.log(p), math.log1p(-p)
    lg = math.lgamma
    base = lg(n + 1)
    total = 0.0
    for x in range(lo, hi + 1):
        prob = math.exp(base - lg(x + 1) - lg(n - x + 1) + x * log_p + (n - x) * log_q)
        total += prob * (-(-x // tile) * tile)
    return total


def compile_plan(plan: PoolPlan, catalog: Catalog, registry: Registry) -> CompiledPlan:
    """Lower ``plan`` into priced terms for its model and chip (see module doc).

    Refuses a host-work key or a kernel implementation name that breaks the rules of
    :mod:`blis_core.contracts.lowering`, and a kernel count above one
    (:attr:`LoweredLayer.kernels`) on a layer that is not MoE, naming the plan's field.
    """
    _check_names(plan)
    model = catalog.model(plan.model)
    hw = catalog.chip(plan.hardware)
    lay = plan.layout
    tp = lay.tp
    act = 2.0
    wdt = memory.dtype_key(plan.weights_dtype)
    quant = plan.quantization
    wb = memory.dtype_bytes("fp8") if wdt == "fp8" or quant == "fp8" else act
    exp_b = memory.dtype_bytes("mxfp4") if quant == "mxfp4" else wb
    cdt = "fp8" if wb == 1.0 else "bf16"
    head_b = act
    head_dt = "bf16"
    if quant is not None and memory.is_gguf(quant):
        # llama.cpp's block formats: bytes per weight averaged over the blocks' matrices
        # and the output head's own type; the products are integer dot products of the
        # quantized weights with 8-bit-quantized activations (ggml's vec_dot with Q8
        # activations), keyed by the weights' type (gguf_q4_k …), which a chip's peaks
        # read as its int8 rate where it states one
        gguf = memory.gguf_layout(model, quant)
        wb = exp_b = gguf.linear_bytes_per_weight()
        head_b = gguf.head_bytes_per_weight()
        cdt, head_dt = gguf.dtype_keys()
    groups = {g.name: g for g in plan.kv_groups}
    h = float(model.hidden_size)

    def lower(
        layers: Sequence[LoweredLayer],
        model: ModelArchitecture,
        wb: float,
        exp_b: float,
        cdt: str,
        vocab: int,
        qkv_in: float = 1.0,
        fc_in: float = 2.0,
    ) -> list[Term]:
        """Terms of ``layers`` of ``model`` (the target, or a drafter's pass)."""
        h = float(model.hidden_size)
        d = float(model.head_dim)
        hq = model.num_attention_heads / tp
        hkv = float(memory.kv_heads_per_rank(model, tp))
        vocab_local = memory.pad_vocab(vocab) / tp
        ar_link = 2.0 * (tp - 1) / tp * h * act
        terms: list[Term] = []
        for layer in layers:
            kind, impl, cnt = layer.kind, layer.impl, layer.count
            if kind is LayerKind.EMBEDDING:
                terms.append(
                    Term(
                        "embedding",
                        impl,
                        "bf16",
                        "embedding",
                        cnt,
                        {},
                        {T: 2 * h * act},
                        where="first",
                    )
                )
                if tp > 1:
                    terms.append(
                        Term(
                            "allreduce",
                            "nccl",
                            "bf16",
                            "embedding",
                            cnt,
                            {},
                            {},
                            {T: ar_link},
                            where="first",
                            ranks=tp,
                        )
                    )
            elif kind is LayerKind.NORM:
                terms.append(
                    Term("elementwise", impl, "bf16", "norm", cnt, {T: 4 * h}, {T: 4 * h * act})
                )
            elif kind is LayerKind.QKV_PROJ:
                if model.mla is not None:
                    m = model.mla
                    ql = float(m.q_lora_rank or 0)
                    qk = float(m.qk_nope_head_dim + m.qk_rope_head_dim)
                    a_out = ql + m.kv_lora_rank + m.qk_rope_head_dim
                    terms.append(_gemm("qkv_a_proj", impl, cdt, cnt, a_out, h, wb, act))
                    terms.append(_gemm("q_b_proj", impl, cdt, cnt, hq * qk, ql or h, wb, act))
                else:
                    terms.append(
                        _gemm("qkv_proj", impl, cdt, cnt, (hq + 2 * hkv) * d, qkv_in * h, wb, act)
                    )
                    terms.append(
                        Term(
                            "elementwise",
                            "rotary",
                            "bf16",
                            "rope",
                            cnt,
                            {T: 4 * (hq + hkv) * d},
                            {T: 2 * (hq + hkv) * d * act},
                        )
                    )
            elif kind is LayerKind.ATTENTION:
                g = groups.get(layer.kv_group or "") or (
                    plan.kv_groups[0] if plan.kv_groups else None
                )
                if g is None:
                    raise InputRefused.one(
                        "plan.kv_groups", (), "an attention layer needs a KV group"
                    )
                kvb = float(g.bytes_per_token_per_layer)
                windowed = g.attention == "sliding_window"
                kd, pp, kp = (KDW, PPW, KPW) if windowed else (KD, PP, KP)
                if model.mla is not None:
                    m = model.mla
                    lat = float(m.kv_lora_rank + m.qk_rope_head_dim)
                    qk = float(m.qk_nope_head_dim + m.qk_rope_head_dim)
                    up = float(m.kv_lora_rank) * hq * (m.qk_nope_head_dim + m.v_head_dim)
                    dec_flops = 2 * hq * (lat + m.kv_lora_rank)
                    pre_flops = 2 * hq * (qk + m.v_head_dim)
                    terms.append(
                        Term(
                            "attention_decode",
                            impl,
                            "bf16",
                            "attention",
                            cnt,
                            {kd: dec_flops, QD: 2 * up},
                            {kd: kvb, QD: hq * (lat + m.kv_lora_rank) * act},
                        )
                    )
                    terms.append(
                        Term(
                            "attention_prefill",
                            impl,
                            "bf16",
                            "attention",
                            cnt,
                            {pp: pre_flops, kp: 2 * up},
                            {
                                kp: kvb + hq * (qk + m.v_head_dim) * act,
                                NP: hq * (qk + m.v_head_dim) * act,
                            },
                        )
                    )
                else:
                    terms.append(
                        Term(
                            "attention_decode",
                            impl,
                            "bf16",
                            "attention",
                            cnt,
                            {kd: 4 * hq * d},
                            {kd: kvb, QD: 2 * hq * d * act, SD: 64.0},
                        )
                    )
                    terms.append(
                        Term(
                            "attention_prefill",
                            impl,
                            "bf16",
                            "attention",
                            cnt,
                            {pp: 4 * hq * d},
                            {kp: kvb, NP: (2 * hq + 2 * hkv) * d * act, SP: 64.0},
                        )
                    )
            elif kind is LayerKind.O_PROJ:
                v_dim = float(model.mla.v_head_dim) if model.mla is not None else d
                terms.append(_gemm("o_proj", impl, cdt, cnt, h, hq * v_dim, wb, act))
                if tp > 1:
                    terms.append(
                        Term(
                            "allreduce",
                            "nccl",
                            "bf16",
                            "o_proj",
                            cnt,
                            {},
                            {},
                            {T: ar_link},
                            ranks=tp,
                        )
                    )
            elif kind is LayerKind.MLP:
                moe = model.moe
                width = (
                    moe.dense_intermediate_size if moe is not None else model.intermediate_size
                ) / tp
                terms.append(_gemm("gate_up_proj", impl, cdt, cnt, 2 * width, h, wb, act))
                terms.append(
                    Term(
                        "elementwise",
                        "silu_and_mul",
                        "bf16",
                        "act",
                        cnt,
                        {T: 4 * width},
                        {T: 3 * width * act},
                    )
                )
                terms.append(_gemm("down_proj", impl, cdt, cnt, h, width, wb, act))
                if tp > 1:
                    terms.append(
                        Term(
                            "allreduce", "nccl", "bf16", "mlp", cnt, {}, {}, {T: ar_link}, ranks=tp
                        )
                    )
            elif kind is LayerKind.MOE:
                moe = model.moe
                if moe is None:
                    raise InputRefused.one("plan.layers", "moe", f"model {model.hf_id} has no MoE")
                ep = lay.ep
                local = math.ceil(moe.num_experts / ep) if ep > 1 else moe.num_experts
                width = moe.expert_intermediate_size / (1 if ep > 1 else tp)
                k = moe.experts_per_token
                routed = (lay.dp * tp / ep) if ep > 1 else 1.0  # token multiplier per rank
                terms.append(_gemm("router", "cublas", "bf16", cnt, moe.num_experts, h, act, act))
                terms.append(
                    Term(
                        "moe_gemm",
                        impl,
                        "fp4" if quant == "mxfp4" else cdt,
                        "experts",
                        cnt,
                        {MOEP: 2 * 3 * h * width * k * routed},
                        {
                            MOEF: local * 3 * h * width * exp_b,
                            T: k * routed * (2 * h + 3 * width) * act,
                        },
                        launches=layer.kernels,
                    )
                )
                if moe.num_shared_experts:
                    sw = moe.shared_expert_intermediate_size / tp
                    terms.append(_gemm("shared_gate_up", "cublas", cdt, cnt, 2 * sw, h, wb, act))
                    terms.append(_gemm("shared_down", "cublas", cdt, cnt, h, sw, wb, act))
                if ep > 1:
                    a2a = 2.0 * k * h * act * (ep - 1) / ep
                    terms.append(
                        Term("alltoall", "nccl", "bf16", "moe", cnt, {}, {}, {T: a2a}, ranks=ep)
                    )
                elif tp > 1:
                    terms.append(
                        Term(
                            "allreduce", "nccl", "bf16", "moe", cnt, {}, {}, {T: ar_link}, ranks=tp
                        )
                    )
            elif kind is LayerKind.ELEMENTWISE:
                terms.append(
                    Term("elementwise", impl, "bf16", "residual", cnt, {T: h}, {T: 3 * h * act})
                )
            elif kind is LayerKind.LOGITS:
                terms.append(
                    _gemm(
                        "lm_head",
                        impl,
                        head_dt,
                        cnt,
                        vocab_local,
                        h,
                        head_b,
                        act,
                        rows=R,
                        where="last",
                    )
                )
                if tp > 1:
                    terms.append(
                        Term(
                            "allgather",
                            "nccl",
                            "bf16",
                            "logits",
                            cnt,
                            {},
                            {},
                            {R: vocab_local * (tp - 1) * 4.0},
                            where="last",
                            ranks=tp,
                        )
                    )
            elif kind is LayerKind.SAMPLER:
                terms.append(
                    Term(
                        "sampling",
                        impl,
                        "bf16",
                        "sampler",
                        cnt,
                        {R: 8.0 * vocab},
                        {R: 4 * 4.0 * vocab},
                        where="last",
                    )
                )
            elif kind is LayerKind.DRAFT_INPUT:
                terms.append(_gemm("draft_fc", impl, "bf16", cnt, h, fc_in * h, act, act))
        return terms

    if plan.parts:
        terms = _split_terms(
            plan,
            h,
            lambda layers: lower(layers, model, wb, exp_b, cdt, model.vocab_size),
            lambda mv, name: _gemm(name, mv.impl, cdt, mv.count, mv.rows, mv.cols, wb, act),
        )
    else:
        terms = lower(plan.layers, model, wb, exp_b, cdt, model.vocab_size)
    if lay.pp > 1:
        terms.append(
            Term(
                "sendrecv",
                "nccl",
                "bf16",
                "pp_stage",
                1,
                {},
                {},
                {T: 2 * h * act},
                where="not_last",
                ranks=2,
            )
        )
    terms.append(Term("host_step", plan.host_work, "*", "host", 1, {}, {}, items={S: 1.0}))
    terms.append(Term("host_request", plan.host_work, "*", "host", 1, {}, {}, items={NEWREQ: 1.0}))
    base_terms = len(terms)
    draft = plan.draft_policy
    n_first = 0
    if draft is not None and draft.layers and draft.draft_model is not None:
        dm = catalog.model(draft.draft_model)
        if draft.method == "mtp":
            dwb, dexp, dcdt = wb, exp_b, cdt
        else:
            dwb, dexp, dcdt = act, act, "bf16"
        pass_terms = lower(
            draft.layers,
            dm,
            dwb,
            dexp,
            dcdt,
            dm.draft_vocab_size or model.vocab_size,
            qkv_in=2.0 if draft.method == "eagle3" else 1.0,
            fc_in=3.0 if draft.method == "eagle3" else 2.0,
        )
        first = [_shift(t, N_AGG, "draft") for t in pass_terms]
        n_first = len(first)
        terms += first
        terms += [_shift(t, 2 * N_AGG, "draft_decode") for t in pass_terms]

    return CompiledPlan(plan, model, hw, terms, catalog, registry, base_terms, n_first)
