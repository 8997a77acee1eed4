"""Tests of random substreams: stability, independence and common random numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blis_core.sim import RandomStreams, stream_key_digest, substream

REPO_ROOT = Path(__file__).resolve().parents[2]


def raw(gen: np.random.Generator, n: int) -> list[int]:
    """Raw 64-bit outputs: numpy keeps the PCG64 bit stream stable across versions."""
    return [int(x) for x in gen.bit_generator.random_raw(n)]


def test_known_answer_pins_the_derivation() -> None:
    # Fails if the canonical encoding, the hash or the generator ever changes.
    digest = stream_key_digest(42, "client", "arrivals", "")
    assert digest.hex() == "21b69367c1a360d402cf8c00800823feb03c7e20442ee2604cd0c2169c9c1689"
    assert raw(substream(42, "client", "arrivals"), 3) == [
        14735636625390462845, 15185308735052108585, 11889574831985989274
    ]  # fmt: skip
    assert raw(substream(7, "engine-0", "lengths", 3), 3) == [
        7333870330846875320, 17987338895372338056, 9838996219467351851
    ]  # fmt: skip
    assert isinstance(substream(1, "c", "p").bit_generator, np.random.PCG64)


def test_same_key_same_sequence_across_calls() -> None:
    a = substream(123, "router", "tie-break", "req-7")
    b = substream(123, "router", "tie-break", "req-7")
    assert a is not b
    assert raw(a, 100) == raw(b, 100)
    assert substream(5, "c", "p").random(10).tolist() == substream(5, "c", "p").random(10).tolist()


def test_same_key_same_sequence_in_another_process() -> None:
    code = (
        "import json, sys\n"
        "from blis_core.sim import substream\n"
        "g = substream(99, 'client', 'lengths', 17)\n"
        "print(json.dumps([int(x) for x in g.bit_generator.random_raw(20)]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == raw(substream(99, "client", "lengths", 17), 20)


@pytest.mark.parametrize(
    "other",
    [
        (2, "client", "arrivals", 0),
        (1, "client2", "arrivals", 0),
        (1, "client", "lengths", 0),
        (1, "client", "arrivals", 1),
        (1, "client", "arrivals", "0"),  # an int entity and its string are distinct
        (1, "client", "arrivals", ""),
        (1, "clientarrivals", "", 0),  # no ambiguity from concatenation
    ],
)
def test_different_keys_give_different_sequences(other: tuple[int, str, str, int | str]) -> None:
    base = raw(substream(1, "client", "arrivals", 0), 8)
    assert raw(substream(*other), 8) != base
    assert stream_key_digest(*other) != stream_key_digest(1, "client", "arrivals", 0)


def test_adding_a_stream_does_not_change_existing_draws() -> None:
    alone = RandomStreams(2024)
    expected = alone.get("engine", "noise", 3).normal(size=10).tolist()

    mixed = RandomStreams(2024)
    first = mixed.get("engine", "noise", 3).normal(size=4).tolist()
    mixed.get("client", "arrivals").exponential(size=1000)  # a new stream, drawn heavily
    mixed.get("engine", "noise", 4).normal(size=50)
    rest = mixed.get("engine", "noise", 3).normal(size=6).tolist()
    assert first + rest == expected


def test_random_streams_caches_per_key_and_holds_seed() -> None:
    streams = RandomStreams(8)
    assert streams.seed == 8
    g = streams.get("c", "p", "e")
    assert streams.get("c", "p", "e") is g
    assert streams.get("c", "p", 1) is not streams.get("c", "p", "1")
    assert len(streams) == 3
    assert raw(RandomStreams(8).get("c", "p", "e"), 5) == raw(substream(8, "c", "p", "e"), 5)


def test_bad_keys_are_refused() -> None:
    with pytest.raises(TypeError, match="seed"):
        substream(1.5, "c", "p")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="entity"):
        substream(1, "c", "p", True)
    with pytest.raises(TypeError, match="seed"):
        RandomStreams("1")  # type: ignore[arg-type]
