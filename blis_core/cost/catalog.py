"""The catalog: hardware, fabric and model-architecture facts (design §3.3, §9).

The catalog is data. By default it is the copy embedded in blis-core
(``blis_core/data/catalog/*.yaml``); a directory path replaces the embedded copy
entirely. A path load and an embedded load of the same data give the same
:attr:`Catalog.content_hash`, because the hash is taken over the canonical parsed
content, never over file bytes.

File format: each ``*.yaml`` file holds ``kind`` (``hardware``, ``fabrics`` or
``models``) and ``entries``, a list of documents with the contract's field names
(:class:`~blis_core.contracts.catalog.HardwareSpec`, ``FabricSpec``,
``ModelArchitecture``). A numeric field may be written as a quantity with its unit
(``80 GiB``, ``3.35 TB/s``, ``989.5 TFLOP/s``, ``700 W``, ``3 us``); the loader converts
it to the field's unit. Refused, naming the file, the key and the cause: two entries
for one key, an unknown unit, an unknown ``kind``, an entry that fails validation.
YAML is read with the safe loader only (``load_packaged_yaml``: libyaml when present).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from blis_core.contracts.catalog import (
    AttentionKind,
    FabricSpec,
    HardwareSpec,
    MachineSpec,
    MLASpec,
    ModelArchitecture,
    MoESpec,
)
from blis_core.contracts.cost import load_packaged_yaml
from blis_core.contracts.errors import FieldError, InputRefused

__all__ = [
    "Catalog",
    "catalog_entry_yaml",
    "content_hash",
    "load_catalog",
    "model_from_hf_config",
    "parse_quantity",
    "read_yaml_documents",
    "write_model",
]

EMBEDDED_CATALOG = "data/catalog"

# Unit tables: dimension -> unit spelling -> factor to the field's base unit.
_BYTES = {
    "B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
    "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
}  # fmt: skip
_UNITS: dict[str, dict[str, float]] = {
    "bytes": _BYTES,
    "bytes_per_s": {f"{u}/s": f for u, f in _BYTES.items()},
    "flops_per_s": {
        "FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15,
        "TOP/s": 1e12, "POP/s": 1e15,
    },
    "us": {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6},
    "watts": {"W": 1.0, "kW": 1e3},
}  # fmt: skip
_QUANTITY = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]+)\s*$")

# Which dimension each quantity-bearing field has, per kind.
_FIELD_DIMS: dict[str, dict[str, str]] = {
    "hardware": {
        "memory_bytes": "bytes",
        "usable_memory_bytes": "bytes",
        "memory_bandwidth_bytes_per_s": "bytes_per_s",
        "peak_flops": "flops_per_s",
        "tdp_watts": "watts",
    },
    "fabrics": {"bandwidth_bytes_per_s": "bytes_per_s", "latency_us": "us"},
    "models": {},
    "machines": {"host_memory_bytes": "bytes"},
}
_INT_FIELDS = {"memory_bytes", "usable_memory_bytes", "host_memory_bytes"}
_KINDS: dict[str, tuple[type[BaseModel], str]] = {
    "hardware": (HardwareSpec, "id"),
    "fabrics": (FabricSpec, "id"),
    "models": (ModelArchitecture, "hf_id"),
    "machines": (MachineSpec, "id"),
}


def parse_quantity(value: object, dimension: str, path: str, source: str) -> float:
    """A number, or a ``"<number> <unit>"`` string, converted to ``dimension``'s base unit.

    Refuses (InputRefused naming ``path``) an unknown unit, a unit of another dimension,
    a non-numeric value and a non-finite number.
    """
    if isinstance(value, bool):
        raise InputRefused.one(path, value, "expected a number or a quantity", source)
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        m = _QUANTITY.match(value)
        if m is None:
            raise InputRefused.one(path, value, "not a quantity '<number> <unit>'", source)
        units = _UNITS[dimension]
        if m.group(2) not in units:
            raise InputRefused.one(
                path, value, f"unknown unit {m.group(2)!r}; known: {sorted(units)}", source
            )
        number = float(m.group(1)) * units[m.group(2)]
    else:
        raise InputRefused.one(path, value, "expected a number or a quantity", source)
    if not math.isfinite(number):
        raise InputRefused.one(path, value, "not a finite number", source)
    return number


def read_yaml_documents(package: str, path: Path | None) -> Iterator[tuple[str, Any]]:
    """Yield ``(file label, parsed YAML)`` for every ``*.yaml`` file, sorted by name.

    ``path`` None reads the embedded folder ``package`` (relative to ``blis_core``);
    a directory reads its files; a single file reads that file. Refuses a missing
    path, a directory without YAML and YAML that does not parse.
    """
    if path is None:
        root = resources.files("blis_core").joinpath(package)
        items = sorted(
            (p for p in root.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name
        )
        for item in items:
            label = f"<embedded>/{item.name}"
            yield label, _safe_load(item.read_text(encoding="utf-8"), label)
        return
    if not path.exists():
        raise InputRefused.one("path", str(path), "no such file or directory")
    files = [path] if path.is_file() else sorted(path.glob("*.yaml"))
    if not files:
        raise InputRefused.one("path", str(path), "directory holds no *.yaml file")
    for f in files:
        yield str(f), _safe_load(f.read_text(encoding="utf-8"), str(f))


def _safe_load(text: str, label: str) -> Any:
    try:
        return load_packaged_yaml(text)
    except yaml.YAMLError as exc:
        raise InputRefused.one("<document>", None, f"YAML does not parse: {exc}", label) from exc


def _model_doc(model: ModelArchitecture) -> dict[str, object]:
    """A model's canonical document; optional fields added later are left out while
    unset, so adding one keeps the hash of every catalog that does not use it."""
    doc: dict[str, object] = model.model_dump(mode="json")
    if doc.get("draft_vocab_size") is None:
        doc.pop("draft_vocab_size", None)
    return doc


def content_hash(content: object) -> str:
    """SHA-256 of the canonical JSON of parsed content (sorted keys, no whitespace)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Catalog:
    """Validated catalog content, keyed by id; ``origin`` says where it came from."""

    hardware: Mapping[str, HardwareSpec]
    fabrics: Mapping[str, FabricSpec]
    models: Mapping[str, ModelArchitecture]
    content_hash: str
    origin: str
    machines: Mapping[str, MachineSpec] = field(default_factory=dict)

    def model(self, hf_id: str) -> ModelArchitecture:
        """The architecture of ``hf_id``; refuses an unknown model, listing the known ones."""
        try:
            return self.models[hf_id]
        except KeyError:
            raise InputRefused.one(
                "model", hf_id, f"unknown model; catalog has {sorted(self.models)}"
            ) from None

    def chip(self, hardware_id: str) -> HardwareSpec:
        """The facts of accelerator ``hardware_id``; refuses an unknown chip."""
        try:
            return self.hardware[hardware_id]
        except KeyError:
            raise InputRefused.one(
                "hardware", hardware_id, f"unknown hardware; catalog has {sorted(self.hardware)}"
            ) from None

    def die_siblings(self, hardware_id: str) -> tuple[str, ...]:
        """The other chips built on ``hardware_id``'s die (none when its die is unset or
        unknown): the chips whose fitted entries may price it, transferred. Nearest first:
        by the ratio of their memory bandwidths (the H100 PCIe's HBM2e is nearer the H100
        SXM's than the H200's), then by id; a key fitted on several is priced from the
        nearest (:meth:`~blis_core.cost.registry.Registry.best`)."""
        hw = self.hardware.get(hardware_id)
        if hw is None or hw.die is None:
            return ()
        bandwidth = hw.memory_bandwidth_bytes_per_s
        return tuple(
            sorted(
                (k for k, v in self.hardware.items() if v.die == hw.die and k != hardware_id),
                key=lambda k: (
                    abs(math.log(self.hardware[k].memory_bandwidth_bytes_per_s / bandwidth)),
                    k,
                ),
            )
        )

    def fabric(self, fabric_id: str) -> FabricSpec:
        """The facts of link kind ``fabric_id``; refuses an unknown fabric."""
        try:
            return self.fabrics[fabric_id]
        except KeyError:
            raise InputRefused.one(
                "fabric", fabric_id, f"unknown fabric; catalog has {sorted(self.fabrics)}"
            ) from None

    def machine(self, machine_id: str) -> MachineSpec:
        """The facts of box ``machine_id``; refuses an unknown machine."""
        try:
            return self.machines[machine_id]
        except KeyError:
            raise InputRefused.one(
                "machine", machine_id, f"unknown machine; catalog has {sorted(self.machines)}"
            ) from None


