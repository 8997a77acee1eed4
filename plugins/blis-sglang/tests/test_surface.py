"""The field list's statuses are true (``blis surface sglang``)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import pytest
import yaml
from blis_conformance import drive_engine
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment

from blis_sglang import SglangEngineFactory
from blis_sglang.config import field_list

#: a non-default value for every ``proven_inert`` field
_INERT_VALUES = {
    "host": "0.0.0.0",
    "port": 8000,
    "log_level": "debug",
    "log_level_http": "warning",
    "served_model_name": "my-model",
    "trust_remote_code": True,
    "load_format": "dummy",
    "enable_metrics": True,
    "num_continuous_decode_steps": 4,
}


def _trace(env: Environment, args: dict[str, object]) -> list[tuple[object, ...]]:
    spec = EnginePoolSpec(
        pool="p",
        model="meta-llama/Llama-2-7b-hf",
        hardware="H100-SXM",
        layout=ParallelLayout(tp=1),
        args={"max_total_tokens": 3000, **args},
    )
    engine = SglangEngineFactory().build(spec, env, "p-0")
    reqs = [
        InferenceRequest(
            f"r{i}", 0, (PromptSegment("s", 64), PromptSegment(f"q{i}", 200)), 300, ignore_eos=False
        )
        for i in range(12)
    ]
    shapes, outcomes = drive_engine(engine, env, reqs)
    return [(s.mode, s.seqs, s.padded_tokens) for s in shapes] + [
        (o.emitted, o.finished, o.preempted, o.kv_events) for o in outcomes
    ]


def test_every_inert_field_is_listed_and_changes_no_decision(
    blis_environment: Callable[[str], Environment],
) -> None:
    listed = {n for n, e in field_list().items() if e["status"] == "proven_inert"}
    assert listed == set(_INERT_VALUES)
    env = blis_environment("surface-0")
    base = _trace(env, {})
    for name, value in _INERT_VALUES.items():
        assert _trace(blis_environment("surface-0"), {name: value}) == base, name


def test_the_models_own_tokenizer_is_accepted_and_another_refused(
    blis_environment: Callable[[str], Environment],
) -> None:
    """The tokenisation is priced with the catalog model's tokenizer: SGLang's default
    tokenizer_path (the model path) changes nothing; another one, or token-id prompts,
    are refused by name."""
    base = _trace(blis_environment("surface-0"), {})
    own = {"tokenizer_path": "meta-llama/Llama-2-7b-hf"}
    assert _trace(blis_environment("surface-0"), own) == base
    for name, value in (("tokenizer_path", "/models/tok"), ("skip_tokenizer_init", True)):
        with pytest.raises(InputRefused) as exc:
            _trace(blis_environment("surface-0"), {name: value})
        assert any(e.path.endswith(name) and "tokenis" in e.cause for e in exc.value.errors), (
            exc.value.errors
        )


def test_modelled_fields_change_decisions(blis_environment: Callable[[str], Environment]) -> None:
    env = blis_environment("surface-0")
    base = _trace(env, {})
    for name, value in {
        "chunked_prefill_size": 128,
        "page_size": 16,
        "disable_overlap_schedule": True,
        "schedule_conservativeness": 0.3,
    }.items():
        assert _trace(blis_environment("surface-0"), {name: value}) != base, name


@pytest.mark.parametrize("status", ["modelled", "proven_inert", "refused"])
def test_statuses_are_known(status: str) -> None:
    assert any(e["status"] == status for e in field_list().values())


def test_kv_events_are_published_only_with_kv_events_config(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("surface-1")
    plain = _trace(env, {})
    published = _trace(env, {"kv_events_config": '{"publisher": "zmq"}'})
    events = [e for row in published if len(row) == 4 for e in row[3]]
    assert events and not [e for row in plain if len(row) == 4 for e in row[3]]
    # the schedule itself is the same
    assert [r for r in plain if len(r) == 3] == [r for r in published if len(r) == 3]


def test_a_machine_is_refused_by_name(blis_environment: Callable[[str], Environment]) -> None:
    """SGLang's steps run on the accelerators alone: a machine would change nothing."""
    spec = EnginePoolSpec(
        pool="p",
        model="meta-llama/Llama-3.1-8B-Instruct",
        hardware="V100-SXM2-16GB",
        layout=ParallelLayout(tp=1),
        machine="v100-sxm2-8x-e5-2680v4",
    )
    with pytest.raises(InputRefused) as exc:
        SglangEngineFactory().plan(spec, blis_environment("p-0"))
    assert exc.value.errors[0].path == "deployment.pools.p.machine"
    assert "would change nothing" in exc.value.errors[0].cause


