"""Label filters: role filters, ``by-label`` and ``label-selector-filter``.

Ports of ``pkg/epp/framework/plugins/scheduling/filter/bylabel/{filter,roles,selector}.go``
(llm-d-router v0.10.0).

* ``by-label`` (deprecated upstream since v0.9.0): keep an endpoint whose label ``label``
  has one of ``validValues``, or that lacks the label when ``allowsNoLabel``.
* ``decode-filter``: ``llm-d.ai/role`` ∈ {decode, prefill-decode, both,
  encode-prefill-decode}, or no role label.
* ``prefill-filter``: role ∈ {prefill, encode-prefill, prefill-decode, both,
  encode-prefill-decode}; the label is required.
* ``encode-filter``: role ∈ {encode, encode-prefill, encode-prefill-decode}; required.
* ``label-selector-filter`` (and its deprecated alias ``by-label-selector``): a
  Kubernetes ``LabelSelector`` (``matchLabels``, ``matchExpressions`` with ``In``,
  ``NotIn``, ``Exists``, ``DoesNotExist``); the empty selector keeps every endpoint.

An endpoint's role label comes from the snapshot's ``role`` when its labels lack one
(:func:`blis_llmd_router.datalayer.endpoint_labels`). Upstream's role-filter factories
ignore parameters; BLIS refuses any.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import ROLE_LABEL
from blis_llmd_router.framework import Endpoint, Filter, SchedulingRequest
from blis_llmd_router.params import ParamSpec, decode_parameters

__all__ = [
    "ROLE_FILTERS",
    "ByLabelFilter",
    "LabelRequirement",
    "LabelSelectorFilter",
    "role_filter",
]

_ROLE_DECODE = "decode"
_ROLE_PREFILL = "prefill"
_ROLE_ENCODE = "encode"
_ROLE_PREFILL_DECODE = "prefill-decode"
_ROLE_ENCODE_PREFILL = "encode-prefill"
_ROLE_ENCODE_PREFILL_DECODE = "encode-prefill-decode"
_ROLE_BOTH = "both"

ROLE_FILTERS: Mapping[str, tuple[bool, tuple[str, ...]]] = {
    "decode-filter": (
        True,
        (_ROLE_DECODE, _ROLE_PREFILL_DECODE, _ROLE_BOTH, _ROLE_ENCODE_PREFILL_DECODE),
    ),
    "prefill-filter": (
        False,
        (
            _ROLE_PREFILL,
            _ROLE_ENCODE_PREFILL,
            _ROLE_PREFILL_DECODE,
            _ROLE_BOTH,
            _ROLE_ENCODE_PREFILL_DECODE,
        ),
    ),
    "encode-filter": (False, (_ROLE_ENCODE, _ROLE_ENCODE_PREFILL, _ROLE_ENCODE_PREFILL_DECODE)),
}
"""Role filter type → (allows no label, valid role values)."""


class ByLabelFilter(Filter):
    """Keeps endpoints whose label has a valid value (or no label, when allowed)."""

    plugin_type = "by-label"
    PARAMS = {
        "label": ParamSpec("str", ""),
        "validValues": ParamSpec("str_list", []),
        "allowsNoLabel": ParamSpec("bool", False),
    }

    def __init__(
        self,
        name: str,
        label: str,
        allows_no_label: bool,
        valid_values: Sequence[str],
        plugin_type: str | None = None,
    ) -> None:
        super().__init__(name)
        if plugin_type is not None:
            self.plugin_type = plugin_type
        self.label = label
        self.allows_no_label = allows_no_label
        self.valid_values = frozenset(valid_values)

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Upstream's test: ``(!labelDefined && allowsNoLabel) || valueValid``."""
        out: list[Endpoint] = []
        for e in endpoints:
            val = e.labels.get(self.label)
            # Go reads a missing label as "", which is valid only if "" was listed.
            if (val is None and self.allows_no_label) or (val or "") in self.valid_values:
                out.append(e)
        return out

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ByLabelFilter:
        """Factory; refuses a missing ``label`` or no valid value without ``allowsNoLabel``."""
        p = decode_parameters(cls.plugin_type, name, params, cls.PARAMS, path)
        if not p["label"]:
            raise InputRefused.one(
                f"{path}.label",
                p["label"],
                f"invalid configuration for filter {name!r}: 'label' must be specified",
            )
        if not p["validValues"] and not p["allowsNoLabel"]:
            raise InputRefused.one(
                f"{path}.validValues",
                p["validValues"],
                f"invalid configuration for filter"
                f" {name!r}: either 'allowsNoLabel' must be true or at least one"
                " 'validValues' must be specified",
            )
        return cls(name, str(p["label"]), bool(p["allowsNoLabel"]), list(p["validValues"]))


