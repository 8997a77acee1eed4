"""Machines in the catalog, GGUF weight sizes and the lowering of part of a model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.lowering import LoweringRequest
from blis_core.contracts.plan import LayerKind, ParallelLayout
from blis_core.cost import Catalog, SimEnvironment, load_catalog, memory
from blis_core.cost.gguf import GGML_TYPES, gguf_layout, gguf_problem

EMBEDDED = Path(__file__).resolve().parents[2] / "blis_core" / "data" / "catalog"
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA70B = "meta-llama/Llama-3.1-70B-Instruct"


def test_machines_name_their_host_accelerators_and_links(catalog: Catalog) -> None:
    laptop = catalog.machine("laptop-rtx3050ti-i9-12900hk")
    assert catalog.chip(laptop.host).processor == "cpu"
    assert laptop.host_memory_bytes == 31 * 2**30
    (gpu,) = laptop.accelerators
    assert catalog.chip(gpu.hardware).processor == "accelerator"
    assert catalog.fabric(gpu.link).kind == "pcie"
    server = catalog.machine("v100-sxm2-8x-e5-2680v4")
    assert server.host_sockets == 2 and server.accelerators[0].count == 8
    assert catalog.chip("V100-SXM2-16GB").usable_memory_bytes == 16_945_512_448
    for m in catalog.machines.values():
        assert m.source
    with pytest.raises(InputRefused, match="unknown machine"):
        catalog.machine("a-box")


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("host: Core-i9-12900HK", "host: RTX3050Ti-Laptop-4GB", "host"),
        ("host: Core-i9-12900HK", "host: Core-i9-99999", "host"),
        ("link: pcie4-x8}", "link: pcie9-x1}", "accelerators.0.link"),
        (
            "{hardware: RTX3050Ti-Laptop-4GB,",
            "{hardware: Core-i9-12900HK,",
            "accelerators.0.hardware",
        ),
    ],
)
def test_a_machine_naming_what_the_catalog_lacks_is_refused(
    tmp_path: Path, old: str, new: str, path: str
) -> None:
    d = tmp_path / "cat"
    shutil.copytree(EMBEDDED, d)
    text = (d / "machines.yaml").read_text()
    assert old in text
    (d / "machines.yaml").write_text(text.replace(old, new, 1))
    with pytest.raises(InputRefused) as exc:
        load_catalog(d)
    assert exc.value.errors[0].path == f"machines.laptop-rtx3050ti-i9-12900hk.{path}"


def test_a_catalog_without_host_processors_keeps_its_hash(tmp_path: Path) -> None:
    """``processor`` is left out of an accelerator's canonical document, so adding the
    field changed no hash of a catalog that has no host CPU."""
    d = tmp_path / "cat"
    shutil.copytree(EMBEDDED, d)
    (d / "machines.yaml").unlink()
    before = load_catalog(d).content_hash
    text = (d / "hardware.yaml").read_text()
    (d / "hardware.yaml").write_text(
        text.replace("    vendor: amd\n", "    vendor: amd\n    processor: accelerator\n")
    )
    assert "processor: accelerator" in (d / "hardware.yaml").read_text()
    assert load_catalog(d).content_hash == before


def test_gguf_q4_k_m_matches_the_sizes_jitllm_reports(catalog: Catalog) -> None:
    """samyfodil/jitllm docs/perf/current.md@05d794dd: Llama-3.1-8B Q4_K_M reads
    4,629,371,136 bytes a token (its own repacked format); block-paging.md@cd3ef386:
    Llama-3.3-70B Q4_K_M is 39.59 GiB; current.md: the 70B reads ~41.9 GB a token."""
    small = gguf_layout(catalog.model(LLAMA8B), "gguf:Q4_K_M")
    per_token = sum(small.blocks) + small.head
    assert per_token == pytest.approx(4_629_371_136, rel=0.005)
    # llama.cpp's use_more_bits: attn_v and ffn_down in Q6_K on 16 of 32 layers
    assert sorted(set(small.blocks)) == [122_716_160, 138_936_320]
    assert small.blocks.count(138_936_320) == 16
    big = gguf_layout(catalog.model(LLAMA70B), "gguf:Q4_K_M")
    assert round((big.embedding + sum(big.blocks) + big.head) / 2**30, 2) == 39.59
    assert sum(big.blocks) + big.head == pytest.approx(41.9e9, rel=0.005)


def test_gguf_uniform_types_and_refusals(catalog: Catalog) -> None:
    model = catalog.model(LLAMA8B)
    h, ff = model.hidden_size, model.intermediate_size
    q8 = gguf_layout(model, "gguf:Q8_0")
    assert q8.head_type == "Q8_0"
    assert q8.linear_bytes_per_weight() == pytest.approx(34 / 32)
    f16 = gguf_layout(model, "gguf:F16")
    assert f16.linear_bytes_per_weight() == 2.0 and f16.head_type == "F16"
    assert GGML_TYPES["Q4_K"] == (256, 144) and GGML_TYPES["Q6_K"] == (256, 210)
    assert f16.blocks[0] == 2 * (2 * h * h + 2 * 1024 * h + 3 * ff * h) + 2 * h * 4
    assert gguf_problem(model, "gguf:Q9_X") is not None
    assert "dense models" in (
        gguf_problem(catalog.model("Qwen/Qwen3-30B-A3B"), "gguf:Q4_K_M") or ""
    )
    q4 = gguf_layout(model, "gguf:Q4_K_M")
    total = sum(q4.blocks) + q4.embedding + q4.head
    assert memory.weight_bytes_per_rank(model, ParallelLayout(), None, "gguf:Q4_K_M") == total
    assert total < 5e9


def _request(**update: object) -> LoweringRequest:
    base = LoweringRequest(engine="toy@1.0", model=LLAMA8B, hardware="H100-SXM")
    return base.model_copy(update=update)


def test_lowering_a_layer_range_gives_that_part_of_the_model(env: SimEnvironment) -> None:
    whole = env.lower(_request())
    middle = env.lower(_request(layer_range=(4, 10), embedding=False, head=False))
    counts = {layer.kind: layer.count for layer in middle.layers}
    assert counts == {
        LayerKind.NORM: 12,
        LayerKind.QKV_PROJ: 6,
        LayerKind.ATTENTION: 6,
        LayerKind.O_PROJ: 6,
        LayerKind.MLP: 6,
        LayerKind.ELEMENTWISE: 6,
    }
    assert middle.kv_groups[0].num_layers == 6
    head = env.lower(_request(layer_range=(32, 32), embedding=False))
    assert [x.kind for x in head.layers] == [LayerKind.NORM, LayerKind.LOGITS, LayerKind.SAMPLER]
    # the parts' weights add up to the whole model's
    pieces = [
        env.lower(_request(layer_range=(0, 0), head=False)),
        *(
            env.lower(_request(layer_range=(i, i + 8), embedding=False, head=False))
            for i in range(0, 32, 8)
        ),
        head,
    ]
    total = sum(p.resident_weight_bytes or 0 for p in pieces)
    assert abs(total - (whole.resident_weight_bytes or 0)) <= len(pieces)


def test_lowering_refuses_a_bad_range_and_an_unknown_gguf_type(env: SimEnvironment) -> None:
    with pytest.raises(InputRefused, match="32 layers"):
        env.lower(_request(layer_range=(0, 40)))
    with pytest.raises(ValueError, match="start <= end"):
        _request(layer_range=(5, 2)).model_validate(_request(layer_range=(5, 2)).model_dump())
    with pytest.raises(InputRefused) as exc:
        env.lower(_request(quantization="gguf:Q4_Z"))
    assert exc.value.errors[0].path == "quantization"
    gguf = env.lower(_request(quantization="gguf:Q4_K_M"))
    assert gguf.quantization == "gguf:Q4_K_M"
    assert gguf.resident_weight_bytes == memory.weight_bytes_per_rank(
        env.model(LLAMA8B), ParallelLayout(), None, "gguf:Q4_K_M"
    )


def test_gguf_products_are_keyed_by_block_type_and_read_the_int8_rate(catalog: Catalog) -> None:
    from blis_core.cost.gguf import dtype_key
    from blis_core.cost.roofline import peak_flops

    assert [dtype_key(t) for t in ("Q4_K", "Q8_0", "F16", "BF16")] == [
        "gguf_q4_k",
        "gguf_q8_0",
        "fp16",
        "bf16",
    ]
    assert gguf_layout(catalog.model(LLAMA8B), "gguf:Q4_K_M").dtype_keys() == (
        "gguf_q4_k",
        "gguf_q6_k",
    )
    cpu = catalog.chip("Core-i9-12900HK")
    assert peak_flops(cpu, "gguf_q4_k") == cpu.peak_flops["int8"] == 3e12
    v100 = catalog.chip("V100-SXM2-16GB")  # no int8 rate stated: its 16-bit tensor rate
    assert peak_flops(v100, "gguf_q4_k") == v100.peak_flops["fp16"]
