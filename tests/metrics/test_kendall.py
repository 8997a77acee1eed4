"""Kendall's tau-b of our own against SciPy's, and a run that never imports scipy.stats."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from blis_core.metrics.kendall import kendall_tau_b
from tests.runner.test_run import TOY, _scenario


def _samples(rng: np.random.Generator, kind: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    if kind == 0:  # no ties
        return np.sort(rng.random(n)), rng.random(n)
    if kind == 1:  # ties in both
        return (
            np.sort(rng.integers(0, n, n)).astype(float),
            rng.integers(0, 10, n).astype(float),
        )
    if kind == 2:  # nearly ordered, no ties: the exact p-value's c <= 1 branch
        y = np.arange(n, dtype=float)
        i = int(rng.integers(0, n - 1))
        y[i], y[i + 1] = y[i + 1], y[i]
        return np.arange(n, dtype=float), y
    # a backlog against time, as detect_overload asks
    return np.arange(n, dtype=float), np.cumsum(rng.integers(-1, 3, n)).astype(float)


@pytest.mark.parametrize("kind", [0, 1, 2, 3])
def test_tau_is_scipys_and_the_p_value_within_rounding(kind: int) -> None:
    rng = np.random.default_rng(kind)
    for _ in range(150):
        n = int(rng.integers(3, 60)) if rng.random() < 0.5 else int(rng.integers(60, 2000))
        x, y = _samples(rng, kind, n)
        want = stats.kendalltau(x, y)
        tau, p = kendall_tau_b(x, y)
        assert tau == float(want.statistic)
        # The normal tail is math.erfc here, SciPy's own erfc there: ulps apart.
        assert p == pytest.approx(float(want.pvalue), rel=1e-12, abs=0.0)


def test_a_constant_sample_has_no_tau() -> None:
    tau, p = kendall_tau_b(np.arange(30.0), np.full(30, 4.0))
    assert math.isnan(tau) and math.isnan(p)


def test_lengths_must_agree() -> None:
    with pytest.raises(ValueError, match="3 x values but 2 y values"):
        kendall_tau_b([1.0, 2.0, 3.0], [1.0, 2.0])


def test_a_run_imports_no_scipy_stats(install_plugins: Callable[..., None], tmp_path: Path) -> None:
    """scipy.stats costs ~0.3 s of every start: a run (two replications, so the overload
    test and the Student-t interval are both made) must not import it."""
    install_plugins(TOY)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(_scenario()), encoding="utf-8")
    out = tmp_path / "result.json"
    code = (
        "import sys\n"
        "from blis_core.cli import main\n"
        "code = main(['run', sys.argv[1], '--out', sys.argv[2]])\n"
        "print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(scenario), str(out)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["replications"]
    assert done.stdout.strip().splitlines()[-1] == "[]"
