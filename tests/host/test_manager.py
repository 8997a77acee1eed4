"""The plugin host: discovery, loading, selection, failures, switches."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from blis_core.contracts.errors import PluginError
from blis_core.host.manager import BLOCK_ENV, PluginHost, release_key

TOY = ("blis-toy", "blis.engines", "toy", "toy_engine")


def test_select_loads_exactly_the_named_engine(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY, ("blis-broken", "blis.engines", "broken", "broken_import"))
    host = PluginHost()
    factory = host.select_engine("toy", "2.0")
    assert (factory.kind, factory.upstream_release) == ("toy", "2.0")
    statuses = {r.name: r.status for r in host.discovered("blis.engines")}
    assert statuses["toy"] == "loaded"
    assert statuses["broken"] == "discovered"  # never imported: not named


def test_unmodelled_version_names_newest_release(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY)
    with pytest.raises(PluginError, match=r"toy@9\.9 is not modelled.*newest.*2\.0"):
        PluginHost().select_engine("toy", "9.9")


def test_version_is_required(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY)
    with pytest.raises(PluginError, match=r"needs a version.*1\.0, 2\.0"):
        PluginHost().select_engine("toy", None)


def test_unknown_engine_lists_installed(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY)
    with pytest.raises(PluginError, match=r"'nope' is not installed.*toy"):
        PluginHost().select_engine("nope", "1")


def test_broken_import_reported_by_name_and_cause_rest_keep_working(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(TOY, ("blis-broken", "blis.engines", "broken", "broken_import"))
    host = PluginHost()
    records = {r.name: r for r in host.load_all()}
    assert records["broken"].status == "failed"
    assert "nonexistent_gpu_lib" in records["broken"].error
    assert records["toy"].status == "loaded"
    assert host.select_engine("toy", "1.0").kind == "toy"


def test_raising_hook_is_reported(install_plugins: Callable[..., None]) -> None:
    install_plugins(("blis-raiser", "blis.engines", "raiser", "raises_in_hook"))
    host = PluginHost()
    with pytest.raises(PluginError, match="raiser.*deliberately broken registration"):
        host.load("blis.engines", "raiser")


def test_two_plugins_one_name_is_an_error(install_plugins: Callable[..., None]) -> None:
    install_plugins(
        TOY,
        ("blis-toy-fork", "blis.engines", "toy", "toy_engine"),
        ("blis-extra", "blis.cost_methods", "extra", "extra_kinds"),
    )
    host = PluginHost()  # discovery itself does not fail: the rest keep working
    rec = host.records[("blis.engines", "toy")]
    assert rec.status == "failed" and "blis-toy, blis-toy-fork" in rec.error
    with pytest.raises(PluginError, match="claimed by several distributions.*blis-toy"):
        host.select_engine("toy", "1.0")
    assert host.load("blis.cost_methods", "extra").status == "loaded"


def test_a_duplicate_name_can_be_blocked(install_plugins: Callable[..., None]) -> None:
    install_plugins(TOY, ("blis-toy-fork", "blis.engines", "toy", "toy_engine"))
    host = PluginHost(blocked=["toy"])
    assert host.records[("blis.engines", "toy")].status == "blocked"


def test_a_misspelled_hook_does_not_fail_the_plugins_after_it(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(
        ("blis-typo", "blis.cost_methods", "a-typo", "misspelled_hook"),  # loaded first
        TOY,
        ("blis-extra", "blis.cost_methods", "extra", "extra_kinds"),
    )
    records = {(r.group, r.name): r for r in PluginHost().load_all()}
    typo = records[("blis.cost_methods", "a-typo")]
    assert typo.status == "failed" and "blis_register_engine" in typo.error
    assert records[("blis.engines", "toy")].status == "loaded", records[("blis.engines", "toy")]
    assert records[("blis.cost_methods", "extra")].status == "loaded"


def test_two_plugins_registering_one_release_is_an_error(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(TOY, ("blis-dup", "blis.engines", "dup", "duplicate_toy"))
    host = PluginHost()
    host.load("blis.engines", "toy")
    with pytest.raises(PluginError, match=r"two plugins register engine 'toy@1\.0'"):
        host.load("blis.engines", "dup")


def test_misspelled_hook_fails_at_once(install_plugins: Callable[..., None]) -> None:
    install_plugins(("blis-typo", "blis.engines", "typo", "misspelled_hook"))
    with pytest.raises(PluginError, match="blis_register_engine"):
        PluginHost().load("blis.engines", "typo")


def test_block_list_environment_variable(
    install_plugins: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    monkeypatch.setenv(BLOCK_ENV, "toy")
    host = PluginHost()
    assert {r.name: r.status for r in host.discovered("blis.engines")}["toy"] == "blocked"
    with pytest.raises(PluginError, match="blocked by BLIS_DISABLE_PLUGINS"):
        host.select_engine("toy", "1.0")


def test_trace_switch_writes_hook_calls(
    install_plugins: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugins(TOY)
    host = PluginHost(trace=True)
    host.select_engine("toy", "1.0")
    assert "blis_register_engines" in capsys.readouterr().err


def test_builtins_register_through_the_same_hooks() -> None:
    from blis_core.runner.builtins import make_host

    host = make_host()
    assert host.select_router("round-robin", "1").kind == "round-robin"
    builtin = [r for r in host.discovered() if r.status == "builtin"]
    assert any("round-robin@1" in r.provides for r in builtin)


def test_release_key_orders_versions() -> None:
    assert sorted(["0.10.0", "0.9.1", "v0.33.0"], key=release_key) == [
        "0.9.1",
        "0.10.0",
        "v0.33.0",
    ]


def test_cost_methods_and_scorers_register(install_plugins: Callable[..., None]) -> None:
    install_plugins(("blis-extra", "blis.cost_methods", "extra", "extra_kinds"))
    host = PluginHost()
    rec = host.load("blis.cost_methods", "extra")
    # one module may provide several kinds: blis_register_cost_methods and
    # blis_register_scorers both ran
    assert host.cost_methods.keys() == ["flat"]
    assert host.scorers.keys() == ["count"]
    assert rec.provides == ["flat", "count"]


def test_an_engine_registered_under_another_entry_point_name_is_found(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(("blis-toy", "blis.engines", "toy-engines", "toy_engine"))
    host = PluginHost()
    factory = host.select_engine("toy", "1.0")
    assert factory.kind == "toy" and host.records[("blis.engines", "toy-engines")].status == (
        "loaded"
    )


def test_one_module_may_serve_two_entry_point_groups(
    install_plugins: Callable[..., None],
) -> None:
    install_plugins(
        ("blis-extra", "blis.cost_methods", "extra", "extra_kinds"),
        ("blis-extra", "blis.scorers", "extra", "extra_kinds"),
    )
    host = PluginHost()
    records = {(r.group, r.name): r for r in host.load_all()}
    cost, scorer = records[("blis.cost_methods", "extra")], records[("blis.scorers", "extra")]
    assert cost.status == scorer.status == "loaded", (cost.error, scorer.error)
    assert scorer.provides == ["count"] and "flat" in cost.provides
    assert "count" in host.scorers.keys() and "flat" in host.cost_methods.keys()


def test_step_explained_reaches_plugins(install_plugins: Callable[..., None]) -> None:
    import importlib

    from blis_core.contracts.cost import StepPrice
    from blis_core.contracts.shape import StepMode, StepShape

    install_plugins(("blis-observer", "blis.scorers", "observer", "observer"))
    host = PluginHost()
    host.load("blis.scorers", "observer")
    observer = importlib.import_module("observer")
    observer.CALLS.clear()
    price = StepPrice(duration_us=7, parts=())
    host.step_explained("i", StepShape(1, StepMode.IDLE, (), 0), price)  # blis_step_explained
    assert observer.CALLS == [("blis_step_explained", price)]


def test_throwaway_cost_method_and_scorer_pass_their_suites() -> None:
    import sys

    from tests.conftest import PLUGINS_DIR

    sys.path.insert(0, str(PLUGINS_DIR))
    try:
        import extra_kinds
    finally:
        sys.path.remove(str(PLUGINS_DIR))
    from blis_conformance import CostMethodConformance, ScorerConformance

    class CostSuite(CostMethodConformance):
        method = extra_kinds.FlatCost()

    class ScorerSuite(ScorerConformance):
        scorer = extra_kinds.CountScorer()

    CostSuite().test_has_a_name()
    CostSuite().test_answers_are_finite_non_negative_seconds_with_a_rank()
    CostSuite().test_same_work_same_price()
    scorer_suite = ScorerSuite()
    for name in dir(scorer_suite):
        if name.startswith("test_"):
            getattr(scorer_suite, name)()
