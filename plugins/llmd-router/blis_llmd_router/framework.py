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

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from blis_core.contracts.request import (
    PACKED_VOCAB_SIZE_MAX,
    InferenceRequest,
    packed_segment_token_ids,
    prompt_token_ids,
)
from blis_core.contracts.router import EndpointSnapshot, RouterEvent
from blis_llmd_router.datalayer import EndpointMetrics, endpoint_labels, metrics_from_snapshot

__all__ = [
    "TOKENIZER_VOCAB_SIZE",
    "DataProducer",
    "Endpoint",
    "EventObserver",
    "Filter",
    "MultiModalFeature",
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


@dataclass(frozen=True, slots=True)
class MultiModalFeature:
    """Upstream ``MultiModalFeature``: one image, video or audio item of a tokenised
    prompt, by content hash and modality. No BLIS request has any (see
    :attr:`SchedulingRequest.multimodal_features`)."""

    hash: str
    modality: str


class SchedulingError(Exception):
    """A profile run or a profile handler failed (upstream returns an ``error``)."""


class SchedulingRequest:
    """Upstream ``fwksched.InferenceRequest``: what plugins see of a request.

    ``target_model`` is the ``model`` header when the request carries one, else ``""``.
    ``token_ids`` is materialised on first use (only prefix-aware plugins need it);
    ``tokens_from_prompt`` says whether it is ``request.prompt``'s tokens (a pure function of
    the prompt's segments and ``vocab_size``, so plugins may cache what they derive from it)
    rather than ids given directly.
    """

    __slots__ = (
        "_tokens",
        "attributes",
        "forward_headers",
        "headers",
        "multimodal_features",
        "prefiller",
        "priority",
        "request",
        "request_id",
        "target_model",
        "tokens_from_prompt",
        "vocab_size",
    )

    def __init__(self, request: InferenceRequest, vocab_size: int = TOKENIZER_VOCAB_SIZE) -> None:
        self.request = request
        self.request_id = request.request_id
        self.headers: dict[str, str] = dict(request.headers)
        self.target_model = self.headers.get("model", "")
        self.priority = request.priority
        self.vocab_size = vocab_size
        self._tokens: tuple[int, ...] | None = None
        self.tokens_from_prompt = True
        self.prefiller: str | None = None
        """The ``x-prefiller-host-port`` header ``PreRequest`` plugins set for P/D: the
        prefill endpoint's name (``None``: not disaggregated)."""
        self.multimodal_features: tuple[MultiModalFeature, ...] = ()
        """Upstream ``TokenizedPrompt.MultiModalFeatures``: always empty, BLIS requests are
        text-only (an ``InferenceRequest`` has no image, video or audio inputs)."""
        self.forward_headers: dict[str, str] = {}
        """Headers ``PreRequest`` plugins set on the forwarded request (through
        :meth:`set_header`): the decision's :attr:`RoutingDecision.headers`. The P/D
        ``x-prefiller-host-port`` is :attr:`prefiller` instead."""
        self.attributes: dict[str, Any] = {}
        """Upstream ``InferenceRequest.PutAttribute`` / ``ReadRequestAttribute``: what a
        plugin publishes for later plugins of the same decision (the disagg handler's
        ``peer-endpoint``). Lives as long as this object, i.e. one decision."""

    def set_header(self, name: str, value: str) -> None:
        """A ``PreRequest`` header write (upstream ``request.Headers[name] = value``): seen
        by later plugins and forwarded with the decision."""
        self.headers[name] = value
        self.forward_headers[name] = value

    def drop_header(self, name: str) -> None:
        """A ``PreRequest`` header delete (upstream ``delete(request.Headers, name)``)."""
        self.headers.pop(name, None)
        self.forward_headers.pop(name, None)

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

    def token_ids_from(self, start: int) -> Sequence[int]:
        """``token_ids[start:]``; when ``start`` is where a prompt segment begins, only the
        segments from there on are materialised (a cached prefix needs no ids)."""
        if self._tokens is None and self.tokens_from_prompt:
            prompt = self.request.prompt
            pos = 0
            for k, seg in enumerate(prompt):
                if pos >= start:
                    if pos == start:
                        return prompt_token_ids(prompt[k:], self.vocab_size)
                    break
                pos += seg.num_tokens
        return self.token_ids[start:]

    @property
    def packs_ids(self) -> bool:
        """Whether :meth:`packed_ids_from` can pack the ids: they are the prompt's, in a
        vocabulary whose ids are uint32s."""
        return self.tokens_from_prompt and 2 <= self.vocab_size <= PACKED_VOCAB_SIZE_MAX

    def packed_ids_from(self, start: int) -> bytes:
        """``token_ids[start:]`` packed as little-endian uint32s (what block hashing
        hashes), made from the prompt's segments
        (:func:`~blis_core.contracts.request.packed_segment_token_ids`) without the ids
        as integers; only where :attr:`packs_ids`."""
        if not self.packs_ids:
            raise ValueError(
                f"request {self.request_id!r}: its ids are not the prompt's uint32 ids"
            )
        parts: list[bytes] = []
        pos = 0
        for seg in self.request.prompt:
            end = pos + seg.num_tokens
            if end > start:
                packed = packed_segment_token_ids(seg.content_key, self.vocab_size, seg.num_tokens)
                parts.append(packed if pos >= start else packed[4 * (start - pos) :])
            pos = end
        return b"".join(parts)

    @classmethod
    def from_token_ids(
        cls, request_id: str, token_ids: Sequence[int], target_model: str = ""
    ) -> SchedulingRequest:
        """A request whose tokenised prompt is given directly (upstream-test vectors)."""
        headers = (("model", target_model),) if target_model else ()
        req = cls(InferenceRequest(request_id, 0, (), 0, headers=headers))
        req._tokens = tuple(token_ids)
        req.tokens_from_prompt = False
        return req


@dataclass(slots=True, eq=False, init=False)
class Endpoint:
    """Upstream ``fwksched.Endpoint``: metadata, metrics and per-request attributes.

    Built afresh for each decision from the endpoint's snapshot, so ``attributes`` (what
    data producers ``Put``) never outlives the decision.
    """

    name: str
    labels: Mapping[str, str]
    metrics: EndpointMetrics
    attributes: dict[str, Any]

    # Hand-written: a router builds one per candidate per decision, and the generated
    # __init__ (default_factory) is measurably slower.
    def __init__(
        self,
        name: str,
        labels: Mapping[str, str],
        metrics: EndpointMetrics,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.labels = labels
        self.metrics = metrics
        self.attributes = {} if attributes is None else attributes

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

    def score_list(
        self, request: SchedulingRequest, endpoints: list[Endpoint]
    ) -> list[float] | None:
        """``score`` as a list in candidate order, or ``None`` (the default): use ``score``.

        A profile calls it first, and only when the endpoints' names are distinct; a scorer
        that implements it must give exactly ``[score(...)[e.name] for e in endpoints]``
        (it saves building and reading back a dict per decision).
        """
        return None


class Picker(Plugin):
    """Upstream ``fwksched.Picker``."""

    def pick(self, scored: list[ScoredEndpoint]) -> ProfileRunResult:
        """Choose among ``scored`` (which the picker may reorder)."""
        raise NotImplementedError

    def pick_totals(self, endpoints: list[Endpoint], totals: list[float]) -> ProfileRunResult:
        """:meth:`pick` over ``endpoints`` with their totals (same length, same order).

        What a profile calls; a picker may override it to choose without building a
        :class:`ScoredEndpoint` per endpoint, and must then choose exactly as ``pick``.
        """
        return self.pick([ScoredEndpoint(e, t) for e, t in zip(endpoints, totals, strict=True)])


class ProfileHandler(Plugin):
    """Upstream ``fwksched.ProfileHandler``."""

    def pick_profiles(
        self,
        request: SchedulingRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: MutableMapping[str, ProfileRunResult | None],
    ) -> dict[str, SchedulerProfile]:
        """The profiles to run next; empty when done. A handler may mark a profile it
        decided not to run as evaluated (``results[name] = None``), as upstream does."""
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

    def discard(self, request_id: str) -> None:
        """Drop what was kept for ``request_id`` before scheduling (``Produce`` or
        ``Score`` state awaiting ``pre_request``): it will not be dispatched. Default: none."""


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


def _weighted_totals(
    columns: list[tuple[list[float] | dict[str, float], float]], names: list[str]
) -> list[float]:
    """Each endpoint's total: from 0.0, add each scorer's clamped score times its weight, in
    profile order (upstream's summation order, so the floats are the same). A dict column
    is clamped here, and a name it lacks adds nothing."""
    lists = [(c, w) for c, w in columns if isinstance(c, list)]
    if len(lists) == len(columns):
        # One pass for the usual profiles; the parentheses keep the order of the additions.
        if len(lists) == 3:
            (a, wa), (b, wb), (c, wc) = lists
            return [((0.0 + x * wa) + y * wb) + z * wc for x, y, z in zip(a, b, c, strict=True)]
        if len(lists) == 2:
            (a, wa), (b, wb) = lists
            return [(0.0 + x * wa) + y * wb for x, y in zip(a, b, strict=True)]
    totals = [0.0] * len(names)
    for column, weight in columns:
        if isinstance(column, list):
            totals = [t + s * weight for t, s in zip(totals, column, strict=True)]
            continue
        get = column.get
        totals = [
            t if (s := get(name)) is None else t + _enforce_score_range(s) * weight
            for t, name in zip(totals, names, strict=True)
        ]
    return totals


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
        names = [e.name for e in endpoints]
        distinct = len(set(names)) == len(names)
        # Per scorer, in profile order: its clamped scores as a list in candidate order, or
        # (when it left a name out or scored out of order) its dict, which is added by name.
        columns: list[tuple[list[float] | dict[str, float], float]] = []
        for ws in self.scorers:
            scorer = ws.scorer
            scores: dict[str, float] | None = None
            vals = scorer.score_list(request, endpoints) if distinct else None
            if vals is None:
                scores = scorer.score(request, endpoints)
                vals = list(scores.values()) if list(scores) == names else None
            if vals is None:
                assert scores is not None
                columns.append((scores, ws.weight))
            elif min(vals) >= 0 and max(vals) <= 1:
                # Already in range: the clamp would change nothing (it keeps a NaN too).
                columns.append((vals, ws.weight))
            else:
                # _enforce_score_range, inlined (hot path).
                columns.append(([0.0 if v < 0 else (1.0 if v > 1 else v) for v in vals], ws.weight))
            if rec is not None:
                if scores is None:
                    assert vals is not None
                    scores = dict(zip(names, vals, strict=True))
                rec["scorers"].append(
                    {
                        "name": scorer.name,
                        "type": scorer.plugin_type,
                        "weight": ws.weight,
                        "scores": {e.name: scores[e.name] for e in endpoints if e.name in scores},
                    }
                )
        totals = _weighted_totals(columns, names)
        if self.picker is None:
            raise SchedulingError(f"profile {self.name!r} has no picker")
        result = self.picker.pick_totals(endpoints, totals)
        if rec is not None:
            rec["totals"] = dict(zip(names, totals, strict=True))
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
