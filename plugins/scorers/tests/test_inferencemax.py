"""The inferencemax adapter: sweep points as closed-loop scenarios, unrunnable ones G5."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from blis_conformance import GroundTruthAdapterConformance
from blis_core.cli import main

from blis_scorers import INFERENCEMAX as ADAPTER


def _entry(**kw: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "hw": "h100",
        "conc": 4,
        "image": "vllm/vllm-openai:v0.11.2",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "framework": "vllm",
        "precision": "bf16",
        "isl": 256,
        "osl": 64,
        "tp": 1,
        "ep": 1,
        "dp_attention": "false",
        "disagg": False,
        "output_tput_per_gpu": 900.0,
        "mean_ttft": 0.03,
        "median_ttft": 0.028,
        "p99_ttft": 0.06,
        "mean_tpot": 0.0065,
        "median_tpot": 0.0064,
        "p99_tpot": 0.007,
        "mean_itl": 0.0065,
        "median_itl": 0.0063,
        "p99_itl": 0.009,
        "mean_e2el": 0.45,
        "median_e2el": 0.44,
        "p99_e2el": 0.5,
    }
    e.update(kw)
    return e


def _write(folder: Path, entries: list[dict[str, Any]]) -> Path:
    run = folder / "run_1"
    run.mkdir(parents=True)
    (run / "agg_bmk.json").write_text(json.dumps(entries))
    return folder


class TestConformance(GroundTruthAdapterConformance):
    adapter = ADAPTER

    def make_sample(self, folder: Path) -> Path:
        return _write(folder, [_entry(), _entry(conc=8)])


def test_a_sweep_point_is_a_closed_loop_run_of_conc_times_ten_requests(tmp_path: Path) -> None:
    folder = _write(tmp_path / "d", [_entry(conc=8, isl=1000, osl=100, tp=2)])
    (p,) = ADAPTER.load(folder, tmp_path)
    wl = p.scenario.workload
    assert wl.arrival.max_concurrency == 8 and wl.num_requests == 80
    assert (wl.input_len.min, wl.input_len.max) == (800, 1000)
    assert p.engine == "vllm@0.11.2"
    assert p.aggregates["output_tokens_per_s.rate"] == 1800.0  # per GPU x 2 GPUs
    assert p.aggregates["itl.p99"] == 0.009
    pool = p.scenario.deployment.pools[0]
    assert (pool.hardware, pool.args["max_num_seqs"]) == ("H100-SXM", 8)
    assert p.estimated["server arguments"].startswith("vLLM's defaults")


def test_gpt_oss_on_hopper_with_vllm_0_13_runs_inferencemax_launch_arguments(
    tmp_path: Path,
) -> None:
    """InferenceX@4e52ed4c6 gptoss_fp4_<chip>_*.sh: the arguments the 0.13.0 runs passed
    (what blis-vllm cannot take named); other images keep vLLM's defaults."""
    gptoss = {
        "model": "openai/gpt-oss-120b",
        "precision": "fp4",
        "image": "vllm/vllm-openai:v0.13.0",
    }
    entries = [
        _entry(hw="h200", isl=1024, osl=8192, conc=16, tp=8, **gptoss),
        _entry(hw="h100", isl=1024, osl=1024, conc=4, tp=8, **gptoss),
        _entry(hw="h200", isl=1024, osl=1024, conc=4, tp=8, **{**gptoss, "image": "v0.11.0"}),
        _entry(hw="b200", isl=1024, osl=1024, conc=4, tp=8, **gptoss),
    ]
    h200, h100, older, b200 = ADAPTER.load(_write(tmp_path / "d", entries), tmp_path)
    args = h200.scenario.deployment.pools[0].args
    assert args == {
        "max_num_seqs": 16, "enable_prefix_caching": False, "async_scheduling": True,
        "max_cudagraph_capture_size": 2048, "max_num_batched_tokens": 8192,
        "max_model_len": 1024 + 8192 + 200, "moe_backend": "marlin",
    }  # fmt: skip
    assert "gptoss_fp4_h200_slurm.sh" in h200.estimated["server arguments"]
    h100_args = h100.scenario.deployment.pools[0].args
    assert (h100_args["max_model_len"], h100_args["moe_backend"]) == (10240, "marlin")
    assert (
        "VLLM_MXFP4_USE_MARLIN=1, the expert kernel, passed as moe_backend marlin"
        in (h100.estimated["server arguments"])
    )
    older_args = older.scenario.deployment.pools[0].args
    assert older_args == {"max_num_seqs": 4, "enable_prefix_caching": False}
    b200_args = b200.scenario.deployment.pools[0].args
    assert (b200_args["kv_cache_dtype"], b200_args["max_num_seqs"]) == ("fp8", 512)
    assert b200_args["moe_backend"] == "flashinfer_trtllm"
    b200_text = b200.estimated["server arguments"]
    assert "fuse_allreduce_rms" in b200_text  # named, not passed
    assert "kernel passed as moe_backend flashinfer_trtllm" in b200_text
    assert "MXFP8 activations of VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8" in b200_text  # not passed


