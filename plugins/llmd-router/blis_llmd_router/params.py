"""Strict decoding of plugin ``parameters``.

Upstream hands every plugin factory a ``json.Decoder`` with ``DisallowUnknownFields``
(``pkg/epp/framework/interface/plugin/registry.go``, ``StrictDecoder``, llm-d-router
v0.10.0), so an unknown field is refused; Go's ``encoding/json`` also refuses a value of
the wrong JSON type. :func:`decode_parameters` does both, naming the plugin and the field,
and collects every problem before refusing.

BLIS is stricter in one place: a plugin whose upstream factory ignores its decoder (for
example ``queue-scorer``) silently ignores any parameters upstream; here such a plugin
declares no fields, so a parameter given to it is refused rather than left inert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_core.contracts.errors import FieldError, InputRefused

__all__ = ["ParamSpec", "decode_parameters"]


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One parameter field: its JSON kind and the value used when it is absent.

    ``kind`` is ``int``, ``float``, ``bool``, ``str``, ``str_list``, ``str_map``,
    ``object`` (a mapping, decoded by the plugin) or ``any``.
    """

    kind: str
    default: Any = None


def _kind_ok(kind: str, value: object) -> bool:
    if value is None:
        # JSON null leaves a Go field at its zero value; the default applies.
        return True
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "str_list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "str_map":
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    if kind == "object":
        return isinstance(value, Mapping)
    return kind == "any"


def decode_parameters(
    plugin_type: str,
    plugin_name: str,
    raw: Mapping[str, Any] | None,
    specs: Mapping[str, ParamSpec],
    path: str,
) -> dict[str, Any]:
    """Decode ``raw`` against ``specs``; absent fields take their defaults.

    :raises InputRefused: naming ``path.<field>``, the value, the plugin and the cause,
        for every unknown field and every value of the wrong type.
    """
    out = {name: spec.default for name, spec in specs.items()}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise InputRefused.one(
            path,
            raw,
            f"parameters of plugin {plugin_name!r} (type {plugin_type!r}) must be a mapping",
        )
    errors: list[FieldError] = []
    for key, value in raw.items():
        spec = specs.get(key)
        if spec is None:
            known = ", ".join(sorted(specs)) or "none"
            errors.append(
                FieldError(
                    f"{path}.{key}",
                    value,
                    f"unknown field {key!r} for plugin {plugin_name!r} (type {plugin_type!r});"
                    f" known fields: {known}",
                )
            )
            continue
        if not _kind_ok(spec.kind, value):
            errors.append(
                FieldError(
                    f"{path}.{key}",
                    value,
                    f"plugin {plugin_name!r} (type {plugin_type!r}): field {key!r} must be"
                    f" of kind {spec.kind}",
                )
            )
            continue
        if value is not None:
            out[key] = float(value) if spec.kind == "float" else value
    if errors:
        raise InputRefused(errors)
    return out
