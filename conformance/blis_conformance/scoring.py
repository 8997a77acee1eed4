"""Conformance suites for scorers and ground-truth adapters. Subclass, set the attribute.

:class:`ScorerConformance` (set ``scorer``) checks what every
:class:`~blis_core.contracts.scoring.Scorer` must honour: it names itself; it returns
:class:`~blis_core.contracts.scoring.ScoringRecord` s for the point it was given, each
naming the scorer, the point's unit and the Result's hash, with finite figures; a
simulation equal to the measurement scores a zero error on every record; a simulation
uniformly slower scores a positive latency error and never a negative one; the same
input gives the same records; it leaves its input unchanged; and a point it cannot score
(no request completed on one side, an empty window) gives records with ``predicted``
``None`` and a reason, or none at all, never an exception.

The points are synthetic: ``requests`` measured at known times and simulated outcomes
derived from them. The Result handed to the scorer is a shell carrying the scenario and
``content_hash``; a scorer reads the Result's identity from it, and the requests from
the arguments.

:class:`GroundTruthAdapterConformance` (set ``adapter``; implement ``make_sample``,
which writes a small dataset in the adapter's format into a folder) checks that the
adapter detects its own sample, refuses a folder that is not its format, and loads
points whose requests line up with their scenarios.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.scenario import Scenario
from blis_core.contracts.scoring import (
    GroundTruthAdapter,
    MeasuredPoint,
    MeasuredRequest,
    Scorer,
    ScoringRecord,
)

__all__ = [
    "GroundTruthAdapterConformance",
    "ScorerConformance",
    "aggregate_point",
    "sample_point",
    "simulated_like",
]

_HASH = "c" * 64
_DISTANCES = ("wasserstein", "ks")


def _scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "name": "conformance-scoring",
            "deployment": {
                "pools": [
                    {
                        "name": "pool",
                        "engine": {"kind": "toy", "version": "1"},
                        "model": "meta-llama/Llama-2-7b-hf",
                        "hardware": "H100-SXM",
                    }
                ]
            },
            "workload": {
                "arrival": {"process": "poisson", "rate_per_s": 1.0},
                "input_len": {"family": "fixed", "value": 100},
                "output_len": {"family": "fixed", "value": 50},
                "num_requests": 40,
            },
        }
    )


def _us(seconds: float) -> float:
    # Whole microseconds, so a simulation built from the point reproduces it exactly.
    return round(seconds * 1e6) / 1e6


def sample_point(n: int = 40, lead_in: int = 4) -> MeasuredPoint:
    """A point of ``n`` requests (the first ``lead_in`` not compared), all completed.

    Request ``k`` is sent at ``k`` × 0.25 s, has 100 + 7k input and 50 output tokens,
    TTFT 0.05 + 0.01·(k mod 5) s and 20 ms per decode token.
    """
    reqs = tuple(
        MeasuredRequest(
            row=k,
            arrival_s=0.25 * k,
            input_tokens=100 + 7 * k,
            output_tokens=50,
            fate="completed",
            ttft_s=_us(0.05 + 0.01 * (k % 5)),
            e2e_s=_us(0.05 + 0.01 * (k % 5) + 49 * 0.02),
            itl_s=(0.02,) * 49,
        )
        for k in range(n)
    )
    return MeasuredPoint(
        unit="conformance/stage-0",
        adapter="synthetic",
        source="synthetic",
        scenario=_scenario(),
        requests=reqs,
        compared=(lead_in, n),
        engine=None,
        labels={"model": "meta-llama/Llama-2-7b-hf", "workload": "synthetic"},
        slo={"ttft": 10.0},
    )


def simulated_like(point: MeasuredPoint, scale: float = 1.0) -> tuple[RequestOutcome, ...]:
    """Outcomes equal to the point's measurements, every latency times ``scale``."""
    out = []
    for k, r in enumerate(point.requests):
        t0 = round(r.arrival_s * 1e6)
        ttft = round((r.ttft_s or 0.0) * scale * 1e6)
        e2e = round((r.e2e_s or 0.0) * scale * 1e6)
        gaps = tuple(round(g * scale * 1e6) for g in r.itl_s)
        out.append(
            RequestOutcome(
                request_id=f"req-{k}",
                arrival_us=t0,
                input_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
                first_token_us=t0 + ttft,
                last_token_us=t0 + e2e,
                fate="completed",
                reason="length",
                chunk_gaps_us=gaps,
            )
        )
    return tuple(out)


def _result(point: MeasuredPoint) -> Result:
    # A shell: no run took place, so only the identity fields are set.
    shell: Result = Result.model_construct(  # type: ignore[call-arg]
        scenario=point.scenario, content_hash=_HASH
    )
    return shell


