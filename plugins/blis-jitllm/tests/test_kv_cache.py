"""``-kv-cache`` and ``-kv-cache-max``: what ``jitllmd serve`` does with them, and why a
history the host cannot hold still stops the run.

``jitllmd serve`` (``server/cmd/jitllmd/main.go@0358625``) opens ``-kv-cache DIR`` as a
``model.FileStore`` bounded by ``-kv-cache-max`` and hands it to the server as its
``PromptStore``: the store of sessions created over the control plane with
``prompt_cache``. A ``model_id`` generate, every request BLIS sends, runs on an
ephemeral session created with the model id alone (``server/engine.go@ccdb11a9``
``resolveSession``), so no store and no KV budget: nothing of it goes to disk.
``-kv-budget`` is ``jitllm run``'s flag (``cmd/jitllm/main.go@0358625``), not serve's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from blis_core.contracts.engine import EnginePoolSpec, Environment
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import StepShape
from boxes import LAPTOP

from blis_jitllm import JitllmEngine, JitllmEngineFactory
from blis_jitllm.settings import FLAGS, resolve_settings

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "RTX3050Ti-Laptop-4GB"
Q4 = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool="p",
        model=LLAMA,
        hardware=GPU,
        layout=ParallelLayout(),
        args={"max-seq": 4096, "load": Q4, **args},
        machine=LAPTOP,
    )


def _shapes(engine: JitllmEngine, requests: list[InferenceRequest]) -> list[StepShape]:
    for r in requests:
        engine.add_request(r, 0)
    now, out = 0, []
    launched: deque[StepShape] = deque()
    while engine.num_unfinished():
        while (shape := engine.schedule(now)) is not None:
            launched.append(shape)
        now += 1000
        shape = launched.popleft()
        engine.complete(shape, now)
        out.append(shape)
    return out


def test_the_store_flags_are_listed_as_inert_and_kv_budget_is_no_serve_flag() -> None:
    assert FLAGS["kv-cache"][0] == "proven_inert"
    assert "prompt_cache" in FLAGS["kv-cache"][1]
    assert FLAGS["kv-cache-max"][0] == "proven_inert"
    assert "kv-budget" not in FLAGS
    surface = JitllmEngineFactory().surface()["flags"]
    assert surface["kv-cache"] == surface["kv-cache-max"] == "proven_inert"
    with pytest.raises(InputRefused, match="not a flag of jitllmd serve"):
        resolve_settings({"kv-budget": "2G"}, 4096)


def test_kv_f16_is_a_modelled_boolean() -> None:
    """``-kv-f16`` is a Go ``fs.Bool`` (``server/cmd/jitllmd/main.go@03586255``), read
    only when given: ``None`` keeps the engine's per-host choice."""
    assert FLAGS["kv-f16"][0] == "modelled"
    assert JitllmEngineFactory().surface()["flags"]["kv-f16"] == "modelled"
    assert resolve_settings({}, 4096).kv_f16 is None
    assert resolve_settings({"kv-f16": False}, 4096).kv_f16 is False
    assert resolve_settings({"kv_f16": True}, 4096).kv_f16 is True
    with pytest.raises(InputRefused, match="must be true or false"):
        resolve_settings({"kv-f16": "yes"}, 4096)


@pytest.mark.parametrize("bound", ["8G", "512M", "3GiB", "1073741824", "0", 0])
def test_a_store_bound_jitllmd_reads_is_taken(bound: object) -> None:
    resolve_settings({"kv-cache": "/var/kv", "kv-cache-max": bound}, 4096)
    resolve_settings({"kv_cache": "/var/kv", "kv_cache_max": bound}, 4096)


def test_a_store_bound_jitllmd_exits_on_is_refused_where_the_store_is_named() -> None:
    with pytest.raises(InputRefused, match="kv-cache-max"):
        resolve_settings({"kv-cache": "/var/kv", "kv-cache-max": "lots"}, 4096)
    with pytest.raises(InputRefused, match="kv-cache"):
        resolve_settings({"kv-cache": 7}, 4096)
    # without a directory jitllmd never parses the bound (main.go: only under -kv-cache)
    resolve_settings({"kv-cache-max": "lots"}, 4096)


def test_the_store_changes_no_step(blis_environment: Callable[[str], Environment]) -> None:
    """Host blocks and a device part, rows whose history stays inside the host: the same
    steps, page-ins and all, with the store named and without it."""
    env = blis_environment("p-0")
    f = JitllmEngineFactory()
    base = {"gpu-layers": 13, "max-queue": -1}
    store = {**base, "kv-cache": "/var/kv", "kv-cache-max": "1G"}
    assert f.plan(_spec(**store), env) == f.plan(_spec(**base), env)

    def requests() -> list[InferenceRequest]:
        return [InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 700),), 30) for i in range(3)]

    with_store = _shapes(f.build(_spec(**store), env, "p-0"), requests())
    without = _shapes(f.build(_spec(**base), env, "p-0"), requests())
    assert with_store == without
    assert len(with_store) > 30


def test_a_history_the_host_cannot_hold_stops_the_run_with_the_store_named_too(
    blis_environment: Callable[[str], Environment],
) -> None:
    """As ``test_host_blocks``' case: 0.4 GiB beside the host's weights for the history of
    its blocks, two rows of 3,200 positions. A generate's session has no store and no
    budget, so ``-kv-cache`` changes nothing and the reason names why."""
    env = blis_environment("p-0")
    args = {"maxmem": "30G", "gpu-layers": 13, "host-mem": "3G", "max-queue": -1}
    for extra in ({}, {"kv-cache": "/var/kv"}):
        engine = JitllmEngineFactory().build(_spec(**args, **extra), env, "p-0")
        reqs = [
            InferenceRequest(f"r{i}", 0, (PromptSegment(f"r{i}", 3000),), 200) for i in range(2)
        ]
        with pytest.raises(SimulationError, match="outgrows the host memory") as err:
            _shapes(engine, reqs)
        assert "prompt_cache" in str(err.value)
        assert "applyPageBudget" in str(err.value)
