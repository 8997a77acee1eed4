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


def test_the_cache_key_holds_a_fingerprint_of_the_code(tmp_path: Path) -> None:
    """A cached simulation is reused only by the same code: the fingerprint of the
    installed packages' files moves with any change to their code or shipped data."""
    from blis_core.scoring.crossval import code_fingerprint, installed_code_roots

    pkg = tmp_path / "blis_thing"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "data" / "entries.yaml").write_text("a: 1\n")
    (pkg / "notes.txt").write_text("not code\n")
    first = code_fingerprint([pkg])
    assert code_fingerprint([pkg]) == first
    (pkg / "notes.txt").write_text("still not code\n")
    assert code_fingerprint([pkg]) == first
    (pkg / "data" / "entries.yaml").write_text("a: 2\n")
    assert code_fingerprint([pkg]) != first
    second = code_fingerprint([pkg])
    (pkg / "__init__.py").write_text("X = 2\n")
    assert code_fingerprint([pkg]) not in (first, second)
    # blis-core itself is among the roots of the installed distributions
    assert any(root.name == "blis_core" for root in installed_code_roots())
