"""The engine contract: what an engine plugin provides and what it is given (design §6).

The simulator builds an engine through its :class:`EngineFactory`, handing it an
:class:`Environment`. The engine resolves its configuration as its upstream does,
plans its pool through the Environment (plan phase), and then, in the run phase, is
driven by the simulator's engine component:

1. ``add_request`` / ``abort_request`` when a request or an abort reaches it;
2. ``schedule(now_us)`` forms the next step and returns its padded :class:`StepShape`
   (``None``: nothing to run until the next input); the simulator asks the
   Environment for the step's price and advances time;
3. ``complete(shape, now_us)`` when that step's execution ends, returning the
   :class:`StepOutcome` (tokens streamed, requests finished, KV events).

Up to ``plan.steps_in_flight`` steps may be scheduled before the oldest completes
(vLLM async scheduling or pipeline parallelism, SGLang overlap); steps complete in the
order scheduled. With pipeline parallelism (``plan.layout.pp`` stages) a step's stage
``s`` starts once its stage ``s - 1`` and the previous step's stage ``s`` have ended;
otherwise steps execute one after another. ``input_boundary`` declares, per kind of
external input, the step boundary at which it takes effect (design §8.2).

Exact fast paths: an engine may compute steps that follow a fixed pattern (a steady
decode step, in which every running request decodes one token) by a shorter route than
its port of the upstream loop, provided every output is the same: shapes, tokens, KV
events, metrics and every later decision. The port stays the reference: with the
environment variable ``BLIS_FAST_FORWARD=0`` (:func:`fast_forward_enabled` false) an
engine takes no fast path, and a Result must not change by a byte between the two.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from blis_core.contracts.catalog import FabricSpec, HardwareSpec, MachineSpec, ModelArchitecture
from blis_core.contracts.cost import StepPrice
from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.outcome import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    FinishedRequest,
    KVEvent,
    PrefixHit,
    StepOutcome,
    TokenEmission,
)
from blis_core.contracts.plan import KVBudget, ParallelLayout, PoolPlan
from blis_core.contracts.request import InferenceRequest
from blis_core.contracts.scenario import AcceptanceModel
from blis_core.contracts.shape import StepShape, Transfer

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "COMMON_ENGINE_ARGS",
    "FAST_FORWARD_ENV",
    "AllBlocksCleared",
    "ArgumentResolving",
    "BlockRemoved",
    "BlockStored",
    "DecodeSpan",
    "EngineFactory",
    "EngineInstance",
    "EnginePoolSpec",
    "Environment",
    "FinishedRequest",
    "KVEvent",
    "KVEventEngine",
    "KVTransferEngine",
    "LinkLoad",
    "PrefixHit",
    "SelectiveScrapeEngine",
    "SpanEngine",
    "StepOutcome",
    "SurfaceReporting",
    "TokenEmission",
    "UnpromptedOutputsEngine",
    "fast_forward_enabled",
    "refuse_machine",
    "rename_common_args",
]

#: Engine arguments whose meaning every engine BLIS models shares (the scheduler's
#: budgets, under vLLM's names): ``blis run --engine`` carries them to an engine of
#: another kind, which reads each as its own argument of that meaning
#: (:func:`rename_common_args`) or refuses it by name.
COMMON_ENGINE_ARGS: tuple[str, ...] = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")


def rename_common_args(
    args: Mapping[str, Any], names: Mapping[str, str], path: str = "engine.args"
) -> tuple[dict[str, Any], list[FieldError]]:
    """``args`` with each common argument named in ``names`` renamed to the engine's own
    argument of the same meaning, and the errors: a setting given under both names."""
    out = dict(args)
    errors: list[FieldError] = []
    for common, own in names.items():
        if common not in out:
            continue
        if own in out:
            errors.append(
                FieldError(
                    f"{path}.{common}",
                    out[common],
                    f"names the same setting as {own!r}, which is also given",
                )
            )
        out[own] = out.pop(common)
    return out, errors


FAST_FORWARD_ENV = "BLIS_FAST_FORWARD"
"""Set to ``0`` to make every engine take its step-by-step reference path."""


def fast_forward_enabled() -> bool:
    """Whether engines may take their exact fast paths (``BLIS_FAST_FORWARD`` is not ``0``).

    Read when an engine is built, so a run never mixes the two paths in one instance."""
    return os.environ.get(FAST_FORWARD_ENV, "1") != "0"


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """Bytes one transfer puts on one link (a fabric id) with its fixed latency."""

    link: str
    num_bytes: int
    latency_us: int


@dataclass(frozen=True, slots=True)
class EnginePoolSpec:
    """What the scenario says about one pool: model, hardware, layout and engine args.

    ``args`` are the upstream's own engine arguments, by their upstream names, as the
    user wrote them; the engine resolves and validates them. ``acceptance`` is the
    scenario's acceptance model for speculative decoding (``None``: not stated).
    """

    pool: str
    model: str
    hardware: str
    layout: ParallelLayout
    args: Mapping[str, Any] = field(default_factory=dict)
    acceptance: AcceptanceModel | None = None
    machine: str | None = None
    """catalog key of the box (:class:`~blis_core.contracts.catalog.MachineSpec`); an
    engine that prices the accelerators alone refuses a pool that names one"""


def refuse_machine(spec: EnginePoolSpec, engine: str) -> None:
    """Refuse a pool that names a machine, for an engine that prices its accelerators
    alone (the host, its DRAM and disks take no part in its steps)."""
    if spec.machine is not None:
        raise InputRefused.one(
            f"deployment.pools.{spec.pool}.machine",
            spec.machine,
            f"{engine} runs every layer on the pool's accelerators; a machine's host CPU, "
            "memory and storage take no part in its steps, so naming one would change nothing",
            engine,
        )


@runtime_checkable
class Environment(Protocol):
    """What the simulator supplies to an engine: catalog facts, memory and prices.

    Memory figures are bytes per rank. An engine never prices a step itself.
    """

    def model(self, hf_id: str) -> ModelArchitecture:
        """The catalog's architecture for ``hf_id``; refuses an unknown model."""
        ...

    def hardware(self, hardware_id: str) -> HardwareSpec:
        """The catalog's facts for an accelerator; refuses an unknown chip."""
        ...

    def fabric(self, fabric_id: str) -> FabricSpec:
        """The catalog's facts for a link kind."""
        ...

    def machine(self, machine_id: str) -> MachineSpec:
        """The catalog's facts for a box (host CPU, DRAM, accelerators, storage);
        refuses an unknown machine."""
        ...

    def device_memory_bytes(self, hardware_id: str) -> int:
        """Total memory the device runtime reports for one accelerator (e.g. what
        ``torch.cuda.mem_get_info`` gives as total): less than the datasheet figure."""
        ...

    def weight_bytes_per_rank(self, plan: PoolPlan) -> int:
        """Resident weight bytes on one rank, with the plan's quantization."""
        ...

    def non_torch_bytes(self, plan: PoolPlan) -> int:
        """Memory outside the framework's allocator on one rank (CUDA context, NCCL and
        cuBLAS workspaces)."""
        ...

    def activation_peak_bytes(self, plan: PoolPlan, num_tokens: int) -> int:
        """Peak activation bytes of a forward pass over ``num_tokens`` tokens on one rank."""
        ...

    def graph_memory_bytes(self, plan: PoolPlan) -> int:
        """Memory the plan's CUDA-graph captures hold on one rank."""
        ...

    def kv_bytes_per_token_per_layer(
        self, model: ModelArchitecture, layout: ParallelLayout, kv_cache_dtype: str, attention: str
    ) -> int:
        """KV bytes one token takes in one layer on one rank (K and V, or MLA's latent)."""
        ...

    def lower(self, request: LoweringRequest) -> PoolPlan:
        """The catalog model lowered for ``request``: a plan-phase PoolPlan (no KV budget)
        with layers, kernel implementations, KV groups, host work and memory figures
        (see :mod:`blis_core.contracts.lowering`); refuses names that break its rules."""
        ...

    def default_kv_budget(self, plan: PoolPlan, memory_fraction: float) -> KVBudget:
        """The default KV budget rule: blocks in ``memory_fraction`` of one device's
        memory after weights, activation peak, graphs and non-torch memory."""
        ...

    def price_step(self, plan: PoolPlan, shape: StepShape) -> int:
        """Duration of a padded step in microseconds (hot path)."""
        ...

    def explain_step(self, plan: PoolPlan, shape: StepShape) -> StepPrice:
        """The same price with its per-primitive breakdown and ranks."""
        ...

    def price_transfer(self, plan: PoolPlan, transfer: Transfer) -> tuple[LinkLoad, ...]:
        """The bytes a KV move puts on each link it crosses."""
        ...

    def frontend_delay_us(self, plan: PoolPlan, input_tokens: int) -> int:
        """Microseconds from the client's send of a request of ``input_tokens`` tokens to
        the engine core receiving it (API server: HTTP parsing, tokenisation, IPC); keyed
        by ``plan.host_work``. Never refuses (a floor prices any host work)."""
        ...

    def tokenize_us(self, plan: PoolPlan, input_tokens: int) -> int:
        """Microseconds the API server's tokenizer works on a text prompt of
        ``input_tokens`` tokens: the part of :meth:`frontend_delay_us` that one tokenizer
        does one prompt at a time (0 where tokenisation is not priced)."""
        ...

    def stream_delay_us(self, plan: PoolPlan) -> int:
        """Microseconds from a step's end to the client receiving its streamed chunk
        (output processing, detokenisation, SSE); keyed by ``plan.host_work``."""
        ...

    def substream(self, purpose: str, entity: str) -> np.random.Generator:
        """A random substream named by (this engine instance, purpose, entity)."""
        ...


