"""A run of reports kept once (the ledger's ``source`` argument) writes every record as
the reports written request by request do: random report sequences, both ways."""

from __future__ import annotations

import random
from dataclasses import fields
from typing import Any

import pytest

from blis_core.contracts.engine import TokenEmission
from blis_core.metrics import RequestLedger
from blis_core.metrics.ledger import MAX_NARROW_GAP_US, RequestRecord

_COMPARED = [f.name for f in fields(RequestRecord) if f.name != "run"]
"""Every field but the ledger's own pointer."""


def _replay(script: list[tuple[Any, ...]], *, sources: bool) -> RequestLedger:
    led = RequestLedger()
    for op, *args in script:
        if op == "arrive":
            led.arrived(*args)
        elif op == "emit":
            emissions, now_us, source = args
            led.emitted(emissions, now_us, source if sources else "")
        elif op == "timeout":
            led.timed_out(*args)
        elif op == "drop":
            led.dropped(*args)
        else:
            led.completed(*args)
    led.close(led.arrivals)
    return led


def _script(seed: int) -> list[tuple[Any, ...]]:
    """Engines that reuse their last tuple most of the time (a decode span), change
    batches, time requests out in the middle of a run, emit a request elsewhere (a
    request moved to another engine), name a request twice, stall past four bytes."""
    rng = random.Random(seed)
    script: list[tuple[Any, ...]] = []
    now = 0
    ids = [f"r{i}" for i in range(rng.randint(3, 14))]
    for i, rid in enumerate(ids):
        script.append(("arrive", rid, i, 10))
    fated: set[str] = set()
    last: dict[str, tuple[TokenEmission, ...]] = {}
    for _ in range(rng.randint(20, 120)):
        now += rng.choice((1, 7, 1_000, 1_000, 0)) if rng.random() > 0.02 else 2**31 + 5
        engine = rng.choice(("e0", "e0", "e1", "e2"))
        roll = rng.random()
        if roll < 0.6 and last.get(engine):
            emissions = last[engine]
        else:
            batch = rng.sample(ids, rng.randint(0, min(6, len(ids))))
            if batch and rng.random() < 0.1:
                batch.append(batch[0])
            emissions = tuple(TokenEmission(rid, rng.choice((1, 1, 1, 3))) for rid in batch)
            last[engine] = emissions
        script.append(("emit", emissions, now, engine))
        if rng.random() < 0.08:
            rid = rng.choice(ids)
            if rid not in fated:
                fated.add(rid)
                fate = rng.choice(("timeout", "drop", "complete"))
                # a timeout at the time of the report before it; the others with a reason
                script.append((fate, rid, now if fate == "timeout" else "x"))
    return script


def _state(led: RequestLedger) -> list[tuple[Any, ...]]:
    return [
        (
            rid,
            *(getattr(rec, name) for name in _COMPARED),
            led.gaps(rec).typecode,
            list(led.gaps(rec)),
        )
        for rid, rec in led.requests()
    ]


@pytest.mark.parametrize("seed", range(300))
def test_runs_write_every_record_as_reports_one_by_one(seed: int) -> None:
    script = _script(seed)
    assert _state(_replay(script, sources=True)) == _state(_replay(script, sources=False))


def test_a_run_keeps_one_gap_a_report_and_settles_at_the_fate() -> None:
    led = RequestLedger()
    for rid in ("a", "b"):
        led.arrived(rid, 0, 1)
    batch = (TokenEmission("a", 1), TokenEmission("b", 1))
    for t in (10, 20, 35, 50):
        led.emitted(batch, t, "e0")
    a, b = led.record("a"), led.record("b")
    # from the second report on, the run holds their gaps
    assert a.run is not None and a.run is b.run
    assert list(a.chunk_gaps_us) == [] and a.output_tokens == 1
    led.timed_out("a", 50)
    assert a.run is None and list(led.gaps(a)) == [10, 15, 15]
    assert a.output_tokens == 4 and a.last_token_us == 50
    led.emitted(batch, 2**31 + 60, "e0")  # "a" discarded; "b"'s gap widens its record
    led.close(2)
    assert b.run is None and list(led.gaps(b)) == [10, 15, 15, 2**31 + 10]
    assert led.gaps(b).typecode == "q" and 2**31 + 10 > MAX_NARROW_GAP_US
    assert b.output_tokens == 5 and a.output_tokens == 4
