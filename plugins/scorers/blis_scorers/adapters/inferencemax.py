"""Ground truth from InferenceMAX / InferenceX sweep results (``agg_bmk.json``).

A file is a list of sweep points, each with ``hw`` (``h100``, ``h200``, ``b200``, ...),
``framework``, ``image`` (e.g. ``vllm/vllm-openai:v0.11.2``), ``model``, ``precision``,
``isl``, ``osl``, ``conc``, ``tp``, ``ep``, ``dp_attention``, ``disagg``, and statistics
in seconds: ``mean_/median_/p99_`` ``ttft``, ``tpot``, ``itl``, ``e2el``; throughput per
GPU (``output_tput_per_gpu``, tokens/s).

InferenceMAX's client (its README) is vLLM's ``benchmark_serving.py`` with ``--dataset-name
random --random-input-len ISL --random-output-len OSL --random-range-ratio 0.8
--num-prompts CONC*10 --max-concurrency CONC --request-rate inf --ignore-eos``.

* State: model, chip, TP (and EP), ISL/OSL, concurrency, the request count, the engine
  release from the image tag.
* Estimate: input and output lengths uniform in ``[0.8 x ISL, ISL]`` and ``[0.8 x OSL,
  OSL]`` (the range ratio as ``benchmark_serving.py`` before vLLM 0.9 read it); the
  server's arguments, not in the file: for gpt-oss on vLLM 0.13.0 on the H100, H200
  and B200 those of InferenceMAX's launch scripts of those runs (:func:`_vllm_launch`;
  the settings it cannot pass are named in each point's estimate), for other vLLM
  points its defaults with ``max_num_seqs`` = the concurrency and prefix caching off, for
  SGLang the arguments of InferenceMAX's
  DeepSeek-R1 launch script for the point's chip (``SemiAnalysisAI/InferenceX@d22bf9c``,
  ``benchmarks/dsr1_fp8_<chip>_*.sh``, :func:`_sglang_launch`; arguments blis-sglang
  refuses are kept, so such a point is refused by name; for SGLang 0.5.6 points also
  ``disable_prefill_cuda_graph``, since that release runs the prefill without CUDA
  graphs: :data:`SGLANG_EAGER_PREFILL`); the chip's id in the
  catalog. A framework is simulated by the release its engine plugin models
  (:data:`MODELLED`); the measured release is the point's ``engine``.
* A point BLIS cannot run (a framework without an engine plugin, a chip or model not in
  the catalog, a precision the engine refuses, disaggregation, DP attention) is kept and
  graded G5 with the refusal, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import MeasuredPoint

from blis_scorers.adapters.common import scenario_of

__all__ = ["ADAPTER", "InferenceMax"]

MODELLED: Final = {"vllm": "0.33.0", "sglang": "0.5.23"}
"""The release each framework's engine plugin models; another framework keeps its tag."""
RANGE_RATIO: Final = 0.8
PROMPTS_PER_CONC: Final = 10
CHIPS: Final = {
    "h100": "H100-SXM",
    "h200": "H200-SXM",
    "b200": "B200",
    "a100": "A100-80GB-SXM",
    "mi300x": "MI300X",
    "mi325x": "MI325X",
}
_GPTOSS_SCRIPTS: Final = "InferenceX@4e52ed4c6 (2026-01-02, the first with vLLM 0.13.0)"
_B200_UNPASSED: Final = (
    "the fuse_allreduce_rms and eliminate_noops compilation passes (blis-vllm models no "
    "compilation pass) and the MXFP8 activations of VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 "
    "(its FlashInfer TRT-LLM MXFP4 kernel is passed as moe_backend flashinfer_trtllm; in "
    "vLLM 0.33.0 that backend runs BF16 activations unless quantization_config asks for "
    "MXFP8, which blis-vllm does not model: the BF16-activation path is priced, one "
    "activation-quantize launch fewer)"
)
"""What InferenceMAX's gpt-oss vLLM 0.13.0 launch on the B200 (``gptoss_fp4_b200_*.sh``
at :data:`_GPTOSS_SCRIPTS`) sets that the adapter does not pass (named in each point's
estimate)."""
_MOE_BACKENDS: Final = {"h100": "marlin", "h200": "marlin", "b200": "flashinfer_trtllm"}
"""``moe_backend`` (vLLM 0.33.0) of the expert kernel each gpt-oss 0.13.0 launch selects:
``VLLM_MXFP4_USE_MARLIN=1`` on the Hopper chips (vLLM 0.33.0 has no such variable; its
``moe_backend: marlin`` selects the same Marlin MXFP4 path), FlashInfer's TRT-LLM MXFP4
kernel on the B200 (``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``)."""


