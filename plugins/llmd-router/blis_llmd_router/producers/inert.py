"""Plugins BLIS accepts whose work the simulator does itself.

Ports of llm-d-router v0.10.0 registrations (``cmd/epp/runner/runner.go``); the
``token-producer`` is ported in :mod:`blis_llmd_router.producers.tokenizer`.

* ``metrics-data-source`` / ``endpoint-notification-source`` (``.../datalayer/source``):
  upstream polls each pod and watches endpoints; BLIS hands the router the scrape in each
  :class:`~blis_core.contracts.router.EndpointSnapshot` and the endpoints per decision.
* ``core-metrics-extractor`` (``.../datalayer/extractor/metrics/factories.go``): the
  built-in engine name tables in :mod:`blis_llmd_router.datalayer`; custom mappings
  (any parameter) are refused.
* Parsers (``.../requesthandling/parsers``): BLIS requests arrive parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_llmd_router.context import BuildContext, PluginFactory
from blis_llmd_router.framework import Plugin
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["InertPlugin", "inert_factory"]


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
