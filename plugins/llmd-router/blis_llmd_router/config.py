"""Decoding of the ``EndpointPickerConfig`` document.

Ports of ``apix/config/v1alpha1/endpointpickerconfig_types.go`` (the document's fields),
``pkg/epp/config/loader/configloader.go`` (``LoadRawConfig``/``decodeRawConfig``: strict
decoding, the deprecated API group, the deprecated top-level ``saturationDetector`` and
``parser``) and ``pkg/epp/config/loader/defaults.go`` (``loadDefaultConfig``,
``applyStaticDefaults``) of llm-d-router v0.10.0.

* ``apiVersion`` is ``llm-d.ai/v1alpha1`` or the deprecated
  ``inference.networking.x-k8s.io/v1alpha1``; ``kind`` is ``EndpointPickerConfig``.
* Every mapping is decoded strictly: an unknown field is refused by its dotted path.
* No configuration at all (``None`` or an empty mapping) is upstream's default:
  ``queue-scorer`` weight 2, ``kv-cache-utilization-scorer`` weight 2,
  ``prefix-cache-scorer`` weight 3 in profile ``default`` (the ``max-score-picker`` and
  ``single-profile-handler`` are then injected by the loader, as upstream).
* A plugin without a name is named after its type.

Scheduling defaults that need to know what each plugin is (profile handler, picker,
weights) are applied by :mod:`blis_llmd_router.loader`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from blis_core.contracts.errors import FieldError, InputRefused

__all__ = [
    "API_VERSION",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_SCORER_WEIGHT",
    "DEPRECATED_API_VERSION",
    "EndpointPickerConfig",
    "PluginSpec",
    "SchedulingPluginRef",
    "SchedulingProfileSpec",
    "decode_config",
    "default_config",
    "load_yaml",
]

API_VERSION = "llm-d.ai/v1alpha1"
DEPRECATED_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
KIND = "EndpointPickerConfig"
DEFAULT_SCORER_WEIGHT = 1.0
DEFAULT_CONFIG_PATH = "deployment.router.config"

_TOP_FIELDS = (
    "apiVersion",
    "kind",
    "featureGates",
    "plugins",
    "schedulingProfiles",
    "dataLayer",
    "flowControl",
    "requestHandler",
    "saturationDetector",
    "parser",
)


@dataclass(slots=True)
class PluginSpec:
    """One entry of ``plugins``: ``name`` (defaults to ``type``), ``type``, ``parameters``."""

    name: str
    type: str
    parameters: Mapping[str, Any] | None = None


@dataclass(slots=True)
class SchedulingPluginRef:
    """One entry of a profile's ``plugins``: ``pluginRef`` and an optional ``weight``."""

    plugin_ref: str
    weight: float | None = None


@dataclass(slots=True)
class SchedulingProfileSpec:
    """One entry of ``schedulingProfiles``."""

    name: str
    plugins: list[SchedulingPluginRef] = field(default_factory=list)


@dataclass(slots=True)
class EndpointPickerConfig:
    """The decoded document (sections BLIS does not act on are kept as decoded mappings)."""

    api_version: str = API_VERSION
    kind: str = KIND
    feature_gates: list[str] = field(default_factory=list)
    plugins: list[PluginSpec] = field(default_factory=list)
    scheduling_profiles: list[SchedulingProfileSpec] = field(default_factory=list)
    data_layer: dict[str, Any] | None = None
    flow_control: dict[str, Any] | None = None
    request_handler: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The document in upstream's field names (for ``explain`` and tests)."""
        out: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "featureGates": list(self.feature_gates),
            "plugins": [
                {
                    "name": p.name,
                    "type": p.type,
                    **({"parameters": dict(p.parameters)} if p.parameters else {}),
                }
                for p in self.plugins
            ],
            "schedulingProfiles": [
                {
                    "name": s.name,
                    "plugins": [
                        {
                            "pluginRef": r.plugin_ref,
                            **({"weight": r.weight} if r.weight is not None else {}),
                        }
                        for r in s.plugins
                    ],
                }
                for s in self.scheduling_profiles
            ],
        }
        for key, val in (
            ("dataLayer", self.data_layer),
            ("flowControl", self.flow_control),
            ("requestHandler", self.request_handler),
        ):
            if val is not None:
                out[key] = val
        return out


