"""The joint-or-separate probe (``blis_jitllm.joint_choice``, jitllm's ``jointChoice``)."""

from __future__ import annotations

import pytest

from blis_jitllm.joint_choice import REPROBE, ROUNDS, RUN, JointChoice, row_bucket


def test_row_counts_share_a_probe_by_power_of_two_bucket() -> None:
    assert [row_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17)] == [1, 2, 4, 4, 8, 8, 16, 16, 32]


def _probe(c: JointChoice, n: int, joint_ns: int, separate_ns: int) -> list[bool]:
    """Run one bucket's probe to its end; the arms picked, step by step."""
    arms = []
    for _ in range(RUN * 4 * ROUNDS):
        joint = c.pick(n)
        arms.append(joint)
        c.observe(n, joint, joint_ns if joint else separate_ns)
    return arms


def test_the_probe_runs_abba_and_adopts_separate_only_past_the_margin() -> None:
    c = JointChoice()
    arms = _probe(c, 6, joint_ns=6_000, separate_ns=5_000)  # separate 20 % faster
    assert arms[: 4 * RUN] == [True] * RUN + [False] * (2 * RUN) + [True] * RUN
    assert c.settled(6) is False
    assert c.pick(7) is False  # the same bucket (5-8)
    near = JointChoice()
    _probe(near, 6, joint_ns=6_000, separate_ns=5_800)  # 3 % faster: joint stays
    assert near.settled(6) is True
    assert near.probe_steps == RUN * 4 * ROUNDS


def test_a_choice_stands_for_its_reprobe_steps() -> None:
    c = JointChoice()
    _probe(c, 3, joint_ns=9_000, separate_ns=4_000)
    assert c.settled(3) is False
    for _ in range(REPROBE):
        c.observe(3, c.pick(3), 4_000)
    assert c.settled(3) is None  # probing again
    assert c.pick(3) is True


def test_steps_from_another_bucket_are_not_timed() -> None:
    # every step alternates buckets: no step is timed, so joint (the incumbent) stays
    c = JointChoice()
    for _ in range(RUN * 4 * ROUNDS):
        for n, t in ((3, 9_000), (6, 9_000)):
            joint = c.pick(n)
            c.observe(n, joint, t if joint else 1)
    assert c.settled(3) is True and c.settled(6) is True


def test_forced_modes_never_probe() -> None:
    assert JointChoice("always").pick(5) is True
    assert JointChoice("never").pick(5) is False
    with pytest.raises(ValueError, match="measured, always or never"):
        JointChoice("sometimes")
