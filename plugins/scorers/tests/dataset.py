"""Writes small datasets in the inference-sim-training layout for the tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

NAME = "20990101-000000-llama-2-7b-tp1-general"

RowEdit = Callable[[int, dict[str, Any], dict[str, Any]], None]


def write_dataset(
    root: Path,
    *,
    stages: tuple[tuple[float, int], ...] = ((4.0, 50), (8.0, 25)),
    output_len: int = 32,
    timeout_s: float | None = None,
    edit: RowEdit | None = None,
    name: str = NAME,
) -> Path:
    """A dataset of one run: ``stages`` of (rate, duration s); rows follow the generator.

    Row ``i`` of a stage sends prompt ``i mod 100`` whose input is 150 + ``slot``;
    measured TTFT 30 ms and 8 ms per decode token. ``edit(i, request, truth)`` changes
    rows in place (failed rows, missing fields).
    """
    (root / "replay").mkdir(parents=True, exist_ok=True)
    server = root / "server" / name
    server.mkdir(parents=True, exist_ok=True)
    requests: list[dict[str, Any]] = []
    truth: list[dict[str, Any]] = []
    t_us = 0
    for rate, duration in stages:
        count = round(rate * duration)
        for k in range(count):
            i = len(requests)
            req = {
                "index": i,
                "arrival_time_us": t_us,
                "input_tokens": 150 + k % 100,
                "output_tokens": output_len,
                "prefix_group": "",
                "has_error": False,
            }
            tr = {
                "index": i,
                "has_error": False,
                "ttft_s": 0.03,
                "e2e_s": 0.03 + 0.008 * (output_len - 1),
            }
            if edit is not None:
                edit(i, req, tr)
            requests.append(req)
            truth.append(tr)
            t_us += round(1e6 / rate)
        t_us += 5_000_000
    config = {
        "tensor_parallelism": 1,
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "kv_blocks_total_gpu": 8000,
        "block_size": 16,
    }
    (root / "replay" / f"{name}.json").write_text(
        json.dumps({"config": config, "requests": requests})
    )
    (root / "replay" / f"{name}_ground_truth.json").write_text(json.dumps(truth))
    (server / "exp-config.yaml").write_text(
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\nmax_model_len: 4096\n"
        "max_num_batched_tokens: 2048\nmax_num_seqs: 128\napp: inference-perf\n"
    )
    profile = {
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {
                "num_unique_system_prompts": 10,
                "num_users_per_system_prompt": 10,
                "system_prompt_len": 100,
                "question_len": 50,
                "output_len": output_len,
            },
        },
        "load": {"type": "constant", "stages": [{"rate": r, "duration": d} for r, d in stages]},
        "server": {"ignore_eos": True, "type": "vllm"},
    }
    (server / "profile.yaml").write_text(json.dumps(profile))
    timeout = "null" if timeout_s is None else f"{timeout_s}"
    (server / "config.yaml").write_text(f"load:\n  type: constant\n  request_timeout: {timeout}\n")
    return root


def write_bench_result(
    path: Path,
    *,
    n: int = 60,
    rate: float | str = 8.0,
    start_times: bool = True,
    metadata: dict[str, Any] | None = None,
    errors: dict[int, str] | None = None,
    max_concurrency: int | None = None,
) -> Path:
    """A ``vllm bench serve --save-detailed`` result of ``n`` requests at ``rate``.

    Request ``i`` has 200 + 3i input and 64 output tokens, TTFT 40 ms, 10 ms gaps.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    step = 0.0 if rate == "inf" else 1.0 / float(rate)
    errs = errors or {}
    doc: dict[str, Any] = {
        "date": "20261202-000000",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-2-7b-hf",
        "num_prompts": n,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": n * step + 1.0,
        "input_lens": [200 + 3 * i for i in range(n)],
        "output_lens": [0 if i in errs else 64 for i in range(n)],
        "ttfts": [0.0 if i in errs else 0.04 for i in range(n)],
        "itls": [[] if i in errs else [0.01] * 63 for i in range(n)],
        "latencies": [0.0 if i in errs else 0.04 + 0.63 for i in range(n)],
        "errors": [errs.get(i, "") for i in range(n)],
        **(
            metadata
            if metadata is not None
            else {"hardware": "H100-SXM", "tensor_parallel_size": 1}
        ),
    }
    if start_times:
        doc["start_times"] = [1000.0 + i * step for i in range(n)]
    path.write_text(json.dumps(doc))
    return path


def write_inference_perf(
    folder: Path,
    *,
    stages: tuple[tuple[float, int], ...] = ((4.0, 20),),
    exp_config: str | None = (
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\nhardware: H100-SXM\n"
        "max_num_seqs: 128\nmax_num_batched_tokens: 2048\nmax_model_len: 4096\n"
    ),
    timeout: float | None = None,
    failures: int = 0,
) -> Path:
    """An inference-perf report folder: config.yaml, exp-config.yaml, stage summaries."""
    folder.mkdir(parents=True, exist_ok=True)
    stage_yaml = "".join(f"  - rate: {r}\n    duration: {d}\n" for r, d in stages)
    (folder / "config.yaml").write_text(
        "api:\n  type: completion\n  streaming: true\ndata:\n  type: shared_prefix\n"
        "  shared_prefix:\n    num_groups: 2\n    num_prompts_per_group: 5\n"
        "    system_prompt_len: 100\n    question_len: 200\n    output_len: 32\n"
        f"load:\n  type: constant\n  stages:\n{stage_yaml}"
        f"  request_timeout: {'null' if timeout is None else timeout}\n"
        "server:\n  type: vllm\n  ignore_eos: true\n"
    )
    if exp_config is not None:
        (folder / "exp-config.yaml").write_text(exp_config)

    def stat(mean: float) -> dict[str, float]:
        return {"mean": mean, "median": mean, "p90": mean * 1.1, "p99": mean * 1.3}

    for i, (rate, duration) in enumerate(stages):
        n = int(rate * duration)
        doc = {
            "load_summary": {"count": n, "requested_rate": rate},
            "successes": {
                "count": n - failures,
                "latency": {
                    "time_to_first_token": stat(0.03),
                    "request_latency": stat(0.30),
                    "normalized_time_per_output_token": stat(0.30 / 32),
                    "time_per_output_token": stat(0.004),
                },
                "throughput": {"requests_per_sec": rate, "output_tokens_per_sec": rate * 32},
                "prompt_len": {"mean": 315.0},
                "output_len": {"mean": 32.0},
            },
            "failures": {"count": failures},
        }
        (folder / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps(doc))
    return folder
