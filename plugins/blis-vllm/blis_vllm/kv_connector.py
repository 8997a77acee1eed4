"""The KV connector interface as the scheduler and the engine see it.

Port of the scheduler-side half of ``KVConnectorBase_V1``
(``vllm/distributed/kv_transfer/kv_connector/v1/base.py``, vLLM 0.33.0) and of the
worker-side calls the model runner makes around every step
(``vllm/v1/worker/kv_connector_model_runner_mixin.py``
``KVConnectorModelRunnerMixin._get_kv_connector_output``), with the output types of
``vllm/v1/outputs.py`` (``KVConnectorOutput``) and ``base.py``
(``KVConnectorTransferResults``).

No connector is modelled yet: ``kv_transfer_config`` stays refused at resolution and
a connector reaches the port only from Python (``Scheduler(..., kv_connector=...)``,
``VllmEngine(..., kv_connector=...)``). The scheduler calls a connector at the same
points and with the same arguments as vLLM 0.33.0's ``v1/core/sched/scheduler.py``:

* ``schedule``: ``get_num_new_matched_tokens(request, block-aligned local hit)`` for
  every waiting request looked up in the prefix cache, ``update_state_after_alloc``
  after its blocks are allocated (an asynchronous load parks the request in
  ``WAITING_FOR_REMOTE_KVS``), ``has_pending_block_frees`` before preempting, and
  ``build_connector_meta(scheduler_output)`` once per step;
* ``update_from_output``: ``update_connector_output`` with the worker's
  ``finished_sending`` / ``finished_recving`` / ``failed_recving`` /
  ``invalid_block_ids``, then ``take_events``;
* ``_free_request``: ``request_finished(request, block_ids)``, whose ``True`` keeps
  the blocks until the request id comes back in ``finished_sending``;
* ``add_request``: ``on_new_request``.

Simulation has no worker process, so one object plays both roles: the engine, in
the model runner's place, binds the step's metadata, asks
``get_transfer_results(finished_req_ids)`` and ``get_block_ids_with_load_errors``
when a step completes, and collects the KV moves the connector started as
:class:`blis_core.contracts.shape.Transfer` objects (``take_transfers``, a simulator
addition) into ``StepOutcome.transfers`` for the simulator to price, and tells it when
the simulator's link reports a move ended (``transfer_done``, also a simulator addition).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from blis_core.contracts.engine import KVEvent
from blis_core.contracts.shape import Transfer

if TYPE_CHECKING:
    from blis_vllm.kv_cache_manager import KVCacheManager
    from blis_vllm.kv_cache_utils import KVCacheBlock
    from blis_vllm.request import Request
    from blis_vllm.scheduler import SchedulerOutput

__all__ = [
    "KVConnector",
    "KVConnectorBase",
    "KVConnectorOutput",
    "KVConnectorTransferResults",
    "KVLoadFailurePolicy",
    "KVRole",
]

KVRole = Literal["kv_producer", "kv_consumer", "kv_both"]
"""``KVTransferConfig.kv_role`` (``vllm/config/kv_transfer.py``)."""

KVLoadFailurePolicy = Literal["recompute", "fail"]
"""``KVTransferConfig.kv_load_failure_policy``; upstream's default is ``"fail"``."""


@dataclass(slots=True)
class KVConnectorTransferResults:
    """``KVConnectorTransferResults`` (``base.py``): one worker snapshot of completions.

    A failed receive also appears in ``finished_recving`` so the scheduler releases
    the request from ``WAITING_FOR_REMOTE_KVS``.
    """

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)


@dataclass(slots=True)
class KVConnectorOutput:
    """``KVConnectorOutput`` (``vllm/v1/outputs.py``), the fields the scheduler reads."""

    finished_sending: set[str] | None = None
    finished_recving: set[str] | None = None
    invalid_block_ids: set[int] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)

    def is_empty(self) -> bool:
        """Upstream ``is_empty`` (stats, events and worker metadata are not modelled)."""
        return not (
            self.finished_sending
            or self.finished_recving
            or self.invalid_block_ids
            or self.failed_recving
        )