def role_filter(plugin_type: str) -> Callable[..., ByLabelFilter]:
    """The factory of one role filter type (``decode-filter`` …)."""
    allows_no_label, values = ROLE_FILTERS[plugin_type]

    def create(
        name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> ByLabelFilter:
        decode_parameters(plugin_type, name, params, {}, path)
        return ByLabelFilter(name, ROLE_LABEL, allows_no_label, values, plugin_type)

    return create


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One ``matchExpressions`` entry (``matchLabels`` entries become ``In`` with one value)."""

    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes ``labels.Requirement.Matches``."""
        has = self.key in labels
        if self.operator == "In":
            return has and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not has or labels[self.key] not in self.values
        if self.operator == "Exists":
            return has
        return not has


class LabelSelectorFilter(Filter):
    """Keeps endpoints whose labels match a Kubernetes label selector."""

    plugin_type = "label-selector-filter"
    PARAMS = {"matchLabels": ParamSpec("str_map", {}), "matchExpressions": ParamSpec("any", [])}

    def __init__(
        self, name: str, requirements: Sequence[LabelRequirement], plugin_type: str | None = None
    ) -> None:
        super().__init__(name)
        if plugin_type is not None:
            self.plugin_type = plugin_type
        self.requirements = tuple(requirements)

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """Endpoints matching every requirement."""
        return [e for e in endpoints if all(r.matches(e.labels) for r in self.requirements)]

    @classmethod
    def create(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> LabelSelectorFilter:
        """Factory; refuses what ``metav1.LabelSelectorAsSelector`` refuses."""
        return cls._create(name, params, path, None)

    @classmethod
    def create_deprecated(
        cls, name: str, params: Mapping[str, Any] | None, ctx: BuildContext, path: str
    ) -> LabelSelectorFilter:
        """``by-label-selector``: the same filter under its deprecated type name."""
        return cls._create(name, params, path, "by-label-selector")

    @classmethod
    def _create(
        cls, name: str, params: Mapping[str, Any] | None, path: str, plugin_type: str | None
    ) -> LabelSelectorFilter:
        ptype = plugin_type or cls.plugin_type
        p = decode_parameters(ptype, name, params, cls.PARAMS, path)
        reqs = [
            LabelRequirement(k, "In", frozenset([v])) for k, v in sorted(p["matchLabels"].items())
        ]
        errors: list[FieldError] = []
        exprs = p["matchExpressions"]
        if not isinstance(exprs, list):
            raise InputRefused.one(f"{path}.matchExpressions", exprs, "must be a list")
        for i, expr in enumerate(exprs):
            where = f"{path}.matchExpressions.{i}"
            if not isinstance(expr, Mapping):
                errors.append(FieldError(where, expr, "must be a mapping"))
                continue
            for k in expr:
                if k not in ("key", "operator", "values"):
                    errors.append(FieldError(f"{where}.{k}", expr[k], f"unknown field {k!r}"))
            key = expr.get("key")
            op = expr.get("operator")
            values = expr.get("values") or []
            if not isinstance(key, str) or not key:
                errors.append(FieldError(f"{where}.key", key, "a label key is required"))
            if op not in _OPERATORS:
                errors.append(
                    FieldError(
                        f"{where}.operator",
                        op,
                        f"is not a valid label selector operator {_OPERATORS}",
                    )
                )
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                errors.append(FieldError(f"{where}.values", values, "must be a list of strings"))
                continue
            if op in ("In", "NotIn") and not values:
                errors.append(
                    FieldError(
                        f"{where}.values",
                        values,
                        "for 'in', 'notin' operators, values set can't be empty",
                    )
                )
            if op in ("Exists", "DoesNotExist") and values:
                errors.append(
                    FieldError(
                        f"{where}.values",
                        values,
                        "values set must be empty for exists and does not exist",
                    )
                )
            if not errors:
                reqs.append(LabelRequirement(str(key), str(op), frozenset(values)))
        if errors:
            raise InputRefused(errors)
        return cls(name, reqs, plugin_type)