def _gptoss_max_model_len(hw: str, isl: int, osl: int) -> int:
    """``max-model-len`` of the gpt-oss launch: 10240 on the H100; on the H200 (and B200)
    ISL + OSL + 20 at 1k/1k, + 200 where either is 8k, else 10240."""
    if hw != "h100":
        if (isl, osl) == (1024, 1024):
            return isl + osl + 20
        if 8192 in (isl, osl):
            return isl + osl + 200
    return 10240


def _vllm_launch(
    hw: str, model: str, tag: str, conc: int, isl: int, osl: int
) -> tuple[dict[str, Any], str]:
    """The engine arguments of a vLLM sweep point, and how they were chosen.

    gpt-oss on the H100, H200 and B200 with the vLLM 0.13.0 image: InferenceMAX's launch
    (``gptoss_fp4_<chip>_*.sh`` at :data:`_GPTOSS_SCRIPTS`; unchanged in what it passes
    to vLLM until the scripts were merged on 2026-01-22; earlier images ran other
    scripts, e.g. ``cudagraph_mode PIECEWISE`` with 0.11.0 at ``d22bf9c``). The expert
    kernel each launch selects is passed as ``moe_backend`` (:data:`_MOE_BACKENDS`):
    ``VLLM_MXFP4_USE_MARLIN=1`` (the H200 from that commit, the H100 from ``2ee1e0018``)
    is vLLM's Marlin MXFP4 path, ``marlin``, whose launches the chip's fitted ``moe_gemm``
    entry prices; the B200's FlashInfer MXFP4 kernel is ``flashinfer_trtllm``. What the
    B200's sets that blis-vllm does not model is named (:data:`_B200_UNPASSED`).
    Elsewhere: vLLM's defaults with ``max_num_seqs`` = the concurrency and prefix caching
    off."""
    if model.startswith("openai/gpt-oss") and hw in ("h100", "h200", "b200") and tag == "0.13.0":
        b200 = hw == "b200"
        args: dict[str, Any] = {
            "max_num_seqs": 512 if b200 else conc, "enable_prefix_caching": False,
            "async_scheduling": True, "max_cudagraph_capture_size": 2048,
            "max_num_batched_tokens": 8192, "max_model_len": _gptoss_max_model_len(hw, isl, osl),
            **({"kv_cache_dtype": "fp8"} if b200 else {}), "moe_backend": _MOE_BACKENDS[hw],
        }  # fmt: skip
        shown = ", ".join(f"{k} {v}" for k, v in args.items())
        script = "gptoss_fp4_b200_*.sh" if b200 else f"gptoss_fp4_{hw}_slurm.sh"
        marlin = "exports" if hw == "h200" else "exports from 2ee1e0018 (2026-01-12)"
        extra = (
            "; its FlashInfer MXFP4 expert kernel passed as moe_backend flashinfer_trtllm; "
            f"also sets {_B200_UNPASSED}: not passed"
            if b200
            else f"; {marlin} VLLM_MXFP4_USE_MARLIN=1, the expert kernel, passed as "
            "moe_backend marlin (vLLM 0.33.0's Marlin MXFP4 path, priced per launch by the "
            "chip's fitted moe_gemm entry)"
        )
        return args, f"InferenceMAX's gpt-oss launch ({_GPTOSS_SCRIPTS} {script}): {shown}{extra}"
    return (
        {"max_num_seqs": conc, "enable_prefix_caching": False},
        f"vLLM's defaults with max_num_seqs {conc}, prefix caching off",
    )


_STATS: Final = (("mean", "mean"), ("p50", "median"), ("p99", "p99"))
_METRICS: Final = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el"))
_KEYS: Final = ("hw", "conc", "model", "isl", "osl", "tp")


def _entries(path: Path) -> list[Mapping[str, Any]] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(doc, list) or not doc:
        return None
    if not all(isinstance(e, dict) and all(k in e for k in _KEYS) for e in doc):
        return None
    return doc


#: SGLang releases whose prefill runs without CUDA graphs by default (read in the 0.5.6
#: wheel's ``srt/server_args.py``: ``enable_piecewise_cuda_graph: bool = False``); the
#: modelled 0.5.23 captures prefill graphs unless ``disable_prefill_cuda_graph`` is set
SGLANG_EAGER_PREFILL = frozenset({"0.5.6"})


