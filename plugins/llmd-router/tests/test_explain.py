"""explain(): every stage against hand-computed upstream formulas."""

from __future__ import annotations

from typing import Any

from blis_llmd_router import explain
from helpers import req, snap
from hypothesis import given, settings
from hypothesis import strategies as st

CFG: dict[str, Any] = {
    "apiVersion": "llm-d.ai/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "decode-filter"},
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "load-aware-scorer", "parameters": {"threshold": 20}},
        {"type": "running-requests-size-scorer"},
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "decode-filter"},
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 1.5},
                {"pluginRef": "load-aware-scorer"},
                {"pluginRef": "running-requests-size-scorer", "weight": 0.5},
            ],
        }
    ],
}

state = st.tuples(
    st.integers(0, 50),
    st.integers(0, 50),
    st.floats(0, 1),
    st.sampled_from(["both", "decode", "prefill"]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(state, min_size=1, max_size=6), st.integers(0, 1000))
def test_explain_matches_hand_computed(
    states: list[tuple[int, int, float, str]], seed: int
) -> None:
    eps = [snap(f"ep-{i}", w, r, kv, role) for i, (w, r, kv, role) in enumerate(states)]
    out = explain(CFG, eps, req("x"), seed=seed)
    prof = out["profiles"]["default"]
    survivors = [e.name for e, s in zip(eps, states, strict=True) if s[3] != "prefill"]
    assert prof["filters"] == [
        {"name": "decode-filter", "type": "decode-filter", "survivors": survivors}
    ]
    if not survivors:
        assert out["status"] == 429 and out["pick"] is None
        return
    st_by = {e.name: s for e, s in zip(eps, states, strict=True)}
    q = {n: st_by[n][0] for n in survivors}
    run = {n: st_by[n][1] for n in survivors}

    def minmax(v: dict[str, int], n: str) -> float:
        hi, lo = max(v.values()), min(v.values())
        return 1.0 if hi == lo else (hi - v[n]) / (hi - lo)

    def load_aware(n: str) -> float:
        return 0.5 if q[n] == 0 else 0.5 * (1 - min(q[n], 20) / 20)

    want = {
        n: 2 * minmax(q, n) + 1.5 * (1 - st_by[n][2]) + 1.0 * load_aware(n) + 0.5 * minmax(run, n)
        for n in survivors
    }
    scores = {s["name"]: s for s in prof["scorers"]}
    assert scores["queue-scorer"]["weight"] == 2 and scores["load-aware-scorer"]["weight"] == 1.0
    for n in survivors:
        assert abs(prof["totals"][n] - want[n]) < 1e-9
    best = max(want.values())
    assert out["pick"] in {n for n in survivors if abs(want[n] - best) < 1e-9}
    assert out["status"] == 200 and prof["picked"] == [out["pick"]]
    assert out == explain(CFG, eps, req("x"), seed=seed)


def test_explain_default_config_with_prefix_history() -> None:
    eps = [snap("a", 0, 0, 0.0), snap("b", 0, 0, 0.0)]
    first = explain(None, eps, req("r1", "doc", 640))
    assert first["injected"] == [
        "approx-prefix-cache-producer",
        "token-producer",
        "single-profile-handler",
        "max-score-picker",
        "utilization-detector",
    ]
    picked = first["pick"]
    out = explain(None, eps, req("r2", "doc", 640), history=[(req("r1", "doc", 640), eps)])
    info = out["producers"]["PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"]
    assert info[picked] == {"match_blocks": 10, "total_blocks": 10, "block_size_tokens": 64}
    other = "b" if picked == "a" else "a"
    assert info[other]["match_blocks"] == 0
    prof = out["profiles"]["default"]
    # queue 2·1 + kv 2·1 + prefix 3·(10/10) on the cached endpoint; 4 on the other
    assert prof["totals"] == {picked: 7.0, other: 4.0}
    assert out["pick"] == picked


def test_explain_yaml_and_active_requests() -> None:
    yaml_cfg = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: active-request-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: active-request-scorer
"""
    eps = [snap("a"), snap("b"), snap("c")]
    hist = [(req(f"h{i}", f"k{i}"), eps) for i in range(3)]
    out = explain(yaml_cfg, eps, req("x"), history=hist, completed=["h0"])
    loads = out["producers"]["InFlightLoadDataKey/inflight-load-producer"]
    assert sum(v["requests"] for v in loads.values()) == 2
    scores = out["profiles"]["default"]["scorers"][0]["scores"]
    for name, v in loads.items():
        # max count is 1: idle endpoints score 1, busy ones (1 - 1) / 1 = 0
        assert scores[name] == (1.0 if v["requests"] == 0 else 0.0)
    assert out["pick"] in {n for n, v in loads.items() if v["requests"] == 0}


def test_explain_no_endpoints() -> None:
    out = explain(None, [], req("x"))
    assert out["status"] == 503 and out["pick"] is None
