"""Several devices: the planned split, one KV pool a device, refusals."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import LayerKind, ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import BOX, V100

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.settings import resolve_settings

LLAMA70 = "meta-llama/Llama-3.1-70B-Instruct"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"


def _spec(model: str = LLAMA70, machine: str | None = BOX, **args: object) -> EnginePoolSpec:
    load = "Llama-3.3-70B-Instruct-Q4_K_M.gguf" if model == LLAMA70 else "llama-8b-Q4_K_M.gguf"
    return EnginePoolSpec(
        "p", model, V100, ParallelLayout(), {"load": load, "max-seq": 4096, **args}, machine=machine
    )


def _blocks(layers: tuple[object, ...]) -> int:
    return sum(x.count for x in layers if getattr(x, "kind", None) is LayerKind.QKV_PROJ)  # type: ignore[attr-defined]


def test_the_devices_flag_names_devices_and_their_budgets() -> None:
    s = resolve_settings({"devices": "cuda:0=2G,cuda:1,cpu"}, 4096)
    assert s.devices == ((0, 2 << 30), (1, None)) and not s.all_devices and not s.host_only
    assert resolve_settings({"devices": "all"}, 4096).all_devices
    assert resolve_settings({}, 4096).devices == ((0, None),)
    for bad in ("vulkan:0", "cuda:0,cuda:0", "cuda:x"):
        with pytest.raises(InputRefused):
            resolve_settings({"devices": bad}, 4096)


def test_a_70b_model_is_split_evenly_over_the_fewest_cards_that_hold_it(
    blis_environment: Callable[[str], Environment],
) -> None:
    """docs/upstream/jitllm.md §6.4: 70B over four V100s once the plan counts the KV
    history (planExtra); with all eight cards offered, the plan still takes four."""
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    for devices in ("cuda:0,cuda:1,cuda:2,cuda:3", "all"):
        plan = f.plan(_spec(devices=devices), env)
        hardware = [p.hardware for p in plan.parts]
        assert hardware == ["Xeon-E5-2680-v4"] + [V100] * 4
        assert [_blocks(p.layers) for p in plan.parts] == [0, 20, 20, 20, 20]
        assert all(p.link == "pcie3-x16" for p in plan.parts[1:])
        assert f.resolved_args(_spec(devices=devices), env)["devices"] == 4


def test_fewer_cards_than_the_plan_needs_fill_each_in_turn(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    # the three cards filled leave card 0 no KV page: -relocate over several devices
    # moves blocks off it as the history grows (tests/test_relocate_devices.py), so the
    # plan stands; where it is not modelled (a pager budget below a block) the refusal
    # names why and the -gpu-layers that leaves each card one context
    plan = f.plan(_spec(devices="cuda:0,cuda:1,cuda:2"), env)
    assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks == 0
    with pytest.raises(InputRefused) as exc:
        f.plan(_spec(devices="cuda:0,cuda:1,cuda:2", maxmem="1G"), env)
    assert exc.value.errors[0].path == "engine.args.gpu-layers"
    assert "gpu-layers 76 leaves room" in exc.value.errors[0].cause
    assert "holds less than one block" in exc.value.errors[0].cause
    plan = f.plan(_spec(devices="cuda:0,cuda:1,cuda:2", **{"gpu-layers": 76}), env)
    resolved = f.resolved_args(_spec(devices="cuda:0,cuda:1,cuda:2", **{"gpu-layers": 76}), env)
    assert str(resolved["relocate"]).startswith("on over 3 devices")
    # 76 blocks offered: the plan holds them over three cards, split in proportion; the
    # last 4 blocks on the host, and the head back on the card of the last placed block
    assert [(p.hardware, _blocks(p.layers)) for p in plan.parts] == [
        ("Xeon-E5-2680-v4", 0),
        (V100, 25),
        (V100, 26),
        (V100, 25),
        ("Xeon-E5-2680-v4", 4),
        (V100, 0),
    ]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (_spec(devices="cuda:8"), "holds 8 V100-SXM2-16GB"),
        (_spec(machine=None, devices="cuda:0,cuda:1"), "a pool without a machine has one device"),
    ],
)
def test_devices_beyond_the_box_are_refused(
    blis_environment: Callable[[str], Environment], spec: EnginePoolSpec, match: str
) -> None:
    with pytest.raises(InputRefused) as exc:
        JitllmEngineFactory().plan(spec, blis_environment("p-0"))
    assert exc.value.errors[0].path == "engine.args.devices"
    assert match in exc.value.errors[0].cause


def test_each_device_grows_its_own_pool_and_admission_reads_the_tightest(
    blis_environment: Callable[[str], Environment],
) -> None:
    env = blis_environment("p-0")
    # 8B on two cards pinned to 3.5 GiB each: 16 blocks a card, each with its own pool
    spec = _spec(LLAMA8, devices="cuda:0=3.5G,cuda:1=3.5G", **{"max-queue": -1})
    f = JitllmEngineFactory()
    plan = f.plan(spec, env)
    assert [_blocks(p.layers) for p in plan.parts if p.hardware == V100] == [16, 16]
    engine = f.build(spec, env, "p-0")
    assert isinstance(engine, JitllmEngine)
    for i in range(6):
        engine.add_request(InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 800),), 40), 0)
    launched: deque[StepShape] = deque()
    now = 0
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 1000
        engine.complete(launched.popleft(), now)
    assert engine.scrape()["jitllm_tokens_generated_total"] == 6 * 40
    assert len(engine._pool_pages) == 2 and min(engine._pool_pages) > 1
