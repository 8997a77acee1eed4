"""Drive SGLang 0.5.23's real ``Scheduler`` and the blis-sglang port side by side.

The real scheduler is built in this process on the CPU as
``docs/upstream/sglang-0.5.23.md`` §8 describes (a config-only Llama model directory,
dummy weights, ``torch_native`` attention, an explicit ``max_total_tokens``), and stepped
with the bodies of its own loops:

* normal (``event_loop_normal``): ``get_next_batch_to_run``, then ``run_batch`` and
  ``process_batch_result``, or ``on_idle``;
* overlap (``event_loop_overlap``): ``get_next_batch_to_run``, ``run_batch`` and the
  result queued, then the previous batch's result processed (or ``on_idle``).

The port takes the resolved values the real scheduler reports (``max_total_num_tokens``,
``max_running_requests``) and is stepped the same way. Output token ids come from the
real model (:attr:`~blis_sglang.scheduler.Scheduler.token_source`), so the radix trees
key on the same tokens. After every iteration the harness compares: the batch (none or
its mode, request ids, prefix and extend lengths), the waiting queue in order, the
running batch, the chunked request, the allocator's free tokens, the tree's evictable
and protected sizes, free request rows, ``new_token_ratio``, every request's output
length and finish state, and the KV events (``BlockStored`` with SGLang's chained page
hashes and token ids, ``BlockRemoved``) the tree recorded since the last iteration. The
first difference raises :class:`Divergence` naming the scenario, the iteration and both
values.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import logging
import os
import shutil
import tempfile
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.engine import BlockRemoved, BlockStored
from blis_core.contracts.request import InferenceRequest, PromptSegment

from blis_sglang.metrics import SglangMetrics
from blis_sglang.req import Req
from blis_sglang.scheduler import Batch, Scheduler

VOCAB = 512
CONTEXT = 4096
DECODE_LOG_INTERVAL = 40  # ServerArgs' default


class Divergence(AssertionError):
    """The port and SGLang decided differently."""


@dataclass(frozen=True)
class OracleRequest:
    """One request: arrives before loop iteration ``arrival_iter``."""

    rid: str
    input_ids: tuple[int, ...]
    max_new_tokens: int
    arrival_iter: int
    ignore_eos: bool = True
    priority: int | None = None
    routing_key: str | None = None


@dataclass(frozen=True)
class Scenario:
    """Server arguments and requests of one oracle run."""

    family: str
    seed: int
    max_total_tokens: int
    max_running_requests: int
    chunked_prefill_size: int
    page_size: int
    schedule_policy: str
    overlap: bool
    mixed_chunk: bool
    conservativeness: float
    max_prefill_tokens: int
    requests: tuple[OracleRequest, ...]
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    priority_scheduling_preemption_threshold: int = 10
    disable_priority_preemption: bool = False
    abort_on_priority_when_disabled: bool = False
    retraction_policy: str = "length"
    max_queued_requests: int | None = None
    disable_radix_cache: bool = False

    def describe(self) -> str:
        """Every parameter, for a failure message."""
        head = {k: v for k, v in self.__dict__.items() if k != "requests"}
        reqs = [
            (
                r.rid,
                len(r.input_ids),
                r.max_new_tokens,
                r.arrival_iter,
                r.ignore_eos,
                r.priority,
                r.routing_key,
            )
            for r in self.requests
        ]
        return (
            f"{head}\nrequests (rid, input, max_new, arrival, ignore_eos, priority, "
            f"routing_key): {reqs}"
        )


@dataclass
class RunStats:
    """What one scenario exercised."""

    iterations: int = 0
    batches: Counter[str] = field(default_factory=Counter)
    retractions: int = 0
    preemptions: int = 0
    queue_aborts: int = 0
    kv_events: int = 0
    chunked: int = 0
    prefix_hit_tokens: int = 0
    evicted_tokens: int = 0
    finished: int = 0
    comparisons: int = 0


_MODEL_DIR: str | None = None
_BUILT = False


def _model_dir() -> str:
    global _MODEL_DIR
    if _MODEL_DIR is None:
        d = tempfile.mkdtemp(prefix="blis-sglang-oracle-model-")
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(
                {
                    "architectures": ["LlamaForCausalLM"],
                    "model_type": "llama",
                    "hidden_size": 64,
                    "intermediate_size": 128,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "num_key_value_heads": 4,
                    "vocab_size": VOCAB,
                    "max_position_embeddings": CONTEXT,
                    "torch_dtype": "bfloat16",
                    # no id the model can sample: requests stop by length only
                    "eos_token_id": 100000,
                    "bos_token_id": 1,
                    "rms_norm_eps": 1e-5,
                    "rope_theta": 10000.0,
                    "hidden_act": "silu",
                    "tie_word_embeddings": False,
                },
                f,
            )
        _MODEL_DIR = d
    return _MODEL_DIR


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence SGLang's loggers and prints for the duration."""
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def allow_sglang_import() -> None:
    """Let ``import sglang`` run beside a CPU torch: PyPI's torchvision there lacks the
    two op schemas its meta registrations look up, so they are declared (once) and its
    pure-Python part imports."""
    import torch

    if not torch.version.cuda:
        with contextlib.suppress(RuntimeError):
            lib = torch.library.Library("torchvision", "DEF")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            allow_sglang_import.lib = lib  # type: ignore[attr-defined]


