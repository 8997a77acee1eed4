"""``blis search --report``: the Pareto front of the points and the ranking, drawn."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from blis_conformance.chromium import assert_plots_rendered, rendered_dom

from blis_core.cli import main
from blis_core.search import PointRecord, SearchSpace, rank
from blis_core.search.report import pareto_points, render_search_report
from tests.runner.test_run import TOY
from tests.search.test_search import _space_file


def _space(**constraint: Any) -> SearchSpace:
    return SearchSpace.model_validate(
        {
            "axes": [{"path": "deployment.pools.0.replicas", "values": [1, 2, 3, 4, 5]}],
            "objective": {"metric": "goodput.value", "direction": "max"},
            "constraints": [{"metric": "ttft.p90", **constraint}] if constraint else [],
            "replications": 2,
        }
    )


def _rec(i: int, goodput: float, ttft: float, gpus: int = 1) -> PointRecord:
    reps = [{"goodput": {"value": goodput + d}, "ttft": {"p90": ttft + d}} for d in (-0.1, 0.1)]
    return PointRecord(i, {"deployment.pools.0.replicas": i + 1}, "done", gpus=gpus,
                       replications=reps)  # fmt: skip


RECORDS = [
    _rec(0, 10.0, 100.0),  # front: least TTFT
    _rec(1, 20.0, 200.0),  # front
    _rec(2, 15.0, 250.0),  # dominated by 1 (less goodput, more TTFT)
    _rec(3, 30.0, 400.0),  # front, but breaks ttft.p90 <= 300
    PointRecord(4, {"deployment.pools.0.replicas": 5}, "refused", reason="too big"),
]


def test_the_front_holds_the_points_no_other_beats_on_both_axes() -> None:
    space = _space(max=300.0)
    pts = pareto_points(space, rank(space, RECORDS))
    assert [(p.record.index, p.on_front, p.feasible) for p in pts] == [
        (0, True, True),
        (1, True, True),
        (2, False, True),
        (3, True, False),
    ]
    assert [p.x for p in pts] == pytest.approx([100.0, 200.0, 250.0, 400.0])


def test_without_constraints_the_second_axis_is_the_gpus() -> None:
    space = _space()
    recs = [_rec(0, 10.0, 1.0, gpus=1), _rec(1, 9.0, 1.0, gpus=2), _rec(2, 30.0, 1.0, gpus=4)]
    pts = pareto_points(space, rank(space, recs))
    assert [(p.x, p.on_front) for p in pts] == [(1.0, True), (2.0, False), (4.0, True)]


def test_the_page_ranks_and_explains_every_point(tmp_path: Path) -> None:
    space = _space(max=300.0)
    text = render_search_report(space, rank(space, RECORDS), "search <x>")
    assert re.findall(r'data-plot="([^"]+)"', text) == ["pareto"]
    assert "search &lt;x&gt;" in text and "<x>" not in text
    assert "ttft.p90 400 &gt; 300" in text and "too big" in text
    ranked = re.findall(r"<tr><td class='num'>(\d+)</td><td>([^<]+)</td>", text)
    assert [r[1] for r in ranked] == [
        "deployment.pools.0.replicas=2",
        "deployment.pools.0.replicas=3",
        "deployment.pools.0.replicas=1",
    ]
    page = tmp_path / "search.html"
    page.write_text(text, encoding="utf-8")
    assert assert_plots_rendered(rendered_dom(page, tmp_path)) == ["pareto"]


def test_the_command_writes_the_report(
    install_plugins: Callable[..., None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    path, _ = _space_file(tmp_path)
    page = tmp_path / "s.html"
    assert main(["search", str(path), "--jobs", "1", "--report", str(page)]) == 0
    assert re.findall(r'data-plot="([^"]+)"', page.read_text()) == ["pareto"]
    assert f"report: {page}" in capsys.readouterr().out
    assert main(["search", str(path), "--report", str(tmp_path / "no" / "s.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
