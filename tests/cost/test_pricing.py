"""Step pricing: breakdown, ranks, consistency, monotonicity and refusals."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import (
    GraphMode,
    LayerKind,
    ParallelLayout,
    PoolPlan,
    nearest_key_tile_rule,
)
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape
from blis_core.contracts.time import seconds_to_us
from blis_core.cost import Catalog, SimEnvironment, default_plan, load_catalog
from blis_core.cost.pricing import KD, CompiledPlan, pairwise_sum
from blis_core.cost.registry import build_registry
from blis_core.runner import installed_registry

_CAT = load_catalog()
_ENV = SimEnvironment(_CAT, installed_registry(_CAT), (), lambda p, e: None)  # type: ignore[arg-type,return-value]


def _plan(
    catalog: Catalog, model: str = "meta-llama/Llama-2-7b-hf", chip: str = "H100-SXM", **layout: int
) -> PoolPlan:
    return default_plan(
        catalog.model(model), catalog.chip(chip), ParallelLayout(**layout), max_num_seqs=256
    )


def _with_moe(plan: PoolPlan, impl: str, kernels: int) -> PoolPlan:
    """``plan`` with its MoE layers on kernel implementation ``impl``, ``kernels``
    launches an instance (as an engine states its selected expert path)."""
    layers = tuple(
        layer.model_copy(update={"impl": impl, "kernels": kernels})
        if layer.kind is LayerKind.MOE
        else layer
        for layer in plan.layers
    )
    return plan.model_copy(update={"layers": layers})


def _decode(batch: int, context: int) -> StepShape:
    return StepShape(
        1, StepMode.DECODE_ONLY, tuple(SeqChunk(1, context) for _ in range(batch)), batch
    )


def test_explain_matches_price_and_lists_ranks(env: SimEnvironment, catalog: Catalog) -> None:
    plan = _plan(catalog)
    shape = _decode(64, 1000)
    price = env.explain_step(plan, shape)
    assert price.duration_us == env.price_step(plan, shape)
    assert price.duration_us == seconds_to_us(sum(p.seconds for p in price.parts))
    families = {p.family for p in price.parts}
    assert {
        "gemm",
        "attention_decode",
        "elementwise",
        "logits" if False else "gemm",
        "host_step",
    } <= families
    ranks = {p.rank for p in price.parts}
    assert CoefficientRank.CALIBRATED in ranks and CoefficientRank.ROOFLINE in ranks
    shares = env.rank_shares()
    assert sum(shares.values()) == pytest.approx(1.0) and "calibrated" in shares


def test_every_catalog_model_prices_on_every_chip(env: SimEnvironment, catalog: Catalog) -> None:
    mixed = StepShape(1, StepMode.MIXED, (SeqChunk(500, 100), SeqChunk(1, 700)), 512)
    for model in catalog.models:
        for chip in catalog.hardware:
            tp = 8 if model in ("deepseek-ai/DeepSeek-V3",) else 2
            plan = _plan(catalog, model, chip, tp=tp)
            assert env.price_step(plan, mixed) > 0
            assert env.price_step(plan, _decode(8, 300)) > 0


def test_tp_adds_allreduce_and_pp_prices_a_stage(env: SimEnvironment, catalog: Catalog) -> None:
    plan = _plan(catalog, "meta-llama/Llama-2-70b-hf", tp=4, pp=2)
    first = StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 50),), 1, num_stages=2, stage=0)
    last = dataclasses.replace(first, stage=1)
    fam_first = {p.family for p in env.explain_step(plan, first).parts}
    fam_last = {p.family for p in env.explain_step(plan, last).parts}
    assert "allreduce" in fam_first and "sendrecv" in fam_first and "sampling" not in fam_first
    assert "sampling" in fam_last and "sendrecv" not in fam_last and "embedding" not in fam_last


def test_moe_and_mla_and_graphs(env: SimEnvironment, catalog: Catalog) -> None:
    plan = _plan(catalog, "deepseek-ai/DeepSeek-V3", "H200-SXM", tp=8)
    parts = env.explain_step(plan, _decode(32, 2000)).parts
    assert {"moe_gemm", "attention_decode"} <= {p.family for p in parts}
    llama = _plan(catalog)
    eager = env.price_step(llama, _decode(32, 500))
    graphed = env.price_step(
        llama, dataclasses.replace(_decode(32, 500), graph_mode=GraphMode.FULL)
    )
    assert graphed < eager
    idle = StepShape(2, StepMode.IDLE, (), 0)
    assert 0 < env.price_step(llama, idle) < graphed


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 200),
    extra=st.integers(1, 56),
    context=st.integers(0, 4000),
    more=st.integers(1, 4000),
    model=st.sampled_from(
        [
            "meta-llama/Llama-2-7b-hf",
            "mistralai/Mixtral-8x7B-v0.1",
            "openai/gpt-oss-20b",
            "deepseek-ai/DeepSeek-V3",
        ]
    ),
    chip=st.sampled_from(["H100-SXM", "A100-80GB-SXM", "MI300X"]),
)
def test_decode_roofline_time_monotone(
    batch: int, extra: int, context: int, more: int, model: str, chip: str
) -> None:
    plan = _plan(_CAT, model, chip, tp=8 if "DeepSeek" in model else 1)
    base = _ENV.explain_step(plan, _decode(batch, context))
    bigger_batch = _ENV.explain_step(plan, _decode(batch + extra, context))
    longer = _ENV.explain_step(plan, _decode(batch, context + more))
    t0 = sum(p.seconds for p in base.parts)
    assert sum(p.seconds for p in bigger_batch.parts) >= t0
    assert sum(p.seconds for p in longer.parts) >= t0


def test_shape_inconsistent_with_plan_refused(env: SimEnvironment, catalog: Catalog) -> None:
    plan = _plan(catalog)
    cases = [
        (StepShape(1, StepMode.MIXED, (SeqChunk(100, 0),), 50), "shape.padded_tokens", 50),
        (StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 5),), 1, num_stages=2),
         "shape.num_stages", None),
        (StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, 5),), 1, dp_rank_tokens=(1, 1)),
         "shape.dp_rank_tokens", (1, 1)),
        (_decode(300, 10), "shape.seqs", 300),
        (StepShape(1, StepMode.MIXED, (SeqChunk(5, -3),), 5), "shape.seqs", None),
    ]  # fmt: skip
    for shape, path, value in cases:
        with pytest.raises(InputRefused) as exc:
            env.price_step(plan, shape)
        err = exc.value.errors[0]
        assert err.path == path and err.cause
        if value is not None:
            assert err.value == value
    with pytest.raises(InputRefused):
        env.explain_step(plan, StepShape(1, StepMode.DECODE_ONLY, (SeqChunk(1, -5),), 1))


def _fresh_env(catalog: Catalog, registry: object) -> SimEnvironment:
    return SimEnvironment(catalog, registry, (), lambda p, e: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        ("meta-llama/Llama-2-7b-hf", {}),
        ("meta-llama/Llama-3.1-8B-Instruct", {"tp": 2}),
        ("mistralai/Mixtral-8x7B-v0.1", {"tp": 2}),
    ],
)
def test_a_quote_prices_and_counts_as_price_step_does(
    catalog: Catalog, model: str, layout: dict[str, int]
) -> None:
    registry = installed_registry(catalog)
    plan = _plan(catalog, model, **layout)
    # A decode span's steps (every context one more; one graph mode, priced with one
    # overhead row), then steps of other kinds and graph modes, some outside the
    # covered ranges (long contexts, a large batch).
    span = [_decode(17, 600 + i) for i in range(9)]
    mixed = [
        *span,
        _decode(200, 30_000),
        StepShape(2, StepMode.MIXED, (SeqChunk(500, 100), SeqChunk(1, 700)), 512),
        StepShape(3, StepMode.EXTEND_ONLY, (SeqChunk(2000, 0),), 2000),
        dataclasses.replace(_decode(8, 50), graph_mode=GraphMode.FULL),
    ]
    for shapes in (span, mixed):
        for taken in (0, 4, len(shapes)):
            quoting, stepping = _fresh_env(catalog, registry), _fresh_env(catalog, registry)
            quoted = quoting.quote_steps(plan, shapes)
            assert quoted is not None
            prices, quote = quoted
            assert prices == [stepping.price_step(plan, s) for s in shapes]
            # Counting a prefix is what pricing that prefix one by one counts.
            quoting.count_quote(plan, quote, taken)
            once = _fresh_env(catalog, registry)
            for s in shapes[:taken]:
                once.price_step(plan, s)
            assert quoting.rank_totals().seconds == once.rank_totals().seconds
            assert quoting.method_seconds() == once.method_seconds()


@pytest.mark.parametrize(
    ("model", "layout", "graph"),
    [
        ("meta-llama/Llama-2-7b-hf", {}, GraphMode.FULL),
        ("meta-llama/Llama-3.1-8B-Instruct", {"tp": 2}, GraphMode.NONE),
        ("mistralai/Mixtral-8x7B-v0.1", {"tp": 2}, GraphMode.PIECEWISE),
        ("meta-llama/Llama-3.1-8B-Instruct", {"dp": 2}, GraphMode.FULL),
    ],
)
def test_an_advancing_quote_is_the_quote_of_the_spans_shapes_to_the_bit(
    catalog: Catalog, model: str, layout: dict[str, int], graph: GraphMode
) -> None:
    """A decode span's steps priced from its first shape (every context a token longer a
    step) give the figures, inside flags and counts the shapes give, bit for bit; across
    the covered ranges' edges too (contexts from 40 to past 8k, a batch of one)."""
    registry = installed_registry(catalog)
    plan = _plan(catalog, model, **layout)
    rng = random.Random(7)
    for batch, lo in ((1, 40), (13, 300), (64, 8_150)):
        contexts = [lo + rng.randrange(0, 400) for _ in range(batch)]
        shapes = [
            StepShape(
                5 + j,
                StepMode.DECODE_ONLY,
                tuple(SeqChunk(1, c + j) for c in contexts),
                batch + (batch % 2),
                graph_mode=graph,
            )
            for j in range(40)
        ]
        by_shapes, advancing = _fresh_env(catalog, registry), _fresh_env(catalog, registry)
        want = by_shapes.quote_steps(plan, shapes)
        got = advancing.quote_advancing(plan, shapes[0], len(shapes))
        assert want is not None and got is not None
        assert got[0] == want[0]
        assert got[1].seconds == want[1].seconds and got[1].inside == want[1].inside
        assert got[1].totals == want[1].totals
        by_shapes.count_quote(plan, want[1], 23, start=3)
        advancing.count_quote(plan, got[1], 23, start=3)
        assert advancing.rank_totals().seconds == by_shapes.rank_totals().seconds


