"""The calibration grid of ``blis score --cross-validate``: its file, entries and loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import ScoringRecord
from blis_core.scoring import PointScore
from blis_core.scoring.crossval import CandidateGrid, point_loss

GRID = """\
kind: candidate-grid
parameters:
  attn: {values: [0.7, 0.9], prior: 0.6}
  fe: {values: [5000], prior: null}
stages: [[attn], [fe]]
entries:
- {family: attention_decode, impl: '*', hardware: H100-SXM, dtype: bf16,
   params: {memory_efficiency: $attn, overhead_us: 5.0}}
- {family: host_request, impl: 'frontend:x', hardware: H100-SXM, dtype: '*',
   params: {overhead_us: $fe}}
- {family: host_request, impl: 'stream:x', hardware: H100-SXM, dtype: '*',
   params: {overhead_us: 500.0}, when: [fe]}
"""


def _grid(tmp_path: Path, text: str = GRID) -> CandidateGrid:
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return CandidateGrid.load(path)


def test_a_grid_reads_its_parameters_stages_and_template(tmp_path: Path) -> None:
    grid = _grid(tmp_path)
    assert grid.names == ("attn", "fe")
    assert grid.stages == (("attn",), ("fe",))
    assert grid.prior() == (0.6, None) and grid.first() == (0.7, 5000.0)
    kept, out = grid.entries_at((0.9, 5000.0))
    assert [e["params"] for e in kept] == [
        {"memory_efficiency": 0.9, "overhead_us": 5.0},
        {"overhead_us": 5000.0},
        {"overhead_us": 500.0},
    ]
    assert out == [] and all("when" not in e for e in kept)
    # A None parameter leaves out the entries that use it or name it under ``when``.
    kept, out = grid.entries_at((0.7, None))
    assert [e["impl"] for e in kept] == ["*"]
    assert [e["impl"] for e in out] == ["frontend:x", "stream:x"]


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("kind: candidate-grid", "kind: coefficients", "kind"),
        ("[0.7, 0.9]", "[0.7, 0.7]", "parameters.attn.values"),
        ("[0.7, 0.9]", "[0.7, fast]", "parameters.attn.values"),
        ("prior: 0.6", "prior: .nan", "parameters.attn.prior"),
        ("stages: [[attn], [fe]]", "stages: [[attn]]", "stages"),
        ("$fe}", "$fee}", "$fee"),
        ("$attn", "0.8", "attn"),  # a parameter no entry uses could change nothing
    ],
)
def test_a_grid_it_cannot_use_is_refused_naming_the_field(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    assert old in GRID
    with pytest.raises(InputRefused) as err:
        _grid(tmp_path, GRID.replace(old, new))
    assert named in str(err.value)


def _score(errors: dict[str, float | None], status: str = "scored") -> PointScore:
    records = tuple(
        ScoringRecord(
            unit="u", metric=m, statistic="mean", predicted=1.0, observed=1.0,
            relative_error=e, grade="G1", result_hash="h",
        )
        for m, e in errors.items()
    )  # fmt: skip
    return PointScore("u", "G1", (), status, "", records, {}, (), {}, 0.0)


def test_the_loss_is_the_mean_capped_log_ratio_of_the_three_stage_means() -> None:
    loss = point_loss(_score({"ttft": 0.1, "tpot": -0.5, "e2e": 0.0}))
    assert loss == pytest.approx((math.log(1.1) + math.log(2.0)) / 3)
    # Capped at log 3 a figure: an overloaded point counts but cannot dominate.
    assert point_loss(_score({"ttft": 50.0, "tpot": 0.0, "e2e": 0.0})) == pytest.approx(
        math.log(3.0) / 3
    )
    # Missing, impossible or unscored figures count the cap.
    assert point_loss(_score({"ttft": None, "tpot": -1.0})) == pytest.approx(math.log(3.0))
    assert point_loss(_score({"ttft": 0.0, "tpot": 0.0, "e2e": 0.0}, "not scored")) == (
        pytest.approx(math.log(3.0))
    )
