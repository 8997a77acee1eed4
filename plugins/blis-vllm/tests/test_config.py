from __future__ import annotations

from typing import Any

import pytest
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from vllm_fakes import H100, LLAMA2_7B, TINY

from blis_vllm.config import VllmSettings, default_capture_sizes, resolve_settings


def _resolve(tp: int = 1, pp: int = 1, **args: Any) -> VllmSettings:
    return resolve_settings(args, LLAMA2_7B, H100, ParallelLayout(tp=tp, pp=pp))


def _causes(exc: pytest.ExceptionInfo[InputRefused]) -> dict[str, str]:
    return {e.path: e.cause for e in exc.value.errors}


def test_defaults_on_h100_openai_server() -> None:
    s = _resolve()
    assert (s.max_num_batched_tokens, s.max_num_seqs) == (8192, 1024)
    assert s.max_model_len == 4096 and s.block_size == 16
    assert s.gpu_memory_utilization == 0.92
    assert s.enable_chunked_prefill and s.enable_prefix_caching and s.async_scheduling
    assert s.scheduling_policy == "fcfs" and s.long_prefill_token_threshold == 0
    assert s.compilation_mode == 3 and s.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert s.cudagraph_capture_sizes[-1] == 512 and s.cudagraph_capture_sizes[:4] == (1, 2, 4, 8)


def test_small_gpu_defaults_and_pp_keeps_async() -> None:
    # vLLM 0.33.0's default V2 model runner runs async scheduling with PP:
    # VllmConfig.max_concurrent_batches is pp + 1 (pp without async scheduling).
    small = H100.model_copy(update={"id": "A100-80GB", "compute_capability": "8.0"})
    s = resolve_settings({}, TINY, small, ParallelLayout(pp=2))
    assert (s.max_num_batched_tokens, s.max_num_seqs) == (2048, 256)
    assert s.async_scheduling and s.max_concurrent_batches == 3
    s = resolve_settings({"async_scheduling": False}, TINY, small, ParallelLayout(pp=4))
    assert not s.async_scheduling and s.max_concurrent_batches == 4
    assert _resolve().max_concurrent_batches == 2
    assert _resolve(async_scheduling=False).max_concurrent_batches == 1


def test_capture_sizes_follow_max_num_seqs() -> None:
    s = _resolve(max_num_seqs=128, max_num_batched_tokens=2048)
    assert s.cudagraph_capture_sizes == (1, 2, 4, *range(8, 256, 8), 256)
    assert default_capture_sizes(128, 2048, 4, "9.0")[-1] == 1024 // 2  # spec: 2*128*4 > 512
    assert 128 * 4 in default_capture_sizes(128, 2048, 4, "9.0")


def test_without_chunked_prefill_default_budget_covers_max_model_len() -> None:
    s = _resolve(enable_chunked_prefill=False, max_model_len=4096)
    assert s.max_num_batched_tokens == 8192


def test_unknown_removed_and_unmodelled_args_are_refused_by_name() -> None:
    with pytest.raises(InputRefused) as exc:
        _resolve(max_num_batched_tokenz=1, max_num_partial_prefills=2, kv_events_config={})
    causes = _causes(exc)
    assert "unknown" in causes["engine.args.max_num_batched_tokenz"]
    assert "no such engine argument" in causes["engine.args.max_num_partial_prefills"]
    assert "not modelled" in causes["engine.args.kv_events_config"]


def test_upstream_refusals_carry_upstream_messages() -> None:
    with pytest.raises(InputRefused) as exc:
        _resolve(tp=3, max_model_len=8192)
    causes = _causes(exc)
    assert causes["layout.tp"] == (
        "Total number of attention heads (32) must be divisible by tensor parallel size (3)."
    )
    assert causes["engine.args.max_model_len"].startswith(
        "User-specified max_model_len (8192) is greater than the derived max_model_len "
        "(max_position_embeddings=4096"
    )
    with pytest.raises(InputRefused) as exc:
        _resolve(enable_chunked_prefill=False, max_num_batched_tokens=2048)
    assert _causes(exc)["engine.args.max_num_batched_tokens"].startswith(
        "max_num_batched_tokens (2048) is smaller than max_model_len (4096)."
    )
    with pytest.raises(InputRefused) as exc:
        _resolve(max_num_batched_tokens=64, max_num_seqs=128)
    assert "must be greater than or equal to max_num_seqs (128)" in str(exc.value)
    assert _resolve(async_scheduling=True, pp=2).async_scheduling
    with pytest.raises(InputRefused) as exc:
        _resolve(pp=2, speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert "speculative decoding with pipeline parallelism is not modelled" in str(exc.value)
    with pytest.raises(InputRefused) as exc:
        _resolve(scheduling_policy="lifo")
    assert "Unknown scheduling policy: lifo" in str(exc.value)


def test_speculative_config_sets_lookahead() -> None:
    s = _resolve(
        speculative_config={
            "method": "eagle",
            "model": "some/eagle-head",
            "num_speculative_tokens": 3,
        }
    )
    assert s.num_speculative_tokens == 3 and s.num_lookahead_tokens == 3
    assert s.speculative_model == "some/eagle-head"
    n = _resolve(speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert n.num_lookahead_tokens == 0 and n.uniform_decode_query_len == 3