def test_an_advancing_quote_follows_the_attention_term_into_its_covered_range(
    catalog: Catalog,
) -> None:
    """A span whose decode attention starts below its entry's covered range and grows
    into it: the quote's inside flags turn as the shapes' do (a later boundary is priced
    from the previous one's terms, so a flag carried over would keep the old rank)."""
    registry = installed_registry(catalog)
    plan = _plan(catalog, "meta-llama/Llama-3.1-8B-Instruct")
    compiled = _fresh_env(catalog, registry).compiled(plan)
    (j,) = [k for k, t in enumerate(compiled.terms) if t.family == "attention_decode"]
    flops_lo = float(compiled.lo[0, j])
    per_token = float(compiled.matrix[j, KD])
    assert flops_lo > 0 and per_token > 0
    start = int(flops_lo / per_token) - 10  # ten tokens below the covered range
    shapes = [_decode(1, start + i) for i in range(30)]
    by_shapes, advancing = _fresh_env(catalog, registry), _fresh_env(catalog, registry)
    want = by_shapes.quote_steps(plan, shapes)
    got = advancing.quote_advancing(plan, shapes[0], len(shapes))
    assert want is not None and got is not None
    flags = [inside[j] for inside in want[1].inside]
    assert not flags[0] and flags[-1]  # the range's edge is inside the span
    assert got[1].inside == want[1].inside and got[1].seconds == want[1].seconds
    by_shapes.count_quote(plan, want[1], len(shapes))
    advancing.count_quote(plan, got[1], len(shapes))
    assert advancing.rank_totals().seconds == by_shapes.rank_totals().seconds


