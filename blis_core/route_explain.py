"""``blis route explain``: one routing decision on a given endpoint state.

The state and request files are JSON (or YAML) documents validated here; the router
plugin does the deciding through :class:`~blis_core.contracts.router.ExplainingRouterFactory`.

State::

    {"endpoints": [{"name": "ep-0", "engine_kind": "vllm", "labels": {},
                    "waiting": 3, "running": 12, "kv_usage": 0.41}, ...]}

``waiting``, ``running`` and ``kv_usage`` (0..1) are written under the engine kind's own
metric names; ``metrics`` gives any metric by its name directly.

Request::

    {"request_id": "r1", "prompt": [{"content_key": "sys/0", "num_tokens": 1000},
                                    {"content_key": "q/1", "num_tokens": 200}],
     "max_output_tokens": 128}

``input_tokens`` may replace ``prompt`` (one segment of unique content).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator

from blis_core.contracts.base import Document
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.router import EndpointSnapshot
from blis_core.io.scenario import field_errors
from blis_core.metrics.engine_gauges import ENGINE_GAUGE_NAMES

__all__ = ["ENGINE_METRIC_NAMES", "EndpointState", "ExplainRequest", "ExplainState"]

#: shorthand -> metric name, per engine kind (the names each engine exports)
ENGINE_METRIC_NAMES = ENGINE_GAUGE_NAMES


class EndpointState(Document):
    """One endpoint as a scrape would show it."""

    name: str = Field(min_length=1)
    pool: str = "pool"
    engine_kind: str = "vllm"
    role: str = Field(default="both", pattern=r"^(both|prefill|decode)$")
    labels: dict[str, str] = Field(default_factory=dict)
    waiting: float | None = Field(default=None, ge=0)
    running: float | None = Field(default=None, ge=0)
    kv_usage: float | None = Field(default=None, ge=0, le=1)
    metrics: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_kind(self) -> EndpointState:
        shorthand = any(v is not None for v in (self.waiting, self.running, self.kv_usage))
        if shorthand and self.engine_kind not in ENGINE_METRIC_NAMES:
            raise ValueError(
                f"engine_kind {self.engine_kind!r} has no shorthand metric names; give "
                f"'metrics' by name (known kinds: {sorted(ENGINE_METRIC_NAMES)})"
            )
        return self

    def snapshot(self) -> EndpointSnapshot:
        """The EndpointSnapshot a router would see."""
        metrics = dict(self.metrics)
        names = ENGINE_METRIC_NAMES.get(self.engine_kind, {})
        for key in ("waiting", "running", "kv_usage"):
            value = getattr(self, key)
            if value is not None:
                metrics[names[key]] = float(value)
        return EndpointSnapshot(
            name=self.name,
            pool=self.pool,
            engine_kind=self.engine_kind,
            role=self.role,
            labels=dict(self.labels),
            metrics=metrics,
            scraped_at_us=0,
        )


class ExplainState(Document):
    """The endpoints a decision runs on, in candidate order."""

    endpoints: tuple[EndpointState, ...]

    @model_validator(mode="after")
    def _unique(self) -> ExplainState:
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            raise ValueError(f"endpoint names must be unique: {names}")
        return self


class SegmentSpec(Document):
    """A run of prompt tokens named by its content."""

    content_key: str = Field(min_length=1)
    num_tokens: int = Field(ge=0)


class ExplainRequest(Document):
    """The request to route."""

    request_id: str = "explain"
    prompt: tuple[SegmentSpec, ...] | None = None
    input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int = Field(default=16, gt=0)
    priority: int = 0
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_prompt(self) -> ExplainRequest:
        if (self.prompt is None) == (self.input_tokens is None):
            raise ValueError("give exactly one of 'prompt' and 'input_tokens'")
        return self

    def request(self) -> InferenceRequest:
        """The InferenceRequest to route."""
        if self.prompt is not None:
            segments = tuple(PromptSegment(s.content_key, s.num_tokens) for s in self.prompt)
        else:
            assert self.input_tokens is not None
            segments = (PromptSegment(f"explain/{self.request_id}", self.input_tokens),)
        return InferenceRequest(
            request_id=self.request_id,
            arrival_us=0,
            prompt=segments,
            max_output_tokens=self.max_output_tokens,
            priority=self.priority,
            headers=tuple(sorted(self.headers.items())),
        )


def parse(model: type[Document], data: Any, source: str) -> Any:
    """Validate ``data`` as ``model``, refusing with every error (field, value, cause)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InputRefused(field_errors(err, data), source) from None
