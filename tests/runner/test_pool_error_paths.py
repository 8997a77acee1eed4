"""Where the host reports an engine's refusal of a pool (docs/plugins.md "Errors and
field paths")."""

from __future__ import annotations

import pytest

from blis_core.runner.run import _pool_error_path


@pytest.mark.parametrize(
    ("path", "reported"),
    [
        ("max_num_seqs", "deployment.pools.0.args.max_num_seqs"),
        ("args.max_num_seqs", "deployment.pools.0.args.max_num_seqs"),
        (
            "engine.args.kv_transfer_config.kv_connector",
            "deployment.pools.0.args.kv_transfer_config.kv_connector",
        ),
        ("deployment.pools.prefill.machine", "deployment.pools.0.machine"),
        ("layout", "deployment.pools.0.layout"),
        ("layout.dp", "deployment.pools.0.layout.dp"),
        ("deployment.layout.tp", "deployment.pools.0.layout.tp"),
        ("layouts", "deployment.pools.0.args.layouts"),
        ("", "deployment.pools.0.args"),
    ],
)
def test_an_engine_refusal_lands_on_the_pool_field_it_names(path: str, reported: str) -> None:
    assert _pool_error_path("deployment.pools.0", "prefill", path) == reported