def _sglang_launch(hw: str, conc: int, isl: int, osl: int, ep: int) -> tuple[dict[str, Any], str]:
    """InferenceMAX's SGLang (DeepSeek-R1 FP8) launch arguments on chip ``hw``, read from
    ``SemiAnalysisAI/InferenceX@d22bf9c`` ``benchmarks/``; ``--cuda-graph-max-bs`` has no
    field in the modelled release and is left at its default. The H200's script names no
    ``--moe-runner-backend`` (``auto``: SGLang's Triton runner there); the B200's
    ``flashinfer_trtllm`` is passed, and refused by blis-sglang by its value."""
    if hw == "h200":  # dsr1_fp8_h200_slurm.sh
        running = 512 if (isl, osl) == (1024, 1024) else 256
        return {
            "disable_radix_cache": True, "max_running_requests": running,
            "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
            "mem_fraction_static": 0.82, "attention_backend": "flashinfer", "stream_interval": 10,
        }, "dsr1_fp8_h200_slurm.sh"  # fmt: skip
    if hw == "b200":  # dsr1_fp8_b200_docker.sh
        return {
            "max_running_requests": 128, "mem_fraction_static": 0.82,
            "kv_cache_dtype": "fp8_e4m3", "chunked_prefill_size": 32768,
            "max_prefill_tokens": 32768, "enable_flashinfer_allreduce_fusion": True,
            "scheduler_recv_interval": 30 if conc >= 16 else 10, "disable_radix_cache": True,
            "attention_backend": "trtllm_mla", "stream_interval": 30, "ep_size": ep,
            "moe_runner_backend": "flashinfer_trtllm", "quantization": "fp8",
        }, "dsr1_fp8_b200_docker.sh"  # fmt: skip
    if hw in ("mi300x", "mi325x"):  # dsr1_fp8_mi300x_slurm.sh, dsr1_fp8_mi325x_slurm.sh
        return {
            "mem_fraction_static": 0.8, "chunked_prefill_size": 196608,
            "num_continuous_decode_steps": 4, "max_prefill_tokens": 196608,
            "disable_radix_cache": True,
        }, f"dsr1_fp8_{hw}_slurm.sh"  # fmt: skip
    return {"disable_radix_cache": True}, "none for this chip: radix cache off, else defaults"


def _server_args(
    framework: str, hw: str, model: str, tag: str, conc: int, isl: int, osl: int, ep: int
) -> tuple[dict[str, Any], str]:
    """The engine arguments a sweep point's server ran with, and how they were chosen."""
    if framework == "sglang":
        args, script = _sglang_launch(hw, conc, isl, osl, ep)
        shown = ", ".join(f"{k} {v}" for k, v in args.items())
        how = f"InferenceMAX's SGLang launch (InferenceX@d22bf9c {script}): {shown}"
        if tag in SGLANG_EAGER_PREFILL:
            args = {**args, "disable_prefill_cuda_graph": True}
            how += (
                f"; disable_prefill_cuda_graph True: SGLang {tag} runs the prefill without "
                "CUDA graphs (server_args.py enable_piecewise_cuda_graph False by default), "
                "the modelled release graphs it unless told not to"
            )
        return args, how
    return _vllm_launch(hw, model, tag, conc, isl, osl)


