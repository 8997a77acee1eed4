"""The API server's tokenisation of the prompt: ``host_request`` ``tokenize:<kind>/<tokenizer>``.

Measured per tokenizer by ``bench/tokenize_rate.py`` (data in
``data/measurements/tokenize``); priced on the frontend path for the engines whose API
server makes the measured call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.plan import ParallelLayout, PoolPlan
from blis_core.cost import Catalog, Registry, SimEnvironment, default_plan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data/measurements/tokenize"
WRITTEN = ROOT / "plugins/cost-calibrated/blis_cost_calibrated/data/measured-tokenize.yaml"
HW = "vllm-0.33.0/async"


def _plan(catalog: Catalog, model: str, engine: str = "vllm@0.33.0") -> PoolPlan:
    plan = default_plan(catalog.model(model), catalog.chip("H100-SXM"), ParallelLayout())
    return plan.model_copy(update={"engine": engine, "host_work": HW})


def _tokenize_us(registry: Registry, impl: str, n: int) -> float:
    e = registry.best("host_request", impl, "H100-SXM", "*")
    assert e is not None and e.impl == impl
    return e.param("per_item_us", 0.0) * n + e.param("per_item_sq_us", 0.0) * n * n


def test_frontend_delay_adds_the_tokenisation(
    env: SimEnvironment, catalog: Catalog, registry: Registry
) -> None:
    plan = _plan(catalog, "openai/gpt-oss-120b")
    fe = registry.best("host_request", f"frontend:{HW}", "H100-SXM", "*")
    assert fe is not None
    for n in (1000, 8000):
        fixed = fe.params["overhead_us"] + fe.params.get("per_item_us", 0.0) * n
        tok = _tokenize_us(registry, "tokenize:vllm/o200k_harmony", n)
        assert tok > 0
        assert env.frontend_delay_us(plan, n) == round(fixed + tok)
    # The measured cost per token grows with the prompt (one long string costs more
    # than its pieces apart): 8k tokens cost more than 8 x 1k.
    t1 = _tokenize_us(registry, "tokenize:vllm/o200k_harmony", 1000)
    t8 = _tokenize_us(registry, "tokenize:vllm/o200k_harmony", 8000)
    assert t8 > 8 * t1
    price = env.explain_host_path(plan, "tokenize", 4000)
    assert price.impl == "tokenize:vllm/o200k_harmony"
    assert price.rank is CoefficientRank.MEASURED
    assert price.seconds == pytest.approx(
        _tokenize_us(registry, "tokenize:vllm/o200k_harmony", 4000) * 1e-6
    )
    assert env.explain_host_path(plan, "tokenize", 50_000).rank is CoefficientRank.TRANSFERRED


def test_tokenizers_differ_and_each_engine_has_its_own_key(
    env: SimEnvironment, catalog: Catalog
) -> None:
    llama = env.explain_host_path(_plan(catalog, "meta-llama/Llama-2-70b-hf"), "tokenize", 4000)
    oss = env.explain_host_path(_plan(catalog, "openai/gpt-oss-120b"), "tokenize", 4000)
    assert llama.impl == "tokenize:vllm/llama-2" and llama.seconds < oss.seconds
    sgl = env.explain_host_path(
        _plan(catalog, "deepseek-ai/DeepSeek-R1-0528", "sglang@0.5.23"), "tokenize", 4000
    )
    assert sgl.impl == "tokenize:sglang/deepseek-v3" and sgl.rank is CoefficientRank.MEASURED
    # Mixtral's tokenizer has no file here: Llama-2's rate, said to be transferred.
    mixtral = env.explain_host_path(_plan(catalog, "mistralai/Mixtral-8x7B-v0.1"), "tokenize", 1000)
    assert mixtral.rank is CoefficientRank.TRANSFERRED and mixtral.seconds > 0


def test_unmeasured_engine_or_tokenizer_is_not_priced(
    env: SimEnvironment, catalog: Catalog
) -> None:
    plan = _plan(catalog, "openai/gpt-oss-120b", "jitllm@0.1.0")
    assert env.explain_host_path(plan, "tokenize", 4000).seconds == 0
    assert env.explain_host_path(plan, "tokenize", 4000).rank is CoefficientRank.ASSUMED
    nameless = catalog.model("openai/gpt-oss-120b").model_copy(update={"tokenizer": None})
    other = dataclasses.replace(catalog, models={**catalog.models, nameless.hf_id: nameless})
    bare = SimEnvironment(other, env.registry, (), lambda p, e: np.random.default_rng(0))
    plan = _plan(catalog, nameless.hf_id)
    assert bare.explain_host_path(plan, "tokenize", 8000).seconds == 0
    assert bare.frontend_delay_us(plan, 8000) < env.frontend_delay_us(plan, 8000)


def test_timings_file_is_the_one_the_entries_name() -> None:
    source = yaml.safe_load((DATA / "SOURCE.yaml").read_text())
    for name, meta in source["files"].items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == meta["sha256"]
    doc = json.loads((DATA / "tokenize_rate.json").read_text())
    entries = yaml.safe_load(WRITTEN.read_text())["entries"]
    for m in doc["tokenizers"].values():
        assert any(m["tokenizer_json_sha256"] in e["source"] for e in entries)


def test_entries_are_what_the_script_writes_from_the_timings(tmp_path: Path) -> None:
    """``measured-tokenize.yaml`` is regenerated, never edited: refitting the committed
    timings gives its parameters."""
    spec = importlib.util.spec_from_file_location("tokenize_rate", ROOT / "bench/tokenize_rate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.WRITE_FILE = tmp_path / "out.yaml"
    doc = json.loads((DATA / "tokenize_rate.json").read_text())
    for m in doc["tokenizers"].values():
        m["fit"] = mod.fit_curve(m["rows"])
    mod.write_registry(doc)
    assert (tmp_path / "out.yaml").read_text() == WRITTEN.read_text()