def _import_sglang() -> dict[str, Any]:
    allow_sglang_import()
    import sglang.srt.layers.rotary_embedding.base as rope_base
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.managers.scheduler import Scheduler as RealScheduler
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import PortArgs, ServerArgs

    rope_base._is_cpu = True
    # KV events: the "null" publisher keeps what the reporter publishes, for the harness
    from sglang.srt.disaggregation import kv_events

    class Recorder(kv_events.NullEventPublisher):  # type: ignore[misc]
        def publish(self, events: Any) -> None:
            PUBLISHED.extend(events.events)

    kv_events.EventPublisherFactory._registry["null"] = lambda **kw: Recorder()
    # metrics: the scheduler's collector writes through stand-ins (its own DI hook)
    from sglang.srt.observability.metrics_collector import SchedulerMetricsCollector

    for hook in ("_counter_cls", "_gauge_cls", "_histogram_cls", "_summary_cls"):
        setattr(SchedulerMetricsCollector, hook, _Metric)
    _skip_decoder_layers()
    return {
        "Scheduler": RealScheduler,
        "ServerArgs": ServerArgs,
        "PortArgs": PortArgs,
        "publish": publish,
        "SpawnRanks": SpawnRanks,
        "TokenizedGenerateReqInput": TokenizedGenerateReqInput,
        "SamplingParams": SamplingParams,
    }


_SG: dict[str, Any] = {}

SAMPLES: dict[str, float] = {}
"""What SGLang's scheduler metrics collector exported, by metric name under its own
labels, ``<name>:<priority>`` for a per-priority child; a histogram as its ``_count``."""


class _Metric:
    """A ``prometheus_client`` metric stand-in that writes into :data:`SAMPLES`."""

    def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._name = name
        self._sink: dict[str, float] = SAMPLES

    def labels(self, *args: Any, **labels: str) -> _Metric:
        if labels.get("priority"):
            return _Metric(f"{self._name}:{labels['priority']}")
        return self

    def set(self, value: float) -> None:
        self._sink[self._name] = float(value)

    def inc(self, value: float = 1.0) -> None:
        self._sink[self._name] = self._sink.get(self._name, 0.0) + value

    def dec(self, value: float = 1.0) -> None:
        self.inc(-value)

    def observe(self, value: float) -> None:
        key = self._name + "_count"
        self._sink[key] = self._sink.get(key, 0.0) + 1


