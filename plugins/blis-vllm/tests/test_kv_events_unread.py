"""A run whose KV events nobody reads makes none, and gives the same Result.

Behind llm-d's default profile (approximate prefix scoring, no KV event consumer) the
engines are told to stop their KV events (``KVEventEngine``); with the KV event check
on, the same run keeps making them and checks every one.
"""

from __future__ import annotations

import pytest
from blis_core.io.scenario import parse_scenario
from blis_core.runner import DataSources, make_host, run_scenario
from blis_core.runner.kv_events_check import CHECK_ENV
from test_held_spans import busy_cluster


def test_unread_kv_events_change_no_result_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = parse_scenario(busy_cluster(), "busy")
    data = DataSources.load()
    monkeypatch.delenv(CHECK_ENV, raising=False)
    unread = run_scenario(scenario, make_host(), data)
    monkeypatch.setenv(CHECK_ENV, "1")
    read = run_scenario(scenario, make_host(), data)
    assert unread.content_hash == read.content_hash
