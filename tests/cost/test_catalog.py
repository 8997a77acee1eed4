"""Catalog loading, hashing, refusals and the new-model playbook."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from blis_core.contracts.catalog import AttentionKind
from blis_core.contracts.errors import InputRefused
from blis_core.cost import Catalog, load_catalog, model_from_hf_config, write_model
from blis_core.cost.catalog import parse_quantity

EMBEDDED = Path(__file__).resolve().parents[2] / "blis_core" / "data" / "catalog"
CONFIGS = Path("/work/shared/data/ground-truth/inference-sim-training/model_configs")

CHIPS = ["H100-SXM", "H200-SXM", "A100-80GB-SXM", "B200", "L40S", "MI300X", "MI325X"]
MODELS = [
    "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf", "codellama/CodeLlama-34b-Instruct-hf",
    "mistralai/Mixtral-8x7B-v0.1", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b", "openai/gpt-oss-120b",
]  # fmt: skip


def test_embedded_catalog_has_every_required_entry(catalog: Catalog) -> None:
    assert set(CHIPS) <= set(catalog.hardware)
    assert set(MODELS) <= set(catalog.models)
    assert {
        "nvlink3",
        "nvlink4",
        "nvlink5",
        "pcie4-x16",
        "pcie5-x16",
        "pcie6-x16",
        "xgmi",
        "rdma-400g",
    } <= set(catalog.fabrics)
    for entry in [*catalog.hardware.values(), *catalog.fabrics.values(), *catalog.models.values()]:
        assert entry.source


def test_catalog_figures_match_catalog_facts(catalog: Catalog) -> None:
    h100 = catalog.chip("H100-SXM")
    assert h100.peak_flops["bf16"] == pytest.approx(989.5e12)
    assert h100.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert catalog.fabric("nvlink4").bandwidth_bytes_per_s == pytest.approx(450e9)
    assert catalog.chip("MI300X").peak_flops["fp8"] == pytest.approx(2614.9e12)
    oss = catalog.model("openai/gpt-oss-120b")
    assert oss.sliding_window == 128 and oss.layer_types.count("sliding_attention") == 18
    assert catalog.model("deepseek-ai/DeepSeek-V3").attention is AttentionKind.MLA


def test_a_chips_device_name_is_spelt_as_the_tuned_config_files_spell_it(
    catalog: Catalog,
) -> None:
    assert catalog.chip("H100-SXM").device_file_name == "NVIDIA_H100_80GB_HBM3"
    assert catalog.chip("MI300X").device_file_name == "AMD_Instinct_MI300X"
    assert catalog.chip("GH200-96GB").device_file_name is None  # not recorded


def test_path_load_gives_same_hash_as_embedded(catalog: Catalog, tmp_path: Path) -> None:
    for f in EMBEDDED.glob("*.yaml"):
        # reformat: same content, different bytes
        (tmp_path / f.name).write_text("# reformatted\n" + f.read_text())
    other = load_catalog(tmp_path)
    assert other.content_hash == catalog.content_hash
    assert other.origin == str(tmp_path)


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "cat"
    shutil.copytree(EMBEDDED, d)
    return d


def test_duplicate_key_refused(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    (d / "extra.yaml").write_text(
        "kind: fabrics\nentries:\n  - {id: nvlink4, kind: scale_up, bandwidth_bytes_per_s: 1 GB/s,"
        " latency_us: 1, source: x}\n"
    )
    with pytest.raises(InputRefused) as exc:
        load_catalog(d)
    assert "nvlink4" in str(exc.value) and "two entries" in str(exc.value)
    assert "extra.yaml" in str(exc.value)


def test_unknown_unit_refused(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    text = (d / "hardware.yaml").read_text().replace("3.35 TB/s", "3.35 TQ/s")
    (d / "hardware.yaml").write_text(text)
    with pytest.raises(InputRefused) as exc:
        load_catalog(d)
    err = exc.value.errors[0]
    assert err.path == "entries.0.memory_bandwidth_bytes_per_s" and err.value == "3.35 TQ/s"
    assert "unknown unit" in err.cause and "hardware.yaml" in exc.value.source


def test_quantity_parsing() -> None:
    assert parse_quantity("80 GiB", "bytes", "x", "f") == 80 * 2**30
    assert parse_quantity("3 ms", "us", "x", "f") == 3000.0
    with pytest.raises(InputRefused):
        parse_quantity("nan GB", "bytes", "x", "f")


def test_unknown_model_and_chip_refused(catalog: Catalog) -> None:
    with pytest.raises(InputRefused) as exc:
        catalog.model("acme/unknown")
    e = exc.value.errors[0]
    assert (e.path, e.value) == ("model", "acme/unknown") and "unknown model" in e.cause
    with pytest.raises(InputRefused) as exc:
        catalog.chip("TPU-v9")
    assert (
        exc.value.errors[0].path == "hardware" and "unknown hardware" in exc.value.errors[0].cause
    )


@pytest.mark.parametrize(
    "name", ["Llama-2-7b-hf", "Llama-2-70b-hf", "CodeLlama-34b-Instruct-hf", "Mixtral-8x7B-v0.1"]
)
def test_hf_config_playbook_matches_catalog(catalog: Catalog, name: str) -> None:
    if not CONFIGS.exists():
        pytest.skip("shared ground-truth configs not present")
    key = next(k for k in catalog.models if k.endswith(name))
    built = model_from_hf_config(json.loads((CONFIGS / name / "config.json").read_text()), key)
    embedded = catalog.model(key)
    # The tokenizer is named by the catalog, not by config.json.
    facts = {"source", "tokenizer"}
    assert built.model_dump(exclude=facts) == embedded.model_dump(exclude=facts)


def test_hf_config_missing_field_refused() -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_hidden_layers": 2,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 4096,
    }
    with pytest.raises(InputRefused) as exc:
        model_from_hf_config(config, "x/y")
    e = exc.value.errors[0]
    assert e.path == "vocab_size" and e.value is None and "lacks" in e.cause


def test_hf_config_deepseek_and_gptoss_shapes() -> None:
    ds = model_from_hf_config(
        {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
         "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
         "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
         "n_shared_experts": 1, "first_k_dense_replace": 3, "kv_lora_rank": 512,
         "q_lora_rank": 1536,
         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
         "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
         "quantization_config": {"quant_method": "fp8"}, "num_nextn_predict_layers": 1},
        "deepseek-ai/DeepSeek-V3",
    )  # fmt: skip
    assert ds.attention is AttentionKind.MLA and ds.moe is not None
    assert ds.moe.first_dense_layers == 3 and ds.intermediate_size == 18432
    assert ds.dtype == "float8_e4m3fn" and ds.num_mtp_layers == 1


def test_write_model_into_directory(tmp_path: Path) -> None:
    if not CONFIGS.exists():
        pytest.skip("shared ground-truth configs not present")
    cfg = json.loads((CONFIGS / "Llama-2-7b-hf" / "config.json").read_text())
    model = model_from_hf_config(cfg, "me/llama-copy")
    target = write_model(tmp_path / "cat", model)
    assert target.name == "models.yaml"
    assert "me/llama-copy" in load_catalog(tmp_path / "cat").models
    with pytest.raises(InputRefused):
        write_model(tmp_path / "cat", model)
