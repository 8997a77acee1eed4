"""How an engine's scrape names its samples, and a histogram that keeps them cumulative.

:meth:`EngineInstance.scrape <blis_core.contracts.engine.EngineInstance.scrape>` returns
Prometheus' text exposition flattened into a mapping: a gauge by its name, a counter as
``<name>_total`` (one distinguishing label value appended as ``:<value>``), a histogram
as one cumulative ``<name>_bucket:<le>`` per bucket, ``<name>_sum`` and ``<name>_count``.
These helpers write those keys as the Prometheus Python client writes the samples, so
every engine and every reader (router, report, scorers) agree on them.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise

__all__ = [
    "Histogram",
    "bucket_key",
    "count_key",
    "counter_key",
    "format_le",
    "sum_key",
]


def format_le(bound: float) -> str:
    """The ``le`` label of a bucket bound as the Prometheus Python client writes it.

    Go's shortest float format: ``+Inf``; Python's ``repr`` of the float (``1.0``,
    ``0.25``), except that from a seven-digit integer part on the value is written with
    an exponent (``1e+06``, ``1.5e+07``).
    """
    if bound == math.inf:
        return "+Inf"
    text = repr(float(bound))
    whole, _, frac = text.partition(".")
    if "e" in text or bound <= 0 or len(whole) <= 6:
        return text
    digits = (whole + frac).rstrip("0")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e+{len(whole) - 1:02d}"


def counter_key(name: str, label: str | None = None) -> str:
    """A counter's sample: ``<name>_total``, or ``<name>_total:<label value>``."""
    return f"{name}_total" if label is None else f"{name}_total:{label}"


def bucket_key(name: str, bound: float) -> str:
    """A histogram's cumulative bucket sample: ``<name>_bucket:<le>``."""
    return f"{name}_bucket:{format_le(bound)}"


def sum_key(name: str) -> str:
    """A histogram's ``<name>_sum`` sample."""
    return f"{name}_sum"


def count_key(name: str) -> str:
    """A histogram's ``<name>_count`` sample."""
    return f"{name}_count"


class Histogram:
    """A Prometheus histogram: per-bucket counts, a sum and a count, updated per observation.

    An observation ``raw`` lands in the first bucket whose bound is ``>= raw / scale``
    (Prometheus' ``le``), or in ``+Inf``. ``scale`` turns integer microseconds into
    seconds; sums stay in raw units until written, so integer observations sum exactly.
    """

    __slots__ = (
        "_bucket_keys",
        "_count_key",
        "_counts",
        "_keys",
        "_raw_sum",
        "_scale",
        "_sum_key",
        "_written",
        "bounds",
    )
    bounds: tuple[float, ...]

    def __init__(self, name: str, bounds: Sequence[float], scale: float = 1.0) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        if any(b >= c for b, c in pairwise(self.bounds)):
            raise ValueError(f"{name}: bucket bounds must increase strictly: {self.bounds}")
        self._counts = [0] * (len(self.bounds) + 1)
        # An int while only integers are observed (as in Python), which a compiled
        # ``float`` attribute would not keep: the written sum's bytes would change.
        self._raw_sum: float | int = 0
        self._scale = scale
        self._bucket_keys = tuple(bucket_key(name, b) for b in (*self.bounds, math.inf))
        self._sum_key = sum_key(name)
        self._count_key = count_key(name)
        # Every sample's key in the order written: the buckets, the sum, the count.
        self._keys = (*self._bucket_keys, self._sum_key, self._count_key)
        # The samples' values as last written (in ``_keys`` order), until the next
        # observation (a scrape rewrites only the histograms that moved).
        self._written: list[float] | None = None

    def observe(self, raw: float) -> None:
        """Add one observation (in raw units)."""
        value = raw / self._scale if self._scale != 1.0 else raw
        self._counts[bisect_left(self.bounds, value)] += 1
        self._raw_sum += raw
        self._written = None

    def observe_many(self, raw: int, times: int) -> None:
        """Add the integer observation ``raw`` ``times`` times (as many ``observe``
        calls: integer sums are exact in any order)."""
        value = raw / self._scale if self._scale != 1.0 else raw
        self._counts[bisect_left(self.bounds, value)] += times
        self._raw_sum += raw * times
        self._written = None

    def observe_spread(self, raw: float, times: int) -> None:
        """Add ``times`` observations of ``raw / times`` whose sum is ``raw`` (the
        Prometheus client's bucket and sum updated directly, as SGLang's
        ``observe_inter_token_latency`` does for several tokens in one output)."""
        value = raw / times / self._scale
        self._counts[bisect_left(self.bounds, value)] += times
        self._raw_sum += raw
        self._written = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys of the samples :meth:`write` sets: the buckets (``+Inf`` last), the
        sum, the count."""
        return self._keys

    @property
    def count(self) -> int:
        """Observations so far."""
        return sum(self._counts)

    @property
    def sum(self) -> float:
        """Sum of the observations in exposed units."""
        return self._raw_sum / self._scale

    @property
    def unwritten(self) -> bool:
        """Whether an observation came after the last :meth:`write` (or none was made):
        a dict holding the samples that write added is then out of date."""
        return self._written is None

    def write(self, out: dict[str, float]) -> None:
        """Add the cumulative ``_bucket`` samples (``+Inf`` last), ``_sum`` and ``_count``."""
        values = self._written
        if values is None:
            values = []
            total = 0
            for n in self._counts:
                total += n
                values.append(float(total))
            values.append(self._raw_sum / self._scale)
            values.append(float(total))
            self._written = values
        # NOTE: the values set key by key into ``out`` (which mostly holds these keys
        # already, a scrape starting from the last one's samples): the same keys in
        # the same order as a dict of them merged in, without building that dict.
        keys = self._keys
        for i in range(len(keys)):
            out[keys[i]] = values[i]
