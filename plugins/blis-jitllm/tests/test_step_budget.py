"""The server's online prompt budget (``blis_jitllm.step_budget``, jitllm's ``stepBudget``)."""

from __future__ import annotations

from blis_jitllm.step_budget import FLOOR, START, StepBudget


def test_the_budget_starts_small_and_doubles_until_it_can_fit_a_line() -> None:
    b = StepBudget(512)
    assert b.tokens() == START
    b.observe(4, START, 10e6)  # one width: no slope yet
    assert b.tokens() == 2 * START
    assert StepBudget(16).tokens() == 16
    b.observe(0, 64, 99e9)  # a prefill-only step teaches nothing
    assert b.tokens() == 2 * START


def test_it_settles_where_a_step_costs_cost_decode_steps() -> None:
    # decode step 10 ms, a prompt token 0.1 ms: cost 4 allows 3 x 10 / 0.1 = 300 tokens
    b = StepBudget(512)
    for _ in range(60):
        p = b.tokens()
        b.observe(8, p, 10e6 + 1e5 * p)
    assert b.fitted
    assert 299 <= b.tokens() <= 300


def test_a_step_the_budget_did_not_limit_only_lowers_it() -> None:
    b = StepBudget(512)
    for _ in range(60):
        p = b.tokens()
        b.observe(8, p, 10e6 + 1e5 * p)
    settled = b.tokens()
    for _ in range(5):  # short prompts on slower steps: the fit says more, ignored
        b.observe(8, 10, 13e6)
    assert b._want()[0] > settled
    assert b.tokens() == settled


def test_dear_prompt_tokens_give_a_small_budget_and_the_floor_keeps_prompts_moving() -> None:
    dear = StepBudget(512)
    for _ in range(40):  # 1 ms a prompt token: 3 x 10 / 1 = 30 tokens
        p = dear.tokens()
        dear.observe(8, p, 10e6 + 1e6 * p)
    assert 29 <= dear.tokens() <= 30
    dearer = StepBudget(512)
    for _ in range(40):  # 100 ms a prompt token: the fit says 0
        p = dearer.tokens()
        dearer.observe(8, p, 10e6 + 1e8 * p)
    assert dearer.tokens() == FLOOR


def test_a_fit_taken_across_a_change_stands_while_steps_keep_within_its_cost() -> None:
    # upstream's rule: settled on 300 tokens at 0.1 ms each, the tokens turn ten times
    # dearer; the refit lands where a step costs four of its (stale) intercepts
    b = StepBudget(512)
    for _ in range(60):
        p = b.tokens()
        b.observe(8, p, 10e6 + 1e5 * p)
    for _ in range(120):
        p = b.tokens()
        b.observe(8, p, 10e6 + 1e6 * p)
    p = b.tokens()
    assert p > 30  # not the 30 a fresh fit gives
    assert 10e6 + 1e6 * p <= 4 * b._icept


def test_a_fixed_budget_ignores_measurements() -> None:
    b = StepBudget(512, fixed=96)
    b.observe(4, 96, 1e9)
    assert b.tokens() == 96
