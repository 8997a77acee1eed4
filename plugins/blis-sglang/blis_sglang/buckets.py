"""SGLang 0.5.23's histogram bucket bounds and the server arguments that change them.

Defaults are ``TokenizerMetricsCollector.__init__`` and ``SchedulerMetricsCollector``'s
``queue_time`` (``observability/metrics_collector.py``); the token-count rules follow
``generate_buckets`` and ``two_sides_exponential_buckets`` (``observability/utils.py``)
and are checked as ``validate_buckets_rule`` (``arg_groups/validation_hook.py:384``)
checks them. A list of latency bounds is given to the Prometheus client as it is, which
refuses one that is not sorted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_E2E_REQUEST_LATENCY",
    "DEFAULT_INTER_TOKEN_LATENCY",
    "DEFAULT_TIME_TO_FIRST_TOKEN",
    "DEFAULT_TOKEN_COUNTS",
    "QUEUE_TIME",
    "MetricBuckets",
    "latency_bounds",
    "token_count_bounds",
]

DEFAULT_TIME_TO_FIRST_TOKEN: tuple[float, ...] = (
    *(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
)
DEFAULT_E2E_REQUEST_LATENCY: tuple[float, ...] = (
    *DEFAULT_TIME_TO_FIRST_TOKEN,
    *(600, 1200, 1800, 2400),
)
DEFAULT_INTER_TOKEN_LATENCY: tuple[float, ...] = (
    *(0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040),
    *(0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
)
#: ``default_bucket_prompt_tokens``: the prompt, uncached prompt and generation
#: token-count histograms all default to it.
DEFAULT_TOKEN_COUNTS: tuple[float, ...] = (
    *(100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000),
    *(10000, 12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000),
    *(60000, 80000, 100000, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000),
)
#: ``sglang:queue_time_seconds`` (fixed upstream).
QUEUE_TIME: tuple[float, ...] = (
    *(0.000, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20),
    *(30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000),
    *(1200, 1400, 1600, 1800, 2000, 2500, 3000),
)


@dataclass(frozen=True, slots=True)
class MetricBuckets:
    """The bucket bounds (``+Inf`` left out) of the histograms a pool exports."""

    time_to_first_token: tuple[float, ...] = DEFAULT_TIME_TO_FIRST_TOKEN
    inter_token_latency: tuple[float, ...] = DEFAULT_INTER_TOKEN_LATENCY
    e2e_request_latency: tuple[float, ...] = DEFAULT_E2E_REQUEST_LATENCY
    prompt_tokens: tuple[float, ...] = DEFAULT_TOKEN_COUNTS
    generation_tokens: tuple[float, ...] = DEFAULT_TOKEN_COUNTS


def latency_bounds(values: object, default: tuple[float, ...]) -> tuple[float, ...]:
    """A ``bucket_*`` argument's bounds: ``None`` keeps the default; a list of numbers
    must be sorted and give at least one finite bound (the Prometheus client's checks).
    A trailing ``inf`` is the client's own ``+Inf`` bucket. Raises :class:`ValueError`
    with the reason."""
    if values is None:
        return default
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, Sequence)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    ):
        raise ValueError("must be a list of floats")
    bounds = [float(v) for v in values]
    if bounds != sorted(bounds):
        raise ValueError("Buckets not in sorted order")
    if bounds and bounds[-1] == math.inf:
        bounds.pop()
    if not bounds:
        raise ValueError("Must have at least two buckets")
    if len(set(bounds)) != len(bounds):
        raise ValueError(
            "not modelled by blis-sglang: a repeated bound would export two buckets with "
            "one le label"
        )
    return tuple(bounds)


def token_count_bounds(rule: object, arg_name: str) -> tuple[float, ...]:
    """``generate_buckets(rule, default_bucket_prompt_tokens)`` after
    ``validate_buckets_rule``; raises :class:`ValueError` with SGLang's message."""
    if rule is None or (isinstance(rule, Sequence) and not isinstance(rule, str) and not rule):
        return DEFAULT_TOKEN_COUNTS
    if isinstance(rule, str) or not isinstance(rule, Sequence):
        raise ValueError("must be a list of strings")
    words = [str(w) for w in rule]
    kind = words[0]
    if kind not in ("tse", "default", "custom"):
        raise ValueError(
            f"Unsupported {arg_name} rule type: '{kind}'. Must be one of: 'tse', 'default', "
            "'custom'"
        )
    if kind == "default":
        if len(words) != 1:
            raise ValueError(
                f"{arg_name} default rule should only have one parameter: ['default'], got "
                f"{len(words)}"
            )
        return DEFAULT_TOKEN_COUNTS
    if kind == "tse":
        return _two_sides_exponential(words, arg_name)
    if len(words) < 2:
        raise ValueError(
            f"{arg_name} custom rule requires at least one bucket value: ['custom', value1, ...]"
        )
    try:
        values = [float(w) for w in words[1:]]
    except ValueError:
        raise ValueError(f"{arg_name} custom rule bucket values must be numeric") from None
    if len(set(values)) != len(values):
        raise ValueError(f"{arg_name} custom rule bucket values should not contain duplicates")
    if any(v < 0 for v in values):
        raise ValueError(f"{arg_name} custom rule bucket values should be non-negative")
    return tuple(sorted(set(values)))


def _two_sides_exponential(words: list[str], arg_name: str) -> tuple[float, ...]:
    if len(words) != 4:
        raise ValueError(
            f"{arg_name} TSE rule requires exactly 4 parameters: ['tse', middle, base, count], "
            f"got {len(words)}"
        )
    try:
        middle, base, count = float(words[1]), float(words[2]), int(words[3])
    except ValueError:
        raise ValueError(
            f"{arg_name} TSE rule parameters must be: ['tse', <float:middle>, <float:base>, "
            "<int:count>]"
        ) from None
    if base <= 1:
        raise ValueError(f"{arg_name} TSE base must be larger than 1, got: {base}")
    if count <= 0:
        raise ValueError(f"{arg_name} TSE count must be positive, got: {count}")
    if middle <= 0:
        raise ValueError(f"{arg_name} TSE middle must be positive, got: {middle}")
    bounds = {middle}
    distance = 1.0
    for _ in range(math.ceil(count / 2)):
        distance *= base
        bounds.add(middle + distance)
        bounds.add(max(0.0, middle - distance))
    return tuple(sorted(bounds))
