"""SimEnvironment: the contracts' Environment over the catalog, registry and cost methods.

One instance serves one simulation (it keeps running rank totals, never global state).
Pricing compiles each PoolPlan once (cached by identity) and then prices a StepShape
with one pass over its sequences (see :mod:`blis_core.cost.pricing`).

Cost methods: the registry holds the entries of the selected coefficient-set methods
(e.g. the roofline floor and the calibrated entries); a plan's kernels take its most
trusted entry on the compiled fast path. Per-kernel methods
(:class:`~blis_core.contracts.cost.CostMethod` plugins) are asked for every kernel of a
step and win when they answer a more trusted rank; a plan priced with them takes that
slower path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from blis_core.contracts.catalog import FabricSpec, HardwareSpec, MachineSpec, ModelArchitecture
from blis_core.contracts.cost import CoefficientRank, CostMethod, PrimitivePrice, StepPrice
from blis_core.contracts.engine import LinkLoad
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.plan import GraphMode, KVBudget, ParallelLayout, PlanPart, PoolPlan
from blis_core.contracts.shape import StepShape, Transfer
from blis_core.contracts.time import seconds_to_us
from blis_core.cost import memory
from blis_core.cost.catalog import Catalog
from blis_core.cost.plans import lowered_plan
from blis_core.cost.pricing import CompiledPlan, StepEvaluation, StepQuote, compile_plan
from blis_core.cost.registry import CoefficientEntry, RankTotals, Registry
from blis_core.cost.roofline import RegistryMethod, RooflineMethod

__all__ = ["SimEnvironment"]

#: a step's own placement (``StepShape.parts``)
_Parts = tuple[PlanPart, ...]

_BOUNDS = ("compute", "memory", "link")


def _bound(cp: CompiledPlan, ev: StepEvaluation, j: int) -> str:
    """The resource that bounds term ``j``; where its entry adds the resources
    (``overlap`` below 1), every one it spends time on, the greatest first."""
    roof = ev.work[:3, j] * cp.inv[:, j]
    if cp.serial[j] > 0:
        used = [k for k in np.argsort(-roof, kind="stable") if roof[k] > 0]
        if len(used) > 1:
            return "+".join(_BOUNDS[k] for k in used)
    return _BOUNDS[int(roof.argmax())]


class SimEnvironment:
    """The Environment an engine is built with: catalog facts, memory and step prices.

    :param catalog: the loaded catalog (:func:`~blis_core.cost.catalog.load_catalog`).
    :param registry: the loaded registry (:func:`~blis_core.cost.registry.load_registry`).
    :param cost_methods: the selected per-kernel cost methods (plugins).
    :param substream: ``(purpose, entity) -> Generator``, the simulator's named substreams.
    """

    def __init__(
        self,
        catalog: Catalog,
        registry: Registry,
        cost_methods: Sequence[CostMethod],
        substream: Callable[[str, str], np.random.Generator],
    ) -> None:
        self.catalog = catalog
        self.registry = registry
        self.extra_methods = tuple(
            m for m in cost_methods if not isinstance(m, RegistryMethod | RooflineMethod)
        )
        self._extra_seconds: dict[str, float] = {}
        self._substream = substream
        self._compiled: dict[int, CompiledPlan] = {}
        # a step's own placement (``StepShape.parts``): by the tuple's identity (it is
        # kept, so its id is not reused), else by (plan, the parts' value)
        self._own_parts: dict[tuple[int, int], tuple[PoolPlan, _Parts, CompiledPlan]] = {}
        self._own_values: dict[tuple[int, _Parts], tuple[PoolPlan, CompiledPlan]] = {}
        # (path, host_work or engine and model, hardware) -> (overhead_us, per_item_us,
        # per_item_sq_us, entry)
        self._host_path: dict[
            tuple[str, str, str], tuple[float, float, float, CoefficientEntry | None]
        ]
        self._host_path = {}
        self.totals = RankTotals()

    # -- catalog facts -----------------------------------------------------------------

    def model(self, hf_id: str) -> ModelArchitecture:
        """The catalog's architecture for ``hf_id``; refuses an unknown model."""
        return self.catalog.model(hf_id)

    def hardware(self, hardware_id: str) -> HardwareSpec:
        """The catalog's facts for an accelerator; refuses an unknown chip."""
        return self.catalog.chip(hardware_id)

    def fabric(self, fabric_id: str) -> FabricSpec:
        """The catalog's facts for a link kind; refuses an unknown fabric."""
        return self.catalog.fabric(fabric_id)

    def machine(self, machine_id: str) -> MachineSpec:
        """The catalog's facts for a box; refuses an unknown machine."""
        return self.catalog.machine(machine_id)

    def device_memory_bytes(self, hardware_id: str) -> int:
        """Total memory the runtime reports on one device (usable, else datasheet)."""
        hw = self.hardware(hardware_id)
        return hw.usable_memory_bytes or hw.memory_bytes

    # -- memory ------------------------------------------------------------------------

    def weight_bytes_per_rank(self, plan: PoolPlan) -> int:
        """Resident weight bytes on the most loaded rank, with the plan's quantization,
        plus the draft model's (``plan.draft_policy.layers``, see
        :func:`~blis_core.cost.memory.draft_weight_bytes_per_rank`)."""
        target = self.model(plan.model)
        weights = memory.weight_bytes_per_rank(
            target, plan.layout, plan.weights_dtype, plan.quantization
        )
        draft = plan.draft_policy
        if draft is not None and draft.layers and draft.draft_model is not None:
            weights += memory.draft_weight_bytes_per_rank(
                self.model(draft.draft_model),
                target,
                plan.layout,
                draft.method,
                plan.quantization,
            )
        return weights

    def activation_peak_bytes(self, plan: PoolPlan, num_tokens: int) -> int:
        """Peak activation bytes of a forward pass over ``num_tokens`` tokens on one rank."""
        if num_tokens <= 0:
            raise InputRefused.one("num_tokens", num_tokens, "must be > 0")
        model = self.model(plan.model)
        peak = memory.activation_peak_bytes(model, plan.layout, num_tokens, plan.max_num_seqs)
        draft = plan.draft_policy
        if draft is not None and draft.method == "eagle3" and draft.layers:
            # EAGLE3 keeps three auxiliary hidden states of the target alive through
            # the forward pass (``aux_hidden_states``, concatenated for the drafter).
            peak += 3 * num_tokens * model.hidden_size * 2
        return peak

    def graph_memory_bytes(self, plan: PoolPlan) -> int:
        """Estimated CUDA-graph pool bytes of the plan's captures on one rank."""
        gp = plan.graph_policy
        if gp.decode_mode is GraphMode.NONE and gp.mixed_mode is GraphMode.NONE:
            return 0
        piecewise = GraphMode.PIECEWISE in (gp.decode_mode, gp.mixed_mode)
        return memory.graph_memory_bytes(
            self.model(plan.model), plan.layout, gp.capture_sizes, piecewise, plan.max_num_seqs
        )

    def non_torch_bytes(self, plan: PoolPlan) -> int:
        """Estimated non-torch memory per rank (CUDA libraries, NCCL buffers); assumed.

        A vLLM port subtracts it as vLLM's ``non_torch_increase``.
        """
        return memory.non_torch_bytes(plan.layout)

    def kv_bytes_per_token_per_layer(
        self, model: ModelArchitecture, layout: ParallelLayout, kv_cache_dtype: str, attention: str
    ) -> int:
        """KV bytes one token takes in one layer on one rank (K and V, or MLA's latent)."""
        return memory.kv_bytes_per_token_per_layer(model, layout.tp, kv_cache_dtype, attention)

    # -- lowering ----------------------------------------------------------------------

    def lower(self, request: LoweringRequest) -> PoolPlan:
        """The catalog model lowered for ``request`` (see
        :func:`~blis_core.cost.plans.lowered_plan`): a plan-phase PoolPlan, no KV budget."""
        return lowered_plan(self.model(request.model), self.hardware(request.hardware), request)

    def default_kv_budget(self, plan: PoolPlan, memory_fraction: float) -> KVBudget:
        """KV blocks in ``memory_fraction`` of one device's memory after the plan's
        weights, activation peak, graphs and non-torch memory (each figure the plan does
        not state is asked of this Environment). A block holds ``block_size_tokens`` of
        every KV group's layers. Refuses a fraction outside (0, 1] and a plan that
        leaves no room for one block."""
        if not 0 < memory_fraction <= 1:
            raise InputRefused.one("memory_fraction", memory_fraction, "must be in (0, 1]")
        if not plan.kv_groups:
            raise InputRefused.one("plan.kv_groups", (), "a KV budget needs a KV group")
        weights = plan.resident_weight_bytes
        if weights is None:
            weights = self.weight_bytes_per_rank(plan)
        act = plan.activation_peak_bytes
        if act is None:
            act = self.activation_peak_bytes(plan, plan.max_num_batched_tokens)
        graphs = plan.graph_bytes if plan.graph_bytes is not None else self.graph_memory_bytes(plan)
        other = plan.nonkv_buffer_bytes
        if other is None:
            other = self.non_torch_bytes(plan)
        budget = int(self.device_memory_bytes(plan.hardware) * memory_fraction)
        available = budget - weights - act - graphs - other
        block_tokens = plan.kv_groups[0].block_size_tokens
        per_block = sum(
            g.block_size_tokens * g.bytes_per_token_per_layer * g.num_layers for g in plan.kv_groups
        )
        blocks = max(0, available) // per_block if per_block > 0 else 0
        if blocks <= 0:
            raise InputRefused.one(
                "memory_fraction",
                memory_fraction,
                f"no room for a KV block: {budget} bytes less weights {weights}, activation "
                f"{act}, graphs {graphs} and other {other} leaves {available}",
            )
        return KVBudget(
            num_gpu_blocks=blocks,
            block_size_tokens=block_tokens,
            kv_bytes=blocks * per_block,
            available_bytes=available,
        )

    # -- pricing -----------------------------------------------------------------------

    def compiled(self, plan: PoolPlan, parts: tuple[PlanPart, ...] = ()) -> CompiledPlan:
        """The plan's pricing program (on ``parts`` where given, a step's own
        placement), compiled on first use."""
        if parts:
            return self._compiled_parts(plan, parts)
        cp = self._compiled.get(id(plan))
        if cp is None or cp.plan is not plan:
            cp = compile_plan(plan, self.catalog, self.registry)
            self._compiled[id(plan)] = cp
        return cp

    def _compiled_parts(self, plan: PoolPlan, parts: tuple[PlanPart, ...]) -> CompiledPlan:
        """The plan on a step's own placement (``StepShape.parts``), compiled once: found
        by the tuple's identity, else by its value."""
        mine = self._own_parts.get((id(plan), id(parts)))
        if mine is not None and mine[0] is plan and mine[1] is parts:
            return mine[2]
        found = self._own_values.get((id(plan), parts))
        if found is None or found[0] is not plan:
            moved = plan.model_copy(update={"parts": parts})
            found = (plan, compile_plan(moved, self.catalog, self.registry))
            self._own_values[(id(plan), parts)] = found
            self._compiled[id(found[1])] = found[1]  # counted with the rest
        self._own_parts[(id(plan), id(parts))] = (plan, parts, found[1])
        return found[1]

    def price_step(self, plan: PoolPlan, shape: StepShape) -> int:
        """Duration of a padded step in microseconds (hot path); counts rank totals."""
        cp = self.compiled(plan, shape.parts)
        if not self.extra_methods:
            return seconds_to_us(cp.price_seconds(shape))
        ev, winners = self._with_extra(cp, cp.evaluate(shape), plan, shape)
        for k, num_bytes in enumerate(shape.page_in_bytes):
            cp.page_in_totals[k] += num_bytes
        for j, (rank, seconds) in enumerate(
            zip(ev.ranks.tolist(), ev.seconds.tolist(), strict=True)
        ):
            self.totals.add(rank, seconds)
            if seconds > 0.0:
                who = winners[j] or cp.entries[j].provider
                self._extra_seconds[who] = self._extra_seconds.get(who, 0.0) + seconds
        return seconds_to_us(ev.total_s)

    def span_pricing(self, plan: PoolPlan) -> CompiledPlan | None:
        """The compiled pricing a span's steps may be quoted and counted on directly
        (``quote_advancing``, ``quote_seconds``, ``count_quote``: what
        :meth:`quote_advancing`, :meth:`quote_steps` and :meth:`count_quote` call; they
        quote no shape on a placement of its own); ``None`` where the Environment prices
        otherwise (per-kernel cost methods)."""
        if self.extra_methods:
            return None
        return self.compiled(plan)

    def quote_steps(
        self, plan: PoolPlan, shapes: Sequence[StepShape]
    ) -> tuple[list[int], StepQuote] | None:
        """What :meth:`price_step` gives each of ``shapes``, in one pass and counted
        nowhere until :meth:`count_quote`; ``None`` where it cannot (per-kernel cost
        methods, IDLE steps, a draft model): price those one by one."""
        cp = self.span_pricing(plan)
        quote = cp.quote_seconds(shapes) if cp is not None else None
        if quote is None:
            return None
        return [seconds_to_us(t) for t in quote.totals], quote

    def quote_advancing(
        self, plan: PoolPlan, first: StepShape, count: int
    ) -> tuple[list[int], StepQuote] | None:
        """What :meth:`quote_steps` gives for ``first`` and the ``count - 1`` decode steps
        after it, each with every sequence's context one token longer (a decode span's
        boundaries), without making their shapes; ``None`` where it cannot."""
        cp = self.span_pricing(plan)
        quote = cp.quote_advancing(first, count) if cp is not None else None
        if quote is None:
            return None
        return [seconds_to_us(t) for t in quote.totals], quote

    def count_quote(self, plan: PoolPlan, quote: StepQuote, count: int, start: int = 0) -> None:
        """Count steps ``start`` to ``count`` (excluded) of ``quote`` in the rank totals,
        as that many :meth:`price_step` calls in that order would."""
        self.compiled(plan).count_quote(quote, count, start)

    def explain_step(self, plan: PoolPlan, shape: StepShape) -> StepPrice:
        """The same price as :meth:`price_step` with its per-kernel breakdown and ranks.

        Does not count toward the rank totals. ``family`` of a part is the primitive
        family; ``impl`` is ``<layer>:<kernel impl>``; ``launches`` the kernels one launch
        of it issues (each paying the entry's fixed cost).
        """
        cp = self.compiled(plan, shape.parts)
        ev = cp.evaluate(shape)
        if self.extra_methods:
            ev, _ = self._with_extra(cp, ev, plan, shape)
        parts = []
        for j, term in enumerate(cp.terms):
            secs = float(ev.seconds[j])
            if secs <= 0.0:
                continue
            bound = "overhead" if term.family.startswith("host") else _bound(cp, ev, j)
            parts.append(
                PrimitivePrice(
                    family=term.family,
                    impl=f"{term.layer}:{term.impl}",
                    seconds=secs,
                    rank=CoefficientRank(int(ev.ranks[j])),
                    bound=bound,
                    launches=term.launches,
                )
            )
        return StepPrice(duration_us=seconds_to_us(ev.total_s), parts=tuple(parts))

    def _with_extra(
        self, cp: CompiledPlan, ev: StepEvaluation, plan: PoolPlan, shape: StepShape
    ) -> tuple[StepEvaluation, list[str]]:
        """Ask the per-kernel cost methods for every launched kernel; keep more trusted
        answers. Also returns, per term, the name of the method that won ("" when the
        registry's entry kept it)."""
        seconds = ev.seconds.copy()
        ranks = ev.ranks.copy()
        winners = [""] * cp.n
        launches = cp.counts[cp.stage_kind(shape)]
        for j in range(cp.n):
            if ev.seconds[j] <= 0.0:
                continue
            work = cp.work_of(j, ev, plan.hardware)
            for method in self.extra_methods:
                answer = method.price(work)
                if answer is not None and int(answer[1]) < int(ranks[j]):
                    seconds[j] = answer[0] * float(launches[j])
                    ranks[j] = int(answer[1])
                    winners[j] = method.name
        return StepEvaluation(seconds, ranks, ev.work, float(seconds.sum())), winners

    def rank_totals(self) -> RankTotals:
        """Seconds of priced time per rank so far, over every step this Environment priced."""
        merged = RankTotals()
        merged.seconds = list(self.totals.seconds)
        for cp in self._compiled.values():
            for rank, seconds in enumerate(cp.rank_seconds()):
                merged.add(rank, seconds)
        return merged

    def method_seconds(self) -> dict[str, float]:
        """Seconds of priced time per cost method so far (over every step priced)."""
        merged = dict(self._extra_seconds)
        for cp in self._compiled.values():
            for name, seconds in cp.method_seconds().items():
                merged[name] = merged.get(name, 0.0) + seconds
        return merged

    def page_in_bytes(self) -> dict[str, int]:
        """Weight bytes paged in so far over each link (fabric id), over every step this
        Environment priced; empty when no plan pages."""
        out: dict[str, int] = {}
        for cp in self._compiled.values():
            for link, total in zip(cp.page_links, cp.page_in_totals, strict=True):
                if total:
                    out[link] = out.get(link, 0) + total
        return out

    def rank_shares(self) -> dict[str, float]:
        """Which ranks priced the steps so far and each rank's share of priced time."""
        return self.rank_totals().rank_shares()

    # -- outside the engine core --------------------------------------------------------

    def frontend_delay_us(self, plan: PoolPlan, input_tokens: int) -> int:
        """Client send to engine-core arrival: HTTP, IPC and the API server's fixed work
        (``host_request``, impl ``frontend:<plan.host_work>``: ``overhead_us + per_item_us
        x input_tokens``), plus the tokenisation of the prompt by the model's tokenizer
        in the engine's API server (:meth:`tokenize_us`)."""
        us = self._host_us("frontend", plan, input_tokens)
        return seconds_to_us((us + self._host_us("tokenize", plan, input_tokens)) * 1e-6)

    def tokenize_us(self, plan: PoolPlan, input_tokens: int) -> int:
        """The tokenisation part of :meth:`frontend_delay_us` (impl ``tokenize:<engine
        kind>/<tokenizer>``, any chip: ``per_item_us x n + per_item_sq_us x n^2``; 0 when
        the catalog names no tokenizer or no entry prices it)."""
        return seconds_to_us(self._host_us("tokenize", plan, input_tokens) * 1e-6)

    def stream_delay_us(self, plan: PoolPlan) -> int:
        """Step end to the client's receipt of its chunk: output processing,
        detokenisation, SSE (``host_request``, impl ``stream:<plan.host_work>``)."""
        return seconds_to_us(self._host_us("stream", plan, 0) * 1e-6)

    def explain_host_path(self, plan: PoolPlan, path: str, items: int = 0) -> PrimitivePrice:
        """The price of ``path`` (``frontend`` or ``tokenize`` with ``items`` input tokens,
        or ``stream``) with the rank that priced it; ``transferred`` outside a calibrated
        ``items`` range."""
        entry = self._host_coeffs(path, plan)[3]
        rank = CoefficientRank.ROOFLINE if entry is None else entry.price_rank
        rng = None if entry is None else entry.covered.get("items")
        if rng is not None and not rng[0] <= items <= rng[1]:
            rank = max(rank, CoefficientRank.TRANSFERRED)
        return PrimitivePrice(
            family="host_request",
            impl=self._host_impl(path, plan),
            seconds=self._host_us(path, plan, items) * 1e-6,
            rank=CoefficientRank(rank),
            bound="overhead",
        )

    def _host_us(self, path: str, plan: PoolPlan, items: int) -> float:
        overhead, per_item, per_item_sq, _ = self._host_coeffs(path, plan)
        n = max(items, 0)
        return overhead + per_item * n + per_item_sq * n * n

    def _host_impl(self, path: str, plan: PoolPlan) -> str:
        if path == "tokenize":
            tokenizer = self.catalog.model(plan.model).tokenizer
            kind = plan.engine.partition("@")[0]
            return f"tokenize:{kind}/{tokenizer}" if tokenizer else "tokenize:-"
        return f"{path}:{plan.host_work}"

    def _host_coeffs(
        self, path: str, plan: PoolPlan
    ) -> tuple[float, float, float, CoefficientEntry | None]:
        """``(overhead_us, per_item_us, per_item_sq_us, entry)`` of a host path; zeros
        and no entry where only the per-step admission entry matches (floor 0)."""
        key = (path, plan.host_work if path != "tokenize" else f"{plan.engine} {plan.model}",
               plan.hardware)  # fmt: skip
        found = self._host_path.get(key)
        if found is None:
            impl = self._host_impl(path, plan)
            entry = None
            if impl != "tokenize:-":
                entry = self.registry.best("host_request", impl, plan.hardware, "*")
            if entry is None or entry.impl == "*":
                found = (0.0, 0.0, 0.0, None)
            else:
                found = (
                    entry.param("overhead_us", 0.0),
                    entry.param("per_item_us", 0.0),
                    entry.param("per_item_sq_us", 0.0),
                    entry,
                )
            self._host_path[key] = found
        return found

    # -- transfers ---------------------------------------------------------------------

    def price_transfer(self, plan: PoolPlan, transfer: Transfer) -> tuple[LinkLoad, ...]:
        """Bytes a KV move puts on the link it crosses, with that link's fixed latency.

        Bytes: ``num_tokens x bytes_per_token_per_layer x num_layers`` of the transfer's
        KV group on one rank, times the ranks that move their shard (TP x PP). Link: the
        link of a tier the plan names (``plan.tiers`` by name or medium), PCIe for
        ``cpu``/``host``, the chip's scale-up fabric for ``gpu``-to-``gpu`` in a node,
        and the RDMA NIC for another pool instance. Refuses an unknown KV group.
        """
        group = next((g for g in plan.kv_groups if g.name == transfer.kv_group), None)
        if group is None:
            raise InputRefused.one(
                "transfer.kv_group",
                transfer.kv_group,
                f"plan has KV groups {[g.name for g in plan.kv_groups]}",
            )
        if transfer.num_tokens < 0:
            raise InputRefused.one("transfer.num_tokens", transfer.num_tokens, "must be >= 0")
        per_rank = transfer.num_tokens * group.bytes_per_token_per_layer * group.num_layers
        num_bytes = per_rank * plan.layout.tp * plan.layout.pp
        link = self._link_for(plan, transfer.src, transfer.dst)
        fabric = self.fabric(link)
        return (
            LinkLoad(
                link=link, num_bytes=num_bytes, latency_us=seconds_to_us(fabric.latency_us * 1e-6)
            ),
        )

    def _link_for(self, plan: PoolPlan, src: str, dst: str) -> str:
        hw = self.hardware(plan.hardware)
        for end in (src, dst):
            for tier in plan.tiers:
                if end in (tier.name, tier.medium):
                    return tier.link
        ends = {src, dst}
        if ends & {"cpu", "host", "host_dram"}:
            return hw.pcie_fabric
        if ends & {"disk"}:
            return "nvme-gen4"
        if ends == {"gpu"}:
            return hw.scale_up_fabric or hw.pcie_fabric
        return "rdma-400g" if "rdma-400g" in self.catalog.fabrics else hw.pcie_fabric

    # -- randomness --------------------------------------------------------------------

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        """A random substream named by (this engine instance, purpose, entity)."""
        return self._substream(purpose, entity)