def test_gpt_oss_launch_arguments_plan_the_expert_kernel_each_launch_selected(
    tmp_path: Path,
) -> None:
    """The vLLM port takes the passed ``moe_backend``: the Hopper points' experts run
    vLLM's Marlin MXFP4 path (the fitted entries' key), the B200's FlashInfer TRT-LLM."""
    from blis_core.contracts.engine import EnginePoolSpec
    from blis_core.contracts.plan import LayerKind
    from blis_core.runner import DataSources, make_host
    from blis_core.runner.environment import make_environment
    from blis_core.sim.rng import RandomStreams

    gptoss = {
        "model": "openai/gpt-oss-120b",
        "precision": "fp4",
        "image": "vllm/vllm-openai:v0.13.0",
    }
    entries = [_entry(hw=hw, isl=1024, osl=1024, conc=4, tp=2, **gptoss) for hw in ("h100", "b200")]
    host = make_host()
    sources = DataSources.load(None, None, host)
    factory = host.select_engine("vllm", "0.33.0")
    got = {}
    for point in ADAPTER.load(_write(tmp_path / "d", entries), tmp_path):
        spec = point.scenario.deployment.pools[0]
        pool = EnginePoolSpec(pool="p", model=spec.model, hardware=spec.hardware,
                              layout=spec.layout, args=dict(spec.args))  # fmt: skip
        plan = factory.plan(pool, make_environment(sources, "plan", RandomStreams(0)))
        (moe,) = [x for x in plan.layers if x.kind is LayerKind.MOE]
        got[spec.hardware] = (moe.impl, moe.kernels)
    assert got == {"H100-SXM": ("FusedMoE:marlin", 7), "B200": ("FusedMoE:flashinfer_trtllm", 4)}


def test_blis_score_scores_what_it_can_and_grades_the_rest_g5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(tmp_path / "d", [_entry(), _entry(model="zai-org/GLM-4.6", precision="fp8")])
    assert main(["score", str(folder), "--json", "-", "--jobs", "1"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    ok = next(p for u, p in points.items() if "Llama" in u)
    bad = next(p for u, p in points.items() if "GLM" in u)
    assert ok["status"] == "scored" and ok["grade"] == "G4"
    assert ok["substitutions"][0] == "engine release vllm@0.11.2; scored with vllm@0.33.0"
    assert bad["grade"] == "G5" and "zai-org/GLM-4.6" in bad["reason"]


def test_an_sglang_point_runs_on_the_sglang_port_with_inferencemax_launch_arguments(
    tmp_path: Path,
) -> None:
    folder = _write(
        tmp_path / "d",
        [
            _entry(
                framework="sglang",
                image="lmsysorg/sglang:v0.5.6-cu129-amd64",
                model="deepseek-ai/DeepSeek-R1-0528",
                hw="h200",
                tp=8,
                precision="fp8",
                isl=1024,
                osl=8192,
            )
        ],
    )
    (p,) = ADAPTER.load(folder, tmp_path)
    assert p.engine == "sglang@0.5.6"
    pool = p.scenario.deployment.pools[0]
    assert (pool.engine.kind, pool.engine.version) == ("sglang", "0.5.23")
    assert pool.args["disable_radix_cache"] is True
    assert pool.args["max_running_requests"] == 256  # 512 only at 1k/1k
    assert "max_num_seqs" not in pool.args
    assert "dsr1_fp8_h200" in p.estimated["server arguments"]
    # SGLang 0.5.6 runs the prefill eager; the modelled 0.5.23 is told to, and says why
    assert pool.args["disable_prefill_cuda_graph"] is True
    assert "enable_piecewise_cuda_graph" in p.estimated["server arguments"]


def test_an_sglang_point_on_a_b200_keeps_its_launch_and_is_refused_by_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    point = _entry(framework="sglang", image="lmsysorg/sglang:v0.5.6-cu129-amd64", hw="b200",
                   model="deepseek-ai/DeepSeek-R1-0528", tp=8, precision="fp8")  # fmt: skip
    folder = _write(tmp_path / "d", [point])
    (p,) = ADAPTER.load(folder, tmp_path)
    assert p.scenario.deployment.pools[0].args["moe_runner_backend"] == "flashinfer_trtllm"
    assert main(["score", str(folder), "--json", "-", "--jobs", "1"]) == 0
    (scored,) = json.loads(capsys.readouterr().out)["points"].values()
    assert scored["grade"] == "G5" and "moe_runner_backend" in scored["reason"]
    # the field is modelled; the value selects FlashInfer's TRT-LLM runner, not counted
    assert "moe_runner_backend=flashinfer_trtllm with fp8_block experts" in scored["reason"]


def test_a_framework_without_a_port_keeps_its_own_release_and_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(tmp_path / "d", [_entry(framework="trt", image="nvcr.io/trtllm:1.2.0rc2")])
    (p,) = ADAPTER.load(folder, tmp_path)
    assert (p.scenario.deployment.pools[0].engine.version, p.engine) == ("1.2.0rc2", "trt@1.2.0rc2")
    assert main(["score", str(folder), "--json", "-", "--jobs", "1"]) == 0
    (point,) = json.loads(capsys.readouterr().out)["points"].values()
    assert point["grade"] == "G5" and "'trt' is not installed" in point["reason"]