class ScorerConformance:
    """Tests every scorer must pass. Set ``scorer``."""

    scorer: ClassVar[Scorer]

    def _score(
        self, point: MeasuredPoint, simulated: Sequence[RequestOutcome]
    ) -> tuple[ScoringRecord, ...]:
        got = self.scorer.score(point, simulated, _result(point))
        assert isinstance(got, tuple), f"score returned {type(got).__name__}, not a tuple"
        for rec in got:
            assert isinstance(rec, ScoringRecord), f"not a ScoringRecord: {rec!r}"
        return got

    @pytest.mark.conformance
    def test_metadata(self) -> None:
        assert isinstance(self.scorer, Scorer)
        assert isinstance(self.scorer.name, str) and self.scorer.name
        assert isinstance(self.scorer.description, str) and self.scorer.description

    @pytest.mark.conformance
    def test_records_name_the_point_the_scorer_and_the_result(self) -> None:
        point = sample_point()
        recs = self._score(point, simulated_like(point, 1.1))
        assert recs, "a point with every request completed on both sides must be scored"
        for rec in recs:
            assert rec.unit == point.unit
            assert rec.scorer == self.scorer.name
            assert rec.result_hash == _HASH
            for value in (rec.predicted, rec.relative_error):
                assert value is None or math.isfinite(value), rec

    @pytest.mark.conformance
    def test_exact_simulation_scores_zero_error(self) -> None:
        point = sample_point()
        for rec in self._score(point, simulated_like(point, 1.0)):
            if rec.relative_error is not None:
                assert abs(rec.relative_error) < 1e-3, rec

    @pytest.mark.conformance
    def test_slower_simulation_scores_positive_latency_error(self) -> None:
        point = sample_point()
        recs = self._score(point, simulated_like(point, 1.2))
        for rec in recs:
            if rec.relative_error is None or rec.statistic in _DISTANCES:
                continue
            if rec.metric in ("ttft", "tpot", "e2e", "itl") and rec.statistic != "req_mae":
                assert rec.relative_error == pytest.approx(0.2, abs=0.02), rec
            if rec.metric.endswith("_per_s"):
                assert rec.relative_error <= 1e-9, f"a slower run cannot serve more: {rec}"

    @pytest.mark.conformance
    def test_deterministic_and_leaves_its_input_unchanged(self) -> None:
        point = sample_point()
        sim = simulated_like(point, 1.3)
        before = (copy.deepcopy(point.requests), sim)
        first = self._score(point, sim)
        assert self._score(point, sim) == first
        assert (point.requests, sim) == before

    @pytest.mark.conformance
    def test_unscorable_points_give_reasons_not_exceptions(self) -> None:
        point = sample_point()
        unfinished = tuple(
            RequestOutcome(o.request_id, o.arrival_us, o.input_tokens, 0, -1, -1,
                           "queued_at_horizon", "")
            for o in simulated_like(point)
        )  # fmt: skip
        for rec in self._score(point, unfinished):
            if rec.metric in ("ttft", "tpot", "e2e"):
                assert rec.predicted is None or rec.statistic == "points", rec
                assert rec.reason or rec.statistic == "points", rec
        empty = dataclasses.replace(point, compared=(len(point.requests), len(point.requests)))
        self._score(empty, simulated_like(point))

    @pytest.mark.conformance
    def test_a_statistics_only_point_is_scored_against_its_statistics(self) -> None:
        point = sample_point()
        summary = aggregate_point(point)
        for rec in self._score(summary, simulated_like(point, 1.0)):
            assert rec.unit == point.unit
            if rec.relative_error is not None:
                assert abs(rec.relative_error) < 1e-3, rec


def aggregate_point(point: MeasuredPoint) -> MeasuredPoint:
    """``point`` as a source with statistics only: its window's means, no rows."""
    window = [r for r in point.window if r.ttft_s is not None and r.e2e_s is not None]
    n = len(window)
    ttft = sum(r.ttft_s or 0.0 for r in window) / n
    e2e = sum(r.e2e_s or 0.0 for r in window) / n
    return dataclasses.replace(
        point,
        requests=(),
        aggregates={
            "ttft.mean": ttft,
            "e2e.mean": e2e,
            "completed.fraction": 1.0,
        },
    )


class GroundTruthAdapterConformance:
    """Tests every ground-truth adapter must pass. Set ``adapter``; implement ``make_sample``."""

    adapter: ClassVar[GroundTruthAdapter]

    def make_sample(self, folder: Path) -> Path:
        """Write a small dataset in the adapter's format under ``folder``; return its path."""
        raise NotImplementedError

    @pytest.mark.conformance
    def test_metadata(self) -> None:
        assert isinstance(self.adapter, GroundTruthAdapter)
        assert isinstance(self.adapter.name, str) and self.adapter.name
        assert isinstance(self.adapter.description, str) and self.adapter.description

    @pytest.mark.conformance
    def test_detects_its_sample_and_not_an_empty_folder(self, tmp_path: Path) -> None:
        (tmp_path / "empty").mkdir()
        assert self.adapter.detect(self.make_sample(tmp_path / "sample"))
        assert not self.adapter.detect(tmp_path / "empty")

    @pytest.mark.conformance
    def test_points_line_up_with_their_scenarios(self, tmp_path: Path) -> None:
        sample = self.make_sample(tmp_path / "sample")
        (tmp_path / "work").mkdir()
        points = self.adapter.load(sample, tmp_path / "work", max_requests=20)
        assert points
        units = [p.unit for p in points]
        assert len(set(units)) == len(units), f"units must be unique: {units}"
        for p in points:
            assert isinstance(p, MeasuredPoint)
            lo, hi = p.compared
            if not p.requests:  # statistics only: the window indexes simulated requests
                assert p.aggregates, f"{p.unit}: neither requests nor statistics"
                assert 0 <= lo <= hi
                continue
            assert 0 <= lo <= hi <= len(p.requests)
            assert hi - lo <= 20
            arrivals = [r.arrival_s for r in p.requests]
            assert arrivals == sorted(arrivals), "requests are in send order"
            for r in p.requests:
                assert r.fate in ("completed", "timed_out", "dropped", "failed", "unmeasured")
                if r.fate == "completed":
                    assert r.ttft_s is not None and r.e2e_s is not None
                    assert 0 <= r.ttft_s <= r.e2e_s