def test_no_advancing_quote_where_the_shapes_differ_by_more_than_the_context(
    env: SimEnvironment, catalog: Catalog
) -> None:
    mixed = StepShape(2, StepMode.MIXED, (SeqChunk(500, 100), SeqChunk(1, 700)), 512)
    assert env.quote_advancing(_plan(catalog), mixed, 4) is None
    window = _plan(catalog, "openai/gpt-oss-20b")
    assert env.compiled(window).has_window
    assert env.quote_advancing(window, _decode(4, 100), 4) is None
    assert env.quote_advancing(_plan(catalog), _decode(4, 100), 0) is None


def test_no_quote_for_idle_steps(env: SimEnvironment, catalog: Catalog) -> None:
    idle = StepShape(1, StepMode.IDLE, (), 0)
    assert env.quote_steps(_plan(catalog), [_decode(4, 100), idle]) is None


def _vectorised_price(cp: CompiledPlan, shape: StepShape) -> tuple[float, list[float], list[float]]:
    """The vectorised form ``CompiledPlan.price_seconds`` had before it priced term by
    term: the seconds and what it added to the inside / outside totals."""
    a = np.array(cp.aggregates(shape, check_seqs=False))
    w = cp.matrix @ a
    w3 = w[: cp.n3].reshape(3, cp.n)
    for k, num_bytes in enumerate(shape.page_in_bytes):
        w3[2, cp.page_js[k]] = float(num_bytes)
    roof = w3 * cp.inv
    per = roof.max(axis=0)
    if cp.any_serial:
        per = per + cp.serial * (roof.sum(axis=0) - per)
    per += w[cp.n3 :] * cp.per_item
    per += cp._overhead(shape) * (w3.any(axis=0) | cp.is_host)
    seconds = per * cp.counts[cp.stage_kind(shape)]
    inside = (np.abs(w3 - cp.mid) <= cp.half).all(axis=0)
    zero = np.zeros(cp.n)
    added_in = zero + np.where(inside, seconds, 0.0)
    added_out = zero + np.where(inside, 0.0, seconds)
    return float(seconds.sum()), added_in.tolist(), added_out.tolist()