@runtime_checkable
class EngineInstance(Protocol):
    """One running engine (one pool replica), driven by the simulator."""

    @property
    def plan(self) -> PoolPlan:
        """The run-phase plan (KV budget decided)."""
        ...

    @property
    def input_boundary(self) -> Mapping[str, str]:
        """Per input kind (``arrival``, ``abort``), when it takes effect."""
        ...

    def add_request(self, request: InferenceRequest, now_us: int) -> None:
        """Accept a request; refuses one the upstream would reject (too long …)."""
        ...

    def abort_request(self, request_id: str, now_us: int) -> None:
        """Abort a request the engine holds; unknown ids are ignored as upstream does."""
        ...

    def schedule(self, now_us: int) -> StepShape | None:
        """Form the next step, or ``None`` when there is nothing to run now.

        The simulator calls it after every ``complete`` and after every input while no
        step is in flight, so ``None`` may also mean "nothing until a step in flight
        completes" (asynchronous scheduling).
        """
        ...

    def complete(self, shape: StepShape, now_us: int) -> StepOutcome:
        """The step ``shape`` (the oldest in flight) finished executing at ``now_us``."""
        ...

    def scrape(self) -> Mapping[str, float]:
        """Metrics under the upstream's Prometheus names, as a scrape would read them.

        Keys are the sample names of Prometheus' text exposition, flattened: a gauge
        by its name; a counter as ``<name>_total``; a histogram as one cumulative
        ``<name>_bucket:<le>`` per bucket (``le`` written as the Prometheus client
        writes it, ``+Inf`` included), ``<name>_sum`` and ``<name>_count``. One
        distinguishing label value is appended as ``:<label value>`` (e.g.
        ``vllm:request_success_total:stop``); an info metric's numeric labels are
        given as ``<metric name>:<label>`` (e.g. ``vllm:cache_config_info:block_size``).
        :mod:`blis_core.contracts.scrape` writes these keys and keeps a histogram's.
        Values are as of the last completed step; the router scrapes often, so keep
        counts cumulative as they change rather than recomputing them per scrape.
        """
        ...

    def num_unfinished(self) -> int:
        """Requests accepted and not yet finished or aborted."""
        ...


