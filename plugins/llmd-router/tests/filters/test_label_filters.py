"""Label filters (filters/bylabel.py), upstream semantics of bylabel/{roles,selector}.go."""

from __future__ import annotations

import pytest
from blis_conformance.router import FixedRuntime
from blis_llmd_router.context import BuildContext
from blis_llmd_router.filters import ByLabelFilter, LabelSelectorFilter, role_filter
from blis_llmd_router.framework import Endpoint, SchedulingRequest
from helpers import snap

from blis_core.contracts.errors import InputRefused

CTX = BuildContext(FixedRuntime())
REQ = SchedulingRequest.from_token_ids("r", [1])


def names(flt: object, endpoints: list[Endpoint]) -> list[str]:
    return [e.name for e in flt.filter(REQ, endpoints)]  # type: ignore[attr-defined]


def test_role_filters_read_role_label_or_snapshot_role() -> None:
    eps = [
        Endpoint.from_snapshot(snap("p", role="prefill")),
        Endpoint.from_snapshot(snap("d", role="decode")),
        Endpoint.from_snapshot(snap("b", role="both")),
        Endpoint.from_snapshot(snap("n", role="")),
        Endpoint.from_snapshot(
            snap("pd", role="decode", labels={"llm-d.ai/role": "prefill-decode"})
        ),
    ]
    assert names(role_filter("decode-filter")("d", None, CTX, "x"), eps) == ["d", "b", "n", "pd"]
    assert names(role_filter("prefill-filter")("p", None, CTX, "x"), eps) == ["p", "b", "pd"]
    assert names(role_filter("encode-filter")("e", None, CTX, "x"), eps) == []
    with pytest.raises(InputRefused):
        role_filter("decode-filter")("d", {"x": 1}, CTX, "x")


def test_by_label() -> None:
    eps = [
        Endpoint.from_snapshot(snap(n, role="", labels=lab))
        for n, lab in [("a", {"zone": "z1"}), ("b", {"zone": "z2"}), ("c", {})]
    ]
    f = ByLabelFilter.create("f", {"label": "zone", "validValues": ["z1"]}, CTX, "x")
    assert names(f, eps) == ["a"]
    f = ByLabelFilter.create("f", {"label": "zone", "allowsNoLabel": True}, CTX, "x")
    assert names(f, eps) == ["c"]
    with pytest.raises(InputRefused):
        ByLabelFilter.create("f", {"label": "zone"}, CTX, "x")


def test_label_selector() -> None:
    eps = [
        Endpoint.from_snapshot(snap(n, role="", labels=lab))
        for n, lab in [("a", {"tier": "gold", "gpu": "h100"}), ("b", {"tier": "silver"}), ("c", {})]
    ]
    f = LabelSelectorFilter.create("s", {"matchLabels": {"tier": "gold"}}, CTX, "x")
    assert names(f, eps) == ["a"]
    f = LabelSelectorFilter.create(
        "s",
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]},
        CTX,
        "x",
    )
    assert names(f, eps) == ["b", "c"]
    f = LabelSelectorFilter.create(
        "s", {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, CTX, "x"
    )
    assert names(f, eps) == ["a"]
    assert names(LabelSelectorFilter.create("s", None, CTX, "x"), eps) == ["a", "b", "c"]
    with pytest.raises(InputRefused):
        LabelSelectorFilter.create(
            "s", {"matchExpressions": [{"key": "t", "operator": "In"}]}, CTX, "x"
        )
    with pytest.raises(InputRefused):
        LabelSelectorFilter.create(
            "s", {"matchExpressions": [{"key": "t", "operator": "Near", "values": ["a"]}]}, CTX, "x"
        )