def _convert_entry(kind: str, raw: Mapping[str, Any], path: str, label: str) -> dict[str, Any]:
    dims = _FIELD_DIMS[kind]
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dim = dims.get(str(key))
        if dim is None or value is None:
            out[str(key)] = value
        elif isinstance(value, Mapping):
            out[str(key)] = {
                str(k): parse_quantity(v, dim, f"{path}.{key}.{k}", label) for k, v in value.items()
            }
        else:
            number = parse_quantity(value, dim, f"{path}.{key}", label)
            out[str(key)] = round(number) if key in _INT_FIELDS else number
    return out


def load_catalog(path: Path | None = None) -> Catalog:
    """Load the embedded catalog (``path`` None) or the catalog in directory ``path``.

    A directory replaces the embedded copy entirely. Refuses (InputRefused naming file,
    key and cause) two entries for one key, unknown units or kinds, invalid entries and
    a hardware entry naming a fabric the catalog lacks.
    """
    tables: dict[str, dict[str, BaseModel]] = {k: {} for k in _KINDS}
    where: dict[tuple[str, str], str] = {}
    errors: list[tuple[str, FieldError]] = []
    for label, doc in read_yaml_documents(EMBEDDED_CATALOG, path):
        if not isinstance(doc, Mapping) or set(doc) != {"kind", "entries"}:
            raise InputRefused.one("<document>", None, "expected keys 'kind' and 'entries'", label)
        kind = doc["kind"]
        if kind not in _KINDS:
            raise InputRefused.one("kind", kind, f"unknown kind; known: {sorted(_KINDS)}", label)
        cls, key_field = _KINDS[kind]
        entries = doc["entries"]
        if not isinstance(entries, list):
            raise InputRefused.one("entries", entries, "expected a list", label)
        for i, raw in enumerate(entries):
            path_i = f"entries.{i}"
            if not isinstance(raw, Mapping):
                raise InputRefused.one(path_i, raw, "expected a mapping", label)
            data = _convert_entry(kind, raw, path_i, label)
            try:
                entry = cls.model_validate(data)
            except ValidationError as exc:
                raise InputRefused(
                    [
                        FieldError(
                            f"{path_i}.{'.'.join(str(p) for p in e['loc'])}",
                            e.get("input"),
                            e["msg"],
                        )
                        for e in exc.errors()
                    ],
                    label,
                ) from None
            key = str(getattr(entry, key_field))
            if key in tables[kind]:
                errors.append(
                    (
                        label,
                        FieldError(
                            f"{path_i}.{key_field}",
                            key,
                            f"two entries for one key (first in {where[(kind, key)]})",
                        ),
                    )
                )
                continue
            tables[kind][key] = entry
            where[(kind, key)] = label
    if errors:
        raise InputRefused([e for _, e in errors], errors[0][0])
    hardware = {k: v for k, v in tables["hardware"].items() if isinstance(v, HardwareSpec)}
    fabrics = {k: v for k, v in tables["fabrics"].items() if isinstance(v, FabricSpec)}
    models = {k: v for k, v in tables["models"].items() if isinstance(v, ModelArchitecture)}
    machines = {k: v for k, v in tables["machines"].items() if isinstance(v, MachineSpec)}
    for hw in hardware.values():
        for fname in (hw.scale_up_fabric, hw.pcie_fabric):
            if fname is not None and fname not in fabrics:
                raise InputRefused.one(
                    f"hardware.{hw.id}.fabric",
                    fname,
                    "names a fabric the catalog lacks",
                    where[("hardware", hw.id)],
                )
    for m in machines.values():
        _check_machine(m, hardware, fabrics, where[("machines", m.id)])
    canonical: dict[str, object] = {
        "hardware": {k: _hardware_doc(v) for k, v in sorted(hardware.items())},
        "fabrics": {k: v.model_dump(mode="json") for k, v in sorted(fabrics.items())},
        "models": {k: _model_doc(v) for k, v in sorted(models.items())},
    }
    if machines:
        canonical["machines"] = {k: v.model_dump(mode="json") for k, v in sorted(machines.items())}
    return Catalog(
        hardware=hardware,
        fabrics=fabrics,
        models=models,
        content_hash=content_hash(canonical),
        origin="embedded" if path is None else str(path),
        machines=machines,
    )


