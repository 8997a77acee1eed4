"""Which cost methods price a run: selection, refusals, and what the Result records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from tests.runner.test_run import TOY, _scenario

EXTRA = ("blis-extra", "blis.cost_methods", "extra", "extra_kinds")


def _doc(**over: Any) -> dict[str, Any]:
    doc = _scenario(**over)
    doc["frame"] = {"replications": 1}
    return doc


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def test_every_installed_method_prices_by_default_and_is_recorded(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, EXTRA)
    result = run_scenario(parse_scenario(_doc(), "t"), make_host(), data)
    rep = result.replications[0]
    assert set(rep.method_shares) == {"calibrated", "flat", "roofline"}
    assert sum(rep.method_shares.values()) == pytest.approx(1.0)
    stamped = {s.name for s in result.stack.plugins if s.group == "blis.cost_methods"}
    assert stamped == {"calibrated", "flat", "roofline"}
    assert result.data.registry_source == "installed"


def test_a_scenario_selects_the_floor_alone(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, EXTRA)
    result = run_scenario(parse_scenario(_doc(cost_methods=["roofline"]), "t"), make_host(), data)
    rep = result.replications[0]
    assert rep.method_shares == {"roofline": 1.0}
    assert not {"calibrated", "measured"} & set(rep.rank_shares)
    assert {s.name for s in result.stack.plugins if s.group == "blis.cost_methods"} == {"roofline"}
    assert result.data.registry_hash != data.registry.content_hash
    assert any("'calibrated'" in r for r in result.validity.reasons)
    full = run_scenario(parse_scenario(_doc(), "t"), make_host(), data)
    assert full.replications[0].end_time_us != rep.end_time_us  # the selection mattered


def test_a_kernel_method_is_used_only_when_selected(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY, EXTRA)
    doc = _doc(cost_methods=["roofline", "flat"])
    rep = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0]
    assert "measured" in rep.rank_shares and set(rep.method_shares) == {"flat", "roofline"}


def test_an_unknown_method_is_refused_naming_the_installed_ones(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    with pytest.raises(InputRefused) as exc:
        doc = _doc(cost_methods=["roofline", "vidur"])
        run_scenario(parse_scenario(doc, "t"), make_host(), data)
    (err,) = exc.value.errors
    assert err.path == "cost_methods.1" and err.value == "vidur"
    assert "installed: calibrated, roofline" in err.cause


def test_a_blocked_method_is_refused_as_blocked(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY)
    host = make_host(blocked=["calibrated"])
    data = DataSources.load(host=host)
    with pytest.raises(InputRefused) as exc:
        run_scenario(parse_scenario(_doc(cost_methods=["calibrated"]), "t"), host, data)
    assert "is blocked" in exc.value.errors[0].cause


def test_without_the_floor_a_run_is_refused_naming_the_package(
    install_plugins: Callable[..., None], data: DataSources
) -> None:
    install_plugins(TOY)
    with pytest.raises(InputRefused) as exc:
        run_scenario(parse_scenario(_doc(cost_methods=["calibrated"]), "t"), make_host(), data)
    (err,) = exc.value.errors
    assert err.path == "cost_methods"
    assert "install blis-cost-roofline" in err.cause and "on H100-SXM" in err.cause


def test_a_repeated_method_name_is_refused() -> None:
    with pytest.raises(InputRefused):
        parse_scenario(_doc(cost_methods=["roofline", "roofline"]), "t")


def test_an_unselected_scenario_hashes_as_before_the_field_existed() -> None:
    scenario = parse_scenario(_doc(), "t")
    assert "cost_methods" not in scenario.model_dump(mode="json")
    chosen = parse_scenario(_doc(cost_methods=["roofline"]), "t")
    assert chosen.model_dump(mode="json")["cost_methods"] == ["roofline"]


def test_two_sets_claiming_one_key_are_refused_naming_both() -> None:
    from blis_core.cost import load_registry

    class Toy:
        description = "toy"

        def __init__(self, name: str) -> None:
            self.name = name

        def documents(self) -> list[tuple[str, Any]]:
            entry = {"family": "gemm", "hardware": "H100-SXM", "rank": "calibrated",
                     "method": "fitted", "source": "toy"}  # fmt: skip
            return [(f"{self.name}.yaml", {"kind": "coefficients", "entries": [entry]})]

    with pytest.raises(InputRefused) as exc:
        load_registry(None, None, [Toy("a"), Toy("b")])
    assert "two entries for one key (first in a.yaml)" in exc.value.errors[0].cause