@runtime_checkable
class KVTransferEngine(EngineInstance, Protocol):
    """An engine whose KV connector moves KV between instances (P/D disaggregation).

    The simulator starts the moves of a step when that step starts executing (the
    worker starts its reads before the forward pass) and carries them over its links;
    when a move ends it tells both ends, the reader (``transfer.dst``) and the owner
    of the source blocks (``transfer.src``).
    """

    def step_transfers(self, step_id: int) -> tuple[Transfer, ...]:
        """KV moves that start when step ``step_id`` starts executing (asked once)."""
        ...

    def transfer_done(self, transfer: Transfer, now_us: int) -> None:
        """A move this instance reads or serves has ended at ``now_us``."""
        ...


@runtime_checkable
class DecodeSpan(Protocol):
    """Step boundaries an engine offers to make in one call (:class:`SpanEngine`)."""

    @property
    def num_steps(self) -> int:
        """How many boundaries the engine offers (at least 1)."""
        ...

    def shape(self, index: int) -> StepShape:
        """The shape of the step that boundary ``index`` (from 0) schedules: a
        ``DECODE_ONLY`` step, boundary 0's shape with ``step_id`` and every sequence's
        ``context_tokens`` plus ``index`` (each boundary appends one token to every
        sequence of the batch), all else equal. The simulator relies on it: it prices
        boundaries ahead from one shape without asking for theirs."""
        ...