#: the collector's samples compared with the port's (``gen_throughput`` and the other
#: time-based ones read wall clocks, which the two sides do not share)
COMPARED_METRICS = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:cache_hit_rate",
    "sglang:new_token_ratio",
    "sglang:num_retracted_reqs",
    "sglang:decode_sum_seq_lens",
    "sglang:token_usage",
    "sglang:full_token_usage",
    "sglang:num_used_tokens",
    "sglang:kv_used_tokens",
    "sglang:kv_available_tokens",
    "sglang:kv_evictable_tokens",
    "sglang:num_retracted_requests_total",
    "sglang:num_retracted_input_tokens_total",
    "sglang:num_retracted_output_tokens_total",
    "sglang:queue_time_seconds_count",
)


_PER_PRIORITY = ("sglang:num_running_reqs:", "sglang:num_queue_reqs:")


def _compared(samples: dict[str, float] | Any) -> dict[str, float]:
    """The compared samples (a metric not written yet reads 0, as a router reads it),
    with every per-priority child."""
    out = {name: samples.get(name, 0.0) for name in COMPARED_METRICS}
    out.update({k: v for k, v in samples.items() if k.startswith(_PER_PRIORITY)})
    return out


def _metrics_real() -> dict[str, float]:
    return _compared(SAMPLES)


def _metrics_port(m: SglangMetrics) -> dict[str, float]:
    return _compared(m.snapshot())


def _skip_decoder_layers() -> None:
    """The model's decoder layers are skipped: hidden states are the token embeddings.

    Scheduling never reads the model's numbers, only the sampled token ids (which key
    the radix tree); the embedding, final logits and the real sampler still run, so
    the ids stay deterministic. This halves an iteration (the layers were 60 % of it).
    """
    from sglang.srt.models import llama

    def forward(  # type: ignore[no-untyped-def]
        self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None
    ):
        return self.embed_tokens(input_ids)

    llama.LlamaModel.forward = forward


_SHARED_ARGS = (
    "enable_priority_scheduling",
    "schedule_low_priority_values_first",
    "priority_scheduling_preemption_threshold",
    "disable_priority_preemption",
    "abort_on_priority_when_disabled",
    "retraction_policy",
    "max_queued_requests",
    "disable_radix_cache",
)


def _shared_args(sc: Scenario) -> dict[str, Any]:
    """The arguments ServerArgs and the port's Scheduler both take by the same name."""
    return {name: getattr(sc, name) for name in _SHARED_ARGS}


def build_real(sc: Scenario) -> Any:
    """SGLang 0.5.23's Scheduler for ``sc`` (one per scenario, in this process)."""
    global _BUILT
    if not _SG:
        _SG.update(_import_sglang())
    if _BUILT:
        import sglang.srt.distributed.bootstrap as bootstrap

        bootstrap.init_parallel_runtime = lambda **kw: None
    sa = _SG["ServerArgs"](
        model_path=_model_dir(),
        device="cpu",
        attention_backend="torch_native",
        load_format="dummy",
        skip_tokenizer_init=True,
        max_total_tokens=sc.max_total_tokens,
        max_running_requests=sc.max_running_requests,
        chunked_prefill_size=sc.chunked_prefill_size,
        max_prefill_tokens=sc.max_prefill_tokens,
        page_size=sc.page_size,
        schedule_policy=sc.schedule_policy,
        schedule_conservativeness=sc.conservativeness,
        enable_mixed_chunk=sc.mixed_chunk,
        mem_fraction_static=0.5,
        random_seed=sc.seed,
        tp_size=1,
        disable_cuda_graph=True,
        disable_overlap_schedule=not sc.overlap,
        enable_metrics=True,
        **_shared_args(sc),
        # KV events recorded by the tree; published by nobody (the harness takes them)
        kv_events_config='{"publisher": "null"}',
    )
    sa.resolve_once()
    # metrics made directly with prometheus_client (GaugeHistogram) register once per
    # process; a new Scheduler registers them again
    from prometheus_client import REGISTRY

    for collector in list(REGISTRY._collector_to_names):
        REGISTRY.unregister(collector)
    _SG["publish"](
        sa, role="scheduler", ranks=_SG["SpawnRanks"](world_rank=0, dp_rank=None, gpu_id=0)
    )
    real = _SG["Scheduler"](sa, _port_args(sa))
    _BUILT = True
    if sc.overlap:
        from collections import deque

        real.enable_skip_finishing_decode = True
        real.result_queue = deque()
    return real


