"""A run whose gaps go to the spill file gives the Result and requests of one that keeps them."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import blis_core.metrics.ledger as ledger_module
from blis_core.contracts.result import RequestOutcome
from blis_core.io.scenario import parse_scenario
from blis_core.metrics import RequestLedger
from blis_core.runner import DataSources, RequestOutcomes, make_host, run_scenario
from tests.runner.test_run import TOY, _scenario


def _run(data: DataSources, jobs: int = 1) -> tuple[Any, list[RequestOutcome]]:
    doc = _scenario()
    doc["frame"] = {"replications": 2}
    outcomes: list[RequestOutcome] = []

    def keep(_: int, got: Sequence[RequestOutcome]) -> None:
        outcomes.extend(got)

    result = run_scenario(parse_scenario(doc, "t"), make_host(), data, on_requests=keep, jobs=jobs)
    return result, outcomes


def test_spilled_gaps_give_the_same_result(
    install_plugins: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugins(TOY)
    data = DataSources.load()
    kept, kept_requests = _run(data)
    files: list[object] = []
    real = tempfile.TemporaryFile

    def counted(*args: Any, **kwargs: Any) -> Any:
        f = real(*args, **kwargs)
        files.append(f)
        return f

    monkeypatch.setattr(ledger_module, "SPILL_BUFFER_BYTES", 16)
    monkeypatch.setattr(ledger_module.tempfile, "TemporaryFile", counted)
    spilled, spilled_requests = _run(data)
    assert files, "the gaps never reached the spill file"
    assert spilled.content_hash == kept.content_hash
    assert spilled_requests == kept_requests
    assert any(o.chunk_gaps_us for o in spilled_requests)
    # Replications in worker processes spill to files of their own and send back the same.
    in_workers, worker_requests = _run(data, jobs=2)
    assert in_workers.content_hash == kept.content_hash
    assert worker_requests == kept_requests


def test_the_outcomes_are_a_sequence_made_as_it_is_read() -> None:
    led = RequestLedger()
    for i, rid in enumerate(("a", "b", "c")):
        led.arrived(rid, i, 10)
        for t in (10, 30 + i, 70):
            led.tokens(rid, 1, t)
        led.completed(rid, "length")
    led.close(3)
    outcomes = RequestOutcomes(led)
    assert len(outcomes) == 3
    assert [o.request_id for o in outcomes] == ["a", "b", "c"]
    assert outcomes[1].chunk_gaps_us == (21, 39)
    assert outcomes[-1] == outcomes[2] and outcomes[-1] is not outcomes[2]  # made when read
    assert [o.request_id for o in outcomes[1:]] == ["b", "c"]
    assert list(outcomes) == [outcomes[0], outcomes[1], outcomes[2]]
