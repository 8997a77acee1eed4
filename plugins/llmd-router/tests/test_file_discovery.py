"""``file-discovery`` and file-discovery mode.

llm-d-router v0.10.0 ``pkg/epp/framework/plugins/datalayer/discovery/file/plugin.go``
(``Factory``: ``path`` required, strict parameters) and ``cmd/epp/runner/runner.go``
(``runWithFileDiscovery``: no InferenceObjective reconciler, so every request has the
director's default priority 0; ``resolveDiscovery``).
"""

from __future__ import annotations

from typing import Any

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router import load
from blis_llmd_router.router import LlmdRouter
from helpers import snap

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment

SHED = (429, "system saturated, sheddable request dropped")


def _doc(discovery: str | None = "file-discovery", **params: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "file-discovery", "parameters": {"path": "/etc/epp/endpoints.yaml", **params}},
            {"type": "queue-scorer"},
        ],
    }
    if discovery is not None:
        doc["dataLayer"] = {"discovery": {"pluginRef": discovery}}
    return doc


def _refusal(doc: dict[str, Any]) -> tuple[str, object, str]:
    with pytest.raises(InputRefused) as exc:
        load(doc, FixedRuntime())
    (e,) = exc.value.errors
    return e.path, e.value, e.cause


def test_file_discovery_parameters() -> None:
    loaded = load(_doc(watchFile=True), FixedRuntime())
    assert loaded.file_discovery
    path, value, cause = _refusal(_doc(path=""))
    assert (
        path.endswith(".path")
        and value == ""
        and cause == "file-discovery: 'path' parameter is required"
    )
    path, _, cause = _refusal(_doc(watch=True))
    assert path.endswith(".watch") and "unknown field" in cause
    path, value, _ = _refusal(_doc(watchFile="yes"))
    assert path.endswith(".watchFile") and value == "yes"


def test_discovery_reference_must_name_a_discovery_plugin() -> None:
    path, value, cause = _refusal(_doc("missing"))
    assert path.endswith("dataLayer.discovery.pluginRef") and value == "missing"
    assert cause == "discovery: no plugin found with name 'missing'"
    _, _, cause = _refusal(_doc("queue-scorer"))
    assert cause == "discovery: plugin 'queue-scorer' does not implement EndpointDiscovery"
    # Declared but not referenced: the Kubernetes path, objective priorities apply.
    assert not load(_doc(None), FixedRuntime()).file_discovery


def test_file_mode_gives_every_request_priority_zero() -> None:
    saturated = [snap("a", waiting=10), snap("b", waiting=10)]
    sheddable = InferenceRequest("s", 0, (PromptSegment("p", 32),), 4, priority=-1)
    kube = LlmdRouter(load(_doc(None), FixedRuntime()))
    assert (d := kube.route(sheddable, saturated)).status == SHED[0] and d.reason == SHED[1]
    file_mode = LlmdRouter(load(_doc(), FixedRuntime()))
    assert file_mode.route(sheddable, saturated).status == 200


def test_file_mode_flow_control_uses_the_default_band() -> None:
    doc = _doc()
    doc["featureGates"] = ["flowControl"]
    router = LlmdRouter(load(doc, FixedRuntime()))
    assert router.flow_controller is not None
    urgent = InferenceRequest("u", 0, (PromptSegment("p", 32),), 4, priority=7)
    router.route(urgent, [snap("a"), snap("b")])
    assert [p for _, _, p in router.flow_controller.dispatch_log] == [0]
