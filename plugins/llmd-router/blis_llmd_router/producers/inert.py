"""Plugins BLIS accepts whose work the simulator does itself.

Ports of llm-d-router v0.10.0 registrations (``cmd/epp/runner/runner.go``); the
``token-producer`` is ported in :mod:`blis_llmd_router.producers.tokenizer`.

* ``metrics-data-source`` / ``endpoint-notification-source`` (``.../datalayer/source``):
  upstream polls each pod and watches endpoints; BLIS hands the router the scrape in each
  :class:`~blis_core.contracts.router.EndpointSnapshot` and the endpoints per decision.
  ``metrics-data-source``'s transport parameters (``scheme``, ``path``, ``port``,
  ``insecureSkipVerify``, ``caCertPath``, ``clientCertPath``, ``clientKeyPath``;
  ``metrics/datasource.go``, decoded strictly as every factory's parameters are; a port
  outside 1..65535 refused) change nothing in simulation; a
  non-empty ``interval`` is refused by name: the scrape period is the scenario's
  ``deployment.router.scrape_interval_us``.
* ``core-metrics-extractor`` (``.../datalayer/extractor/metrics/factories.go``): the
  built-in engine name tables in :mod:`blis_llmd_router.datalayer`; custom mappings
  (any parameter) are refused.
* Parsers (``.../requesthandling/parsers``): BLIS requests arrive parsed.
* ``file-discovery`` (``.../datalayer/discovery/file/plugin.go``): upstream reads the
  endpoint inventory from the file at ``path`` (required; ``watchFile`` reloads it); in
  BLIS the inventory is the simulated deployment, so the file is not read. What the mode
  changes is kept: with ``dataLayer.discovery`` set upstream runs without a controller
  manager (``cmd/epp/runner/runner.go``, ``runWithFileDiscovery``), no
  InferenceObjective reconciler runs, and every request gets the director's default
  priority 0 (:attr:`~blis_llmd_router.loader.LoadedConfig.file_discovery`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.context import BuildContext, PluginFactory
from blis_llmd_router.framework import Plugin
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["FileDiscovery", "InertPlugin", "create_metrics_data_source", "inert_factory"]


class InertPlugin(Plugin):
    """A configured plugin that takes no part in a BLIS decision."""

    def __init__(self, name: str, plugin_type: str) -> None:
        super().__init__(name)
        self.plugin_type = plugin_type


def inert_factory(plugin_type: str, params: Mapping[str, ParamSpec]) -> PluginFactory:
    """A factory that decodes ``params`` strictly and builds an :class:`InertPlugin`."""

    def create(
        name: str, raw: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> InertPlugin:
        decode_parameters(plugin_type, name, raw, params, path)
        return InertPlugin(name, plugin_type)

    return create


_METRICS_SOURCE_PARAMS: Mapping[str, ParamSpec] = {
    "scheme": ParamSpec("str", "http"),
    "path": ParamSpec("str", "/metrics"),
    "port": ParamSpec("int", None),
    "insecureSkipVerify": ParamSpec("bool", True),
    "caCertPath": ParamSpec("str", ""),
    "clientCertPath": ParamSpec("str", ""),
    "clientKeyPath": ParamSpec("str", ""),
    "interval": ParamSpec("str", ""),
}


def create_metrics_data_source(
    name: str, raw: Mapping[str, Any] | None, ctx: BuildContext, path: str
) -> InertPlugin:
    """``MetricsDataSourceFactory`` (module doc): transport fields accepted, inert."""
    ptype = "metrics-data-source"
    p = decode_parameters(ptype, name, raw, _METRICS_SOURCE_PARAMS, path)
    errors: list[FieldError] = []
    port = p["port"]
    if port is not None and not 1 <= port <= 65535:
        errors.append(
            FieldError(f"{path}.port", port, f"invalid port {port}: must be between 1 and 65535")
        )
    if p["interval"]:
        errors.append(
            FieldError(
                f"{path}.interval",
                p["interval"],
                f"{ptype} {name!r}: a per-source scrape interval is not modelled; the scrape"
                " period is the scenario's deployment.router.scrape_interval_us",
            )
        )
    if errors:
        raise InputRefused(errors)
    return InertPlugin(name, ptype)


class FileDiscovery(Plugin):
    """``file-discovery``: an ``EndpointDiscovery`` whose inventory is the deployment."""

    plugin_type = "file-discovery"
    PARAMS: Mapping[str, ParamSpec] = {
        "path": ParamSpec("str", ""),
        "watchFile": ParamSpec("bool", False),
    }

    def __init__(self, name: str, path: str, watch_file: bool = False) -> None:
        super().__init__(name)
        self.path = path
        self.watch_file = watch_file

    @classmethod
    def create(
        cls, name: str, raw: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> FileDiscovery:
        """``Factory``: strict decoding; ``path`` is required."""
        p = decode_parameters(cls.plugin_type, name, raw, cls.PARAMS, path)
        if not p["path"]:
            raise InputRefused.one(
                f"{path}.path", p["path"], "file-discovery: 'path' parameter is required"
            )
        return cls(name, str(p["path"]), bool(p["watchFile"]))
