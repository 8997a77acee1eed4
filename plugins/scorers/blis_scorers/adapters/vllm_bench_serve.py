"""Ground truth from ``vllm bench serve --save-result --save-detailed`` result files.

The result JSON (``vllm/benchmarks/serve.py``, vLLM 0.33.0) holds per request, in send
order: ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (s, one list per
request), ``latencies`` (E2E, s), ``start_times`` (send times, s, on the client's clock)
and ``errors`` (``""`` when it succeeded); and the traffic: ``request_rate`` (``"inf"``
or req/s), ``burstiness``, ``max_concurrency``, ``model_id``, plus any
``--metadata KEY=VALUE`` pairs.

The file does not say what served it. The deployment comes from, in order:

1. a ``deployment.yaml`` (or ``<stem>.deployment.yaml``) beside the file: a scenario's
   ``deployment`` mapping (``pools: [{engine, model, hardware, layout, args}]``), copied
   verbatim, less an optional ``replay`` mapping of BLIS's own replay choices:
   ``measured_engine`` (``kind@version``, the release that ran, where it is not the
   pool's: the point's ``engine``) and ``substitutions`` (strings, each named in the
   point's substitutions);
2. the ``--metadata`` keys ``hardware``, ``tensor_parallel_size`` (or ``tp``),
   ``vllm_version`` and ``engine_arg.<name>=<value>``, with ``model_id`` as the model.

Without a hardware the file is refused by name. The four steps:

* State: each request's input and output length and send time as measured; the model;
  the deployment as given. Each request's output length is forced (``ignore_eos`` with
  ``max_tokens`` = the measured length), so both sides generate the same tokens.
* Estimate: the engine arguments not given take vLLM's defaults (the engine's own
  resolution); the prompts' content is not recorded, so no two requests share a prefix.
* A run without ``start_times`` (older vLLM) is replayed only when every request was sent
  at once (``request_rate`` ``inf`` without ``max_concurrency``); otherwise refused.
* A run with ``max_concurrency`` (a closed loop) is replayed open loop at its measured
  send times: named as a substitution.
* A failed request (non-empty ``errors``) is ``timed_out`` when its error says so, else
  ``failed``; it is replayed (the server saw it) and compared by fate only.
* Statistics only: a file without ``itls`` (the per-request gaps left out, e.g. an
  extract of a large ``benchmark_serving.py`` result) that holds the printed summary
  (``duration``, ``mean_ttft_ms``, ``median_itl_ms``, ...) is compared by those figures:
  TPOT and ITL mean/median/P99, output tokens/s, requests/s as printed; TTFT
  mean/median/P99 recomputed from ``ttfts`` over the requests that streamed text (older
  clients record a request whose first token was EOS as output 0 with TTFT 0 and count
  it in the printed TTFT figures). Every request is replayed (one without output as one
  token: its prefill was served).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import MeasuredPoint, MeasuredRequest, RowRefusal

from blis_scorers.adapters.common import finite_number, read_deployment, scenario_of, short_repr

__all__ = ["ADAPTER", "VllmBenchServe"]

_PER_REQUEST: Final = ("input_lens", "output_lens", "ttfts", "itls")
_PRINTED: Final = ("duration", "completed", "output_throughput", "mean_tpot_ms", "median_itl_ms")
"""The printed figures a statistics-only file (no ``itls``) must hold."""
_PRINTED_STATS: Final = (("tpot", "tpot_ms"), ("itl", "itl_ms"))
ENGINE_VERSION: Final = "0.33.0"
_MAX_TOKENS: Final = 10_000_000  # far beyond any context a request can have


def _read(path: Path) -> Mapping[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


class VllmBenchServe:
    """The ``vllm-bench-serve`` adapter (see the module doc)."""

    name = "vllm-bench-serve"
    description = "vllm bench serve --save-result --save-detailed JSON (per-request TTFT/ITL)"

    def detect(self, path: Path) -> bool:
        """A JSON file with the per-request lists of a detailed result, or a folder of them."""
        if path.is_dir():
            return any(self._is_result(p) for p in sorted(path.glob("*.json")))
        return self._is_result(path)

    @staticmethod
    def _is_result(path: Path) -> bool:
        if path.suffix != ".json" or not path.is_file():
            return False
        doc = _read(path)
        return doc is not None and (
            all(k in doc for k in _PER_REQUEST)
            or (all(k in doc for k in _PER_REQUEST[:3]) and all(k in doc for k in _PRINTED))
        )

    def load(
        self, path: Path, work_dir: Path, *, max_requests: int | None = None
    ) -> list[MeasuredPoint]:
        """One point per result file (all requests compared, or the first ``max_requests``)."""
        if path.is_dir():
            files = sorted(p for p in path.glob("*.json") if self._is_result(p))
        else:
            files = [path]
        points = [self._point(f, work_dir, max_requests) for f in files]
        if not points:
            raise InputRefused.one("", str(path), "holds no vllm bench serve result", str(path))
        return points

    # ------------------------------------------------------------------ one file

    def _point(self, path: Path, work_dir: Path, max_requests: int | None) -> MeasuredPoint:
        doc = _read(path)
        src = str(path)
        if doc is None:
            raise InputRefused.one("", src, "cannot be read as a JSON object", src)
        if not isinstance(doc.get("input_lens"), list) or not doc["input_lens"]:
            raise InputRefused.one(
                "input_lens", short_repr(doc.get("input_lens")), "must be a non-empty list", src
            )
        n = len(doc["input_lens"])
        stats_only = "itls" not in doc
        if stats_only:
            for key in _PRINTED:
                if finite_number(doc.get(key)) is None:
                    raise InputRefused.one(
                        key,
                        short_repr(doc.get(key)),
                        "a file without itls is compared by its printed figures: must be a number",
                        src,
                    )
        for key in ("output_lens", "ttfts", "itls", "errors", "latencies", "start_times"):
            present = doc.get(key) is not None
            required = key in _PER_REQUEST and not (stats_only and key == "itls")
            if (present or required) and (not isinstance(doc.get(key), list) or len(doc[key]) != n):
                raise InputRefused.one(
                    key, short_repr(doc.get(key)), f"must be a list of {n} entries", src
                )
        errors = doc.get("errors") or [""] * n
        starts = doc.get("start_times")
        subs: list[str] = []
        rate = doc.get("request_rate")
        infinite = isinstance(rate, float) and rate == math.inf
        if not (rate in ("inf", None) or infinite or (finite_number(rate) or 0.0) > 0):
            raise InputRefused.one(
                "request_rate", short_repr(rate), "must be 'inf' or a rate > 0", src
            )
        concurrency = doc.get("max_concurrency")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise InputRefused.one(
                "max_concurrency", short_repr(concurrency), "must be null or an integer >= 1", src
            )
        if isinstance(starts, list) and not all(
            finite_number(t) is not None and 0 <= (finite_number(t) or 0.0) < 1e12 for t in starts
        ):
            raise InputRefused.one(
                "start_times", short_repr(starts), "must be send times in seconds (finite)", src
            )
        if isinstance(starts, list):
            t0 = min(float(s) for s in starts)
            send = [float(s) - t0 for s in starts]
            if concurrency:
                subs.append(
                    f"max_concurrency {concurrency} (a closed loop) replayed open loop "
                    "at the measured send times"
                )
        elif rate in ("inf", None) or finite_number(rate) == math.inf:
            if concurrency:
                raise InputRefused.one(
                    "start_times",
                    None,
                    "missing: a closed-loop run (max_concurrency) cannot be replayed without "
                    "its send times (rerun with --save-detailed on vLLM >= 0.11)",
                    src,
                )
            send = [0.0] * n
        else:
            raise InputRefused.one(
                "start_times",
                None,
                f"missing: the send times of a run at {rate} req/s are not recorded "
                "(rerun with --save-detailed on a vLLM that records start_times)",
                src,
            )
        refusals: list[RowRefusal] = []
        requests: list[MeasuredRequest] = []
        for i in range(n):
            n_in = finite_number(doc["input_lens"][i])
            if n_in is None or n_in < 1 or n_in > _MAX_TOKENS:
                refusals.append(
                    RowRefusal(
                        row=i,
                        field="input_lens",
                        value=short_repr(doc["input_lens"][i]),
                        cause="not a length >= 1; not replayed",
                    )
                )
                continue
            err = errors[i] if isinstance(errors[i], str) else ("error" if errors[i] else "")
            n_out = finite_number(doc["output_lens"][i]) or 0.0
            if n_out > _MAX_TOKENS or n_out < 0:
                refusals.append(
                    RowRefusal(
                        row=i,
                        field="output_lens",
                        value=short_repr(doc["output_lens"][i]),
                        cause=f"not a length in [0, {_MAX_TOKENS}]; not replayed",
                    )
                )
                continue
            ttft = finite_number(doc["ttfts"][i])
            itl = [] if stats_only else doc["itls"][i]
            itl = itl if isinstance(itl, list) else []
            gaps = tuple(g for g in (finite_number(x) for x in itl) if g is not None)
            if err:
                fate = "timed_out" if "timeout" in err.lower() else "failed"
                requests.append(MeasuredRequest(i, send[i], int(n_in), 0, fate, None, None))
                continue
            lat = doc.get("latencies")
            e2e = finite_number(lat[i]) if isinstance(lat, list) and len(lat) == n else None
            if e2e is None and ttft is not None and not stats_only:
                e2e = ttft + sum(gaps)
            if stats_only:
                fate = "completed" if ttft is not None and n_out >= 1 else "unmeasured"
            elif ttft is None or e2e is None or n_out < 1:
                refusals.append(
                    RowRefusal(
                        row=i,
                        field="ttfts",
                        value=short_repr(doc["ttfts"][i]),
                        cause="a request without error must have a TTFT and "
                        "an output; replayed, not compared",
                    )
                )
                fate = "unmeasured"
            else:
                fate = "completed"
            requests.append(
                MeasuredRequest(i, send[i], int(n_in), int(n_out), fate, ttft, e2e, gaps)
            )
        requests.sort(key=lambda r: (r.arrival_s, r.row))
        deployment, engine, replay_subs = self._deployment(doc, path)
        subs.extend(replay_subs)
        aggregates: dict[str, float] = {}
        if stats_only:
            aggregates = self._printed(doc, requests)
            streamed = sum(1 for r in requests if r.fate == "completed")
            subs.append(
                "statistics only (no per-request gaps in the file): compared the printed "
                f"TPOT, ITL and throughput figures and the TTFT of the {streamed} requests "
                "that streamed text"
            )
            silent = sum(1 for r in requests if r.fate == "unmeasured")
            if silent:
                subs.append(
                    f"{silent} requests streamed no text (output 0, TTFT 0): replayed as "
                    "one output token, left out of the TTFT figures"
                )
        csv = work_dir / f"{path.stem}.csv"
        self._write_trace(csv, requests)
        workload: dict[str, Any] = {
            "trace": {"path": csv.name, "format": "csv"},
            "ignore_eos": True,
        }
        scenario = scenario_of(
            {
                "name": f"score-{path.stem}",
                "description": f"replay of {path.name} ({self.name})",
                "seed": 1,
                "deployment": deployment,
                "workload": workload,
            },
            src,
        )
        hi = len(requests) if max_requests is None else min(len(requests), max_requests)
        if refusals:
            subs.append(f"{len(refusals)} measured rows refused (see refusals)")
        pool = deployment["pools"][0]
        if stats_only:
            # Compared by the printed figures only: no request row is compared.
            recorded: dict[str, Any] = {
                "model_id": doc.get("model_id"),
                "request_rate": rate,
                "num_prompts": doc.get("num_prompts", n),
                "date": doc.get("date"),
            }
            measured: tuple[MeasuredRequest, ...] = ()
            compared = (0, len(requests))
            engine_args = "those the deployment gives; vLLM's defaults for the rest"
            label = str(doc.get("dataset_name") or "vllm-bench")
            stage = f"n{n}"
        else:
            recorded = {
                "model_id": doc.get("model_id"),
                "request_rate": rate,
                "burstiness": doc.get("burstiness"),
                "max_concurrency": concurrency,
                "num_prompts": doc.get("num_prompts", n),
            }
            measured = tuple(requests)
            compared = (0, hi)
            engine_args = "vLLM's defaults for every argument not given"
            label = str(doc.get("label") or doc.get("dataset_name") or "vllm-bench")
            stage = "0"
        return MeasuredPoint(
            unit=path.stem,
            adapter=self.name,
            source=str(path),
            scenario=scenario,
            requests=measured,
            compared=compared,
            engine=engine,
            base_dir=work_dir,
            recorded=recorded,
            estimated={
                "prompts": "content not recorded: no two requests share a prefix",
                "engine arguments": engine_args,
            },
            substitutions=tuple(subs),
            refusals=tuple(refusals),
            labels={
                "experiment": path.stem,
                "model": str(pool.get("model", "")),
                "hardware": str(pool.get("hardware", "")),
                "tp": str((pool.get("layout") or {}).get("tp", 1)),
                "workload": label,
                "stage": stage,
                "rate_per_s": str(rate),
            },
            aggregates=aggregates,
        )

    @staticmethod
    def _printed(doc: Mapping[str, Any], requests: Sequence[MeasuredRequest]) -> dict[str, float]:
        """A statistics-only file's figures, ``metric.statistic`` in seconds (see the
        module doc)."""
        out: dict[str, float] = {}
        for metric, key in _PRINTED_STATS:
            for st, printed in (("mean", "mean"), ("p50", "median"), ("p99", "p99")):
                v = finite_number(doc.get(f"{printed}_{key}"))
                if v is not None:
                    out[f"{metric}.{st}"] = v / 1000.0
        ttfts = sorted(r.ttft_s for r in requests if r.fate == "completed" and r.ttft_s)
        if ttfts:
            out["ttft.mean"] = sum(ttfts) / len(ttfts)
            out["ttft.p50"] = _percentile(ttfts, 50.0)
            out["ttft.p99"] = _percentile(ttfts, 99.0)
        duration = float(doc["duration"])
        out["completed_per_s.rate"] = float(doc["completed"]) / duration
        out["output_tokens_per_s.rate"] = float(doc["output_throughput"])
        return out

    @staticmethod
    def _deployment(
        doc: Mapping[str, Any], path: Path
    ) -> tuple[dict[str, Any], str | None, list[str]]:
        src = str(path)
        for side in (
            path.with_name(f"{path.stem}.deployment.yaml"),
            path.with_name("deployment.yaml"),
        ):
            if side.exists():
                deployment, engine = read_deployment(side)
                replay = deployment.pop("replay", None) or {}
                if not isinstance(replay, dict):
                    raise InputRefused.one(
                        "replay", short_repr(replay), "must be a mapping", str(side)
                    )
                measured = replay.get("measured_engine")
                if measured is not None:
                    if not isinstance(measured, str) or "@" not in measured:
                        raise InputRefused.one(
                            "replay.measured_engine",
                            short_repr(measured),
                            "must be kind@version",
                            str(side),
                        )
                    engine = measured
                subs = replay.get("substitutions") or []
                if not isinstance(subs, list) or not all(isinstance(x, str) for x in subs):
                    raise InputRefused.one(
                        "replay.substitutions",
                        short_repr(subs),
                        "must be a list of strings",
                        str(side),
                    )
                return deployment, engine, [" ".join(x.split()) for x in subs]
        hardware = doc.get("hardware")
        if not isinstance(hardware, str) or not hardware:
            raise InputRefused.one(
                "hardware",
                None,
                "the result does not say what served it: write deployment.yaml beside it "
                "(pools: [{engine, model, hardware, layout, args}]) or run vllm bench serve "
                "with --metadata hardware=H100-SXM tensor_parallel_size=N",
                src,
            )
        tp = doc.get("tensor_parallel_size", doc.get("tp", 1))
        args: dict[str, Any] = {}
        for key, value in doc.items():
            if isinstance(key, str) and key.startswith("engine_arg."):
                args[key.removeprefix("engine_arg.")] = yaml.safe_load(str(value))
        version = doc.get("vllm_version")
        pool = {
            "name": "pool",
            "engine": {"kind": "vllm", "version": ENGINE_VERSION},
            "model": str(doc.get("model_id", "")),
            "hardware": hardware,
            "layout": {"tp": int(tp)},
            "args": args,
        }
        return {"pools": [pool]}, (f"vllm@{version}" if version else None), []

    @staticmethod
    def _write_trace(csv: Path, requests: Sequence[MeasuredRequest]) -> None:
        lines = ["arrival_s,input_tokens,output_tokens"]
        for r in requests:
            lines.append(f"{r.arrival_s:.6f},{r.input_tokens},{max(1, r.output_tokens)}")
        tmp = csv.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(csv)


def _percentile(ordered: Sequence[float], q: float) -> float:
    """numpy's linear percentile of an ascending list (what vLLM's client prints)."""
    k = (len(ordered) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


ADAPTER: Final = VllmBenchServe()