class KVConnector(Protocol):
    """What the port calls on a KV connector (scheduler side plus the worker snapshot).

    Method names, arguments and return values follow ``KVConnectorBase_V1`` of vLLM
    0.33.0; ``blocks`` are the port's :class:`KVCacheBlock` list for the single KV
    cache group (upstream's ``KVCacheBlocks``), ``block_ids`` their ids. The
    ``kv_role`` and ``kv_load_failure_policy`` properties stand for the
    ``KVTransferConfig`` fields the scheduler reads.
    """

    @property
    def kv_role(self) -> KVRole:
        """``kv_transfer_config.kv_role``."""
        ...

    @property
    def kv_load_failure_policy(self) -> KVLoadFailurePolicy:
        """``kv_transfer_config.kv_load_failure_policy``."""
        ...

    @property
    def requires_kv_delivery(self) -> bool:
        """Whether a preempted request's pending hand-off must be recomputed."""
        ...

    # -- scheduler side ------------------------------------------------------------------

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        """Bind the scheduler's cache manager after construction."""
        ...

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens loadable beyond ``num_computed_tokens`` (``None``: ask again later)
        and whether they load asynchronously (between steps)."""
        ...

    def update_state_after_alloc(
        self, request: Request, blocks: list[KVCacheBlock], num_external_tokens: int
    ) -> None:
        """Blocks were allocated for ``request``; load ``num_external_tokens`` if > 0."""
        ...

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> object:
        """This step's metadata for the worker side; resets the per-step state."""
        ...

    def on_new_request(self, request: Request) -> None:
        """A request was added to the scheduler."""
        ...

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """The worker side's output of one step."""
        ...

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Called once when ``request`` finishes, before its blocks are freed; ``True``
        keeps them until the id is reported in ``finished_sending``."""
        ...

    def take_events(self) -> Iterable[KVEvent]:
        """KV cache events since the last call."""
        ...

    def has_pending_block_frees(self) -> bool:
        """Whether pending transfers will free blocks (the scheduler then waits
        instead of preempting)."""
        ...

    def has_pending_push_work(self) -> bool:
        """Whether push-mode work must keep the engine stepping."""
        ...

    # -- worker side (the engine plays the model runner) ---------------------------------

    def bind_connector_metadata(self, connector_metadata: object) -> None:
        """Bind the metadata of the step being executed."""
        ...

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Sends, receives and failed receives completed as of this step."""
        ...

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Block ids whose load failed."""
        ...

    def clear_connector_metadata(self) -> None:
        """Unbind the step's metadata."""
        ...

    # -- simulator -----------------------------------------------------------------------

    def take_transfers(self) -> Sequence[Transfer]:
        """KV moves started since the last call, for ``StepOutcome.transfers``."""
        ...

    def transfer_done(self, transfer: Transfer) -> None:
        """A move this instance reads or serves has ended (the simulator's link says)."""
        ...


class KVConnectorBase:
    """Defaults of ``KVConnectorBase_V1`` for the optional methods.

    Subclasses implement ``get_num_new_matched_tokens``, ``update_state_after_alloc``
    and ``build_connector_meta`` (abstract upstream) and whatever else they need.
    ``requires_kv_delivery`` defaults to the producer role, as upstream.
    """

    def __init__(
        self, kv_role: KVRole = "kv_both", kv_load_failure_policy: KVLoadFailurePolicy = "fail"
    ) -> None:
        self._kv_role: KVRole = kv_role
        self._kv_load_failure_policy: KVLoadFailurePolicy = kv_load_failure_policy
        self._kv_cache_manager: KVCacheManager | None = None
        self._connector_metadata: object | None = None

    @property
    def kv_role(self) -> KVRole:
        """``kv_transfer_config.kv_role``."""
        return self._kv_role

    @property
    def kv_load_failure_policy(self) -> KVLoadFailurePolicy:
        """``kv_transfer_config.kv_load_failure_policy``."""
        return self._kv_load_failure_policy

    @property
    def requires_kv_delivery(self) -> bool:
        """Upstream default: ``kv_transfer_config.is_kv_producer``."""
        return self._kv_role in ("kv_producer", "kv_both")

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        """Keep the scheduler's cache manager."""
        self._kv_cache_manager = kv_cache_manager

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Abstract upstream."""
        raise NotImplementedError

    def update_state_after_alloc(
        self, request: Request, blocks: list[KVCacheBlock], num_external_tokens: int
    ) -> None:
        """Abstract upstream."""
        raise NotImplementedError

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> object:
        """Abstract upstream."""
        raise NotImplementedError

    def on_new_request(self, request: Request) -> None:
        """No-op."""

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """No-op."""

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Free the blocks now, no transfer parameters."""
        return False, None

    def take_events(self) -> Iterable[KVEvent]:
        """No events."""
        return ()

    def has_pending_block_frees(self) -> bool:
        """No pending frees."""
        return False

    def has_pending_push_work(self) -> bool:
        """No push work."""
        return False

    def bind_connector_metadata(self, connector_metadata: object) -> None:
        """Keep the step's metadata."""
        self._connector_metadata = connector_metadata

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Nothing completed."""
        return KVConnectorTransferResults()

    def get_block_ids_with_load_errors(self) -> set[int]:
        """No load errors."""
        return set()

    def clear_connector_metadata(self) -> None:
        """Drop the step's metadata."""
        self._connector_metadata = None

    def take_transfers(self) -> Sequence[Transfer]:
        """No transfers."""
        return ()

    def transfer_done(self, transfer: Transfer) -> None:
        """No transfers to hear of."""
