"""Resolution of SGLang 0.5.23's server arguments (``blis_sglang.config``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from blis_core.contracts.engine import Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout

from blis_sglang.config import decode_capture_sizes, prefill_capture_sizes, resolve_settings

MIB = 1 << 20
LLAMA = "meta-llama/Llama-2-7b-hf"


@pytest.fixture
def env(blis_environment: Callable[[str], Environment]) -> Environment:
    return blis_environment("config-0")


def _resolve(env: Environment, gpu_mib: int = 81559, tp: int = 1, **args: object):  # type: ignore[no-untyped-def]
    return resolve_settings(
        args, env.model(LLAMA), env.hardware("H100-SXM"), ParallelLayout(tp=tp), gpu_mib * MIB
    )


def test_h100_defaults_follow_the_memory_table_and_the_worked_example(env: Environment) -> None:
    s = _resolve(env)
    assert s.chunked_prefill_size == 8192
    assert s.decode_graph_sizes[-1] == 256
    # Llama-2 models capture prefill graphs up to 4096 tokens only (memory_hook.py:260)
    assert s.prefill_graph_sizes[-1] == 4096 and len(s.prefill_graph_sizes) == 50
    # reserved = 512 + 8192 x 1.5 + 1/8 x 1024 + (256 x 2 + 50 x 8) = 13840 MiB
    assert s.mem_fraction_static == round((81559 - 13840) / 81559, 3) == 0.83
    other = resolve_settings(
        {},
        env.model("meta-llama/Llama-3.1-8B"),
        env.hardware("H100-SXM"),
        ParallelLayout(tp=1),
        81559 * MIB,
    )
    assert other.prefill_graph_sizes[-1] == 8192 and len(other.prefill_graph_sizes) == 58
    assert s.page_size == 1
    assert s.enable_overlap
    assert s.attention_backend == "fa3"
    assert s.max_prefill_tokens == 16384


def test_small_and_large_devices_take_their_rows(env: Environment) -> None:
    small = _resolve(env, gpu_mib=16 * 1024)
    assert (small.chunked_prefill_size, small.decode_graph_sizes[-1]) == (2048, 8)
    large = _resolve(env, gpu_mib=180 * 1024)
    assert (large.chunked_prefill_size, large.decode_graph_sizes[-1]) == (16384, 512)
    tp4 = _resolve(env, gpu_mib=40 * 1024, tp=4)
    assert (tp4.chunked_prefill_size, tp4.decode_graph_sizes[-1]) == (4096, 160)


def test_decode_max_bs_is_capped_by_max_running_requests(env: Environment) -> None:
    s = _resolve(env, max_running_requests=100)
    assert s.decode_graph_sizes[-1] == 100
    assert 96 in s.decode_graph_sizes and 104 not in s.decode_graph_sizes


def test_capture_lists_match_upstream_generators() -> None:
    assert decode_capture_sizes(20) == (1, 2, 4, 8, 12, 16, 20)
    assert decode_capture_sizes(4, no_padding=True) == (1, 2, 3, 4)
    assert prefill_capture_sizes(64) == (4, 8, 12, 16, 20, 24, 28, 32, 48, 64)


def test_common_arguments_name_their_sglang_fields(env: Environment) -> None:
    s = _resolve(env, max_num_seqs=64, max_num_batched_tokens=2048, max_model_len=2048)
    assert (s.max_running_requests, s.chunked_prefill_size, s.context_len) == (64, 2048, 2048)
    with pytest.raises(InputRefused, match="names the same setting as 'chunked_prefill_size'"):
        _resolve(env, max_num_batched_tokens=2048, chunked_prefill_size=4096)


def test_priority_policy_is_refused_with_sglangs_crash(env: Environment) -> None:
    with pytest.raises(InputRefused, match="Unknown schedule_policy: policy='priority'"):
        _resolve(env, schedule_policy="priority")


def test_priority_scheduling_takes_fcfs_or_lof_as_sglang_asserts(env: Environment) -> None:
    with pytest.raises(InputRefused, match=r"schedule_policy must be 'fcfs' or 'lof'\. 'lpm'"):
        _resolve(env, enable_priority_scheduling=True, schedule_policy="lpm")
    with pytest.raises(InputRefused, match="retraction-policy priority requires"):
        _resolve(env, retraction_policy="priority")
    s = _resolve(
        env,
        enable_priority_scheduling=True,
        schedule_policy="lof",
        retraction_policy="priority",
        priority_scheduling_preemption_threshold=0,
        max_queued_requests=8,
    )
    assert (s.enable_priority_scheduling, s.retraction_policy) == (True, "priority")
    assert (s.priority_scheduling_preemption_threshold, s.max_queued_requests) == (0, 8)


def test_every_policy_but_priority_is_modelled(env: Environment) -> None:
    for policy in ("dfs-weight", "hrrn", "shortest-prefill-first", "routing-key"):
        assert _resolve(env, schedule_policy=policy).schedule_policy == policy


def test_unported_values_and_unknown_fields_are_refused_by_name(env: Environment) -> None:
    with pytest.raises(InputRefused) as err:
        _resolve(env, radix_eviction_policy="lfu", not_a_field=1, enable_hierarchical_cache=True)
    text = str(err.value)
    assert "engine.args.radix_eviction_policy: 'lfu': not modelled by blis-sglang" in text
    assert "engine.args.not_a_field: 1: not a ServerArgs field of SGLang 0.5.23" in text
    assert "engine.args.enable_hierarchical_cache: True: not modelled by blis-sglang" in text


def test_an_unported_field_at_its_upstream_default_is_accepted(env: Environment) -> None:
    assert _resolve(env, enable_hierarchical_cache=False).page_size == 1


def test_chunk_must_be_a_page_multiple(env: Environment) -> None:
    with pytest.raises(InputRefused, match="chunked_prefill_size must be divisible by page_size"):
        _resolve(env, page_size=16, chunked_prefill_size=1000)


def test_negative_conservativeness_is_refused(env: Environment) -> None:
    with pytest.raises(InputRefused, match="schedule_conservativeness must be non-negative"):
        _resolve(env, schedule_conservativeness=-1.0)


def test_chunking_off_and_graphs_off(env: Environment) -> None:
    s = _resolve(env, chunked_prefill_size=-1, disable_cuda_graph=True, mem_fraction_static=0.8)
    assert s.chunked_prefill_size is None
    assert s.decode_graph_sizes == () and s.prefill_graph_sizes == ()
    assert s.mem_fraction_static == 0.8


def test_prefill_graphs_off_keeps_the_decode_graphs(env: Environment) -> None:
    """``disable_prefill_cuda_graph`` (exec_.py: the prefill-phase graph off): every
    prefill runs eager, the decode graphs stay."""
    on = _resolve(env)
    off = _resolve(env, disable_prefill_cuda_graph=True)
    assert on.prefill_graph_sizes and off.prefill_graph_sizes == ()
    assert off.decode_graph_sizes == on.decode_graph_sizes != ()


def test_hicache_and_disaggregation_are_refused_with_their_reason(env: Environment) -> None:
    with pytest.raises(InputRefused) as err:
        _resolve(
            env, enable_hierarchical_cache=True, hicache_ratio=4.0, disaggregation_mode="prefill"
        )
    text = str(err.value)
    assert "enable_hierarchical_cache: True: not modelled by blis-sglang: HiCache" in text
    assert "hicache_ratio: 4.0: not modelled by blis-sglang: HiCache" in text
    assert (
        "disaggregation_mode: 'prefill': not modelled by blis-sglang: SGLang's prefill/decode"
        in text
    )


def test_attention_backends_take_upstreams_choices_with_this_ports_status(
    env: Environment,
) -> None:
    assert _resolve(env, attention_backend="triton").attention_backend == "triton"
    with pytest.raises(InputRefused, match="'ascend': not modelled by blis-sglang: out_of_scope"):
        _resolve(env, attention_backend="ascend")
    with pytest.raises(InputRefused, match="'flashmla': not modelled by blis-sglang: refused"):
        _resolve(env, attention_backend="flashmla")
    with pytest.raises(InputRefused, match="'fa9': invalid choice"):
        _resolve(env, attention_backend="fa9")


def test_surface_lists_policies_backends_and_cache_kinds() -> None:
    from blis_sglang import SglangEngineFactory

    surface = SglangEngineFactory().surface()
    assert surface["schedule_policies"]["priority"] == "refused"
    assert surface["schedule_policies"]["hrrn"] == "modelled"
    assert len(surface["attention_backends"]) == 25
    assert surface["attention_backends"]["fa3"] == "modelled"
    assert surface["attention_backends"]["aiter"] == "out_of_scope:hardware"
    assert surface["attention_backends"]["flashmla"] == "refused"
    assert surface["cache_kinds"]["UnifiedRadixCache"] == "modelled"
    assert surface["cache_kinds"]["UnifiedRadixCache+hicache"] == "refused"


def test_shortest_prefill_first_needs_the_tree(env: Environment) -> None:
    assert _resolve(env, disable_radix_cache=True).disable_radix_cache
    with pytest.raises(InputRefused, match="shortest-prefill-first requires prefix caching"):
        _resolve(env, disable_radix_cache=True, schedule_policy="shortest-prefill-first")