@runtime_checkable
class SpanEngine(EngineInstance, Protocol):
    """An engine that can make several step boundaries in one call (an exact fast path).

    A *step boundary* is what the simulator does when the oldest step in flight ends:
    ``complete`` it, then ``schedule`` the next step, both at the step's end time. Right
    after a boundary, with ``plan.steps_in_flight`` steps in flight and one pipeline
    stage, the simulator may ask :meth:`decode_span` for the boundaries that follow
    whatever their times: those whose outcomes finish, preempt or admit no request and
    whose scheduled steps the engine's state alone determines (steady decode steps).
    It reads the shapes, prices them and decides how many boundaries fall before the
    next input, scrape or other outside event, then makes them with :meth:`take_span`.

    ``take_span(span, boundaries_us)`` makes the next ``len(boundaries_us)`` boundaries
    of ``span`` (increasing times, the first the oldest step's end the simulator
    computed): the engine must end in the state, and return the outcomes, that the same
    number of ``complete(oldest, t)`` and ``schedule(t)`` pairs would have given, the
    ``schedule`` of boundary ``i`` (counted from the span's first) returning
    ``span.shape(i)``, including every KV event in the outcome of the boundary that made
    it and the metrics a scrape reads afterwards. The steps a span schedules start no
    KV moves (a :class:`KVTransferEngine` gives none for them). The simulator may take
    a span in several calls, a scrape between them (a span goes on after a scrape); no
    call other than ``scrape`` may come between :meth:`decode_span` and a
    :meth:`take_span`, or between two of them. With ``BLIS_FAST_FORWARD=0`` an engine
    offers no span.
    """

    def decode_span(self) -> DecodeSpan | None:
        """The boundaries the engine can make in one call now, or ``None`` (read-only)."""
        ...

    def take_span(self, span: DecodeSpan, boundaries_us: Sequence[int]) -> Sequence[StepOutcome]:
        """Make the next ``len(boundaries_us)`` boundaries of ``span``; one outcome each."""
        ...


