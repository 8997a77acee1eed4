"""The fuzz's bounded sample in CI (``integration/fuzz.py --cases 10000`` is the full run):
every generated input ends in a Result or a named refusal, and every run keeps the
invariants."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import fuzz

CASES = int(os.environ.get("BLIS_FUZZ_CASES", "500"))


def test_every_input_gets_a_result_or_a_named_refusal() -> None:
    outcome = fuzz.fuzz(CASES)
    total = sum(outcome.counts[s] for s in fuzz.SURFACES)
    assert total >= CASES - len(fuzz.SURFACES)  # every surface ran its share
    assert outcome.counts["runs"] > 0  # some cases were valid and simulated
    assert outcome.counts["rc=2"] > 0  # and some were refused
    assert outcome.failures == [], "\n".join(outcome.failures)


def test_the_checks_catch_a_broken_invariant_and_an_escaping_exception() -> None:
    outcome = fuzz.Outcome()
    fuzz._judge("argv", ["x"], 3, "blis: internal error: boom", outcome)
    fuzz._judge("argv", ["x"], 2, "Traceback (most recent call last):", outcome)
    assert outcome.counts["failure"] == 2
    outcome = fuzz.Outcome()
    fuzz.run_case("argv", None, outcome)  # None is no argv: the case itself raises
    assert outcome.counts["failure"] == 1 and "exception escaped" in outcome.failures[0]


def test_the_silent_change_check_names_a_substituted_value() -> None:
    given = {"frame": {"warmup_s": 5, "percentiles": [50, 90]}, "workload": {"num_requests": "40"}}
    kept = {
        "frame": {"warmup_s": 5.0, "percentiles": [50.0, 90.0]},
        "workload": {"num_requests": 40},
    }
    assert fuzz.silent_change(given, kept) is None
    kept["frame"]["warmup_s"] = 0.0  # a default put where the user wrote 5
    assert fuzz.silent_change(given, kept) == "frame.warmup_s: given 5, kept 0.0"
    kept["frame"]["warmup_s"], kept["frame"]["percentiles"] = 5.0, [50.0]
    assert fuzz.silent_change(given, kept) == "frame.percentiles: 2 items given, 1 kept"


def test_a_plugin_or_kernel_error_in_a_run_is_a_failure_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import blis_core.runner as runner
    from blis_core.contracts.errors import PluginError

    def broken(*args: object, **kwargs: object) -> None:
        raise PluginError("engine.schedule raised IndexError")

    monkeypatch.setattr(runner, "run_scenario", broken)
    assert fuzz.check_run(fuzz.BASE, tmp_path) == "PluginError: engine.schedule raised IndexError"
