"""The scheduling framework: profile handler → filters → scorers → picker.

Ports of llm-d-router v0.10.0 (the EPP framework that used to live in
gateway-api-inference-extension now lives in this repository's ``pkg/epp``):

* ``pkg/epp/scheduling/scheduler.go`` — :class:`Scheduler` (``Schedule``): ask the
  profile handler which profiles to run, run them, repeat until it picks none, then let
  it process the results;
* ``pkg/epp/scheduling/scheduler_profile.go`` — :class:`SchedulerProfile` (``Run``):
  filters in order, stopping when one leaves no endpoint; each scorer's score clamped to
  [0, 1] (``enforceScoreRange``) times its weight, summed per endpoint from 0; the picker
  given every surviving endpoint with its total;
* ``pkg/epp/scheduling/weighted_scorer.go`` — the weight a profile gives a scorer;
* ``pkg/epp/framework/interface/scheduling/{plugins,types}.go`` — the plugin kinds.

Determinism (design §5): upstream builds the picker's input by iterating a Go map, so
its order is random; here the picker gets the surviving endpoints in candidate order, and
every picker draws from a runtime substream. Profiles run in the order the profile handler
returns them (configuration order); upstream iterates a map there too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.request import InferenceRequest, prompt_token_ids
from blis_core.contracts.router import EndpointSnapshot, RouterEvent
from blis_llmd_router.datalayer import EndpointMetrics, endpoint_labels, metrics_from_snapshot

__all__ = [
    "TOKENIZER_VOCAB_SIZE",
    "DataProducer",
    "Endpoint",
    "EventObserver",
    "Filter",
    "Picker",
    "Plugin",
    "PreRequest",
    "ProfileHandler",
    "ProfileRunResult",
    "ScheduleTrace",
    "Scheduler",
    "SchedulerProfile",
    "SchedulingError",
    "SchedulingRequest",
    "SchedulingResult",
    "ScoredEndpoint",
    "Scorer",
    "WeightedScorer",
]

TOKENIZER_VOCAB_SIZE = 2**32
"""Vocabulary the router materialises prompt token ids with.

Upstream's tokenizer turns prompt text into token ids (or, in its zero-config
``estimate`` backend, packs 4 bytes of text per uint32 "token"). BLIS prompts carry
content keys, not text, so the router's tokenised prompt is
:func:`~blis_core.contracts.request.prompt_token_ids` with this vocabulary: the same
content always gives the same ids and different content different ids (up to 32-bit
collisions), which is all the approximate prefix index compares.
"""


class SchedulingError(Exception):
    """A profile run or a profile handler failed (upstream returns an ``error``)."""


class SchedulingRequest:
    """Upstream ``fwksched.InferenceRequest``: what plugins see of a request.

    ``target_model`` is the ``model`` header when the request carries one, else ``""``.
    ``token_ids`` is materialised on first use (only prefix-aware plugins need it).
    """

    __slots__ = (
        "_tokens",
        "headers",
        "priority",
        "request",
        "request_id",
        "target_model",
        "vocab_size",
    )

    def __init__(self, request: InferenceRequest, vocab_size: int = TOKENIZER_VOCAB_SIZE) -> None:
        self.request = request
        self.request_id = request.request_id
        self.headers: Mapping[str, str] = dict(request.headers)
        self.target_model = self.headers.get("model", "")
        self.priority = request.priority
        self.vocab_size = vocab_size
        self._tokens: tuple[int, ...] | None = None

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The prompt's token ids in the token producer's vocabulary (``vocab_size``).

        :data:`TOKENIZER_VOCAB_SIZE` (upstream's ``estimate`` backend) unless a
        ``token-producer`` names a catalog model (see
        :mod:`blis_llmd_router.producers.tokenizer`).
        """
        if self._tokens is None:
            self._tokens = tuple(prompt_token_ids(self.request.prompt, self.vocab_size))
        return self._tokens

    @classmethod
    def from_token_ids(
        cls, request_id: str, token_ids: Sequence[int], target_model: str = ""
    ) -> SchedulingRequest:
        """A request whose tokenised prompt is given directly (upstream-test vectors)."""
        headers = (("model", target_model),) if target_model else ()
        req = cls(InferenceRequest(request_id, 0, (), 0, headers=headers))
        req._tokens = tuple(token_ids)
        return req


@dataclass(slots=True, eq=False)
class Endpoint:
    """Upstream ``fwksched.Endpoint``: metadata, metrics and per-request attributes.

    Built afresh for each decision from the endpoint's snapshot, so ``attributes`` (what
    data producers ``Put``) never outlives the decision.
    """

    name: str
    labels: Mapping[str, str]
    metrics: EndpointMetrics
    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, snapshot: EndpointSnapshot) -> Endpoint:
        """The scheduling view of a scraped endpoint."""
        return cls(snapshot.name, endpoint_labels(snapshot), metrics_from_snapshot(snapshot))


@dataclass(slots=True)
class ScoredEndpoint:
    """An endpoint and its weighted total score."""

    endpoint: Endpoint
    score: float


@dataclass(slots=True)
class ProfileRunResult:
    """The endpoints a profile's picker chose, best first."""

    target_endpoints: list[Endpoint]


@dataclass(slots=True)
class SchedulingResult:
    """Every profile's result and which one is primary."""

    profile_results: dict[str, ProfileRunResult | None]
    primary_profile_name: str


class Plugin:
    """Base of every plugin: its configured ``name`` and upstream ``plugin_type``."""

    plugin_type: str = ""

    def __init__(self, name: str) -> None:
        self.name = name