@runtime_checkable
class KVEventEngine(EngineInstance, Protocol):
    """An engine that can leave its KV events unmade when nothing in the run reads them.

    The simulator calls :meth:`stop_kv_events` once, after the run is built and before
    the first input, when no router observes ``kv_events``
    (:class:`~blis_core.contracts.router.SelectiveRouter`), no plugin observes completed
    steps (``blis_step_completed``) and the KV event check (``BLIS_CHECK_KV_EVENTS``) is
    off. From then on the engine's ``StepOutcome.kv_events`` may be empty, and nothing
    else may change: the same steps, outcomes otherwise, metrics and decisions
    (``blis_conformance.KVEventConformance`` checks it).
    """

    def stop_kv_events(self) -> None:
        """Make no more KV events (nothing reads them)."""
        ...


@runtime_checkable
class UnpromptedOutputsEngine(EngineInstance, Protocol):
    """An engine that can skip work only a later prompt holding its generated tokens needs.

    The simulator calls :meth:`outputs_unprompted` once, after the run is built (after
    :meth:`KVEventEngine.stop_kv_events`, where it is called) and before the first
    input, when no request's prompt will contain an earlier request's generated tokens
    (a segment under :func:`~blis_core.contracts.request.output_content_key`:
    :attr:`~blis_core.workload.source.WorkloadSource.prompts_outputs` is false, no
    multi-turn session). From then on nothing may change: the same steps, outcomes,
    metrics and decisions (``blis_conformance.UnpromptedOutputsConformance`` checks
    it); an engine whose KV events are still read may ignore the call.
    """

    def outputs_unprompted(self) -> None:
        """No later prompt holds a generated token of this run."""
        ...


@runtime_checkable
class SelectiveScrapeEngine(EngineInstance, Protocol):
    """An engine that can give some of its scrape's samples without making the rest.

    When the router reads only some metrics
    (:class:`~blis_core.contracts.router.MetricSelectiveRouter`), the simulator scrapes
    this engine with :meth:`scrape_keys` instead of ``scrape``
    (``blis_conformance.SelectiveScrapeConformance`` checks the two agree).
    """

    def scrape_keys(self, keys: frozenset[str]) -> Mapping[str, float]:
        """``scrape()``'s samples under ``keys``, those it exports (a key it does not
        export is left out), with the same values; a new mapping each call."""
        ...


@runtime_checkable
class EngineFactory(Protocol):
    """What an engine plugin registers: one upstream release of one engine kind."""

    kind: str
    upstream_release: str
    plugin_version: str

    def plan(self, spec: EnginePoolSpec, env: Environment) -> PoolPlan:
        """Resolve and plan a pool (both phases) without running it (``blis plan``)."""
        ...

    def build(self, spec: EnginePoolSpec, env: Environment, instance: str) -> EngineInstance:
        """Build a running engine instance named ``instance``."""
        ...


@runtime_checkable
class ArgumentResolving(Protocol):
    """A plugin factory that reports the server arguments its upstream resolves for a pool
    (``blis plan`` prints them).

    ``resolved_args(spec, env)`` maps upstream's argument names to the values the
    upstream release would run the pool with: defaults filled in, values derived from the
    device and the pool size (e.g. SGLang's ``mem_fraction_static`` and
    ``max_total_num_tokens``). It refuses what ``plan`` refuses.
    """

    def resolved_args(self, spec: EnginePoolSpec, env: Environment) -> Mapping[str, object]:
        """Upstream argument name -> resolved value."""
        ...


@runtime_checkable
class SurfaceReporting(Protocol):
    """A plugin factory that reports its surface and field lists (``blis surface KIND``).

    ``surface()`` maps each list (``models``, ``attention_backends``, ``fields`` …) to the
    items of that list with their status (``modelled``, ``refused``, ``out_of_scope:…``,
    ``proven_inert``), as generated from the upstream's own registration tables.
    """

    def surface(self) -> Mapping[str, Mapping[str, str]]:
        """List name -> item -> status."""
        ...