def _random_shape(rng: random.Random, stages: int) -> StepShape:
    kind = rng.choice((StepMode.DECODE_ONLY, StepMode.MIXED, StepMode.EXTEND_ONLY))
    long = rng.random() < 0.2  # outside the fitted entries' covered ranges
    ctx = (lambda: rng.randint(0, 60_000)) if long else (lambda: rng.randint(0, 3_000))
    if kind is StepMode.DECODE_ONLY:
        seqs = tuple(SeqChunk(1, max(1, ctx())) for _ in range(rng.randint(1, 256)))
    else:  # within the plan's 2,048 scheduled tokens
        seqs = tuple(
            SeqChunk(rng.choice((1, rng.randint(1, 256))), ctx()) for _ in range(rng.randint(1, 8))
        )
        if kind is StepMode.EXTEND_ONLY:
            seqs = tuple(SeqChunk(max(2, s.new_tokens), s.context_tokens) for s in seqs)
    tokens = sum(s.new_tokens for s in seqs)
    return StepShape(
        rng.randint(1, 10**6),
        kind,
        seqs,
        tokens + rng.randint(0, 7),
        graph_mode=rng.choice(tuple(GraphMode)),
        stage=rng.randrange(stages),
        num_stages=stages,
    )


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        ("meta-llama/Llama-2-7b-hf", {}),
        ("meta-llama/Llama-3.1-8B-Instruct", {"tp": 2}),
        ("meta-llama/Llama-2-70b-hf", {"tp": 2, "pp": 2}),
        ("mistralai/Mixtral-8x7B-v0.1", {"tp": 2}),
        ("deepseek-ai/DeepSeek-V3", {"tp": 8}),
        ("openai/gpt-oss-20b", {}),
    ],
)
@pytest.mark.parametrize("overlaps", [False, True])
def test_price_seconds_is_its_vectorised_form_to_the_bit(
    catalog: Catalog, model: str, layout: dict[str, int], overlaps: bool
) -> None:
    """The term-by-term hot path gives every step's seconds and adds to the running
    totals exactly what the vectorised form gave (dense, TP, PP stages, MoE, an expert
    path of several launches, MLA, a sliding window; every graph mode; steps inside and
    outside the covered ranges; with ``overlaps``, entries whose resources add in part or
    whole)."""
    plan = _plan(catalog, model, **layout)
    if model == "openai/gpt-oss-20b":
        # as blis-vllm states vLLM's Marlin MXFP4 path on Hopper: 6 launches an expert layer
        plan = _with_moe(plan, "FusedMoE:marlin", 6)
    registry = installed_registry(catalog)
    if overlaps:
        registry = build_registry(
            [
                e if e.family.startswith("host") else
                dataclasses.replace(e, params={**e.params, "overlap": (0.0, 0.25)[i % 2]})
                for i, e in enumerate(registry.entries)
            ],
            "test",
        )  # fmt: skip
    cp = _fresh_env(catalog, registry).compiled(plan)
    # the shipped entries' one serial kind: gpt-oss's MXFP4 experts on Hopper
    assert cp.any_serial == (overlaps or model == "openai/gpt-oss-20b")
    rng = random.Random(f"{model}{layout}")
    outside = 0
    for _ in range(150):
        shape = _random_shape(rng, plan.layout.pp)
        before_in, before_out = list(cp.acc_inside), list(cp.acc_outside)
        want, added_in, added_out = _vectorised_price(cp, shape)
        assert cp.price_seconds(shape) == want
        assert cp.acc_inside == [b + d for b, d in zip(before_in, added_in, strict=True)]
        assert cp.acc_outside == [b + d for b, d in zip(before_out, added_out, strict=True)]
        outside += any(added_out)
    assert outside  # some steps left a covered range


