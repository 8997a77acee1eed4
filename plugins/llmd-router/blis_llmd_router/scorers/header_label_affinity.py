"""``header-label-affinity-scorer``: 1 where an endpoint label equals a request header.

Port of ``pkg/epp/framework/plugins/scheduling/scorer/headerlabelaffinity/plugin.go``
(llm-d-router v0.10.0). Parameters ``headerName`` and ``labelKey`` are both required
(and so are the parameters themselves). An endpoint scores 1 when its ``labelKey`` label
equals the request's ``headerName`` header, else 0; a missing or empty header scores 0
everywhere. Upstream lower-cases ``headerName`` and reads the lower-cased header map the
EPP ingests; BLIS request headers are matched case-insensitively to the same effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blis_core.contracts.errors import InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.framework import Endpoint, SchedulingRequest, Scorer
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = ["HeaderLabelAffinityScorer", "request_header"]


def request_header(request: SchedulingRequest, name: str) -> str:
    """The value of header ``name`` (lower-case), matched case-insensitively; ``""`` if none.

    Upstream's EPP lower-cases every incoming header name at ingestion and plugins read
    ``request.Headers[name]``; a BLIS request may carry mixed-case names.
    """
    value = request.headers.get(name)
    if value is not None:
        return value
    for k, v in request.headers.items():
        if k.lower() == name:
            return v
    return ""


class HeaderLabelAffinityScorer(Scorer):
    """Soft affinity for endpoints whose label matches a request header."""

    plugin_type = "header-label-affinity-scorer"
    PARAMS = {"headerName": ParamSpec("str", ""), "labelKey": ParamSpec("str", "")}

    def __init__(self, name: str, header_name: str, label_key: str) -> None:
        super().__init__(name)
        self.header_name = header_name.lower()
        self.label_key = label_key

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """1 for a label equal to the (non-empty) header value, 0 otherwise."""
        requested = request_header(request, self.header_name)
        if not requested:
            return {e.name: 0.0 for e in endpoints}
        return {
            e.name: 1.0 if e.labels.get(self.label_key, "") == requested else 0.0 for e in endpoints
        }

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> HeaderLabelAffinityScorer:
        """Factory; parameters, ``headerName`` and ``labelKey`` are required."""
        if params is None:
            raise InputRefused.one(path, None, f"{cls.plugin_type} requires parameters")
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        if not p["headerName"]:
            raise InputRefused.one(
                f"{path}.headerName", p["headerName"], f"{cls.plugin_type} headerName is required"
            )
        if not p["labelKey"]:
            raise InputRefused.one(
                f"{path}.labelKey", p["labelKey"], f"{cls.plugin_type} labelKey is required"
            )
        return cls(name, str(p["headerName"]), str(p["labelKey"]))
