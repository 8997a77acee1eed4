"""The cost model's command line: output and exit status 2 on refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blis_core.cost.cli import main


def test_catalog_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "H100-SXM" in doc["hardware"] and "openai/gpt-oss-120b" in doc["models"]
    assert "v100-sxm2-8x-e5-2680v4" in doc["machines"]
    assert main(["catalog", "list"]) == 0
    text = capsys.readouterr().out
    assert "Core-i9-12900HK" in text and "(host cpu)" in text
    assert "8x V100-SXM2-16GB on pcie3-x16; disk nvme-gen4" in text


def test_cost_memory_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "cost",
        "memory",
        "--model",
        "meta-llama/Llama-2-7b-hf",
        "--hardware",
        "H100-SXM",
        "--json",
    ]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["weights_bytes_per_rank"] == 6_738_415_616 * 2
    assert doc["kv_bytes_per_token_per_rank"] == 16384 * 32


def test_cost_price(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shape = {
        "step_id": 3,
        "mode": "decode_only",
        "padded_tokens": 2,
        "seqs": [{"new_tokens": 1, "context_tokens": 100}, {"new_tokens": 1, "context_tokens": 7}],
    }
    f = tmp_path / "shape.json"
    f.write_text(json.dumps(shape))
    args = ["cost", "price", "--model", "meta-llama/Llama-2-70b-hf", "--hardware", "H100-SXM",
            "--tp", "4", "--shape", str(f), "--json"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["duration_us"] > 0 and {p["rank"] for p in doc["parts"]} >= {"calibrated"}


def test_cost_price_names_an_expert_paths_launches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--moe-impl``/``--moe-kernels`` price the MoE layers as an engine's selected
    expert path; the breakdown names its launches, and more launches cost more."""
    f = tmp_path / "shape.json"
    f.write_text(json.dumps({"step_id": 1, "mode": "decode_only", "padded_tokens": 8,
                             "seqs": [{"new_tokens": 1, "context_tokens": 500}] * 8}))  # fmt: skip
    base = ["cost", "price", "--model", "mistralai/Mixtral-8x7B-v0.1", "--hardware", "H100-SXM",
            "--tp", "2", "--shape", str(f), "--json", "--moe-impl", "FusedMoE:triton"]  # fmt: skip
    durations = {}
    for kernels in (1, 6):
        assert main([*base, "--moe-kernels", str(kernels)]) == 0
        doc = json.loads(capsys.readouterr().out)
        (moe,) = [p for p in doc["parts"] if p["family"] == "moe_gemm"]
        assert (moe["impl"], moe["launches"]) == ("experts:FusedMoE:triton", kernels)
        durations[kernels] = doc["duration_us"]
    assert durations[6] > durations[1]
    assert main([a for a in base if a != "--json"] + ["--moe-kernels", "6"]) == 0
    assert "(6 launches)" in capsys.readouterr().out
    dense = ["cost", "price", "--model", "meta-llama/Llama-2-7b-hf", "--hardware", "H100-SXM",
             "--shape", str(f), "--moe-kernels", "3"]  # fmt: skip
    assert main(dense) == 2
    assert "--moe-kernels" in capsys.readouterr().err


def test_refusals_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", "memory", "--model", "acme/none", "--hardware", "H100-SXM"]) == 2
    err = capsys.readouterr().err
    assert "model" in err and "acme/none" in err and "unknown model" in err
    assert "Traceback" not in err
    bad = tmp_path / "shape.json"
    bad.write_text(json.dumps({"step_id": 1, "mode": "mixed", "padded_tokens": 1,
                               "seqs": [{"new_tokens": 5, "context_tokens": 0}]}))  # fmt: skip
    args = ["cost", "price", "--model", "meta-llama/Llama-2-7b-hf", "--hardware", "H100-SXM",
            "--shape", str(bad)]  # fmt: skip
    assert main(args) == 2
    assert "shape.padded_tokens" in capsys.readouterr().err
    # Each problem by name: a missing field without the whole document as its value, an
    # unknown key (a misspelt field would otherwise be dropped silently) refused.
    bad.write_text(json.dumps({"step_id": 1, "mode": "mixed", "padded_tokns": 5,
                               "seqs": [{"new_tokens": 5, "context": 0}]}))  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "shape.padded_tokens: None: required field is missing" in err
    assert "shape.padded_tokns: 5: unknown field (not part of this document)" in err
    assert "shape.seqs.0.context: 0: unknown field (not part of this document)" in err
    assert "shape.seqs.0.context_tokens: None: required field is missing" in err
    assert "'mode'" not in err
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert main(["catalog", "add-model", str(cfg), "--id", "x/y"]) == 2
    assert "hidden_size" in capsys.readouterr().err


def test_add_model_writes_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16"}))  # fmt: skip
    assert (
        main(
            ["catalog", "add-model", str(cfg), "--id", "me/tiny", "--catalog", str(tmp_path / "c")]
        )
        == 0
    )
    assert main(["catalog", "list", "--catalog", str(tmp_path / "c"), "--json"]) == 0
    assert "me/tiny" in json.loads(capsys.readouterr().out.split("\n", 1)[1])["models"]