def test_pairwise_sum_is_numpys_sum_to_the_bit() -> None:
    """Every branch: under 8 terms, up to 128 in eight partial sums, longer runs split."""
    rng = np.random.default_rng(7)
    for n in (*range(0, 40), 127, 128, 129, 135, 255, 256, 300, 1000):
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, size=n)
        assert pairwise_sum(x.tolist(), 0, n) == float(x.sum()), n
        padded = [1e300, *x.tolist(), -1e300]  # an offset start reads only its run
        assert pairwise_sum(padded, 1, n) == float(x.sum()), n


def test_explain_names_every_resource_of_a_term_whose_resources_add(catalog: Catalog) -> None:
    """An entry with overlap 0 prices compute plus memory, and explain_step names both,
    the greater first; the same term under the roofline's max names one."""
    # bf16 experts on vLLM's Triton path (the serving-fitted entry): the roofline's max
    plan = _with_moe(_plan(catalog, "mistralai/Mixtral-8x7B-v0.1", tp=2), "FusedMoE:triton", 6)
    shape = StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(900, 0),), 900)
    registry = installed_registry(catalog)
    serial = build_registry(
        [
            dataclasses.replace(e, params={**e.params, "overlap": 0.0})
            if e.family == "moe_gemm" else e
            for e in registry.entries
        ],
        "test",
    )  # fmt: skip
    before = _fresh_env(catalog, registry).explain_step(plan, shape)
    after = _fresh_env(catalog, serial).explain_step(plan, shape)
    moe_before = next(p for p in before.parts if p.family == "moe_gemm")
    moe_after = next(p for p in after.parts if p.family == "moe_gemm")
    assert moe_before.bound in ("compute", "memory")
    assert moe_after.bound in ("compute+memory", "memory+compute")
    assert moe_after.bound.startswith(moe_before.bound)
    assert moe_after.seconds > moe_before.seconds
    rest = [(p.family, p.impl, p.seconds) for p in before.parts if p.family != "moe_gemm"]
    assert rest == [(p.family, p.impl, p.seconds) for p in after.parts if p.family != "moe_gemm"]


