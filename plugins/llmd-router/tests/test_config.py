"""EndpointPickerConfig decoding and loading (config.py, loader.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import decode_config, explain, load, load_yaml
from blis_llmd_router.framework import WeightedScorer
from helpers import snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.cost.catalog import load_catalog

FIXTURES = Path(__file__).parent / "fixtures"


def doc(
    plugins: list[dict[str, Any]], profiles: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
    }
    if profiles is not None:
        out["schedulingProfiles"] = profiles
    out.update(extra)
    return out


def weights(loaded: Any, profile: str = "default") -> dict[str, float]:
    prof = loaded.scheduler.profiles[profile]
    return {ws.scorer.name: ws.weight for ws in prof.scorers if isinstance(ws, WeightedScorer)}


def test_no_config_is_upstream_default() -> None:
    # pkg/epp/config/loader/defaults.go, loadDefaultConfig (v0.10.0).
    for empty in (None, {}):
        loaded = load(empty, FixedRuntime())
        assert weights(loaded) == {
            "queue-scorer": 2.0,
            "kv-cache-utilization-scorer": 2.0,
            "prefix-cache-scorer": 3.0,
        }
        prof = loaded.scheduler.profiles["default"]
        assert prof.picker is not None and prof.picker.plugin_type == "max-score-picker"
        assert loaded.scheduler.handler.plugin_type == "single-profile-handler"
        assert set(loaded.injected) == {
            "approx-prefix-cache-producer",
            "token-producer",
            "single-profile-handler",
            "max-score-picker",
            "utilization-detector",
        }


def test_defaults_injected() -> None:
    loaded = load(
        doc(
            [{"type": "queue-scorer"}, {"type": "load-aware-scorer", "name": "la"}],
            [
                {
                    "name": "p",
                    "plugins": [{"pluginRef": "queue-scorer"}, {"pluginRef": "la", "weight": 4}],
                }
            ],
        ),
        FixedRuntime(),
    )
    assert weights(loaded, "p") == {"queue-scorer": 1.0, "la": 4.0}
    assert loaded.scheduler.handler.plugin_type == "single-profile-handler"
    assert loaded.scheduler.profiles["p"].picker is not None
    assert loaded.injected == ["single-profile-handler", "max-score-picker", "utilization-detector"]
    # the effective document records the injected plugins and the default weight
    d = loaded.config.to_dict()
    assert {"name": "max-score-picker", "type": "max-score-picker"} in d["plugins"]
    assert d["schedulingProfiles"][0]["plugins"][0] == {"pluginRef": "queue-scorer", "weight": 1.0}


def test_no_profiles_collects_filters_scorers_pickers() -> None:
    loaded = load(
        doc([{"type": "decode-filter"}, {"type": "queue-scorer"}, {"type": "random-picker"}]),
        FixedRuntime(),
    )
    prof = loaded.scheduler.profiles["default"]
    assert [f.name for f in prof.filters] == ["decode-filter"]
    assert weights(loaded) == {"queue-scorer": 1.0}
    assert prof.picker is not None and prof.picker.plugin_type == "random-picker"


def test_deprecated_api_version_accepted() -> None:
    d = doc([{"type": "queue-scorer"}])
    d["apiVersion"] = "inference.networking.x-k8s.io/v1alpha1"
    assert load(d, FixedRuntime()).config.api_version == "inference.networking.x-k8s.io/v1alpha1"


def refused(d: Any) -> list[tuple[str, object, str]]:
    with pytest.raises(InputRefused) as exc:
        load(d, FixedRuntime())
    return [(e.path, e.value, e.cause) for e in exc.value.errors]


def test_unknown_parameter_refused_naming_plugin_and_field() -> None:
    errs = refused(
        doc([{"type": "load-aware-scorer", "name": "la", "parameters": {"treshold": 3}}])
    )
    assert len(errs) == 1
    path, value, cause = errs[0]
    assert path == "deployment.router.config.plugins.0.parameters.treshold" and value == 3
    assert "'la'" in cause and "load-aware-scorer" in cause and "treshold" in cause


def test_parameter_of_wrong_type_refused() -> None:
    errs = refused(doc([{"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": "two"}}]))
    assert errs[0][0].endswith("parameters.maxNumOfEndpoints")


def test_parameters_refused_for_parameterless_plugin() -> None:
    errs = refused(doc([{"type": "queue-scorer", "parameters": {"x": 1}}]))
    assert errs[0][0].endswith("parameters.x") and "queue-scorer" in errs[0][2]


def test_unknown_plugin_type_refused_by_name() -> None:
    errs = refused(doc([{"type": "no-such-scorer"}]))
    assert errs == [
        (
            "deployment.router.config.plugins.0.type",
            "no-such-scorer",
            "plugin type 'no-such-scorer' is not registered",
        )
    ]


def test_unmodelled_upstream_type_refused_with_reason() -> None:
    errs = refused(doc([{"type": "pd-profile-handler"}]))
    assert errs[0][1] == "pd-profile-handler" and "use disagg-profile-handler" in errs[0][2]


def test_unknown_top_level_and_nested_fields_refused() -> None:
    d = doc(
        [{"type": "queue-scorer", "nmae": "x"}],
        [{"name": "p", "plugins": [{"pluginRef": "queue-scorer", "wieght": 1}]}],
    )
    d["schedulingProfile"] = []
    errs = refused(d)
    paths = {e[0] for e in errs}
    assert paths == {
        "deployment.router.config.schedulingProfile",
        "deployment.router.config.plugins.0.nmae",
        "deployment.router.config.schedulingProfiles.0.plugins.0.wieght",
    }


def test_api_version_and_kind_required() -> None:
    errs = refused({"plugins": [{"type": "queue-scorer"}]})
    assert {e[0] for e in errs} == {
        "deployment.router.config.apiVersion",
        "deployment.router.config.kind",
    }


def test_profile_reference_validation() -> None:
    errs = refused(
        doc([{"type": "queue-scorer"}], [{"name": "p", "plugins": [{"pluginRef": "nope"}]}])
    )
    assert errs[0][1] == "nope" and "undefined plugin" in errs[0][2]


def test_duplicate_plugin_names_refused() -> None:
    errs = refused(doc([{"type": "queue-scorer"}, {"type": "queue-scorer"}]))
    assert "duplicate plugin name" in errs[0][2]


def test_single_handler_refuses_two_profiles() -> None:
    errs = refused(
        doc(
            [{"type": "queue-scorer"}, {"type": "single-profile-handler"}],
            [
                {"name": "a", "plugins": [{"pluginRef": "queue-scorer"}]},
                {"name": "b", "plugins": [{"pluginRef": "queue-scorer"}]},
            ],
        )
    )
    assert "SingleProfileHandler cannot support multiple scheduling profiles" in errs[0][2]


def test_two_profiles_without_handler_refused() -> None:
    errs = refused(
        doc(
            [{"type": "queue-scorer"}],
            [
                {"name": "a", "plugins": [{"pluginRef": "queue-scorer"}]},
                {"name": "b", "plugins": [{"pluginRef": "queue-scorer"}]},
            ],
        )
    )
    assert "no profile handler configured" in errs[0][2]


def test_two_pickers_in_a_profile_refused() -> None:
    errs = refused(doc([{"type": "random-picker"}, {"type": "max-score-picker"}]))
    assert "already has picker" in errs[0][2]


def test_missing_named_producer_refused() -> None:
    errs = refused(
        doc(
            [{"type": "prefix-cache-scorer", "parameters": {"prefixMatchInfoProducerName": "mine"}}]
        )
    )
    assert errs[0][1] == "mine" and "no default producer" in errs[0][2]


def test_named_producer_is_used() -> None:
    loaded = load(
        doc(
            [
                {"type": "approx-prefix-cache-producer", "name": "mine"},
                {
                    "type": "prefix-cache-scorer",
                    "parameters": {"prefixMatchInfoProducerName": "mine"},
                },
            ]
        ),
        FixedRuntime(),
    )
    assert "approx-prefix-cache-producer" not in loaded.plugins
    assert [p.name for p in loaded.producers] == ["mine"]


def test_feature_gates() -> None:
    assert load(doc([{"type": "queue-scorer"}], featureGates=["flowControl=false"]), FixedRuntime())
    on = load(doc([{"type": "queue-scorer"}], featureGates=["flowControl"]), FixedRuntime())
    assert on.flow_controller is not None
    errs = refused(doc([{"type": "queue-scorer"}], featureGates=["noSuchGate"]))
    assert "unknown or unregistered" in errs[0][2]


def test_deprecated_parser_moves_to_request_handler() -> None:
    cfg = decode_config(doc([{"type": "openai-parser"}], parser={"pluginRef": "openai-parser"}))
    assert cfg.request_handler == {"parsers": [{"pluginRef": "openai-parser"}]}
    errs = refused(doc([{"type": "queue-scorer"}], parser={"pluginRef": "openai-parser"}))
    assert "parser references undefined plugin" in errs[0][2]


def test_errors_are_collected() -> None:
    errs = refused(
        doc([{"type": "load-aware-scorer", "parameters": {"a": 1, "b": 2}}, {"type": "nope"}])
    )
    assert len(errs) == 1  # unknown types are refused before any plugin is built
    errs = refused(doc([{"type": "load-aware-scorer", "parameters": {"a": 1, "b": 2}}]))
    assert len(errs) == 2


# Upstream sample configurations (deploy/config at v0.10.0). Each either loads or is
# refused naming the plugin types this port does not implement yet.
SAMPLES_LOADING = {
    "dp-epp-config.yaml",
    "epp-config.yaml",
    "epp-estimate-prefix-cache-config.yaml",
    "pd-epp-config.yaml",
    "pd-topology-epp-config.yaml",
    "sim-pd-epp-config.yaml",
    "sim-e-p-d-epp-config.yaml",
    "sim-e-pd-epp-config.yaml",
    "probabilistic-admitter-epp-config.yaml",
    "sim-epp-config.yaml",
    "sim-epp-kvcache-config.yaml",
    "sim-epp-no-hit-lru.yaml",
    "sim-program-aware-config.yaml",
    "soft-reflective-ceiling-epp-config.yaml",
}
SAMPLES_REFUSED = {
    # endpoint-attribute-filter/-scorer load; DCGM GPU telemetry is not modelled.
    "sim-epp-gpu-config.yaml": {"dcgm-data-source", "dcgm-extractor"},
}


# Samples whose types are all implemented but whose token-producer names a model BLIS has
# no tokenizer for (not in the model catalog): refused at ``modelName``.
SAMPLES_REFUSED_MODEL = {
    "epp-burst-prefix-cache-config.yaml": "hf-repo/model-name",
    "epp-precise-prefix-cache-config.yaml": "hf-repo/model-name",
    "sim-epp-tokenizer-vllm-http-config.yaml": "${MODEL_NAME}",
}


# Samples upstream's own loader refuses (a parameter its factory's strict decoder does not
# know), refused here for the same field.
SAMPLES_REFUSED_AS_UPSTREAM = {
    # producer.go Parameters has only cacheSizeInMBPerServer; the sample (and its
    # placeholder tokenizer model) says cacheSizeInMB.
    "epp-mm-embeddings-cache-config.yaml": {
        ("plugins.0.parameters.modelName", "hf-repo/model-name"),
        ("plugins.4.parameters.cacheSizeInMB", 2048),
    },
}


def test_every_fixture_is_classified() -> None:
    names = {p.name for p in FIXTURES.glob("*.yaml")}
    assert names == (
        SAMPLES_LOADING
        | set(SAMPLES_REFUSED)
        | set(SAMPLES_REFUSED_MODEL)
        | set(SAMPLES_REFUSED_AS_UPSTREAM)
    )
    for p in FIXTURES.glob("*.yaml"):
        assert p.read_text().startswith("# Source: github.com/llm-d/llm-d-router deploy/config/")


@pytest.mark.parametrize("name", sorted(SAMPLES_LOADING))
def test_sample_loads(name: str) -> None:
    runtime = FixedRuntime(models=load_catalog().models)
    loaded = load(load_yaml((FIXTURES / name).read_text()), runtime)
    assert loaded.scheduler.profiles


@pytest.mark.parametrize("name", sorted(SAMPLES_REFUSED))
def test_sample_refused_by_unimplemented_type(name: str) -> None:
    with pytest.raises(InputRefused) as exc:
        load(load_yaml((FIXTURES / name).read_text()), FixedRuntime())
    types = {e.value for e in exc.value.errors}
    assert types == SAMPLES_REFUSED[name]
    assert all(e.path.endswith(".type") and "not modelled" in e.cause for e in exc.value.errors)


CATALOG_MODELS = load_catalog().models


@pytest.mark.parametrize("name", sorted(SAMPLES_REFUSED_AS_UPSTREAM))
def test_sample_refused_as_upstream_refuses_it(name: str) -> None:
    with pytest.raises(InputRefused) as exc:
        load(load_yaml((FIXTURES / name).read_text()), FixedRuntime(models=CATALOG_MODELS))
    prefix = "deployment.router.config."
    got = {(e.path.removeprefix(prefix), e.value) for e in exc.value.errors}
    assert got == SAMPLES_REFUSED_AS_UPSTREAM[name]


def test_mm_embeddings_sample_with_upstreams_field_name_routes_text_requests() -> None:
    """With the field upstream decodes and a catalog model, the sample loads; on text-only
    requests the producer puts nothing and the mm scorer scores every endpoint 0."""
    text = (
        (FIXTURES / "epp-mm-embeddings-cache-config.yaml")
        .read_text()
        .replace("cacheSizeInMB:", "cacheSizeInMBPerServer:")
        .replace("hf-repo/model-name", "meta-llama/Llama-2-7b-hf")
    )
    out = explain(
        text,
        [snap("a", waiting=1), snap("b")],
        InferenceRequest("r", 0, (PromptSegment("p", 128),), 4),
        models=FixedRuntime(models=CATALOG_MODELS),
    )
    (scorers,) = [p["scorers"] for p in out["profiles"].values()]
    mm = next(sc for sc in scorers if sc["type"] == "mm-embeddings-cache-scorer")
    assert mm["scores"] == {"a": 0.0, "b": 0.0}
    assert out["pick"] == "b"


@pytest.mark.parametrize("name", sorted(SAMPLES_REFUSED_MODEL))
def test_sample_refused_by_tokenizer_model(name: str) -> None:
    with pytest.raises(InputRefused) as exc:
        load(load_yaml((FIXTURES / name).read_text()), FixedRuntime(models=CATALOG_MODELS))
    (err,) = exc.value.errors
    assert err.path.endswith(".modelName") and err.value == SAMPLES_REFUSED_MODEL[name]
    assert "not in the run's model catalog" in err.cause


@pytest.mark.parametrize("name", sorted(SAMPLES_REFUSED_MODEL))
def test_precise_sample_loads_with_a_catalog_model(name: str) -> None:
    text = (
        (FIXTURES / name)
        .read_text()
        .replace(SAMPLES_REFUSED_MODEL[name], "meta-llama/Llama-2-7b-hf")
    )
    loaded = load(load_yaml(text), FixedRuntime(models=CATALOG_MODELS))
    assert loaded.vocab_size == 32000
    with pytest.raises(InputRefused, match="not in the run's model catalog"):
        load(load_yaml(text), FixedRuntime())  # a runtime without model facts
    producer = "burst" if "burst" in name else "precise"
    assert f"{producer}-prefix-cache-producer" in loaded.plugins


def test_metrics_data_source_transport_parameters() -> None:
    """metrics/datasource.go: transport fields accepted; port range; interval refused."""
    ok = doc([{"type": "metrics-data-source", "parameters": {"scheme": "https", "port": 9090}}])
    load(ok, FixedRuntime())
    errs = refused(doc([{"type": "metrics-data-source", "parameters": {"nope": 1}}]))
    assert "unknown field 'nope'" in errs[0][2]
    errs = refused(doc([{"type": "metrics-data-source", "parameters": {"port": 70000}}]))
    assert "invalid port 70000: must be between 1 and 65535" in errs[0][2]
    errs = refused(doc([{"type": "metrics-data-source", "parameters": {"interval": "1s"}}]))
    assert "scrape_interval_us" in errs[0][2]