_IPC_SCRATCH: list[tempfile.TemporaryDirectory[str]] = []


def _port_args(sa: Any) -> Any:
    """SGLang's ``PortArgs.init_new(sa)``, its IPC names made inside a folder this
    process removes when it exits: SGLang 0.5.23 names each socket after a temporary file
    it makes and never removes (``server_args.py``, ``NamedTemporaryFile(delete=False)``
    in ``PortArgs.init_new``), six a Scheduler, which filled /tmp over an oracle run."""
    if not _IPC_SCRATCH:
        _IPC_SCRATCH.append(tempfile.TemporaryDirectory(prefix="blis-sglang-oracle-ipc-"))
    before = tempfile.tempdir
    tempfile.tempdir = _IPC_SCRATCH[0].name
    try:
        return _SG["PortArgs"].init_new(sa)
    finally:
        tempfile.tempdir = before


def _real_request(r: OracleRequest) -> Any:
    sp = _SG["SamplingParams"](
        max_new_tokens=r.max_new_tokens, ignore_eos=r.ignore_eos, temperature=0.0
    )
    sp.normalize(None)
    sp.verify(VOCAB)
    return _SG["TokenizedGenerateReqInput"](
        rid=r.rid,
        input_text=None,
        input_ids=array("q", r.input_ids),
        input_embeds=None,
        mm_inputs=None,
        token_type_ids=None,
        sampling_params=sp,
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=False,
        priority=r.priority,
        routing_key=r.routing_key,
    )


def build_port(sc: Scenario, real: Any) -> Scheduler:
    """The port with the values the real scheduler resolved."""
    return Scheduler(
        max_total_num_tokens=real.max_total_num_tokens,
        max_running_requests=real.max_running_requests,
        max_prefill_tokens=real.max_prefill_tokens,
        chunked_prefill_size=real.chunked_prefill_size if real.chunked_prefill_size else None,
        page_size=sc.page_size,
        policy=sc.schedule_policy,
        conservativeness=sc.conservativeness,
        enable_overlap=sc.overlap,
        enable_mixed_chunk=sc.mixed_chunk,
        random_seed=sc.seed,
        **_shared_args(sc),
    )


