"""Simulated time: integer microseconds and the one rounding rule (design §8.3).

Every conversion from a real-valued duration to simulated time goes through
:func:`seconds_to_us`, so that two code paths can never round the same duration
differently.
"""

from __future__ import annotations

import math

__all__ = ["US_PER_S", "seconds_to_us", "us_to_seconds"]

US_PER_S = 1_000_000


def seconds_to_us(seconds: float) -> int:
    """Round a duration in seconds to whole microseconds, half up.

    The rule is ``floor(seconds * 1e6 + 0.5)``: round half up. Negative and
    non-finite durations are refused with :class:`ValueError`, since no duration
    in a simulation can be either.
    """
    if not math.isfinite(seconds) or seconds < 0.0:
        raise ValueError(f"duration must be finite and >= 0 seconds, got {seconds!r}")
    return math.floor(seconds * US_PER_S + 0.5)


def us_to_seconds(us: int) -> float:
    """Convert microseconds to seconds (exact up to float precision)."""
    return us / US_PER_S
