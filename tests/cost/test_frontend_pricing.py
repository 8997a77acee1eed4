"""host_request frontend/stream entries: the path outside the engine core."""

from __future__ import annotations

from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.engine import Environment
from blis_core.contracts.plan import ParallelLayout, PoolPlan
from blis_core.cost import Catalog, Registry, SimEnvironment, default_plan
from blis_core.cost.registry import impl_matches

HW = "vllm-0.33.0/async"


def _plan(catalog: Catalog, host_work: str, chip: str = "H100-SXM") -> PoolPlan:
    plan = default_plan(
        catalog.model("meta-llama/Llama-2-7b-hf"), catalog.chip(chip), ParallelLayout()
    )
    return plan.model_copy(update={"host_work": host_work})


def test_impl_prefix_patterns() -> None:
    assert impl_matches("*", "x") and impl_matches("frontend:*", "frontend:vllm")
    assert not impl_matches("frontend:*", "stream:vllm")
    assert not impl_matches("vllm", "vllm-0.33.0/async")


def test_calibrated_entries_load_with_their_range(registry: Registry) -> None:
    for impl in (f"frontend:{HW}", f"stream:{HW}", "frontend:vllm-0.33.0/sync"):
        e = registry.best("host_request", impl, "H100-SXM", "*")
        assert e is not None and e.impl == impl and e.hardware == "H100-SXM"
    fe = registry.best("host_request", f"frontend:{HW}", "H100-SXM", "*")
    assert fe is not None and fe.rank is CoefficientRank.CALIBRATED
    assert fe.covered["items"][0] < fe.covered["items"][1]
    # The per-step admission term (impl = host_work) is not shadowed by them.
    step = registry.best("host_request", HW, "H100-SXM", "*")
    assert step is not None and step.impl == "*"


def test_environment_prices_frontend_and_stream(
    env: SimEnvironment, catalog: Catalog, registry: Registry
) -> None:
    assert isinstance(env, Environment)
    plan = _plan(catalog, HW)
    fe = registry.best("host_request", f"frontend:{HW}", "H100-SXM", "*")
    st = registry.best("host_request", f"stream:{HW}", "H100-SXM", "*")
    assert fe is not None and st is not None
    want = round(fe.params["overhead_us"] + fe.params.get("per_item_us", 0.0) * 600)
    assert env.frontend_delay_us(plan, 600) == want > 0
    assert env.stream_delay_us(plan) == round(st.params["overhead_us"]) > 0
    lo, hi = fe.covered["items"]
    assert env.explain_host_path(plan, "frontend", int(lo)).rank is CoefficientRank.CALIBRATED
    out = env.explain_host_path(plan, "frontend", int(hi) + 1000)
    assert out.rank is CoefficientRank.TRANSFERRED
    assert env.explain_host_path(plan, "stream").rank is CoefficientRank.ASSUMED


def test_any_host_work_is_priced_by_the_floor(env: SimEnvironment, catalog: Catalog) -> None:
    plan = _plan(catalog, "some-engine-9/async")
    assert env.frontend_delay_us(plan, 1000) == 0
    assert env.stream_delay_us(plan) == 0
    assert env.explain_host_path(plan, "frontend", 5).rank is CoefficientRank.ASSUMED
    other = _plan(catalog, HW, "A100-80GB-SXM")
    assert env.explain_host_path(other, "frontend", 600).rank is CoefficientRank.ASSUMED
    assert env.frontend_delay_us(other, 600) > 0
