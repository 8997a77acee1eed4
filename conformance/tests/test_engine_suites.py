"""The engine suite's checks, each proven by a toy engine broken in one way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from blis_conformance import (
    EngineConformance,
    KVEventConformance,
    SelectiveScrapeConformance,
    UnpromptedOutputsConformance,
)
from blis_conformance.engine import pep440_of
from toy_engines import Breakage, ToyFactory

from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.plan import ParallelLayout

SPEC = EnginePoolSpec(
    pool="toy",
    model="meta-llama/Llama-2-7b-hf",
    hardware="H100-SXM",
    layout=ParallelLayout(),
    args={"max_num_seqs": 16, "max_num_batched_tokens": 512, "max_model_len": 2048},
)
METRICS = ("toy:num_requests_running", "toy:num_requests_waiting")


def _suite(factory: ToyFactory, metric_names: tuple[str, ...] = METRICS) -> Any:
    class Suite(
        EngineConformance,
        KVEventConformance,
        SelectiveScrapeConformance,
        UnpromptedOutputsConformance,
    ):
        pass

    Suite.factory = factory
    Suite.spec = SPEC
    Suite.metric_names = metric_names
    return Suite()


def _check(suite: Any, name: str, env: Environment) -> None:
    """Run one suite check with the fixtures it asks for."""
    test = getattr(suite, name)
    params = test.__code__.co_varnames[1 : test.__code__.co_argcount]
    kwargs: dict[str, Any] = {}
    if "env" in params:
        kwargs["env"] = env
    if "engine" in params:
        kwargs["engine"] = suite.factory.build(suite.spec, env, "toy-0")
    if "blis_environment" in params:
        kwargs["blis_environment"] = lambda _name: env
    test(**kwargs)


@pytest.fixture
def env(blis_environment: Callable[[str], Environment]) -> Environment:
    return blis_environment("toy-0")


def test_the_sound_toy_passes_every_check(env: Environment) -> None:
    suite = _suite(ToyFactory(num_gpu_blocks=64))
    names = [n for n in dir(suite) if n.startswith("test_")]
    assert "test_never_holds_more_kv_than_its_budget" in names
    for name in names:
        if name == "test_metadata_names_one_upstream_release":
            continue  # toy's release 1.0 and plugin 1.0-blis.1: checked below
        _check(suite, name, env)
    suite.test_metadata_names_one_upstream_release()


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    [
        (ToyFactory(Breakage(ignore_token_budget=True)),
         "test_steps_respect_the_token_and_sequence_budgets", "max_num_batched_tokens=512"),
        (ToyFactory(Breakage(ignore_kv_budget=True), num_gpu_blocks=64),
         "test_never_holds_more_kv_than_its_budget", "the KV budget has 64"),
        (ToyFactory(Breakage(frozen_metrics=True)),
         "test_exports_the_metrics_it_declares", "changed while six requests ran"),
        (ToyFactory(Breakage(kv_events_steer=True)),
         "test_stopped_kv_events_change_nothing_else", "the metrics changed"),
        (ToyFactory(Breakage(stale_selective_scrape=True)),
         "test_a_selective_scrape_is_the_scrape_under_its_keys", r"step \d+: \['toy:num"),
        (ToyFactory(Breakage(unprompted_steers=True)),
         "test_unprompted_outputs_change_nothing", "the metrics changed with the outputs"),
    ],
)  # fmt: skip
def test_a_broken_engine_fails_its_check(
    factory: ToyFactory, check: str, message: str, env: Environment
) -> None:
    with pytest.raises(AssertionError, match=message):
        _check(_suite(factory), check, env)


def test_undeclared_or_missing_metrics_fail(env: Environment) -> None:
    with pytest.raises(AssertionError, match="set metric_names"):
        _check(_suite(ToyFactory(), metric_names=()), "test_exports_the_metrics_it_declares", env)
    with pytest.raises(AssertionError, match="lacks declared metric 'vllm:kv_cache_usage_perc'"):
        _check(
            _suite(ToyFactory(), metric_names=("vllm:kv_cache_usage_perc",)),
            "test_exports_the_metrics_it_declares",
            env,
        )


def test_blis_tags_map_to_pep440_post_releases() -> None:
    assert pep440_of("0.33.0-blis.1") == "0.33.0.post1"
    assert pep440_of("v0.10.0-blis.2") == "0.10.0.post2"
    assert pep440_of("1.2.3") == "1.2.3"


def test_a_version_out_of_step_with_its_distribution_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import blis_conformance.engine as engine_suite

    monkeypatch.setattr(engine_suite, "_distribution_of", lambda cls: "blis-toy")
    monkeypatch.setattr(engine_suite.metadata, "version", lambda dist: "1.0.post2")
    with pytest.raises(AssertionError, match=r"does not match distribution blis-toy 1\.0\.post2"):
        _suite(ToyFactory()).test_plugin_version_matches_its_distribution()
    monkeypatch.setattr(engine_suite.metadata, "version", lambda dist: "1.0.post1")
    _suite(ToyFactory()).test_plugin_version_matches_its_distribution()
