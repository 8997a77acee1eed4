"""A request's ``jitllm_priority``: the value BLIS sends and what the server does with it.

What ``jitllmd serve`` does (read 2026-12-05; ``docs/upstream/jitllm.md`` §9 "Request
priority"):

* the OpenAI and Anthropic request bodies carry ``jitllm_priority``, "high" or "normal"
  (omitted when empty), copied to ``GenerateOptions.Priority`` (``server/compat_openai.go``,
  ``server/compat_anthropic.go``; index ids 70946747649, 70898006069);
* the step loop's row takes ``rowPriority``: 1 for "high", else 0
  (``server/batchfair.go@33d6e08b``); the queue is ordered by waiting time less
  ``prio`` times ``fairBoost`` and the victims of a park are the lowest ``prio`` first
  (:mod:`blis_jitllm.step_loop`);
* ``Engine.prioritise`` (``server/budget.go@14225e13``) makes a "high" request's model
  the favoured one for the host budget's division, until a "high" request names another
  model; "normal" changes nothing; any other string is ``ErrInvalid``.

BLIS's request carries an integer (:class:`~blis_core.contracts.request.InferenceRequest`
``priority``, vLLM's convention: a lower value is served first, 0 by default), not
jitllm's string. The mapping here is BLIS's own, not jitllm's (:data:`MAPPING`): a
priority below 0, ahead of vLLM's default, is sent as "high"; 0 and above as "normal".
"""

from __future__ import annotations

__all__ = ["MAPPING", "PRIORITY_HIGH", "PRIORITY_NORMAL", "jitllm_priority", "row_priority"]

#: ``PriorityHigh`` (``server/budget.go@14225e13``)
PRIORITY_HIGH = "high"
#: ``PriorityNormal``
PRIORITY_NORMAL = "normal"

#: what ``blis plan`` prints of the mapping (``resolved_args``: ``jitllm_priority``)
MAPPING = (
    "BLIS's mapping, not jitllm's: a request priority below 0 (ahead of vLLM's default) is "
    "sent as jitllm_priority high, 0 and above as normal; high queues a request fairBoost "
    "(1 s at the default fairness) ahead and parks its row after the normal ones; the host "
    "budget's division between models it would favour is not modelled (one model a pool: "
    "a lone model's share is the same either way)"
)


def jitllm_priority(priority: int) -> str:
    """The ``jitllm_priority`` BLIS sends for a request of integer ``priority``
    (vLLM's convention, lower first): "high" below 0, else "normal"."""
    return PRIORITY_HIGH if priority < 0 else PRIORITY_NORMAL


def row_priority(value: str) -> int:
    """``rowPriority``: a row's priority in the step loop's queue and victim order, 1 for
    "high", else 0."""
    return 1 if value == PRIORITY_HIGH else 0
