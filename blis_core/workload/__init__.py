"""Workload generation: arrival processes, length distributions, shared-prefix groups
and multi-turn sessions, closed-loop concurrency, trace replay and trace fitting.

The spec documents live in :mod:`blis_core.contracts.workload`; this package turns
them into :class:`~blis_core.contracts.request.InferenceRequest` streams through
:class:`WorkloadSource`, drawing every random number from the kernel's
``rng_for(purpose, entity)`` substreams.
"""

from __future__ import annotations

from blis_core.workload.arrivals import (
    ArrivalSchedule,
    RngFactory,
    ScheduledArrival,
    arrival_times_us,
    concurrency_due_times_s,
    renewal_times_s,
    stage_offsets_s,
)
from blis_core.workload.fit import (
    DEFAULT_LENGTH_FAMILIES,
    ArrivalFamilyFit,
    ArrivalFit,
    LengthFamily,
    LengthFamilyFit,
    LengthFit,
    TraceFit,
    fit_arrivals,
    fit_lengths,
    fit_trace,
)
from blis_core.workload.lengths import (
    LengthStream,
    length_cdf,
    length_from_uniform,
    length_mean,
    sample_lengths,
)
from blis_core.workload.shared_prefix import SharedPrefixContent
from blis_core.workload.source import RequestContent, SyntheticContent, WorkloadSource
from blis_core.workload.trace import (
    Trace,
    TraceContent,
    load_replay_json,
    load_trace,
    load_trace_csv,
)

__all__ = [
    "DEFAULT_LENGTH_FAMILIES",
    "ArrivalFamilyFit",
    "ArrivalFit",
    "ArrivalSchedule",
    "LengthFamily",
    "LengthFamilyFit",
    "LengthFit",
    "LengthStream",
    "RequestContent",
    "RngFactory",
    "ScheduledArrival",
    "SharedPrefixContent",
    "SyntheticContent",
    "Trace",
    "TraceContent",
    "TraceFit",
    "WorkloadSource",
    "arrival_times_us",
    "concurrency_due_times_s",
    "fit_arrivals",
    "fit_lengths",
    "fit_trace",
    "length_cdf",
    "length_from_uniform",
    "length_mean",
    "load_replay_json",
    "load_trace",
    "load_trace_csv",
    "renewal_times_s",
    "sample_lengths",
    "stage_offsets_s",
]