def _check_machine(
    m: MachineSpec,
    hardware: Mapping[str, HardwareSpec],
    fabrics: Mapping[str, FabricSpec],
    label: str,
) -> None:
    """Refuse a machine naming a processor, accelerator or link the catalog lacks, or a
    host that is not a CPU / an accelerator that is one."""
    host = hardware.get(m.host)
    if host is None or host.processor != "cpu":
        why = "names no hardware entry" if host is None else "is not a host CPU (processor: cpu)"
        raise InputRefused.one(f"machines.{m.id}.host", m.host, why, label)
    for i, acc in enumerate(m.accelerators):
        hw = hardware.get(acc.hardware)
        if hw is None or hw.processor != "accelerator":
            why = "names no hardware entry" if hw is None else "is a host CPU, not an accelerator"
            raise InputRefused.one(
                f"machines.{m.id}.accelerators.{i}.hardware", acc.hardware, why, label
            )
        if acc.link not in fabrics:
            raise InputRefused.one(
                f"machines.{m.id}.accelerators.{i}.link",
                acc.link,
                "names a fabric the catalog lacks",
                label,
            )
    if m.storage is not None and m.storage not in fabrics:
        raise InputRefused.one(
            f"machines.{m.id}.storage", m.storage, "names a fabric the catalog lacks", label
        )