def _port_request(r: OracleRequest, real: Any) -> Req:
    n = len(r.input_ids)
    max_new = max(0, min(r.max_new_tokens, real.max_req_len - n - 1))
    page = real.page_size
    paged = -(-n // page) * page
    max_new = max(0, min(max_new, real.max_total_num_tokens - paged - page - 1))
    req = InferenceRequest(
        r.rid, 0, (PromptSegment(r.rid, n),), r.max_new_tokens, ignore_eos=r.ignore_eos
    )
    return Req(
        req,
        list(r.input_ids),
        max_new,
        f"out/{r.rid}",
        VOCAB,
        priority=r.priority,
        routing_key=r.routing_key,
    )


def _batch_view_real(b: Any) -> tuple[Any, ...] | None:
    if b is None:
        return None
    mode = b.forward_mode
    name = "mixed" if mode.is_mixed() else "extend" if mode.is_extend() else "decode"
    rids = tuple(r.rid for r in b.reqs)
    if name == "decode":
        return (name, rids)
    return (name, rids, tuple(b.prefix_lens), tuple(b.extend_lens))


def _batch_view_port(b: Batch | None) -> tuple[Any, ...] | None:
    if b is None:
        return None
    rids = tuple(r.rid for r in b.reqs)
    if b.mode == "decode":
        return ("decode", rids)
    prefix = list(b.prefix_lens)
    extend = list(b.extend_lens)
    if b.mode == "mixed":
        # mix_with_running: every decode row is an extend of 1 over its context
        prefix += list(b.decode_contexts)
        extend += [1] * len(b.decode_contexts)
    return (b.mode, rids, tuple(prefix), tuple(extend))


PUBLISHED: list[Any] = []
"""KV events SGLang's reporter published (``publish_kv_events``), oldest first."""


def _real_events(real: Any) -> list[tuple[Any, ...]]:
    """Every KV event recorded since the last call: published, then still queued."""
    events = PUBLISHED + list(real.tree_cache.take_events())
    PUBLISHED.clear()
    return _events_real(events)


def _events_real(events: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        name = type(e).__name__
        if name == "BlockStored":
            out.append(
                (name, tuple(e.block_hashes), e.parent_block_hash, tuple(e.token_ids), e.block_size)
            )
        elif name == "BlockRemoved":
            out.append((name, tuple(e.block_hashes)))
        else:
            out.append((name,))
    return out


def _events_port(events: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, BlockStored):
            out.append(
                ("BlockStored", e.block_hashes, e.parent_block_hash, e.token_ids, e.block_size)
            )
        elif isinstance(e, BlockRemoved):
            out.append(("BlockRemoved", e.block_hashes))
        else:
            out.append((type(e).__name__,))
    return out


def _state_real(s: Any) -> dict[str, Any]:
    return {
        "waiting": [r.rid for r in s.waiting_queue],
        "running": [r.rid for r in s.running_batch.reqs],
        "chunked": s.chunked_req.rid if s.chunked_req is not None else None,
        "available": s.token_to_kv_pool_allocator.available_size(),
        "evictable": s.tree_cache.evictable_size(),
        "protected": _protected(s.tree_cache),
        "free_rows": s.req_to_token_pool.available_size(),
        "ratio": round(s.new_token_ratio_tracker.current, 9),
    }


def _state_port(p: Scheduler) -> dict[str, Any]:
    return {
        "waiting": [r.rid for r in p.waiting_queue],
        "running": [r.rid for r in p.running_batch.reqs],
        "chunked": p.chunked_req.rid if p.chunked_req is not None else None,
        "available": p.pool.available,
        "evictable": p.tree.evictable_size(),
        "protected": p.tree.protected_size(),
        "free_rows": p.free_rows,
        "ratio": round(p.ratio.current, 9),
    }


def _protected(tree: Any) -> int:
    v = tree.protected_size()
    return v[0] if isinstance(v, tuple) else int(v)


def run_scenario(sc: Scenario, max_iters: int = 5000) -> RunStats:
    """Run ``sc`` on both sides; raise :class:`Divergence` at the first difference."""
    PUBLISHED.clear()  # a scenario that diverged leaves its last events behind
    real = build_real(sc)
    SAMPLES.clear()  # the start-up constants are not compared
    port = build_port(sc, real)
    metrics = SglangMetrics(port, context_len=CONTEXT, decode_log_interval=DECODE_LOG_INTERVAL)
    real_reqs: dict[str, Any] = {}
    port_reqs: dict[str, Req] = {}

    def token(req: Req) -> int:
        return int(real_reqs[req.rid].output_ids[len(req.output_ids)])

    port.token_source = token
    # requests the real scheduler aborted outside the output stream (a full queue, a
    # refused priority): SGLang reports them and forgets them, unfinished
    aborted: dict[str, Any] = {}
    real.send_abort_output = lambda abort_req, req: aborted.setdefault(req.rid, req)

    def requeue_order(reqs: list[Req]) -> list[Req]:
        # preempted requests re-enter SGLang's queue in the order of a set (by address)
        order = {r.rid: i for i, r in enumerate(real.waiting_queue)}
        return sorted(reqs, key=lambda r: order.get(r.rid, len(order)))

    port.requeue_order = requeue_order
    stats = RunStats()
    _compare(sc, -1, "kv events", _real_events(real), _events_port(port.tree.take_events()), stats)
    pending = sorted(sc.requests, key=lambda r: r.arrival_iter)
    real_last = None
    for it in range(max_iters):
        while pending and pending[0].arrival_iter <= it:
            r = pending.pop(0)
            real.handle_generate_request(_real_request(r))
            real_reqs[r.rid] = (
                next((q for q in reversed(real.waiting_queue) if q.rid == r.rid), None)
                or aborted[r.rid]
            )
            port_reqs[r.rid] = _port_request(r, real)
            metrics.requests.added(r.rid, 0)
            port.add_request(port_reqs[r.rid])
        # -- the real loop body
        plan = real.get_next_batch_to_run(
            running_batch=real.running_batch, last_batch=real.last_batch
        )
        real.running_batch = plan.running_batch
        batch = plan.batch_to_run
        port_batch = port.schedule_step()
        metrics.scheduled(port_batch, 0)
        port.retracted.clear()
        _compare(sc, it, "batch", _batch_view_real(batch), _batch_view_port(port_batch), stats)
        if sc.overlap:
            if batch is not None:
                result = real.run_batch(batch)
                real.result_queue.append((batch.copy(), result))
            else:
                result = None
            if real.last_batch is not None:
                tmp_batch, tmp_result = real.result_queue.popleft()
                real.process_batch_result(tmp_batch, tmp_result)
                metrics.result_processed(port.process_result()[0], 0)
            elif batch is None:
                real.on_idle()
            real.launch_batch_sample_if_needed(result, batch)
            real.last_batch = batch
        else:
            if batch is not None:
                real.process_batch_result(batch, real.run_batch(batch))
                metrics.result_processed(port.process_result()[0], 0)
            else:
                real.on_idle()
            real.last_batch = batch
        real_last = batch
        stats.iterations += 1
        if batch is not None:
            stats.batches[_batch_view_real(batch)[0]] += 1  # type: ignore[index]
        _compare(sc, it, "state", _state_real(real), _state_port(port), stats)
        _compare(sc, it, "metrics", _metrics_real(), _metrics_port(metrics), stats)
        events = _real_events(real)
        stats.kv_events += len(events)
        _compare(sc, it, "kv events", events, _events_port(port.tree.take_events()), stats)
        for rid, rr in real_reqs.items():
            pr = port_reqs[rid]
            _compare(
                sc,
                it,
                f"request {rid}",
                (len(rr.output_ids), rr.finished() or rid in aborted, rr.prefix_len),
                (len(pr.output_ids), pr.finished(), pr.prefix_len),
                stats,
            )
        stats.retractions = port.num_retracted_total
        stats.preemptions += len(port.preempted)
        port.preempted.clear()
        stats.queue_aborts = len(aborted)
        drained = not sc.overlap or not real.result_queue
        done = all(r.finished() or rid in aborted for rid, r in real_reqs.items())
        if not pending and real_last is None and done and drained:
            break
    else:
        raise Divergence(f"{sc.family}-{sc.seed}: did not finish in {max_iters} iterations")
    stats.finished = sum(1 for r in port_reqs.values() if r.finished())
    return stats


def _compare(sc: Scenario, it: int, what: str, real: Any, port: Any, stats: RunStats) -> None:
    stats.comparisons += 1
    if real != port:
        raise Divergence(
            f"{sc.family}-{sc.seed} iteration {it}: {what} differs\n"
            f"  sglang: {real}\n  port:   {port}\n{sc.describe()}"
        )
