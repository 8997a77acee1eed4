"""``NixlConnector`` (pull mode), the KV connector of llm-d's P/D disaggregation.

Port of the scheduler side of vLLM 0.33.0's
``vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py``
(``NixlPullConnectorScheduler``, which ``NixlConnector`` is) and
``nixl/base_scheduler.py`` (``build_connector_meta``, ``on_new_request``), for models
with one full-attention KV group and no Mamba or MTP lookahead (so
``_prefill_backoff()`` is 0), ``kv_buffer_device`` ``cuda`` (no host buffer) and
``bidirectional_kv_xfer`` off:

* a decode-side request (``do_remote_prefill``) reports ``prompt tokens - local hit``
  tokens to load asynchronously; after allocation the blocks it holds without a hash
  are queued for reading (``_reqs_need_recv``), and the request's parameters are marked
  processed (``do_remote_prefill`` False, ``_remote_blocks_processed`` True);
* a prefill-side request (``do_remote_decode``) that finishes by length or stop keeps
  its blocks (``delay_free_blocks``) until the decode side has read them, and returns
  the parameters the decode side needs (``remote_engine_id`` — the instance name —,
  ``remote_request_id``, ``remote_block_ids``, ``remote_num_tokens`` …); finished any
  other way it is "not processed" and frees at once;
* a decode-side request finished before its load was queued queues an empty read,
  which only tells the prefill side to free.

The worker side (``nixl/pull_worker.py``) is the simulator's: the reads queued in a
step's metadata start when that step starts executing, as :class:`Transfer` objects
(``transfer_id`` is the prefill side's request id, which is how NIXL's notification
names it; ``num_tokens`` counts whole blocks, which is what a block read moves); when
the simulator reports a read ended (``transfer_done``) the decode side reports it in
``finished_recving`` and the prefill side in ``finished_sending`` at their next step.
Leases and heartbeats (``kv_lease_duration``) are not modelled: a prefill side's blocks
stay until they are read or the read is cancelled, which is what heartbeats achieve
while the decode side holds the request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blis_core.contracts.shape import Transfer

from blis_vllm.kv_connector import (
    KVConnectorBase,
    KVConnectorTransferResults,
    KVLoadFailurePolicy,
    KVRole,
)
from blis_vllm.request import RequestStatus

if TYPE_CHECKING:
    from blis_vllm.kv_cache_utils import KVCacheBlock
    from blis_vllm.request import Request
    from blis_vllm.scheduler import SchedulerOutput

__all__ = ["NIXL_SIDE_CHANNEL_PORT", "NixlConnector", "NixlMetadata", "NixlRead"]

NIXL_SIDE_CHANNEL_PORT = 5600
"""``VLLM_NIXL_SIDE_CHANNEL_PORT``'s default (data-parallel index 0)."""

_REMOTE_KEYS = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")


@dataclass(frozen=True, slots=True)
class NixlRead:
    """``ReqMeta`` of one read: the local blocks to fill, the local hit, whether the
    scheduler parked the request for it (``awaiting_kvs``), and the remote request."""

    local_block_ids: tuple[int, ...]
    local_num_computed_blocks: int
    awaiting_kvs: bool
    remote_engine_id: str
    remote_request_id: str


@dataclass(slots=True)
class NixlMetadata:
    """``NixlConnectorMetadata``: the reads to start and the sends to expect."""

    reqs_to_recv: dict[str, NixlRead] = field(default_factory=dict)
    reqs_to_send: set[str] = field(default_factory=set)
    reqs_in_batch: set[str] = field(default_factory=set)
    reqs_not_processed: set[str] = field(default_factory=set)