class Filter(Plugin):
    """Upstream ``fwksched.Filter``."""

    def filter(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> list[Endpoint]:
        """The endpoints that pass, in their given order."""
        raise NotImplementedError


class Scorer(Plugin):
    """Upstream ``fwksched.Scorer``."""

    def score(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> dict[str, float]:
        """A score per endpoint name, nominally in [0, 1] (the profile clamps it)."""
        raise NotImplementedError


class Picker(Plugin):
    """Upstream ``fwksched.Picker``."""

    def pick(self, scored: list[ScoredEndpoint]) -> ProfileRunResult:
        """Choose among ``scored`` (which the picker may reorder)."""
        raise NotImplementedError


class ProfileHandler(Plugin):
    """Upstream ``fwksched.ProfileHandler``."""

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        """The profiles to run next; empty when done."""
        raise NotImplementedError

    def process_results(
        self, request: SchedulingRequest, results: Mapping[str, ProfileRunResult | None]
    ) -> SchedulingResult:
        """Combine the profile results; raises :class:`SchedulingError` on failure."""
        raise NotImplementedError


class DataProducer(Plugin):
    """Upstream ``requestcontrol.DataProducer``: puts attributes on endpoints before scheduling."""

    def produce(self, request: SchedulingRequest, endpoints: list[Endpoint]) -> None:
        """Annotate ``endpoints`` for this request."""
        raise NotImplementedError


class PreRequest(Plugin):
    """Upstream ``requestcontrol.PreRequest``: runs after a successful decision."""

    def pre_request(self, request: SchedulingRequest, result: SchedulingResult) -> None:
        """Record the decision (index writes, in-flight counters)."""
        raise NotImplementedError


class EventObserver(Plugin):
    """Hears what the router observes after a decision (upstream response plugins)."""

    def on_event(self, event: RouterEvent) -> None:
        """Update state on ``first_token``, ``completed`` or ``kv_events``."""
        raise NotImplementedError


@dataclass(slots=True)
class WeightedScorer:
    """A scorer and the weight its profile gives it (``weighted_scorer.go``)."""

    scorer: Scorer
    weight: float


def _enforce_score_range(score: float) -> float:
    if score < 0:
        return 0.0
    if score > 1:
        return 1.0
    return score


@dataclass(slots=True)
class ScheduleTrace:
    """What :mod:`blis_llmd_router.explain` records of each profile run."""

    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)


class SchedulerProfile:
    """Filters, weighted scorers and one picker (``scheduler_profile.go``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.filters: list[Filter] = []
        self.scorers: list[WeightedScorer] = []
        self.picker: Picker | None = None

    def run(
        self,
        request: SchedulingRequest,
        candidates: list[Endpoint],
        trace: ScheduleTrace | None = None,
    ) -> ProfileRunResult:
        """Filter, score and pick; raises :class:`SchedulingError` when no endpoint survives."""
        rec: dict[str, Any] | None = None
        if trace is not None:
            rec = {
                "candidates": [e.name for e in candidates],
                "filters": [],
                "scorers": [],
                "totals": {},
                "picker": None,
                "picked": [],
            }
            trace.profiles[self.name] = rec
        endpoints = candidates
        for flt in self.filters:
            endpoints = flt.filter(request, endpoints)
            if rec is not None:
                rec["filters"].append(
                    {
                        "name": flt.name,
                        "type": flt.plugin_type,
                        "survivors": [e.name for e in endpoints],
                    }
                )
            if not endpoints:
                break
        if not endpoints:
            raise SchedulingError("no endpoints available for the given request")
        totals = {e.name: 0.0 for e in endpoints}
        for ws in self.scorers:
            scores = ws.scorer.score(request, endpoints)
            weight = ws.weight
            # NOTE: _enforce_score_range inlined (hot path); the per-endpoint sums add the
            # scorers in the same order as upstream, so totals are bit-identical.
            for name, score in scores.items():
                if name in totals:
                    clamped = 0.0 if score < 0 else (1.0 if score > 1 else score)
                    totals[name] += clamped * weight
            if rec is not None:
                rec["scorers"].append(
                    {
                        "name": ws.scorer.name,
                        "type": ws.scorer.plugin_type,
                        "weight": ws.weight,
                        "scores": {e.name: scores[e.name] for e in endpoints if e.name in scores},
                    }
                )
        if self.picker is None:
            raise SchedulingError(f"profile {self.name!r} has no picker")
        scored = [ScoredEndpoint(e, totals[e.name]) for e in endpoints]
        result = self.picker.pick(scored)
        if rec is not None:
            rec["totals"] = dict(totals)
            rec["picker"] = {"name": self.picker.name, "type": self.picker.plugin_type}
            rec["picked"] = [e.name for e in result.target_endpoints]
        return result


class Scheduler:
    """Runs the profile handler's loop (``scheduler.go``, ``Schedule``)."""

    def __init__(self, handler: ProfileHandler, profiles: Mapping[str, SchedulerProfile]) -> None:
        self.handler = handler
        self.profiles = dict(profiles)

    def schedule(
        self,
        request: SchedulingRequest,
        candidates: list[Endpoint],
        trace: ScheduleTrace | None = None,
    ) -> SchedulingResult:
        """Schedule ``request``; raises :class:`SchedulingError` when no profile succeeds."""
        results: dict[str, ProfileRunResult | None] = {}
        while True:
            picked = self.handler.pick_profiles(request, self.profiles, results)
            if not picked:
                break
            for name, profile in picked.items():
                try:
                    results[name] = profile.run(request, candidates, trace)
                except SchedulingError:
                    results[name] = None
        if not results:
            raise SchedulingError(
                f"failed to run any scheduler profile for request {request.request_id}"
            )
        return self.handler.process_results(request, results)
