"""P/D disaggregation in the cluster: the decode instance's sidecar, prefill legs, KV moves
over NIC links (blis_core/runner/engine_component.py, router_component.py, run.py).

Driven by the throw-away ``pdtoy`` engine and ``pdrouter`` router (tests/plugins/pd_toy.py).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import pytest
from blis_conformance import run_both_ways

from blis_core.contracts.shape import Transfer
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.runner.run import _build, _run_until_done

PD = ("blis-pd-toy", "blis.engines", "pdtoy", "pd_toy")
PD_ROUTER = ("blis-pd-toy", "blis.routers", "pdrouter", "pd_toy")


@pytest.fixture(scope="module")
def data() -> DataSources:
    return DataSources.load()


def _doc(num_requests: int = 1, prefill_args: dict[str, Any] | None = None) -> dict[str, Any]:
    def pool(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "name": name, "role": name, "engine": {"kind": "pdtoy", "version": "1.0"},
            "model": "meta-llama/Llama-2-7b-hf", "hardware": "H100-SXM",
            "args": {"max_num_seqs": 16, **(args or {})},
        }  # fmt: skip

    return {
        "name": "pd", "seed": 3,
        "deployment": {
            "pools": [pool("prefill", prefill_args), pool("decode")],
            "router": {"kind": "pdrouter", "version": "1.0"},
        },
        "workload": {
            "arrival": {"process": "poisson", "rate_per_s": 50},
            "input_len": {"family": "fixed", "value": 1000},
            "output_len": {"family": "fixed", "value": 6},
            "num_requests": num_requests,
        },
    }  # fmt: skip


@pytest.fixture
def pd(install_plugins: Callable[..., None]) -> Any:
    install_plugins(PD, PD_ROUTER)
    module = importlib.import_module("pd_toy")
    module.EVENTS.clear()
    module.MOVES.clear()
    module.ADDS.clear()
    return module


def test_one_request_prefills_moves_its_kv_then_decodes(pd: Any, data: DataSources) -> None:
    cluster = _build(parse_scenario(_doc(), "t"), 3, make_host(), data, None, {})
    _run_until_done(cluster, None)
    ((rid, rec),) = cluster.ledger.requests()
    assert rec.fate == "completed"
    adds = {(inst, r): t for inst, r, t in pd.ADDS}
    leg_added = adds[("prefill-0", f"{rid}/prefill")]
    decode_added = adds[("decode-0", rid)]
    assert rec.arrival_us <= leg_added < decode_added
    # Both ends hear of the move at the same instant, after the link carried it.
    done = {key: t for key, t in pd.MOVES}
    t_done = done[f"decode-0:{rid}/prefill"]
    assert done[f"prefill-0:{rid}/prefill"] == t_done
    (decode,) = (e for e in cluster.engines if e.name == "decode-0")
    env = cluster.envs[cluster.engines.index(decode)]
    plan = decode.engine.plan
    move = Transfer(
        transfer_id="x", request_id=rid, src="prefill-0", dst="decode-0", kv_group="full",
        num_tokens=1000, num_blocks=63,
    )  # fmt: skip
    (load,) = env.price_transfer(plan, move)
    bandwidth = env.fabric(load.link).bandwidth_bytes_per_s * plan.layout.tp
    expected = math.ceil(load.num_bytes * 1_000_000 / bandwidth) + load.latency_us
    assert t_done - decode_added == expected  # the idle step started the read at once
    assert rec.first_token_us > t_done
    assert rec.output_tokens == 6  # the prefill leg's token never reaches the client


def test_router_hears_only_the_decode_leg(pd: Any, data: DataSources) -> None:
    rep = run_scenario(parse_scenario(_doc(20), "t"), make_host(), data).replications[0]
    assert rep.fates.completed == 20
    kinds = {(kind, endpoint) for kind, endpoint, _ in pd.EVENTS}
    assert kinds == {
        ("dispatched", "decode-0"),
        ("first_token", "decode-0"),
        ("completed", "decode-0"),
    }
    assert not any(r.endswith("/prefill") for _, _, r in pd.EVENTS)
    assert sum(1 for k, _, _ in pd.EVENTS if k == "completed") == 20
    # Every prompt was moved once and both ends heard of it.
    assert len(pd.MOVES) == 40


def test_a_refused_prefill_leg_drops_the_request(pd: Any, data: DataSources) -> None:
    doc = _doc(3, prefill_args={"max_num_batched_tokens": 512})  # too small for the prompt
    f = run_scenario(parse_scenario(doc, "t"), make_host(), data).replications[0].fates
    assert f.completed == 0 and f.arrivals == 3
    ((reason, n),) = f.dropped.items()
    assert n == 3 and reason.startswith("prefill engine refused:")
    assert "longer than max_num_batched_tokens" in reason


def test_abort_while_the_prefill_leg_runs_cancels_the_leg(pd: Any, data: DataSources) -> None:
    from blis_core.contracts.engine import EnginePoolSpec
    from blis_core.contracts.plan import ParallelLayout
    from blis_core.contracts.request import InferenceRequest, PromptSegment
    from blis_core.runner.engine_component import EngineComponent
    from blis_core.runner.environment import make_environment
    from blis_core.runner.messages import DisaggDispatch, PrefillLeg
    from blis_core.sim.kernel import Message
    from blis_core.sim.rng import RandomStreams

    env = make_environment(data, "decode-0", RandomStreams(1))
    spec = EnginePoolSpec(
        pool="decode", model="meta-llama/Llama-2-7b-hf", hardware="H100-SXM",
        layout=ParallelLayout(), args={},
    )  # fmt: skip
    engine = pd.PDToyFactory("1.0").build(spec, env, "decode-0")
    comp = EngineComponent(
        "decode-0", engine, env, client="c", router="r", scrape_interval_us=0, link="l"
    )
    req = InferenceRequest("q", 0, (PromptSegment("q/p", 100),), max_output_tokens=3)
    comp.external(0, [Message(0, 0, "r", 0, "decode-0", "disagg", DisaggDispatch(req, "p-0"))])
    sent: list[tuple[str, str, object]] = []

    def capture(
        dest: str, port: str, payload: object, delay_us: int = 0, made_ahead: bool = False
    ) -> None:
        sent.append((dest, port, payload))

    comp.send = capture  # type: ignore[method-assign]
    comp.output(0)
    ((dest, leg),) = [(d, p) for d, port, p in sent if port == "prefill_leg"]
    assert dest == "p-0" and isinstance(leg, PrefillLeg) and leg.reply_to == "decode-0"
    assert leg.request.request_id == "q/prefill" and leg.request.max_output_tokens == 1
    assert (leg.request.kv_transfer_params or {})["do_remote_decode"] is True
    comp.internal(0)
    sent.clear()
    comp.external(1, [Message(1, 0, "r", 1, "decode-0", "abort", "q")])
    comp.output(1)
    assert ("p-0", "abort", "q/prefill") in sent
    assert engine.num_unfinished() == 0  # the decode leg never existed


def test_a_decode_leg_dropped_before_the_engine_frees_the_prefill_blocks(
    pd: Any, data: DataSources
) -> None:
    from blis_core.contracts.request import InferenceRequest, PromptSegment
    from blis_core.runner.messages import PrefillDone
    from blis_core.sim.kernel import Message

    cluster = _build(parse_scenario(_doc(), "t"), 3, make_host(), data, None, {})
    (decode,) = (e for e in cluster.engines if e.name == "decode-0")
    sent: list[tuple[str, str, object]] = []

    def capture(
        dest: str, port: str, payload: object, delay_us: int = 0, made_ahead: bool = False
    ) -> None:
        sent.append((dest, port, payload))

    decode.send = capture  # type: ignore[method-assign]
    big = InferenceRequest("q", 0, (PromptSegment("q/p", 10**7),), max_output_tokens=3)
    decode._awaiting_prefill["q"] = (big, "prefill-0")
    params = {"do_remote_prefill": True, "remote_engine_id": "prefill-0",
              "remote_request_id": "q/prefill"}  # fmt: skip
    decode.external(5, [Message(5, 0, "prefill-0", 0, "decode-0", "prefilled",
                                PrefillDone("q", params))])  # fmt: skip
    decode.output(5)
    ((dest, moved),) = [(d, p) for d, port, p in sent if port == "kv_sent"]
    assert dest == "prefill-0" and isinstance(moved, Transfer)
    assert (moved.transfer_id, moved.num_blocks) == ("q/prefill", 0)
    assert any(port == "dropped" for _, port, _ in sent)  # the engine refused the prompt


def test_run_ahead_keeps_every_byte_of_a_pd_run(
    pd: Any, data: DataSources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P/D messages (legs, KV moves, their answers) stop a run-ahead before time moves on;
    the Result is the one made one instant at a time."""
    both = run_both_ways(parse_scenario(_doc(30), "t"), data, monkeypatch)
    assert both.run_ahead_transitions > 0
    assert both.fast.replications[0].fates.completed == 30
    assert not both.differences()