@pytest.mark.parametrize("kernels", [2, 7])
def test_an_expert_path_of_several_launches_pays_the_fixed_cost_per_launch(
    catalog: Catalog, kernels: int
) -> None:
    """``LoweredLayer.kernels`` on an MoE layer charges its entry's ``overhead_us`` that
    many times per layer instance and its work once: the expert term's seconds grow by
    exactly the extra launches' overhead, every other term (and the work) is unchanged,
    and explain_step names the launches."""
    base = _with_moe(_plan(catalog, "mistralai/Mixtral-8x7B-v0.1", tp=2), "FusedMoE:triton", 1)
    more = _with_moe(base, "FusedMoE:triton", kernels)
    env = _fresh_env(catalog, installed_registry(catalog))
    for shape in (_decode(16, 700), StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(900, 0),), 900)):
        one = env.explain_step(base, shape)
        many = env.explain_step(more, shape)
        (e1,) = [p for p in one.parts if p.family == "moe_gemm"]
        (ek,) = [p for p in many.parts if p.family == "moe_gemm"]
        assert (e1.launches, ek.launches) == (1, kernels)
        cp = env.compiled(more)
        (j,) = [i for i, t in enumerate(cp.terms) if t.family == "moe_gemm"]
        entry = cp.entries[j]
        layers = next(x.count for x in more.layers if x.kind is LayerKind.MOE)
        extra = (kernels - 1) * entry.params["overhead_us"] * 1e-6 * layers
        assert entry.params["overhead_us"] > 0
        assert ek.seconds - e1.seconds == pytest.approx(extra, rel=1e-9)
        rest = [(p.family, p.impl, p.seconds) for p in one.parts if p.family != "moe_gemm"]
        assert rest == [(p.family, p.impl, p.seconds) for p in many.parts if p.family != "moe_gemm"]
        ev1, evk = env.compiled(base).evaluate(shape), cp.evaluate(shape)
        assert np.array_equal(ev1.work, evk.work)  # the work is counted once
        assert env.price_step(more, shape) == many.duration_us > one.duration_us


def test_a_lent_dense_gemm_entry_prices_the_paths_two_gemms_not_its_small_kernels(
    catalog: Catalog,
) -> None:
    """An expert path priced by the chip's dense GEMM entry (no expert entry of its own:
    the family transfer) pays the GEMM's fixed cost for its two grouped GEMMs only; its
    other launches are small kernels at the moe_gemm floor's per-launch cost."""
    registry = installed_registry(catalog)
    env = _fresh_env(catalog, registry)
    plan = _plan(catalog, "mistralai/Mixtral-8x7B-v0.1", tp=2)
    layers = next(x.count for x in plan.layers if x.kind is LayerKind.MOE)
    gemm = registry.best("gemm", "*", "H100-SXM", "bf16")
    floor = registry.roofline("moe_gemm", "*", "H100-SXM", "bf16")
    assert gemm is not None and floor is not None
    g_us, f_us = gemm.params["overhead_us"], floor.params["overhead_us"]
    assert g_us > f_us > 0
    shape = _decode(16, 700)
    secs = {}
    for kernels in (1, 2, 6):
        price = env.explain_step(_with_moe(plan, "FusedMoE:acme", kernels), shape)
        (moe,) = [p for p in price.parts if p.family == "moe_gemm"]
        assert moe.rank is CoefficientRank.TRANSFERRED
        secs[kernels] = moe.seconds
    assert secs[2] - secs[1] == pytest.approx(g_us * 1e-6 * layers, rel=1e-9)
    assert secs[6] - secs[2] == pytest.approx(4 * f_us * 1e-6 * layers, rel=1e-9)


def test_a_kernel_count_on_a_layer_that_is_not_moe_is_refused(catalog: Catalog) -> None:
    plan = _plan(catalog)
    i = next(k for k, x in enumerate(plan.layers) if x.kind is LayerKind.ATTENTION)
    layers = list(plan.layers)
    layers[i] = layers[i].model_copy(update={"kernels": 3})
    bad = plan.model_copy(update={"layers": tuple(layers)})
    with pytest.raises(InputRefused) as exc:
        _fresh_env(catalog, installed_registry(catalog)).price_step(bad, _decode(4, 100))
    (err,) = exc.value.errors
    assert (err.path, err.value) == (f"plan.layers.{i}.kernels", 3)
    assert "only an MoE layer" in err.cause