def _hardware_doc(hw: HardwareSpec) -> dict[str, object]:
    """A chip's canonical document; ``processor`` is left out for an accelerator and
    ``die`` when unset, so a catalog that states neither keeps its hash."""
    doc: dict[str, object] = hw.model_dump(mode="json")
    if doc.get("processor") == "accelerator":
        doc.pop("processor")
    if doc.get("die") is None:
        doc.pop("die")
    return doc


# ---------------------------------------------------------------------------------------
# The "new model" playbook: a Hugging Face config.json to a ModelArchitecture.
# ---------------------------------------------------------------------------------------


def _need(config: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` present in ``config``; refuses when none is."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    raise InputRefused.one(
        names[0], None, f"config.json lacks a needed field (tried {', '.join(names)})"
    )


def model_from_hf_config(
    config: Mapping[str, Any], hf_id: str, source: str | None = None
) -> ModelArchitecture:
    """Build a catalog entry from a Hugging Face ``config.json`` (already parsed).

    Reads architectures, hidden size, layers, heads (KV heads default to the attention
    heads, as transformers does), head_dim (default hidden/heads), FFN width, vocab,
    max_position_embeddings and dtype; detects MoE (Mixtral/Qwen-MoE/DeepSeek/gpt-oss
    field spellings), MLA (``kv_lora_rank``), sliding windows and ``layer_types``, and
    quantization (``quantization_config.quant_method``). Refuses (InputRefused naming
    the field) a config missing a needed field, and one that fails the contract.
    """
    cfg = dict(config)
    if isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg, **cfg["text_config"]}
    archs = _need(cfg, "architectures")
    if not isinstance(archs, list) or not archs:
        raise InputRefused.one("architectures", archs, "expected a non-empty list")
    hidden = int(_need(cfg, "hidden_size", "d_model", "n_embd"))
    layers = int(_need(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    heads = int(_need(cfg, "num_attention_heads", "n_head"))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = int(_need(cfg, "vocab_size"))
    max_pos = int(_need(cfg, "max_position_embeddings", "n_positions", "seq_length"))
    dtype = str(_need(cfg, "torch_dtype", "dtype"))
    quant = cfg.get("quantization_config")
    quant_method = str(quant.get("quant_method")) if isinstance(quant, Mapping) else None
    if quant_method == "fp8":
        dtype = "float8_e4m3fn"

    n_experts = (
        cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    )
    moe: MoESpec | None = None
    intermediate = int(cfg.get("intermediate_size") or 0)
    if n_experts:
        top_k = int(_need(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk"))
        expert_width = int(cfg.get("moe_intermediate_size") or _need(cfg, "intermediate_size"))
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        shared = int(cfg.get("n_shared_experts") or 0)
        moe = MoESpec(
            num_experts=int(n_experts),
            experts_per_token=top_k,
            expert_intermediate_size=expert_width,
            num_shared_experts=shared,
            shared_expert_intermediate_size=expert_width * shared,
            first_dense_layers=first_dense,
            dense_intermediate_size=intermediate if first_dense else 0,
        )
        if not first_dense:
            intermediate = 0
    elif not intermediate:
        intermediate = int(_need(cfg, "intermediate_size", "ffn_dim", "n_inner"))

    mla: MLASpec | None = None
    if cfg.get("kv_lora_rank"):
        mla = MLASpec(
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(_need(cfg, "qk_nope_head_dim")),
            qk_rope_head_dim=int(_need(cfg, "qk_rope_head_dim")),
            v_head_dim=int(_need(cfg, "v_head_dim")),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim

    layer_types = tuple(str(t) for t in cfg.get("layer_types") or ())
    window = cfg.get("sliding_window")
    use_window = cfg.get("use_sliding_window", True)
    sliding = int(window) if window and use_window else None
    if layer_types and "sliding_attention" not in layer_types:
        layer_types = ()
    if mla is not None:
        attention = AttentionKind.MLA
    elif sliding is not None and not layer_types:
        attention = AttentionKind.SLIDING_WINDOW
    else:
        attention = AttentionKind.MHA if kv_heads == heads else AttentionKind.GQA
    if layer_types and sliding is None:
        raise InputRefused.one("sliding_window", window, "layer_types names sliding layers")

    try:
        return ModelArchitecture(
            hf_id=hf_id,
            architecture=str(archs[0]),
            hidden_size=hidden,
            num_layers=layers,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=intermediate,
            vocab_size=vocab,
            max_position_embeddings=max_pos,
            attention=attention,
            sliding_window=sliding,
            layer_types=layer_types,
            moe=moe,
            mla=mla,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", False) or cfg.get("qkv_bias", False))
            or str(archs[0]).startswith("Qwen2"),
            attention_sinks=str(archs[0]).startswith("GptOss"),
            dtype=dtype,
            quantization=quant_method,
            num_mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
            draft_vocab_size=cfg.get("draft_vocab_size") or None,
            source=source or f"Hugging Face config.json of {hf_id}",
        )
    except ValidationError as exc:
        raise InputRefused(
            [
                FieldError(".".join(str(p) for p in e["loc"]) or "config", e.get("input"), e["msg"])
                for e in exc.errors()
            ],
            hf_id,
        ) from None


def catalog_entry_yaml(model: ModelArchitecture) -> str:
    """The YAML text of one models-file entry (a one-element ``entries`` list item)."""
    return yaml.safe_dump([model.model_dump(mode="json")], sort_keys=False, width=100)


def write_model(directory: Path, model: ModelArchitecture) -> Path:
    """Add ``model`` to the catalog directory ``directory`` and return the file written.

    An empty or missing directory is first seeded with a copy of the embedded catalog,
    because a directory replaces the embedded copy. The entry goes into ``models.yaml``
    (created when absent). Refuses a model id the directory's catalog already has; the
    directory is re-loaded afterwards, so a write never leaves an ambiguous catalog.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if not any(directory.glob("*.yaml")):
        for item in resources.files("blis_core").joinpath(EMBEDDED_CATALOG).iterdir():
            if item.name.endswith(".yaml"):
                (directory / item.name).write_text(item.read_text(encoding="utf-8"))
    existing = load_catalog(directory)
    if model.hf_id in existing.models:
        raise InputRefused.one("--id", model.hf_id, f"catalog {directory} already has this model")
    target = directory / "models.yaml"
    if target.exists():
        doc = _safe_load(target.read_text(encoding="utf-8"), str(target))
        if not isinstance(doc, dict) or doc.get("kind") != "models":
            raise InputRefused.one("kind", None, "models.yaml is not a models file", str(target))
        doc["entries"] = [*doc["entries"], model.model_dump(mode="json")]
    else:
        doc = {"kind": "models", "entries": [model.model_dump(mode="json")]}
    target.write_text(yaml.safe_dump(doc, sort_keys=False, width=100), encoding="utf-8")
    load_catalog(directory)
    return target
