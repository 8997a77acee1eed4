"""``blis run --report``: a page whose figures agree with the Result, drawn in Chromium."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from blis_conformance.chromium import assert_plots_rendered, rendered_dom

from blis_core.cli import main
from blis_core.contracts.result import RequestOutcome, Result
from blis_core.contracts.timeline import InstanceTimeline, Timeline
from blis_core.io.scenario import parse_scenario
from blis_core.metrics import engine_gauges
from blis_core.run_report import latency_samples, render_run_report
from blis_core.runner import DataSources, make_host, run_scenario
from tests.report.test_timeline import TOY_GAUGES
from tests.runner.test_run import TOY, _scenario

PLOTS = ["latency-cdfs", "throughput", "waiting", "running", "kv-usage", "routing"]


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _recorded(
    data: DataSources, **over: object
) -> tuple[Result, Sequence[RequestOutcome], Timeline]:
    doc = _scenario(**over)
    doc["frame"] = {**doc.get("frame", {}), "replications": 1}
    kept: dict[str, object] = {}
    result = run_scenario(
        parse_scenario(doc, "t"),
        make_host(),
        data,
        on_requests=lambda r, o: kept.__setitem__("requests", tuple(o)),
        on_timeline=lambda r, tl: kept.__setitem__("timeline", tl),
    )
    return result, kept["requests"], kept["timeline"]  # type: ignore[return-value]


def test_the_latency_samples_are_the_population_of_the_estimates(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    result, requests, _ = _recorded(data, frame={"warmup_s": 0.5})
    samples = latency_samples(requests, 500_000)
    for metric in ("ttft", "tpot", "e2e", "itl"):
        got = float(np.mean(samples[metric]))
        assert got == pytest.approx(result.estimates[metric]["mean"].mean, rel=1e-6), metric
    assert len(samples["ttft"]) < result.replications[0].fates.completed  # warm-up left out


def test_the_page_names_every_figure_and_counts_every_request(
    install_plugins: Callable[..., None], data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    monkeypatch.setitem(engine_gauges.ENGINE_GAUGE_NAMES, "toy", TOY_GAUGES)
    result, requests, timeline = _recorded(data)
    text = render_run_report(result, requests, timeline)
    assert re.findall(r'data-plot="([^"]+)"', text) == PLOTS
    assert result.content_hash in text
    assert "Not estimated: the intervals above cover workload randomness only" in text
    assert ("outside the calibrated domain" in text) == (not result.validity.inside_domain)
    shares = dict(re.findall(r"<tr><td>(p-\d)</td><td class='num'>([\d,]+)</td>", text))
    assert sum(int(v) for v in shares.values()) == result.replications[0].fates.arrivals
    assert set(shares) == {"p-0", "p-1"}


def test_an_overloaded_replication_gets_no_latency_curves(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    doc_over = {
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 5000},
            "input_len": {"family": "fixed", "value": 2000},
            "output_len": {"family": "fixed", "value": 200},
            "num_requests": 400,
        }
    }
    result, requests, timeline = _recorded(data, **doc_over)
    assert result.replications[0].overloaded
    text = render_run_report(result, requests, timeline)
    assert "no latency figures" in text
    cdfs = text.split('data-plot="latency-cdfs"')[1].split("blis-plot-1")[0]
    assert '"x":[' not in cdfs.replace(" ", "")  # no trace carries data


def test_every_figure_renders_in_chromium(
    install_plugins: Callable[..., None], data: DataSources, tmp_path: Path
) -> None:
    install_plugins(TOY)
    result, requests, recorded = _recorded(data)
    times = recorded.instances[0].times_us
    n = len(times)
    timeline = Timeline(
        0,
        recorded.sample_gap_us,
        tuple(
            InstanceTimeline(
                instance=f"p-{k}",
                pool="p",
                engine_kind="vllm",
                gauges=("waiting", "running", "kv_usage"),
                times_us=times,
                waiting=tuple(float(t % 3) for t in range(n)),
                running=tuple(float(t % 7) for t in range(n)),
                kv_usage=tuple(t / n for t in range(n)),
            )
            for k in range(2)
        ),
    )
    page = tmp_path / "run.html"
    page.write_text(render_run_report(result, requests, timeline), encoding="utf-8")
    assert assert_plots_rendered(rendered_dom(page, tmp_path)) == PLOTS


def test_the_command_writes_the_report_and_refuses_what_it_cannot_do(
    install_plugins: Callable[..., None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    hide_module: Callable[[str], None],
) -> None:
    import yaml

    install_plugins(TOY)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(_scenario()))
    page = tmp_path / "r.html"
    assert main(["run", str(scenario), "--report", str(page), "--jobs", "2"]) == 0
    text = page.read_text()
    assert re.findall(r'data-plot="([^"]+)"', text) == PLOTS
    assert "report written to" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.html")] == []
    missing = tmp_path / "no" / "r.html"
    assert main(["run", str(scenario), "--report", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    out = tmp_path / "o.json"
    assert main(["run", str(scenario), "--report", str(page), "--out", str(out), "--resume"]) == 2
    assert "not with --resume" in capsys.readouterr().err
    hide_module("plotly")
    assert main(["run", str(scenario), "--report", str(page)]) == 2
    assert "blis-core[report]" in capsys.readouterr().err
