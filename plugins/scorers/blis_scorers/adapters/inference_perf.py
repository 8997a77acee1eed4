"""Ground truth from an inference-perf report folder (stage summaries only).

inference-perf writes, per load stage, ``stage_<i>_lifecycle_metrics.json``:
``successes.latency.{time_to_first_token, request_latency,
normalized_time_per_output_token}`` (mean, median, p90, p99, seconds),
``successes.throughput.{requests_per_sec, output_tokens_per_sec}``, ``successes.count``,
``failures.count`` and ``successes.prompt_len`` (the server's token counts). Its config
(``config.yaml``, else ``profile.yaml``) gives the load (``load.type``, ``load.stages``,
``load.request_timeout``), the data generator (``data.shared_prefix``) and
``server.ignore_eos``. Its ``time_per_output_token`` and ``inter_token_latency`` count
SSE events, not tokens, so they are not compared.

What served it: ``deployment.yaml`` beside the reports (a scenario's ``deployment``),
else ``exp-config.yaml`` (``model``, ``tensor_parallelism``, engine arguments) with a
``hardware`` key; without either the folder is refused by name.

Each stage is one point, simulated with the profile's own generator (BLIS models
inference-perf's ``shared_prefix`` and ``stages`` natively) from an empty engine, and
scored against the stage's statistics:

* State: the generator's parameters, the stage's rate, duration and load type, the
  client's timeout, ``ignore_eos``; the deployment as given.
* Estimate: ``token_inflation`` = the measured mean prompt length over the configured
  system prompt + question (older inference-perf re-tokenised its random text into more
  tokens); engine arguments not given take vLLM's defaults.
* Compared: TTFT and E2E (mean, p50, p90, p99), E2E per output token (p50, p90: the
  client's re-tokenised output counts make its mean and tail unreliable), completed
  requests/s and output tokens/s, and the completed/failed fractions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import MeasuredPoint

from blis_scorers.adapters.common import finite_number, read_deployment, scenario_of

__all__ = ["ADAPTER", "InferencePerf"]

ENGINE_VERSION: Final = "0.33.0"
_LATENCIES: Final = (
    ("ttft", "time_to_first_token", ("mean", "p50", "p90", "p99")),
    ("e2e", "request_latency", ("mean", "p50", "p90", "p99")),
    ("e2e_per_token", "normalized_time_per_output_token", ("p50", "p90")),
)
_STAT_KEYS: Final = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
_ENGINE_ARGS: Final = ("max_model_len", "max_num_batched_tokens", "max_num_seqs")


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputRefused.one("", str(path), f"cannot read: {exc}", str(path)) from exc


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


class InferencePerf:
    """The ``inference-perf`` adapter (see the module doc)."""

    name = "inference-perf"
    description = "inference-perf report folder: stage_N_lifecycle_metrics.json + config.yaml"

    def detect(self, path: Path) -> bool:
        """A folder with stage summaries and the config that produced them."""
        return (
            path.is_dir()
            and (path / "stage_0_lifecycle_metrics.json").is_file()
            and ((path / "config.yaml").is_file() or (path / "profile.yaml").is_file())
        )

    def load(
        self, path: Path, work_dir: Path, *, max_requests: int | None = None
    ) -> list[MeasuredPoint]:
        """One point per stage (``max_requests`` does not apply: the statistics cover
        every request of the stage)."""
        if not self.detect(path):
            raise InputRefused.one(
                "",
                str(path),
                "is not an inference-perf report folder "
                "(stage_0_lifecycle_metrics.json and config.yaml)",
                str(path),
            )
        src = str(path)
        cfg_path = (
            path / "config.yaml" if (path / "config.yaml").is_file() else path / "profile.yaml"
        )
        cfg = _yaml(cfg_path)
        stages = _get(cfg, "load", "stages")
        sp = _get(cfg, "data", "shared_prefix")
        if not isinstance(stages, list) or not stages:
            raise InputRefused.one(
                "load.stages", stages, "must list the load stages", str(cfg_path)
            )
        if _get(cfg, "data", "type") != "shared_prefix" or not isinstance(sp, dict):
            raise InputRefused.one(
                "data.type",
                _get(cfg, "data", "type"),
                "only the shared_prefix generator is modelled",
                str(cfg_path),
            )
        deployment, engine = self._deployment(path)
        timeout = finite_number(_get(cfg, "load", "request_timeout"))
        load_type = str(_get(cfg, "load", "type") or "constant")
        ignore_eos = bool(_get(cfg, "server", "ignore_eos"))
        points = []
        for i, stage in enumerate(stages):
            stats_path = path / f"stage_{i}_lifecycle_metrics.json"
            if not stats_path.is_file():
                raise InputRefused.one(f"load.stages.{i}", stage, f"has no {stats_path.name}", src)
            try:
                stats = json.loads(stats_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise InputRefused.one("", str(stats_path), f"cannot read: {exc}", src) from exc
            points.append(
                self._point(
                    path, i, stage, stats, sp, deployment, engine, timeout, load_type, ignore_eos
                )
            )
        return points

    def _point(
        self,
        path: Path,
        index: int,
        stage: Mapping[str, Any],
        stats: Mapping[str, Any],
        sp: Mapping[str, Any],
        deployment: dict[str, Any],
        engine: str | None,
        timeout: float | None,
        load_type: str,
        ignore_eos: bool,
    ) -> MeasuredPoint:
        aggregates: dict[str, float] = {}
        for metric, key, wanted in _LATENCIES:
            block = _get(stats, "successes", "latency", key)
            for st in wanted:
                v = finite_number(_get(block, _STAT_KEYS[st]))
                if v is not None:
                    aggregates[f"{metric}.{st}"] = v
        for metric, key in (
            ("completed_per_s", "requests_per_sec"),
            ("output_tokens_per_s", "output_tokens_per_sec"),
        ):
            v = finite_number(_get(stats, "successes", "throughput", key))
            if v is not None:
                aggregates[f"{metric}.rate"] = v
        ok = finite_number(_get(stats, "successes", "count")) or 0.0
        failed = finite_number(_get(stats, "failures", "count")) or 0.0
        if ok + failed > 0:
            aggregates["completed.fraction"] = ok / (ok + failed)
            kind = "timed_out" if timeout is not None else "dropped"
            aggregates[f"{kind}.fraction"] = failed / (ok + failed)
        estimated: dict[str, str] = {"engine arguments": "vLLM's defaults for any not given"}
        shared = dict(sp)
        prompt = finite_number(_get(stats, "successes", "prompt_len", "mean"))
        configured = (finite_number(sp.get("system_prompt_len")) or 0.0) + (
            finite_number(sp.get("question_len")) or 0.0
        )
        if prompt and configured and "token_inflation" not in shared:
            shared["token_inflation"] = round(prompt / configured, 4)
            estimated["token_inflation"] = (
                f"{shared['token_inflation']} = measured mean prompt {prompt:.1f} tokens / "
                f"configured {configured:g}"
            )
        workload: dict[str, Any] = {
            "arrival": {
                "process": "stages",
                "type": load_type,
                "stages": [{"rate": stage["rate"], "duration": stage["duration"]}],
            },
            "shared_prefix": shared,
            "ignore_eos": ignore_eos,
        }
        if timeout is not None:
            workload["request_timeout_s"] = timeout
        unit = f"{path.name}/stage-{index}"
        scenario = scenario_of(
            {
                "name": f"score-{path.name}-stage-{index}",
                "description": f"stage {index} of {path} ({self.name})",
                "seed": 1,
                "deployment": deployment,
                "workload": workload,
            },
            str(path),
        )
        n = math.floor(float(stage["rate"]) * float(stage["duration"]))
        pool = deployment["pools"][0]
        return MeasuredPoint(
            unit=unit,
            near_copies=path.name,  # the stages of one run
            adapter=self.name,
            source=str(path),
            scenario=scenario,
            requests=(),
            compared=(0, n),
            engine=engine,
            recorded={
                "stage": dict(stage),
                "request_timeout_s": timeout,
                "load.type": load_type,
                "ignore_eos": ignore_eos,
                "shared_prefix": dict(sp),
            },
            estimated=estimated,
            substitutions=(
                "statistics only (no per-request rows): compared stage figures",
                "each stage simulated from an empty engine (inference-perf drains between stages)",
            ),
            labels={
                "experiment": path.name,
                "model": str(pool.get("model", "")),
                "hardware": str(pool.get("hardware", "")),
                "tp": str((pool.get("layout") or {}).get("tp", 1)),
                "workload": "shared_prefix",
                "stage": str(index),
                "rate_per_s": f"{float(stage['rate']):g}",
            },
            aggregates=aggregates,
        )

    @staticmethod
    def _deployment(path: Path) -> tuple[dict[str, Any], str | None]:
        side = path / "deployment.yaml"
        if side.is_file():
            return read_deployment(side)
        exp_path = path / "exp-config.yaml"
        exp = _yaml(exp_path) if exp_path.is_file() else None
        if not isinstance(exp, dict) or not exp.get("hardware") or not exp.get("model"):
            raise InputRefused.one(
                "deployment",
                str(path),
                "the reports do not say what served them: write deployment.yaml beside them "
                "(pools: [{engine, model, hardware, layout, args}]), or give exp-config.yaml "
                "a model and a hardware",
                str(path),
            )
        args = {k: exp[k] for k in _ENGINE_ARGS if k in exp}
        version = exp.get("vllm_version")
        pool = {
            "name": "pool",
            "engine": {"kind": "vllm", "version": ENGINE_VERSION},
            "model": str(exp["model"]),
            "hardware": str(exp["hardware"]),
            "layout": {"tp": int(exp.get("tensor_parallelism", 1))},
            "args": args,
        }
        return {"pools": [pool]}, (f"vllm@{version}" if version else None)


ADAPTER: Final = InferencePerf()
