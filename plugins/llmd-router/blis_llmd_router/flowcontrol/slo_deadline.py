"""SLO-deadline ordering: earliest ``received + TTFT SLO`` first.

Port of ``pkg/epp/framework/plugins/flowcontrol/ordering/slodeadline/slo_deadline.go``
(llm-d-router v0.10.0, read, not copied) — :class:`SLODeadlineOrderingPolicy`
(``slo-deadline-ordering-policy``, no parameters). The deadline is the request's received
time plus the ``x-llm-d-slo-ttft-ms`` header (deprecated alias ``x-slo-ttft-ms``, read only
when the current name is absent; ``metadata.GetLowerCaseHeaderValue``) in milliseconds. A
missing, empty or unparsable value (Go ``strconv.ParseInt`` base 10: optional sign, digits
only, surrounding blanks trimmed), a negative one, or one above ``MaxInt64 / 1e6`` (it would
overflow a ``time.Duration``) gives a far-future deadline, after every SLO-bound request.
Equal deadlines are ordered by received time (FCFS).

BLIS: the received time is the enqueue time (both are the moment the router sees the
request); times are simulator microseconds, so the deadline is ``received_us + 1000·ms``.
"""

from __future__ import annotations

import re

from blis_core.contracts.request import InferenceRequest
from blis_llmd_router.flowcontrol.policies import FlowItem, OrderingPolicy

__all__ = ["SLO_TTFT_HEADERS", "SLODeadlineOrderingPolicy", "slo_ttft_ms"]

SLO_TTFT_HEADERS = ("x-llm-d-slo-ttft-ms", "x-slo-ttft-ms")
"""``metadata.TTFTSLOHeaderKey`` then its deprecated alias ``OldTTFTSLOHeaderKey``."""

_MAX_INT64 = (1 << 63) - 1
_MAX_MS = _MAX_INT64 // 1_000_000  # math.MaxInt64 / int64(time.Millisecond)
_FAR_FUTURE_US = 1 << 62  # sloMaxDeadlineTime: after any deadline a valid header can give
_GO_INT = re.compile(r"[+-]?[0-9]+")
# strings.TrimSpace: unicode.IsSpace (narrower than Python's str.isspace).
_GO_SPACE = (
    " \t\n\v\f\r\x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)


def slo_ttft_ms(request: InferenceRequest) -> int | None:
    """The TTFT SLO in ms, or ``None`` when missing or invalid (``calculateSLODeadline``)."""
    headers = {k.lower(): v for k, v in request.headers}
    value: str | None = None
    for key in SLO_TTFT_HEADERS:
        if key in headers:
            value = headers[key]
            break
    if not value:
        return None
    text = value.strip(_GO_SPACE)
    if _GO_INT.fullmatch(text) is None:
        return None
    ms = int(text)
    if ms < 0 or ms > _MAX_MS:
        return None  # also covers ParseInt's own int64 range error
    return ms


class SLODeadlineOrderingPolicy(OrderingPolicy):
    """Earliest SLO deadline first, ties by received time."""

    plugin_type = "slo-deadline-ordering-policy"

    def key(self, item: FlowItem) -> tuple[int, ...]:
        ms = slo_ttft_ms(item.request)
        deadline = _FAR_FUTURE_US if ms is None else item.enqueue_us + 1000 * ms
        return (deadline, item.enqueue_us)
