"""Whether a jitllm decode step runs its rows as one joint step or one after another.

A joint step reads every block's weights once for all its rows but pays for ragged
kernels and a wider head; running the sessions one after another pays a full read
each. The server measures instead of assuming (``jointChoice``,
``server/batchchoose.go`` at commit ``4179c1c4``; ``docs/upstream/jitllm.md`` §4):

* row counts share a probe by bucket: 1, 2, then 3-4, 5-8, 9-16, … (``rowBucket``);
* a probe runs the arms in ABBA order (joint, separate, separate, joint) as runs of
  ``RUN`` steps whose first step is not timed, for ``ROUNDS`` quads; a step that comes
  from another bucket is not timed either; each timed step counts as its time per row;
* separate is adopted only when its median is ``MARGIN`` faster than joint's (joint is
  the incumbent, and keeps it when an arm has no timed step);
* a choice stands for ``REPROBE`` steps of its bucket, then is measured again.

Durations are integer nanoseconds, as Go's ``time.Duration``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MARGIN", "REPROBE", "ROUNDS", "RUN", "JointChoice", "row_bucket"]

RUN = 4
ROUNDS = 2
MARGIN = 1.05
REPROBE = 2048
_ABBA = (True, False, False, True)


def row_bucket(n: int) -> int:
    """``rowBucket``: 1 and 2 their own, then each power of two from 4 holds the
    counts above the one before."""
    if n <= 2:
        return n
    b = 4
    while b < n:
        b *= 2
    return b


@dataclass(slots=True)
class _Arm:
    settled: bool = False
    joint: bool = False
    since: int = 0
    turn: int = 0
    step: int = 0
    j: list[int] = field(default_factory=list)
    s: list[int] = field(default_factory=list)
    j_median: int = 0
    s_median: int = 0
    probes: int = 0


def _median(values: list[int]) -> int:
    """The upper median, as ``median`` takes ``v[len(v)/2]`` of the sorted values."""
    if not values:
        return 0
    return sorted(values)[len(values) // 2]


class JointChoice:
    """The measured choice per row bucket; ``mode`` is ``measured`` (the default),
    ``always`` or ``never`` (``-joint-steps``)."""

    __slots__ = ("_arms", "_last", "mode", "probe_steps")

    def __init__(self, mode: str = "measured") -> None:
        if mode not in ("measured", "always", "never"):
            raise ValueError(f"joint steps must be measured, always or never, got {mode!r}")
        self.mode = mode
        self._arms: dict[int, _Arm] = {}
        self._last = 0
        self.probe_steps = 0

    def pick(self, n: int) -> bool:
        """Whether a decode step of ``n`` rows runs joint."""
        if self.mode != "measured":
            return self.mode == "always"
        arm = self._arms.setdefault(row_bucket(n), _Arm())
        if arm.settled:
            return arm.joint
        self.probe_steps += 1
        return _ABBA[arm.turn % len(_ABBA)]

    def observe(self, n: int, joint: bool, duration_ns: int) -> None:
        """A step of ``n`` rows on the arm :meth:`pick` chose took ``duration_ns``."""
        if self.mode != "measured":
            return
        b = row_bucket(n)
        fresh = self._last != b
        self._last = b
        arm = self._arms.get(b)
        if arm is None:
            return
        if arm.settled:
            arm.since += 1
            if arm.since >= REPROBE:
                kept = _Arm(j_median=arm.j_median, s_median=arm.s_median, probes=arm.probes)
                self._arms[b] = kept
            return
        if arm.step > 0 and not fresh:
            per_row = duration_ns // n
            (arm.j if joint else arm.s).append(per_row)
        arm.step += 1
        if arm.step < RUN:
            return
        arm.step = 0
        arm.turn += 1
        if arm.turn < ROUNDS * len(_ABBA):
            return
        arm.j_median, arm.s_median = _median(arm.j), _median(arm.s)
        arm.joint = not arm.j or not arm.s or not arm.s_median * MARGIN < arm.j_median
        arm.settled, arm.since, arm.turn, arm.j, arm.s = True, 0, 0, [], []
        arm.probes += 1

    def settled(self, n: int) -> bool | None:
        """The standing choice for ``n`` rows (``True``: joint), or ``None`` while its
        bucket probes."""
        arm = self._arms.get(row_bucket(n))
        return arm.joint if arm is not None and arm.settled else None