class InferenceMax:
    """The ``inferencemax`` adapter (see the module doc)."""

    name = "inferencemax"
    description = "InferenceMAX/InferenceX agg_bmk.json sweeps (fixed concurrency, ISL/OSL)"

    def detect(self, path: Path) -> bool:
        """A JSON list of sweep points, or a folder (searched recursively) holding some."""
        if path.is_dir():
            return any(_entries(p) is not None for p in sorted(path.rglob("agg_bmk.json")))
        return path.suffix == ".json" and _entries(path) is not None

    def load(
        self, path: Path, work_dir: Path, *, max_requests: int | None = None
    ) -> list[MeasuredPoint]:
        """One point per sweep entry; ``max_requests`` does not apply (statistics only)."""
        files = sorted(path.rglob("agg_bmk.json")) if path.is_dir() else [path]
        points: list[MeasuredPoint] = []
        seen: set[str] = set()
        for f in files:
            entries = _entries(f)
            if entries is None:
                continue
            run = f.parent.name if path.is_dir() else f.stem
            for entry in entries:
                point = self._point(f, run, entry)
                if point.unit in seen:
                    continue  # the same sweep point in another copy of the run
                seen.add(point.unit)
                points.append(point)
        if not points:
            raise InputRefused.one("", str(path), "holds no InferenceMAX sweep point", str(path))
        return points

    def _point(self, path: Path, run: str, e: Mapping[str, Any]) -> MeasuredPoint:
        hw = str(e["hw"]).lower()
        conc, isl, osl, tp = int(e["conc"]), int(e["isl"]), int(e["osl"]), int(e["tp"])
        ep = int(e.get("ep", 1) or 1)
        framework = str(e.get("framework", "vllm"))
        # "v0.13.0" (vLLM's images), "v0.5.6-cu129-amd64" (SGLang's): the release only
        tag = str(e.get("image", "")).rsplit(":", 1)[-1].lstrip("v").split("-", 1)[0]
        engine = f"{framework}@{tag}" if tag else None
        model = str(e["model"])
        short = model.rsplit("/", 1)[-1]
        config = f"{hw}-{short}-{e.get('precision', '')}-tp{tp}-ep{ep}-isl{isl}-osl{osl}-c{conc}"
        unit = f"{run}/{config}"
        aggregates: dict[str, float] = {}
        for metric, key in _METRICS:
            for st, prefix in _STATS:
                v = e.get(f"{prefix}_{key}")
                if isinstance(v, int | float) and not isinstance(v, bool):
                    aggregates[f"{metric}.{st}"] = float(v)
        out_tput = e.get("output_tput_per_gpu")
        if isinstance(out_tput, int | float):
            aggregates["output_tokens_per_s.rate"] = float(out_tput) * tp * ep
        chip = CHIPS.get(hw, hw.upper())
        args, server = _server_args(framework, hw, model, tag, conc, isl, osl, ep)
        precision = str(e.get("precision", "")).lower()
        pool: dict[str, Any] = {
            "name": "pool",
            "engine": {"kind": framework, "version": MODELLED.get(framework, tag or "unknown")},
            "model": model,
            "hardware": chip,
            "layout": {"tp": tp, **({"ep": ep} if ep > 1 else {})},
            "args": args,
        }
        workload = {
            "arrival": {"process": "concurrency", "max_concurrency": conc},
            "input_len": {"family": "uniform", "min": round(RANGE_RATIO * isl), "max": isl},
            "output_len": {"family": "uniform", "min": round(RANGE_RATIO * osl), "max": osl},
            "num_requests": conc * PROMPTS_PER_CONC,
            "ignore_eos": True,
        }
        subs = ["statistics only (no per-request rows): compared sweep figures"]
        if precision not in ("", "bf16", "fp16"):
            subs.append(f"precision {precision}: priced as the catalog's checkpoint of the model")
        if e.get("disagg") or str(e.get("dp_attention", "false")).lower() == "true":
            subs.append("disaggregated serving / DP attention: not reproduced by this adapter")
        labels = {
            "experiment": run,
            "model": model,
            "hardware": chip,
            "tp": str(tp),
            "workload": f"isl{isl}-osl{osl}",
            "stage": f"c{conc}",
            "rate_per_s": "closed loop",
        }
        try:
            scenario = scenario_of(
                {
                    "name": f"score-{unit.replace('/', '-')}",
                    "seed": 1,
                    "description": f"InferenceMAX sweep point {unit}",
                    "deployment": {"pools": [pool]},
                    "workload": workload,
                },
                str(path),
            )
        except InputRefused as err:
            raise InputRefused(err.errors, f"{path} ({unit})") from None
        return MeasuredPoint(
            unit=unit,
            # the same configuration measured by another nightly run is a near-copy
            near_copies=f"inferencemax/{config}",
            adapter=self.name,
            source=str(path),
            scenario=scenario,
            requests=(),
            compared=(0, conc * PROMPTS_PER_CONC),
            engine=engine,
            recorded={k: e.get(k) for k in (*_KEYS, "ep", "framework", "image", "precision")},
            estimated={
                "lengths": f"uniform in [{RANGE_RATIO} x ISL, ISL] and [{RANGE_RATIO} x OSL, "
                "OSL] (random-range-ratio 0.8)",
                "server arguments": server,
                "hardware": f"{hw} -> {chip}",
            },
            substitutions=tuple(subs),
            labels=labels,
            aggregates=aggregates,
        )


ADAPTER: Final = InferenceMax()