class NixlConnector(KVConnectorBase):
    """The pull-mode NIXL connector of one engine instance (see module doc)."""

    def __init__(
        self,
        instance: str,
        *,
        block_size: int,
        kv_group: str,
        kv_role: KVRole = "kv_both",
        kv_load_failure_policy: KVLoadFailurePolicy = "fail",
        kv_recompute_threshold: int = 64,
        transfer_tp_size: int = 1,
        pp_size: int = 1,
    ) -> None:
        super().__init__(kv_role, kv_load_failure_policy)
        self.instance = instance
        self.block_size = block_size
        self.kv_group = kv_group
        self.kv_recompute_threshold = kv_recompute_threshold
        self.transfer_tp_size = transfer_tp_size
        self.pp_size = pp_size
        self._reqs_need_recv: dict[str, tuple[Request, list[int], int, bool]] = {}
        self._reqs_need_send: set[str] = set()
        self._reqs_in_batch: set[str] = set()
        self._reqs_not_processed: set[str] = set()
        # Worker side (simulated): reads started, and completions not yet reported.
        self._moves: list[Transfer] = []
        self._reading: dict[str, str] = {}  # transfer id -> local request id
        self._serving: set[str] = set()  # local request ids whose blocks await a read
        self._done_recving: set[str] = set()
        self._done_sending: set[str] = set()

    # -- scheduler side ------------------------------------------------------------------

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Remote prefill: every prompt token not hit locally, loaded asynchronously."""
        params = request.kv_transfer_params
        if params is not None and params.get("do_remote_prefill"):
            count = request.num_prompt_tokens - num_computed_tokens
            if count > 0:
                return count, True
        if (
            params is not None
            and params.get("do_remote_decode")
            and params.get("remote_block_ids")
            and all(k in params for k in _REMOTE_KEYS)
        ):
            remote = int(params.get("remote_num_tokens") or 0)
            count = min(remote, request.num_prompt_tokens) - num_computed_tokens
            if count > 0:
                if self.kv_recompute_threshold > 0 and count < self.kv_recompute_threshold:
                    return 0, False
                return count, True
        return 0, False

    def update_state_after_alloc(
        self, request: Request, blocks: list[KVCacheBlock], num_external_tokens: int
    ) -> None:
        """Queue the read of the blocks allocated for the remote tokens."""
        params = request.kv_transfer_params
        if not params:
            return
        if params.get("do_remote_decode"):
            self._reqs_in_batch.add(request.request_id)
        elif params.get("do_remote_prefill"):
            if params.get("remote_block_ids") and all(k in params for k in _REMOTE_KEYS):
                unhashed = (
                    [b.block_id for b in blocks if b.block_hash is None]
                    if num_external_tokens > 0
                    else []
                )
                cached = sum(1 for b in blocks if b.block_hash is not None and not b.is_null)
                self._reqs_need_recv[request.request_id] = (
                    request,
                    unhashed,
                    cached,
                    num_external_tokens > 0,
                )
            params["do_remote_prefill"] = False
            params["_remote_blocks_processed"] = True

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> NixlMetadata:
        """This step's reads, expected sends and batch sets; the reads start with it."""
        meta = NixlMetadata(
            reqs_to_send=self._reqs_need_send,
            reqs_in_batch=self._reqs_in_batch,
            reqs_not_processed=self._reqs_not_processed,
        )
        for rid, (request, block_ids, cached, awaiting) in self._reqs_need_recv.items():
            params: Mapping[str, Any] = request.kv_transfer_params or {}
            read = NixlRead(
                tuple(block_ids),
                cached,
                awaiting,
                str(params.get("remote_engine_id")),
                str(params.get("remote_request_id")),
            )
            meta.reqs_to_recv[rid] = read
            self._start_read(rid, read)
        self._reqs_need_recv.clear()
        self._reqs_need_send = set()
        self._reqs_in_batch = set()
        self._reqs_not_processed = set()
        return meta

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Hold a prefilled request's blocks for the decode side (module doc)."""
        params = request.kv_transfer_params
        if not params:
            return False, None
        is_p_node = bool(params.get("do_remote_decode"))
        if params.get("do_remote_prefill"):
            self._reqs_need_recv[request.request_id] = (request, [], 0, False)
            params["do_remote_prefill"] = False
            return False, None
        if not is_p_node:
            return False, None
        if request.status not in (
            RequestStatus.FINISHED_LENGTH_CAPPED,
            RequestStatus.FINISHED_STOPPED,
        ):
            self._reqs_not_processed.add(request.request_id)
            return False, None
        delay_free_blocks = len(block_ids) > 0
        remote_num_tokens = 0
        if delay_free_blocks:
            self._reqs_need_send.add(request.request_id)
            self._serving.add(request.request_id)
            remote_num_tokens = request.num_computed_tokens
        return delay_free_blocks, {
            "do_remote_prefill": is_p_node,
            "do_remote_decode": not is_p_node,
            "remote_block_ids": list(block_ids),
            "remote_engine_id": self.instance,
            "remote_request_id": request.request_id,
            "remote_host": self.instance,
            "remote_port": NIXL_SIDE_CHANNEL_PORT,
            "tp_size": self.transfer_tp_size,
            "dcp_size": 1,
            "pp_size": self.pp_size,
            "remote_num_tokens": remote_num_tokens,
            "remote_blocks_expiry_time": None,
            "transfer_mode": "pull",
        }

    # -- worker side (simulated) ---------------------------------------------------------

    def _start_read(self, rid: str, read: NixlRead) -> None:
        """The worker's read. Only a read the scheduler parked the request for
        (``awaiting_kvs``) is reported in ``finished_recving``; the others only notify
        the prefill side."""
        self._reading[read.remote_request_id] = rid if read.awaiting_kvs else ""
        self._moves.append(
            Transfer(
                transfer_id=read.remote_request_id,
                request_id=rid,
                src=read.remote_engine_id,
                dst=self.instance,
                kv_group=self.kv_group,
                num_tokens=len(read.local_block_ids) * self.block_size,
                num_blocks=len(read.local_block_ids),
            )
        )

    def take_transfers(self) -> Sequence[Transfer]:
        """The reads the last metadata started."""
        moves, self._moves = self._moves, []
        return moves

    def transfer_done(self, transfer: Transfer) -> None:
        """A read this instance made, or served, has ended."""
        if transfer.dst == self.instance:
            rid = self._reading.pop(transfer.transfer_id, "")
            if rid:
                self._done_recving.add(rid)
        if transfer.src == self.instance and transfer.transfer_id in self._serving:
            self._serving.discard(transfer.transfer_id)
            self._done_sending.add(transfer.transfer_id)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Reads and sends completed since the last step."""
        results = KVConnectorTransferResults(
            finished_sending=self._done_sending, finished_recving=self._done_recving
        )
        self._done_sending = set()
        self._done_recving = set()
        return results