def default_config() -> EndpointPickerConfig:
    """``loadDefaultConfig``: the configuration used when none is given."""
    return EndpointPickerConfig(
        plugins=[
            PluginSpec("queue-scorer", "queue-scorer"),
            PluginSpec("kv-cache-utilization-scorer", "kv-cache-utilization-scorer"),
            PluginSpec("prefix-cache-scorer", "prefix-cache-scorer"),
            PluginSpec("metrics-data-source", "metrics-data-source"),
            PluginSpec("core-metrics-extractor", "core-metrics-extractor"),
        ],
        scheduling_profiles=[
            SchedulingProfileSpec(
                "default",
                [
                    SchedulingPluginRef("queue-scorer", 2.0),
                    SchedulingPluginRef("kv-cache-utilization-scorer", 2.0),
                    SchedulingPluginRef("prefix-cache-scorer", 3.0),
                ],
            )
        ],
        data_layer={
            "sources": [
                {
                    "pluginRef": "metrics-data-source",
                    "extractors": [{"pluginRef": "core-metrics-extractor"}],
                }
            ]
        },
    )


class _Decoder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: list[FieldError] = []

    def at(self, *parts: object) -> str:
        return (
            ".".join([self.path, *(str(p) for p in parts)])
            if self.path
            else ".".join(str(p) for p in parts)
        )

    def fail(self, where: str, value: object, cause: str) -> None:
        self.errors.append(FieldError(where, value, cause))

    def mapping(
        self, value: object, where: str, allowed: tuple[str, ...]
    ) -> Mapping[str, Any] | None:
        if not isinstance(value, Mapping):
            self.fail(where, value, "must be a mapping")
            return None
        for k in value:
            if k not in allowed:
                self.fail(
                    f"{where}.{k}",
                    value[k],
                    f"unknown field {k!r}; known fields: {', '.join(allowed)}",
                )
        return value

    def string(self, value: object, where: str, required: bool = False) -> str:
        if value is None:
            if required:
                self.fail(where, value, "is required")
            return ""
        if not isinstance(value, str):
            self.fail(where, value, "must be a string")
            return ""
        return value

    def seq(self, value: object, where: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(where, value, "must be a list")
            return []
        return value

    def ref(
        self, value: object, where: str, allowed: tuple[str, ...] = ("pluginRef",)
    ) -> dict[str, Any] | None:
        m = self.mapping(value, where, allowed)
        if m is None:
            return None
        self.string(m.get("pluginRef"), f"{where}.pluginRef")
        return dict(m)


def _decode_data_layer(d: _Decoder, value: object) -> dict[str, Any] | None:
    where = d.at("dataLayer")
    m = d.mapping(
        value,
        where,
        (
            "injectDefaults",
            "sources",
            "discovery",
            "crossReplicaSyncerPluginRef",
            "crossReplicaSyncInterval",
        ),
    )
    if m is None:
        return None
    if "injectDefaults" in m and not isinstance(m["injectDefaults"], bool):
        d.fail(f"{where}.injectDefaults", m["injectDefaults"], "must be a boolean")
    for i, src in enumerate(d.seq(m.get("sources"), f"{where}.sources")):
        s = d.ref(src, f"{where}.sources.{i}", ("pluginRef", "extractors"))
        if s is not None:
            for j, ext in enumerate(d.seq(s.get("extractors"), f"{where}.sources.{i}.extractors")):
                d.ref(ext, f"{where}.sources.{i}.extractors.{j}")
    if m.get("discovery") is not None:
        d.ref(m["discovery"], f"{where}.discovery")
    d.string(m.get("crossReplicaSyncerPluginRef"), f"{where}.crossReplicaSyncerPluginRef")
    d.string(m.get("crossReplicaSyncInterval"), f"{where}.crossReplicaSyncInterval")
    return dict(m)


_BAND_FIELDS = ("priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef")


def _decode_flow_control(d: _Decoder, value: object) -> dict[str, Any] | None:
    where = d.at("flowControl")
    m = d.mapping(
        value,
        where,
        (
            "maxBytes",
            "maxRequests",
            "defaultRequestTTL",
            "defaultPriorityBand",
            "defaultNegativePriorityBand",
            "priorityBands",
            "usageLimitPolicyPluginRef",
            "saturationDetector",
            "enableEviction",
        ),
    )
    if m is None:
        return None
    for key in ("defaultPriorityBand", "defaultNegativePriorityBand"):
        if m.get(key) is not None:
            d.mapping(m[key], f"{where}.{key}", _BAND_FIELDS)
    for i, band in enumerate(d.seq(m.get("priorityBands"), f"{where}.priorityBands")):
        d.mapping(band, f"{where}.priorityBands.{i}", _BAND_FIELDS)
    if m.get("saturationDetector") is not None:
        d.ref(m["saturationDetector"], f"{where}.saturationDetector")
    return dict(m)


def decode_config(
    doc: Mapping[str, Any] | None, path: str = DEFAULT_CONFIG_PATH
) -> EndpointPickerConfig:
    """Decode ``doc`` strictly; ``None`` or ``{}`` gives :func:`default_config`.

    :param path: where the document sits, prefixed to every refused field's path.
    :raises InputRefused: with every problem found.
    """
    if not doc:
        return default_config()
    d = _Decoder(path)
    top = d.mapping(doc, path or "<document>", _TOP_FIELDS)
    if top is None:
        raise InputRefused(d.errors)
    api = top.get("apiVersion")
    if api not in (API_VERSION, DEPRECATED_API_VERSION):
        d.fail(
            d.at("apiVersion"),
            api,
            f"must be {API_VERSION!r} (or the deprecated {DEPRECATED_API_VERSION!r})",
        )
    if top.get("kind") != KIND:
        d.fail(d.at("kind"), top.get("kind"), f"must be {KIND!r}")
    cfg = EndpointPickerConfig(api_version=str(api), kind=KIND)
    for i, gate in enumerate(d.seq(top.get("featureGates"), d.at("featureGates"))):
        cfg.feature_gates.append(d.string(gate, d.at("featureGates", i), required=True))
    for i, raw in enumerate(d.seq(top.get("plugins"), d.at("plugins"))):
        m = d.mapping(raw, d.at("plugins", i), ("name", "type", "parameters"))
        if m is None:
            continue
        params = m.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            d.fail(d.at("plugins", i, "parameters"), params, "must be a mapping")
            params = None
        name = d.string(m.get("name"), d.at("plugins", i, "name"))
        ptype = d.string(m.get("type"), d.at("plugins", i, "type"))
        # applyStaticDefaults: a plugin without a name is named after its type.
        cfg.plugins.append(PluginSpec(name or ptype, ptype, params))
    for i, raw in enumerate(d.seq(top.get("schedulingProfiles"), d.at("schedulingProfiles"))):
        m = d.mapping(raw, d.at("schedulingProfiles", i), ("name", "plugins"))
        if m is None:
            continue
        prof = SchedulingProfileSpec(d.string(m.get("name"), d.at("schedulingProfiles", i, "name")))
        for j, ref in enumerate(d.seq(m.get("plugins"), d.at("schedulingProfiles", i, "plugins"))):
            where = d.at("schedulingProfiles", i, "plugins", j)
            r = d.mapping(ref, where, ("pluginRef", "weight"))
            if r is None:
                continue
            weight = r.get("weight")
            if weight is not None and (
                isinstance(weight, bool) or not isinstance(weight, int | float)
            ):
                d.fail(f"{where}.weight", weight, "must be a number")
                weight = None
            prof.plugins.append(
                SchedulingPluginRef(
                    d.string(r.get("pluginRef"), f"{where}.pluginRef"),
                    None if weight is None else float(weight),
                )
            )
        cfg.scheduling_profiles.append(prof)
    if top.get("dataLayer") is not None:
        cfg.data_layer = _decode_data_layer(d, top["dataLayer"])
    if top.get("flowControl") is not None:
        cfg.flow_control = _decode_flow_control(d, top["flowControl"])
    if top.get("requestHandler") is not None:
        rh = d.mapping(top["requestHandler"], d.at("requestHandler"), ("parsers",))
        if rh is not None:
            for i, p in enumerate(d.seq(rh.get("parsers"), d.at("requestHandler", "parsers"))):
                d.ref(p, d.at("requestHandler", "parsers", i))
            cfg.request_handler = dict(rh)
    # Deprecated top-level fields move to their new homes unless those are set.
    if top.get("saturationDetector") is not None:
        sd = d.ref(top["saturationDetector"], d.at("saturationDetector"))
        if sd is not None:
            fc = dict(cfg.flow_control or {})
            fc.setdefault("saturationDetector", sd)
            cfg.flow_control = fc
    if top.get("parser") is not None:
        pc = d.ref(top["parser"], d.at("parser"))
        if pc is not None:
            rh2 = dict(cfg.request_handler or {})
            if not rh2.get("parsers"):
                rh2["parsers"] = [pc]
            cfg.request_handler = rh2
    if d.errors:
        raise InputRefused(d.errors)
    return cfg


def load_yaml(text: str, path: str = DEFAULT_CONFIG_PATH) -> EndpointPickerConfig:
    """Decode an ``EndpointPickerConfig`` from YAML text (empty text gives the default)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputRefused.one(path, text[:80], f"not valid YAML: {exc}") from exc
    if doc is not None and not isinstance(doc, Mapping):
        raise InputRefused.one(path, doc, "an EndpointPickerConfig must be a mapping")
    return decode_config(doc, path)
