"""The metric registry: every metric's one definition (design §8.7).

Latency metrics are computed over requests that **completed** and arrived after the
warm-up; requests unfinished at the horizon are counted in the fates and excluded from
latency statistics (stated in each definition's ``unfinished``). ITL follows vLLM's
benchmark (``vllm bench serve``): one sample per streamed chunk after the first, the
gap since the previous chunk, pooled over all completed requests; TPOT is per request
(E2E − TTFT) / (output tokens − 1), over requests with more than one output token.
"""

from __future__ import annotations

from blis_core.contracts.result import MetricDefinition

__all__ = ["LATENCY_METRICS", "METRICS", "RATE_METRICS", "definition"]

_COMPLETED = "requests completed, arriving at or after the warm-up end"
_UNFINISHED = "excluded; counted in fates (in flight / queued at horizon)"

METRICS: dict[str, MetricDefinition] = {
    m.name: m
    for m in (
        MetricDefinition(
            name="ttft",
            formula="time of first output token at the client - arrival time",
            statistic="mean, std, percentiles",
            population=_COMPLETED,
            window="measurement window (warm-up excluded)",
            unit="ms",
            unfinished=_UNFINISHED,
        ),
        MetricDefinition(
            name="itl",
            formula="gap between consecutive streamed chunks of one request (vLLM bench ITL)",
            statistic="mean, std, percentiles over all gaps pooled",
            population="every chunk gap of " + _COMPLETED,
            window="measurement window (warm-up excluded)",
            unit="ms",
            unfinished=_UNFINISHED,
        ),
        MetricDefinition(
            name="tpot",
            formula="(e2e - ttft) / (output_tokens - 1)",
            statistic="mean, std, percentiles over requests",
            population=_COMPLETED + ", with output_tokens > 1",
            window="measurement window (warm-up excluded)",
            unit="ms",
            unfinished=_UNFINISHED,
        ),
        MetricDefinition(
            name="e2e",
            formula="time of last output token at the client - arrival time",
            statistic="mean, std, percentiles",
            population=_COMPLETED,
            window="measurement window (warm-up excluded)",
            unit="ms",
            unfinished=_UNFINISHED,
        ),
        MetricDefinition(
            name="ntpot",
            formula="e2e / output_tokens (normalized time per output token)",
            statistic="mean, std, percentiles",
            population=_COMPLETED,
            window="measurement window (warm-up excluded)",
            unit="ms",
            unfinished=_UNFINISHED,
        ),
        MetricDefinition(
            name="scheduling_delay",
            formula="start of the first engine step that computes the request - arrival time",
            statistic="mean, std, percentiles",
            population=_COMPLETED,
            window="measurement window (warm-up excluded)",
            unit="ms",
            unfinished=_UNFINISHED,
        ),
        MetricDefinition(
            name="request_throughput",
            formula="completed requests / measurement duration",
            statistic="value",
            population=_COMPLETED,
            window="warm-up end to the last completion (or the horizon)",
            unit="requests/s",
            unfinished="not counted",
        ),
        MetricDefinition(
            name="input_token_throughput",
            formula="sum of input tokens of completed requests / measurement duration",
            statistic="value",
            population=_COMPLETED,
            window="warm-up end to the last completion (or the horizon)",
            unit="tokens/s",
            unfinished="not counted",
        ),
        MetricDefinition(
            name="output_token_throughput",
            formula="sum of output tokens of completed requests / measurement duration",
            statistic="value",
            population=_COMPLETED,
            window="warm-up end to the last completion (or the horizon)",
            unit="tokens/s",
            unfinished="not counted",
        ),
        MetricDefinition(
            name="goodput",
            formula="completed requests meeting every set SLO / measurement duration",
            statistic="value",
            population=_COMPLETED,
            window="warm-up end to the last completion (or the horizon)",
            unit="requests/s",
            unfinished="not counted (an unfinished request meets no SLO)",
        ),
    )
}

LATENCY_METRICS = ("ttft", "itl", "tpot", "e2e", "ntpot", "scheduling_delay")
RATE_METRICS = (
    "request_throughput",
    "input_token_throughput",
    "output_token_throughput",
    "goodput",
)


def definition(name: str) -> MetricDefinition:
    """The definition of ``name``; KeyError lists the known metrics."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {sorted(METRICS)}") from None
