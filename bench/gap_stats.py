"""The ITL figures of a replication: the integer-gap histogram against numpy's float array.

    python bench/gap_stats.py [NUM_REQUESTS] [TOKENS]

Makes ``NUM_REQUESTS`` ledger-like arrays of ``TOKENS`` 4-byte gaps (default 50,000 of
512, 16x50k's size; 2,000 distinct step times) and times, in this process, the summary
``blis_core.metrics.gaps.GapSamples`` gives against the one numpy gives on the float
array of every gap (what the statistics computed before), printing both times, their
ratio and whether the percentiles agree to the bit.
"""

from __future__ import annotations

import argparse
import time
from array import array

import numpy as np

from blis_core.metrics.gaps import GapSamples

PERCENTILES = (50, 90, 99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("num_requests", type=int, nargs="?", default=50_000)
    parser.add_argument("tokens", type=int, nargs="?", default=512)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    steps = rng.integers(6_000, 12_000, 2_000)
    arrays = [array("i", rng.choice(steps, args.tokens).tolist()) for _ in range(args.num_requests)]

    start = time.perf_counter()
    new = GapSamples(lambda: arrays).summary(PERCENTILES)
    new_s = time.perf_counter() - start

    start = time.perf_counter()
    x = np.concatenate([np.frombuffer(a, dtype="i4") for a in arrays], dtype=np.float64)
    x /= 1000.0
    old = {"mean": float(x.mean()), "std": float(x.std())}
    for p in PERCENTILES:
        old[f"p{p:g}"] = float(np.percentile(x, p))
    old_s = time.perf_counter() - start

    same = all(new[f"p{p:g}"] == old[f"p{p:g}"] for p in PERCENTILES)
    print(
        f"{len(x):,} gaps: histogram {new_s:.2f} s, float array {old_s:.2f} s "
        f"({new_s / old_s:.2f} of it); percentiles equal to the bit: {same}"
    )


if __name__ == "__main__":
    main()
