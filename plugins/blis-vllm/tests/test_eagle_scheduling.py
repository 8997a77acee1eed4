"""EAGLE-family scheduling (vLLM 0.33.0): settings, lookahead block hashes, the
trailing prefix-cache block drop, the multi-module MTP prefill lookahead and
re-prefillable tail, and ``skip_drafts``. The oracle's ``eagle`` family proves the
same decisions against upstream step by step; these pin the rules one at a time."""

from __future__ import annotations

from typing import Any

import pytest
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import ParallelLayout
from vllm_fakes import H100, TINY, req

from blis_vllm.config import VllmSettings, resolve_settings
from blis_vllm.request import Request
from blis_vllm.scheduler import ModelRunnerOutput, Scheduler, SchedulerOutput

MTP4 = TINY.model_copy(update={"num_mtp_layers": 4})


def _settings(spec: dict[str, Any] | None, model: Any = TINY, **args: Any) -> VllmSettings:
    args.setdefault("async_scheduling", False)
    args.setdefault("block_size", 16)
    args.setdefault("max_num_seqs", 8)
    if spec is not None:
        args["speculative_config"] = spec
    return resolve_settings(args, model, H100, ParallelLayout())


def _eagle(k: int = 2, **flags: bool) -> dict[str, Any]:
    return {"method": "eagle3", "model": "draft/head", "num_speculative_tokens": k, **flags}


def _lookahead(s: VllmSettings) -> tuple[int, int, int, bool]:
    return (
        s.num_lookahead_tokens,
        s.num_prefill_lookahead_tokens,
        s.num_hash_lookahead_tokens,
        s.use_eagle_block_drop,
    )


def test_lookahead_settings_follow_vllm_config() -> None:
    assert _lookahead(_settings(None)) == (0, 0, 0, False)
    assert _lookahead(_settings({"method": "ngram", "num_speculative_tokens": 3})) == (
        0,
        0,
        0,
        False,
    )
    # EAGLE with prefix caching: lookahead hashes prove the boundary token, no drop.
    assert _lookahead(_settings(_eagle(3))) == (3, 1, 1, False)
    assert _lookahead(_settings(_eagle(3, disable_lookahead_block_hashes=True))) == (3, 1, 0, True)
    assert _lookahead(_settings(_eagle(3, disable_eagle_block_drop=True))) == (3, 1, 0, False)
    assert _lookahead(_settings(_eagle(3), enable_prefix_caching=False)) == (3, 1, 0, True)
    # MTP: one module reads one token ahead; several read k.
    one = _settings({"method": "mtp", "num_speculative_tokens": 1}, MTP4)
    assert _lookahead(one) == (1, 1, 1, False)
    multi = _settings({"method": "mtp", "num_speculative_tokens": 4}, MTP4)
    assert _lookahead(multi) == (4, 4, 4, False)
    with pytest.raises(InputRefused, match="requires scheduler_block_size"):
        _settings({"method": "mtp", "num_speculative_tokens": 4}, MTP4, block_size=2)
    with pytest.raises(InputRefused, match="must be a bool"):
        _settings(_eagle(disable_eagle_block_drop="yes"))  # type: ignore[arg-type]


def _request(rid: str, n: int, lookahead: int, max_tokens: int = 4, key: str = "") -> Request:
    return Request(req(rid, (key or rid, n), max_tokens=max_tokens), 1000, 16, True, lookahead)


def test_lookahead_hashes_wait_for_the_next_token_and_cover_it() -> None:
    plain = _request("a", 32, 0)
    ahead = _request("a", 32, 1)
    assert len(plain.block_hashes or ()) == 2 and len(ahead.block_hashes or ()) == 1
    assert plain.block_hashes and ahead.block_hashes
    assert plain.block_hashes[0] != ahead.block_hashes[0]
    ahead.append_output_token_ids(7)
    assert len(ahead.block_hashes) == 2
    # The same block with the same next token hashes alike; another next token not.
    other = _request("b", 16, 1, key="a")
    other.append_output_token_ids(8)
    twin = _request("c", 16, 1, key="a")
    twin.append_output_token_ids(8)
    third = _request("d", 16, 1, key="a")
    third.append_output_token_ids(9)
    assert other.block_hashes and twin.block_hashes and third.block_hashes
    assert other.block_hashes[0] == twin.block_hashes[0] != third.block_hashes[0]


def _finish(s: Scheduler, rid: str, n: int, lookahead: int, key: str) -> None:
    s.add_request(_request(rid, n, lookahead, max_tokens=1, key=key))
    while rid in s.requests and not s.requests[rid].is_finished():
        out = s.schedule()
        _step(s, out)


def _step(s: Scheduler, out: SchedulerOutput) -> None:
    sampled = {rid: [s.requests[rid].next_output_token_id()] for rid in out.sampling}
    s.update_from_output(out, ModelRunnerOutput(sampled))


@pytest.mark.parametrize(
    ("flags", "expected_hit"),
    [({}, 32), ({"disable_lookahead_block_hashes": True}, 16)],
)
def test_prefix_hit_with_lookahead_hashes_or_the_block_drop(
    flags: dict[str, bool], expected_hit: int
) -> None:
    settings = _settings(_eagle(2, **flags), max_num_batched_tokens=512)
    s = Scheduler(settings, 64)
    look = settings.num_hash_lookahead_tokens
    _finish(s, "first", 40, look, "p")
    s.add_request(_request("second", 40, look, key="p"))
    out = s.schedule()
    assert out.context_tokens["second"] == expected_hit
    assert out.skip_drafts is False


def test_multi_module_mtp_keeps_chunks_out_of_the_prefill_lookahead() -> None:
    settings = _settings(
        {"method": "mtp", "num_speculative_tokens": 4}, MTP4, max_num_batched_tokens=30
    )
    s = Scheduler(settings, 64)
    s.add_request(_request("r", 32, settings.num_hash_lookahead_tokens))
    out = s.schedule()
    # 30 would leave 2 < 4 prompt tokens: the chunk stops 4 short of the end.
    assert out.num_scheduled_tokens == {"r": 28}
    assert out.skip_drafts is True  # a non-final chunk uses no drafts
    _step(s, out)
    out = s.schedule()
    # The final chunk samples the first of 4 output tokens: later steps verify drafts.
    assert out.num_scheduled_tokens == {"r": 4} and out.skip_drafts is False
    # The last k - 1 computed tokens may be re-prefilled: not cached yet.
    assert s.kv_cache_manager.coordinator.get_num_cacheable_tokens(32) == 29


def test_one_token_lookahead_never_shortens_a_chunk() -> None:
    settings = _settings(_eagle(3), max_num_batched_tokens=31)
    s = Scheduler(settings, 64)
    s.add_request(_request("r", 32, settings.num_hash_lookahead_tokens, max_tokens=8))
    out = s.schedule()
    assert out.num_scheduled_tokens == {"r": 31}
    _step(s, out)
    out = s.schedule()
    # The last prompt token: it samples, and later steps verify drafts.
    assert out.num_scheduled_tokens == {"r": 1} and out.skip_drafts is False


def test_ngram_never_skips_drafts() -> None:
    settings = _settings({"method": "ngram", "num_speculative_tokens": 2})
    s = Scheduler(settings, 64)
    s.add_request(_request("r", 40, 0, max_tokens=1))
    assert s.schedule().skip_drafts is False
