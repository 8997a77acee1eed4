"""Pickers (pickers/*.py): tie-breaking, determinism, A-Res."""

from __future__ import annotations

from collections import Counter

import numpy as np
from blis_conformance.router import FixedRuntime
from blis_llmd_router.context import BuildContext
from blis_llmd_router.datalayer import EndpointMetrics
from blis_llmd_router.framework import Endpoint, ScoredEndpoint
from blis_llmd_router.pickers import MaxScorePicker, RandomPicker, WeightedRandomPicker
from blis_llmd_router.pickers.common import shuffle
from blis_llmd_router.pickers.weighted_random import a_res_key


def scored(scores: list[float]) -> list[ScoredEndpoint]:
    return [
        ScoredEndpoint(Endpoint(f"e{i}", {}, EndpointMetrics()), s) for i, s in enumerate(scores)
    ]


def picks(
    picker_cls: type, scores: list[float], seed: int, n: int = 50, **params: int
) -> list[str]:
    p = picker_cls.create("pk", params or None, BuildContext(FixedRuntime(seed)), "x")
    return [p.pick(scored(scores)).target_endpoints[0].name for _ in range(n)]


def test_max_score_picks_the_maximum() -> None:
    assert set(picks(MaxScorePicker, [0.1, 0.9, 0.5], 0)) == {"e1"}


def test_max_score_ties_broken_at_random_but_reproducibly() -> None:
    a = picks(MaxScorePicker, [1.0, 0.2, 1.0, 1.0], 3, 200)
    assert a == picks(MaxScorePicker, [1.0, 0.2, 1.0, 1.0], 3, 200)
    assert set(a) == {"e0", "e2", "e3"}
    assert a != picks(MaxScorePicker, [1.0, 0.2, 1.0, 1.0], 4, 200)


def test_max_num_of_endpoints_orders_best_first() -> None:
    p = MaxScorePicker.create("pk", {"maxNumOfEndpoints": 2}, BuildContext(FixedRuntime()), "x")
    got = p.pick(scored([0.3, 0.9, 0.6])).target_endpoints
    assert [e.name for e in got] == ["e1", "e2"]
    p0 = MaxScorePicker.create("pk", {"maxNumOfEndpoints": 0}, BuildContext(FixedRuntime()), "x")
    assert p0.max_num_of_endpoints == 1


def test_shuffle_is_fisher_yates_from_the_end() -> None:
    rng = np.random.Generator(np.random.PCG64(1))
    expect = list(range(6))
    ref = np.random.Generator(np.random.PCG64(1))
    for i in range(5, 0, -1):
        j = int(ref.integers(0, i + 1))
        expect[i], expect[j] = expect[j], expect[i]
    items = list(range(6))
    shuffle(items, rng)
    assert items == expect


def test_random_picker_uniform_and_reproducible() -> None:
    a = picks(RandomPicker, [0.0, 1.0, 0.5], 5, 300)
    assert a == picks(RandomPicker, [0.0, 1.0, 0.5], 5, 300)
    assert set(Counter(a)) == {"e0", "e1", "e2"}


def test_weighted_random_zero_scores_fall_back_to_random() -> None:
    assert set(picks(WeightedRandomPicker, [0.0, 0.0], 1, 100)) == {"e0", "e1"}


def test_weighted_random_never_picks_zero_when_positive_exists() -> None:
    assert set(picks(WeightedRandomPicker, [0.0, 0.5, 0.0], 2, 100)) == {"e1"}


def test_weighted_random_proportional() -> None:
    c = Counter(picks(WeightedRandomPicker, [1.0, 3.0], 9, 4000))
    assert 0.70 < c["e1"] / 4000 < 0.80


def test_a_res_key() -> None:
    assert a_res_key(0.25, 0.5) == 0.0625
    assert a_res_key(0.0, 1.0) == 1e-10
    assert a_res_key(0.3, 0.0) == 0.0
