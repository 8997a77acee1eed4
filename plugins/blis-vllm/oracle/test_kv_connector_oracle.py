"""The KV connector interface against vLLM 0.33.0 with an equivalent toy connector.

Both schedulers run with the synchronous toy connectors of ``toy_connector.py``
(upstream's loaded by name through ``KVTransferConfig``): every ``schedule()`` and
``update_from_output()`` must agree as in the standard set, and so must the
sequence of connector calls (``get_num_new_matched_tokens`` with its local-hit
argument and answer, ``update_state_after_alloc`` with the number of blocks and
external tokens, ``request_finished`` with the number of computed blocks).

Asynchronous loads, delayed frees and load failures need the worker side's
``KVConnectorOutput``, which the oracle's driver does not synthesize yet; they are
checked against upstream's code by reading only (``tests/test_kv_connector.py``).
"""

from __future__ import annotations

import dataclasses

import pytest
from harness import Driver, quiet_vllm
from scenarios import make_scenario

CASES = [
    (fam, seed) for fam in ("chunked", "prefix", "pressure", "async", "mixed") for seed in range(6)
]


@pytest.mark.parametrize(("family", "seed"), CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_toy_connector_agrees(family: str, seed: int) -> None:
    """Decisions and connector calls agree with an external hit on every lookup."""
    base = make_scenario(family, seed)
    scenario = dataclasses.replace(
        base, config=dataclasses.replace(base.config, kv_connector="toy-sync")
    )
    with quiet_vllm():
        driver = Driver(scenario)
        driver.run()
    up_log = type(driver.up.sched.connector).log  # type: ignore[union-attr]
    port_log = driver.port.sched.connector.log  # type: ignore[union-attr]
    assert any(c[0] == "match" and c[3] > 0 for c in port_log)
    assert up_log == port_log