def _with_tiles(plan: PoolPlan, rule: tuple[tuple[int, int], ...]) -> PoolPlan:
    layers = tuple(
        layer.model_copy(update={"expert_tile_rows": rule})
        if layer.kind is LayerKind.MOE
        else layer
        for layer in plan.layers
    )
    return plan.model_copy(update={"layers": layers})


def _expert_flops(env: SimEnvironment, plan: PoolPlan, shape: StepShape) -> float:
    cp = env.compiled(plan)
    (j,) = [i for i, t in enumerate(cp.terms) if t.family == "moe_gemm"]
    return cp.work_of(j, cp.evaluate(shape), "H100-SXM").flops


def test_tiled_expert_gemms_compute_each_experts_rows_padded_to_whole_tiles(
    catalog: Catalog,
) -> None:
    """``LoweredLayer.expert_tile_rows``: the expert GEMMs' FLOPs are those of every
    expert's rows padded up to the tile height the rule gives for the step's tokens, an
    expert's rows ``Binomial(tokens, top_k / experts)``; a one-row tile is no padding."""
    env = _fresh_env(catalog, installed_registry(catalog))
    plan = _plan(catalog, "mistralai/Mixtral-8x7B-v0.1", tp=2)
    one = _decode(1, 100)
    wide = StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(512, 0),), 512)
    untiled = _expert_flops(env, plan, wide)
    assert _expert_flops(env, _with_tiles(plan, ((4096, 1),)), wide) == pytest.approx(
        untiled, rel=1e-12
    )
    rule = ((32, 16), (10_000, 128))
    tiled = _with_tiles(plan, rule)
    # 512 tokens: 8 experts of Binomial(512, 1/4) rows, about 128 each, half of them
    # spilling into a second 128-row tile (bench/moe_padding.py: 1.48x).
    assert _expert_flops(env, tiled, wide) / untiled == pytest.approx(1.476, abs=0.002)
    # One token: its two experts compute one 16-row tile each.
    assert _expert_flops(env, tiled, one) / _expert_flops(env, plan, one) == pytest.approx(16)
    # A prefill-sized step is bound by the arithmetic: the padding costs time there.
    big = StepShape(1, StepMode.EXTEND_ONLY, (SeqChunk(2048, 0),), 2048)
    assert env.price_step(tiled, big) > env.price_step(plan, big)
    # Nothing else of the step moves.
    a, b = env.explain_step(plan, big), env.explain_step(tiled, big)
    assert [p for p in a.parts if p.family != "moe_gemm"] == [
        p for p in b.parts if p.family != "moe_gemm"
    ]


def test_expert_tile_rows_on_a_layer_that_is_not_moe_is_refused(catalog: Catalog) -> None:
    plan = _plan(catalog)
    i = next(k for k, x in enumerate(plan.layers) if x.kind is LayerKind.ATTENTION)
    layers = list(plan.layers)
    layers[i] = layers[i].model_copy(update={"expert_tile_rows": ((64, 16),)})
    bad = plan.model_copy(update={"layers": tuple(layers)})
    with pytest.raises(InputRefused) as exc:
        _fresh_env(catalog, installed_registry(catalog)).price_step(bad, _decode(4, 100))
    (err,) = exc.value.errors
    assert err.path == f"plan.layers.{i}.expert_tile_rows"
    assert "only an MoE layer" in err.cause


def test_a_tuned_tables_nearest_key_rule_takes_the_first_key_on_a_tie() -> None:
    """``nearest_key_tile_rule``: the tile of the key nearest ``M``, the first listed on
    a tie, as a step function; beyond the last key the last key's tile."""
    rule = nearest_key_tile_rule([(1, 16), (64, 32), (128, 64), (256, 128), (512, 128)])
    assert rule == ((32, 16), (96, 32), (192, 64), (512, 128))
    # listed in another order, the tie between 64 and 128 at M = 96 goes to 128's tile
    assert nearest_key_tile_rule([(128, 64), (64, 32)]) == ((95, 32), (128, 64))
