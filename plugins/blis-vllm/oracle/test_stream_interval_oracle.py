"""``stream_interval``: blis-vllm sends a request's tokens when vLLM 0.33.0's output
processor does.

Runs in tox's ``oracle-vllm`` environment (the real ``vllm==0.33.0``). For random token
counts per step (speculative steps give several), intervals and finishing steps, vLLM's
own ``RequestState.make_request_output`` (``v1/engine/output_processor.py``, ``DELTA``
as the OpenAI server streams, a detokenizer that only counts tokens) says at which steps
a request's output goes out and with how many tokens; blis-vllm's engine must emit the
same chunks (``VllmEngine._streamed_emissions``) step for step.
"""

from __future__ import annotations

import random

import pytest

from blis_vllm.engine import VllmEngine

STEPS = 40


def _upstream(counts: list[int], finish_at: int, interval: int) -> list[int | None]:
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine import FinishReason
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer
    from vllm.v1.engine.logprobs import LogprobsProcessor
    from vllm.v1.engine.output_processor import RequestState

    detok = IncrementalDetokenizer()
    state = RequestState(
        request_id="r",
        external_req_id="r",
        parent_req=None,
        request_index=0,
        lora_request=None,
        output_kind=RequestOutputKind.DELTA,
        prompt=None,
        prompt_token_ids=[1, 2, 3],
        prompt_embeds=None,
        logprobs_processor=LogprobsProcessor(None, None, None, None, None, None),
        detokenizer=detok,
        max_tokens_param=None,
        arrival_time=0.0,
        queue=None,
        log_stats=False,
        stream_interval=interval,
    )
    sent: list[int | None] = []
    for step, n in enumerate(counts[: finish_at + 1]):
        new = [7] * n
        detok.update(new, False)
        finish = FinishReason.LENGTH if step == finish_at else None
        out = state.make_request_output(new, None, finish, None)
        sent.append(None if out is None else len(out.outputs[0].token_ids))
    return sent


def _ours(counts: list[int], finish_at: int, interval: int) -> list[int | None]:
    engine = VllmEngine.__new__(VllmEngine)
    engine._streamed = {}
    engine._settings = type("S", (), {"stream_interval": interval})()  # type: ignore[assignment]
    sent: list[int | None] = []
    for step, n in enumerate(counts[: finish_at + 1]):
        finished = [("r", "length", 0)] if step == finish_at else []
        emitted = engine._streamed_emissions({"r": n}, finished)
        sent.append(emitted[0].num_tokens if emitted else None)
    return sent


@pytest.mark.parametrize("seed", range(25))
def test_the_chunks_are_the_output_processors(seed: int) -> None:
    rng = random.Random(seed)
    interval = rng.choice([1, 2, 3, 5, 10, 20])
    counts = [rng.choice([1, 1, 1, 2, 3, 4]) for _ in range(STEPS)]
    finish_at = rng.randrange(STEPS)
    want = _upstream(counts, finish_at, interval)
    assert _ours(counts, finish_at, interval) == want
    assert want[0] is not None  # the first output goes out at once
