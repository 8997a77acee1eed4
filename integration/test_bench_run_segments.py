"""``bench/run_segments.py``: a run's wall time per request, segment by segment (here, not
in ``tests/``: the Go-parity scenario runs blis-vllm behind the llm-d router)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "run_segments.py"


def test_every_segment_and_the_share_made_ahead_are_printed() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "1x5k", "--requests", "300", "--every", "100"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    segments = re.findall(
        r"^\s*([\d,]+) to\s+([\d,]+) requests .* us a request$", done.stdout, re.M
    )
    assert len(segments) >= 2, done.stdout
    ends = [int(b.replace(",", "")) for _, b in segments]
    assert ends == sorted(ends) and ends[-1] <= 300
    # each segment starts where the one before ended
    assert [int(a.replace(",", "")) for a, _ in segments[1:]] == ends[:-1]
    events = re.search(
        r"^events ([\d,]+), made ahead .* ([\d,]+) \((\d+\.\d)%\)$", done.stdout, re.M
    )
    assert events is not None, done.stdout
    assert int(events.group(2).replace(",", "")) < int(events.group(1).replace(",", ""))


def test_a_segment_of_no_requests_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "1x5k", "--every", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--every must be at least 1" in done.stderr