def test_the_field_list_reads_as_the_pure_python_loader_reads_it() -> None:
    """``data/fields.yaml`` is parsed by libyaml (``load_packaged_yaml``, a tenth of the
    pure-Python parser's time on every run's planning); it must give the same table."""
    text = resources.files("blis_sglang").joinpath("data/fields.yaml").read_text()
    assert field_list() == yaml.safe_load(text)["fields"]


#: a value other than its upstream default for every ``modelled`` field: each must run
_MODELLED_VALUES: dict[str, object] = {
    "abort_on_priority_when_disabled": True,
    "attention_backend": "triton",
    "bucket_e2e_request_latency": [0.5, 100.0],
    "bucket_inter_token_latency": [0.01, 0.5],
    "bucket_time_to_first_token": [0.1, 1.0],
    "chunked_prefill_size": 1024,
    "context_length": 2048,
    "cuda_graph_bs_decode": [1, 2, 4, 8],
    "cuda_graph_max_bs_decode": 32,
    "decode_log_interval": 20,
    "default_priority_value": 3,
    "disable_cuda_graph": True,
    "disable_cuda_graph_padding": True,
    "disable_overlap_schedule": True,
    "disable_prefill_cuda_graph": True,
    "disable_priority_preemption": True,
    "disable_radix_cache": True,
    "enable_mixed_chunk": True,
    "enable_priority_scheduling": True,
    "generation_tokens_buckets": ["tse", "100", "2", "4"],
    "kv_cache_dtype": "bfloat16",
    "kv_events_config": '{"publisher": "zmq"}',
    "max_prefill_tokens": 8192,
    "max_queued_requests": 100,
    "max_running_requests": 64,
    "max_total_tokens": 100_000,
    "mem_fraction_static": 0.8,
    "model_path": "meta-llama/Llama-2-7b-hf",
    "moe_runner_backend": "triton",
    "page_size": 16,
    "priority_scheduling_preemption_threshold": 5,
    "prompt_tokens_buckets": ["default"],
    "random_seed": 7,
    "retraction_policy": "priority",
    "schedule_conservativeness": 0.5,
    "schedule_low_priority_values_first": True,
    "schedule_policy": "lpm",
    "stream_interval": 4,
    "tp_size": 2,
}
#: what SGLang requires beside some of those values (its own start-up conditions)
_COMPANIONS: dict[str, dict[str, object]] = {
    "retraction_policy": {"enable_priority_scheduling": True},
}


def test_every_modelled_field_runs_off_its_default(
    blis_environment: Callable[[str], Environment],
) -> None:
    """A field listed ``modelled`` runs with a value other than its default (one that
    only its default ever ran is ``refused`` by name, as radix_eviction_policy is)."""
    fields = field_list()
    listed = {n for n, e in fields.items() if e["status"] == "modelled"}
    assert listed == set(_MODELLED_VALUES)
    for name, value in _MODELLED_VALUES.items():
        assert value != fields[name].get("default"), name
        spec = EnginePoolSpec(
            pool="p",
            model="meta-llama/Llama-2-7b-hf",
            hardware="H100-SXM",
            layout=ParallelLayout(tp=2 if name == "tp_size" else 1),
            args={name: value, **_COMPANIONS.get(name, {})},
        )
        env = blis_environment("surface-0")
        SglangEngineFactory().plan(spec, env)
        SglangEngineFactory().build(spec, env, "p-0")
