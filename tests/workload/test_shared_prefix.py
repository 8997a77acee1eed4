"""inference-perf shared_prefix semantics: groups, users, multi-turn context."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from blis_core.contracts.request import InferenceRequest, PromptSegment, output_content_key
from blis_core.contracts.workload import WorkloadSpec
from blis_core.workload import WorkloadSource
from tests.workload.conftest import RngFor, drive

GROUPS, USERS = 3, 4
N = GROUPS * USERS


def _spec(multi_turn: bool, **sp: Any) -> WorkloadSpec:
    shared: dict[str, Any] = {
        "num_unique_system_prompts": GROUPS,
        "num_users_per_system_prompt": USERS,
        "system_prompt_len": 100,
        "question_len": {"family": "uniform", "min": 20, "max": 60},
        "output_len": 30,
        "enable_multi_turn_chat": multi_turn,
    }
    shared.update(sp)
    return WorkloadSpec.model_validate(
        {
            "arrival": {"process": "poisson", "rate_per_s": 50},
            "shared_prefix": shared,
            "num_requests": 5 * N,
        }
    )


def test_users_of_a_group_share_exactly_the_system_prompt(rng_for: RngFor) -> None:
    reqs = list(WorkloadSource(_spec(False), rng_for))
    by_group: dict[str, set[PromptSegment]] = defaultdict(set)
    questions: dict[str, set[str]] = defaultdict(set)
    for r in reqs:
        assert len(r.prompt) == 2
        sys_seg, q_seg = r.prompt
        assert r.prefix_group == sys_seg.content_key and sys_seg.num_tokens == 100
        by_group[sys_seg.content_key].add(sys_seg)
        questions[sys_seg.content_key].add(q_seg.content_key)
        assert 20 <= q_seg.num_tokens <= 60 and r.max_output_tokens == 30
    assert len(by_group) == GROUPS
    assert all(len(segs) == 1 for segs in by_group.values())
    assert all(len(qs) == USERS for qs in questions.values())
    all_questions = [q for qs in questions.values() for q in qs]
    assert len(set(all_questions)) == N


def test_single_turn_prompts_repeat_every_n_requests(rng_for: RngFor) -> None:
    reqs = list(WorkloadSource(_spec(False), rng_for))
    for i in range(len(reqs) - N):
        assert reqs[i].prompt == reqs[i + N].prompt
    assert len({r.prompt for r in reqs[:N]}) == N
    assert all(r.session_id is None for r in reqs)


def test_multi_turn_prompt_contains_previous_answer(rng_for: RngFor) -> None:
    src = WorkloadSource(_spec(True), rng_for)
    # Long service times force later turns to wait for earlier ones.
    sent = drive(src, lambda r: 2_000_000, output_tokens=lambda r: 25)
    by_session: dict[str, list[tuple[InferenceRequest, int, int]]] = defaultdict(list)
    for req, send, done in sent:
        assert isinstance(req, InferenceRequest)
        by_session[req.session_id or ""].append((req, send, done))
    assert len(by_session) == N
    for turns in by_session.values():
        turns.sort(key=lambda t: t[0].turn)
        assert [t[0].turn for t in turns] == list(range(5))
        for (prev, _, prev_done), (cur, cur_send, _) in itertools.pairwise(turns):
            assert cur_send >= prev_done  # one turn at a time
            answer = PromptSegment(output_content_key(prev.request_id), 25)
            assert cur.prompt == (*prev.prompt, answer, prev.prompt[-1])
        first = turns[0][0]
        assert first.prompt[0].content_key == first.prefix_group
        # The question repeats every turn (same slot), the system prompt stays first.
        assert {t[0].prompt[-1] for t in turns} == {first.prompt[-1]}


def test_users_of_a_session_group_share_its_system_prompt(rng_for: RngFor) -> None:
    reqs = list(WorkloadSource(_spec(True, history="none"), rng_for))
    group_of_session = {r.session_id: r.prefix_group for r in reqs}
    assert len(group_of_session) == N
    per_group: dict[str | None, int] = defaultdict(int)
    for g in group_of_session.values():
        per_group[g] += 1
    assert sorted(per_group.values()) == [USERS] * GROUPS


def test_history_none_never_grows(rng_for: RngFor) -> None:
    reqs = list(WorkloadSource(_spec(True, history="none"), rng_for))
    for i in range(len(reqs) - N):
        assert reqs[i].prompt == reqs[i + N].prompt
        assert reqs[i].session_id == reqs[i + N].session_id
        assert reqs[i + N].turn == reqs[i].turn + 1


def test_failed_turn_leaves_context_unchanged(rng_for: RngFor) -> None:
    src = WorkloadSource(_spec(True), rng_for)
    sent = drive(src, lambda r: 1_000, failed=lambda r: True)
    assert all(len(r.prompt) == 2 for r, _, _ in sent)  # type: ignore[attr-defined]


def test_token_inflation_and_empty_system_prompt(rng_for: RngFor) -> None:
    inflated = list(WorkloadSource(_spec(False, token_inflation=1.05, question_len=466), rng_for))
    assert {r.prompt[0].num_tokens for r in inflated} == {105}
    assert {r.prompt[1].num_tokens for r in inflated} == {489}
    bare = list(WorkloadSource(_spec(False, system_prompt_len=0), rng_for))
    assert all(len(r.prompt) == 1 for r in bare)


def test_stage_restarts_the_prompt_index(rng_for: RngFor) -> None:
    spec = WorkloadSpec.model_validate(
        {
            "arrival": {
                "process": "stages",
                "stage_start": "fixed",
                "stages": [{"rate": 1.3, "duration": 10}, {"rate": 2, "duration": 10}],
            },
            "shared_prefix": {
                "num_groups": GROUPS,
                "num_prompts_per_group": USERS,
                "system_prompt_len": 10,
                "question_len": 5,
                "output_len": 5,
            },
        }
    )
    reqs = list(WorkloadSource(spec, rng_for))
    assert len(reqs) == 13 + 20
    assert reqs[13].prompt == reqs[0].prompt  # stage 1, index 0 == stage 0, index 0
    assert reqs[12].prompt == reqs[0].prompt  # index 12 of stage 0 wraps to prompt 0
