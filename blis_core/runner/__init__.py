"""Running scenarios: the cluster's components, replications and the Result."""

from __future__ import annotations

from blis_core.runner.builtins import make_host
from blis_core.runner.run import (
    DataSources,
    RequestOutcomes,
    RequestsCallback,
    RunProgress,
    check_scenario,
    installed_registry,
    replication_seed,
    request_outcomes,
    run_scenario,
    write_result,
)

__all__ = [
    "DataSources",
    "RequestOutcomes",
    "RequestsCallback",
    "RunProgress",
    "check_scenario",
    "installed_registry",
    "make_host",
    "replication_seed",
    "request_outcomes",
    "run_scenario",
    "write_result",
]
