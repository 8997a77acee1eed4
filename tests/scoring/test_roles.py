"""Roles computed from a seed: per group of near-copies, in their shares, published or not."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import ScoreReport, ScoringRecord
from blis_core.scoring import PointScore, print_tables, report_json
from blis_core.scoring.roles import (
    MIN_SECRET_UNITS,
    PUBLISHED_ROLES,
    ROLE_SEED_ENV,
    ROLE_SHARES,
    Role,
    group_of,
    load_seed,
    published_roles,
    read_published,
    role_of,
)


class _Unit:
    """A stand-in for a MeasuredPoint: roles read only its unit and group."""

    def __init__(self, unit: str, near_copies: str = "") -> None:
        self.unit = unit
        self.near_copies = near_copies


def test_roles_are_drawn_in_their_shares_and_depend_on_the_seed() -> None:
    assert sum(ROLE_SHARES.values()) == pytest.approx(1.0)
    groups = [f"g{i}" for i in range(20_000)]
    drawn = Counter(role_of(b"seed-a", g) for g in groups)
    for role, share in ROLE_SHARES.items():
        assert drawn[role] / len(groups) == pytest.approx(share, abs=0.012), role
    again = [role_of(b"seed-a", g) for g in groups[:500]]
    assert again == [role_of(b"seed-a", g) for g in groups[:500]]  # computed, the same
    other = [role_of(b"seed-b", g) for g in groups[:500]]
    assert sum(a != b for a, b in zip(again, other, strict=True)) > 200


def test_near_copies_share_a_role_and_only_published_roles_are_listed() -> None:
    units = [_Unit(f"run{r}/cfg{c}", f"cfg{c}") for r in range(3) for c in range(60)]
    seed = b"s"
    for u in units:
        assert group_of(u) == u.near_copies  # type: ignore[arg-type]
    by_group: dict[str, set[Role]] = {}
    for u in units:
        by_group.setdefault(u.near_copies, set()).add(role_of(seed, group_of(u)))  # type: ignore[arg-type]
    assert all(len(roles) == 1 for roles in by_group.values())
    listed = published_roles(units, seed)  # type: ignore[arg-type]
    assert listed and set(listed.values()) <= {r.value for r in PUBLISHED_ROLES}
    secret = [u.unit for u in units if role_of(seed, u.near_copies) not in PUBLISHED_ROLES]
    assert secret and not set(secret) & set(listed)
    assert group_of(_Unit("alone")) == "alone"  # type: ignore[arg-type]


def test_a_published_list_reads_back_and_refuses_a_secret_role(tmp_path: Path) -> None:
    good = tmp_path / "roles.yaml"
    good.write_text("units:\n  a/1: fit\n  b/2: report\n")
    assert read_published(str(good)) == {"a/1": Role.FIT, "b/2": Role.REPORT}
    bad = tmp_path / "leak.yaml"
    bad.write_text("units:\n  a/1: held\n")
    with pytest.raises(InputRefused, match="a published list holds only"):
        read_published(str(bad))


def test_the_seed_comes_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ROLE_SEED_ENV, raising=False)
    assert load_seed(None) is None
    monkeypatch.setenv(ROLE_SEED_ENV, " env-seed \n")
    assert load_seed(None) == b"env-seed"
    f = tmp_path / "seed"
    f.write_text("file-seed\n")
    assert load_seed(str(f)) == b"file-seed"
    f.write_text("  \n")
    with pytest.raises(InputRefused, match="empty"):
        load_seed(str(f))


def _score(unit: str, err: float, model: str) -> PointScore:
    record = ScoringRecord(
        unit=unit,
        scorer="latency",
        metric="tpot",
        statistic="mean",
        observed=1.0,
        predicted=1.0 + err,
        relative_error=err,
        grade="G4",
        result_hash="h",
    )
    return PointScore(
        unit=unit,
        grade="G4",
        substitutions=(),
        status="scored",
        reason="",
        records=(record,),
        labels={"model": model},
        refusals=(),
        cdfs={},
        wall_s=0.0,
    )


def test_a_secret_role_shows_only_aggregates_of_enough_units() -> None:
    scores = [_score(f"held-unit-{i}", 0.01 * i, "big" if i < 11 else "small") for i in range(12)]
    report = ScoreReport(records=(), points={}, cdfs={}, build="b", data=("d",))
    doc = report_json(report, scores, aggregates_over=MIN_SECRET_UNITS)
    assert set(doc) == {"build", "data", "aggregates"}  # no unit, no record
    assert doc["aggregates"]["all"][0]["points"] == 12
    assert [r["value"] for r in doc["aggregates"]["model"]] == ["big"]  # 11; "small" has 1
    console = Console(record=True, width=200)
    print_tables(scores, console, aggregates_over=MIN_SECRET_UNITS)
    text = console.export_text()
    assert "held-unit" not in text and "big" in text and "small" not in text
    full = report_json(report, scores)
    assert "points" in full
