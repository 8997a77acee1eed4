"""``bench/paired.py``: two commands timed against each other in alternating pairs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "paired.py"


def _paired(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_the_ratio_is_new_over_base_pair_by_pair() -> None:
    sleep = f"{sys.executable} -c 'import time; time.sleep(%s)'"
    done = _paired(
        "-n", "2", "--warmup", "0", "--base", sleep % "0.3", "--",
        sys.executable, "-c", "import time; time.sleep(0.05)",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ratio = next(line for line in done.stdout.splitlines() if line.startswith("new/base"))
    wall = float(ratio.split("wall ")[1].split()[0])
    assert 0.1 < wall < 0.6, ratio  # (0.05 + start-up) / (0.3 + start-up)
    assert "(2 pairs)" in ratio and "pair 2/2 done" in done.stderr


def test_a_failing_run_fails_the_comparison() -> None:
    done = _paired("-n", "1", "--warmup", "0", "--base", "true", "--", "false")
    assert done.returncode == 1 and "runs failed (exit 1)" in done.stderr
