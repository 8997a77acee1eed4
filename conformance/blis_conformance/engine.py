"""The engine conformance suite and a small harness that drives an engine.

Subclass :class:`EngineConformance`, set ``factory`` and ``spec`` (a pool the engine can
plan), and the capability flags that apply.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import ClassVar

import pytest
from packaging.version import Version

from blis_core.contracts.engine import (
    EngineFactory,
    EngineInstance,
    EnginePoolSpec,
    Environment,
    KVEventEngine,
    SelectiveScrapeEngine,
    SpanEngine,
    StepOutcome,
    UnpromptedOutputsEngine,
)
from blis_core.contracts.errors import InputRefused
from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.request import InferenceRequest, PromptSegment
from blis_core.contracts.shape import SeqChunk, StepMode, StepShape

__all__ = [
    "EngineConformance",
    "KVEventConformance",
    "PrefixCachingConformance",
    "SelectiveScrapeConformance",
    "SpanConformance",
    "UnpromptedOutputsConformance",
    "drive_engine",
    "pep440_of",
]

_BLIS_TAG = re.compile(r"^(?P<base>.+)-blis\.(?P<n>\d+)$")


def pep440_of(plugin_version: str) -> str:
    """The PEP 440 form of a BLIS plugin version: ``X-blis.N`` is released as ``X.postN``
    (a leading ``v`` of the upstream tag dropped); any other form is taken as it is."""
    m = _BLIS_TAG.match(plugin_version)
    if m is None:
        return plugin_version
    return f"{m['base'].removeprefix('v')}.post{m['n']}"


def _distribution_of(cls: type) -> str | None:
    """The installed distribution that ships ``cls``'s top-level package, if any."""
    top = cls.__module__.split(".", 1)[0]
    dists = metadata.packages_distributions().get(top, [])
    return dists[0] if len(dists) == 1 else None


def drive_engine(
    engine: EngineInstance,
    env: Environment,
    requests: Sequence[InferenceRequest],
    max_steps: int = 100_000,
) -> tuple[list[StepShape], list[StepOutcome]]:
    """Run ``requests`` (all arriving at 0) to completion, stepping as the simulator does.

    Steps execute one at a time; up to ``plan.steps_in_flight`` are scheduled ahead.
    """
    for req in requests:
        engine.add_request(req, 0)
    now = 0
    shapes: list[StepShape] = []
    outcomes: list[StepOutcome] = []
    in_flight: list[tuple[StepShape, int]] = []
    limit = engine.plan.steps_in_flight
    for _ in range(max_steps):
        while len(in_flight) < limit:
            shape = engine.schedule(now)
            if shape is None:
                break
            in_flight.append((shape, env.price_step(engine.plan, shape)))
            shapes.append(shape)
        if not in_flight:
            break
        shape, duration = in_flight.pop(0)
        now += duration
        outcomes.append(engine.complete(shape, now))
    else:  # pragma: no cover - a conformance failure
        raise AssertionError(f"engine did not finish within {max_steps} steps")
    return shapes, outcomes


def _request(i: int, prompt: int, output: int, shared: int = 0) -> InferenceRequest:
    segments: list[PromptSegment] = []
    if shared:
        segments.append(PromptSegment("conformance/shared", shared))
    segments.append(PromptSegment(f"conformance/q{i}", prompt))
    return InferenceRequest(f"c{i}", 0, tuple(segments), output)


def _step_through(
    engine: EngineInstance, env: Environment, max_steps: int = 10_000
) -> Iterator[int]:
    """Step as :func:`drive_engine` does, yielding the steps completed so far before each
    completion (up to ``plan.steps_in_flight`` scheduled ahead), until nothing is left."""
    now = 0
    in_flight: list[tuple[StepShape, int]] = []
    for done in range(max_steps):
        while len(in_flight) < engine.plan.steps_in_flight:
            shape = engine.schedule(now)
            if shape is None:
                break
            in_flight.append((shape, env.price_step(engine.plan, shape)))
        if not in_flight:
            return
        yield done
        shape, duration = in_flight.pop(0)
        now += duration
        engine.complete(shape, now)


class EngineConformance:
    """Tests every engine plugin must pass. Set ``factory``, ``spec`` and ``metric_names``.

    ``metric_names`` declares the metrics the engine exports for routers (e.g. vLLM's
    ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
    ``vllm:kv_cache_usage_perc``); every scrape must carry them.
    """

    factory: ClassVar[EngineFactory]
    spec: ClassVar[EnginePoolSpec]
    metric_names: ClassVar[tuple[str, ...]] = ()

    @pytest.fixture
    def env(self, blis_environment: Callable[[str], Environment]) -> Environment:
        return blis_environment("conformance-0")

    @pytest.fixture
    def engine(self, env: Environment) -> EngineInstance:
        return self.factory.build(self.spec, env, "conformance-0")

    @pytest.mark.conformance
    def test_metadata_names_one_upstream_release(self) -> None:
        f = self.factory
        assert f.kind and f.upstream_release and f.plugin_version
        assert f.plugin_version.startswith(f.upstream_release.removeprefix("v")), (
            "plugin_version must be <upstream release>-blis.N"
        )

    @pytest.mark.conformance
    def test_plan_decides_a_kv_budget(self, env: Environment) -> None:
        plan = self.factory.plan(self.spec, env)
        assert isinstance(plan, PoolPlan)
        assert plan.kv_budget is not None and plan.kv_budget.num_gpu_blocks > 0
        assert plan.engine == f"{self.factory.kind}@{self.factory.upstream_release}"

    @pytest.mark.conformance
    def test_instance_satisfies_protocol(self, engine: EngineInstance) -> None:
        assert isinstance(engine, EngineInstance)
        assert "arrival" in engine.input_boundary

    @pytest.mark.conformance
    def test_every_request_gets_exactly_its_tokens(
        self, engine: EngineInstance, env: Environment
    ) -> None:
        reqs = [_request(i, 50 + 37 * i, 3 + i % 5) for i in range(12)]
        _, outcomes = drive_engine(engine, env, reqs)
        emitted: dict[str, int] = {}
        finished = {}
        for o in outcomes:
            for e in o.emitted:
                emitted[e.request_id] = emitted.get(e.request_id, 0) + e.num_tokens
            for f in o.finished:
                assert f.request_id not in finished, "a request finished twice"
                finished[f.request_id] = f
        for r in reqs:
            assert emitted[r.request_id] == r.max_output_tokens
            assert finished[r.request_id].output_tokens == r.max_output_tokens
        assert engine.num_unfinished() == 0

    @pytest.mark.conformance
    def test_shapes_are_padded_not_truncated(
        self, engine: EngineInstance, env: Environment
    ) -> None:
        shapes, _ = drive_engine(engine, env, [_request(i, 100, 4) for i in range(5)])
        for s in shapes:
            assert s.padded_tokens >= s.scheduled_tokens > 0
            if s.mode is StepMode.DECODE_ONLY:
                assert all(c.new_tokens == 1 for c in s.seqs)

    @pytest.mark.conformance
    def test_same_inputs_same_steps(self, env: Environment) -> None:
        reqs = [_request(i, 80 + 13 * i, 6) for i in range(8)]
        a = drive_engine(self.factory.build(self.spec, env, "a"), env, reqs)[0]
        b = drive_engine(self.factory.build(self.spec, env, "b"), env, reqs)[0]
        assert a == b

    @pytest.mark.conformance
    def test_abort_removes_request(self, engine: EngineInstance) -> None:
        engine.add_request(_request(0, 64, 8), 0)
        engine.abort_request("c0", 0)
        engine.abort_request("unknown-id", 0)
        assert engine.num_unfinished() == 0

    @pytest.mark.conformance
    def test_scrape_gives_numbers(self, engine: EngineInstance) -> None:
        metrics = engine.scrape()
        assert metrics and all(isinstance(v, float) for v in metrics.values())

    @pytest.mark.conformance
    def test_steps_respect_the_token_and_sequence_budgets(
        self, engine: EngineInstance, env: Environment
    ) -> None:
        plan = engine.plan
        n = min(plan.max_num_seqs + 8, 300)
        prompt = max(1, min(plan.max_num_batched_tokens // 2, plan.max_model_len // 4))
        try:
            shapes, _ = drive_engine(engine, env, [_request(i, prompt, 4) for i in range(n)])
        except InputRefused as err:  # the Environment refuses to price such a step
            raise AssertionError(f"a step the plan's budgets refuse was formed: {err}") from err
        dp = plan.layout.dp
        for s in shapes:
            assert s.scheduled_tokens <= plan.max_num_batched_tokens * dp, (
                f"step {s.step_id} schedules {s.scheduled_tokens} tokens, more than "
                f"max_num_batched_tokens={plan.max_num_batched_tokens}"
            )
            assert len(s.seqs) <= plan.max_num_seqs * dp, (
                f"step {s.step_id} runs {len(s.seqs)} sequences, more than "
                f"max_num_seqs={plan.max_num_seqs}"
            )

    @pytest.mark.conformance
    def test_never_holds_more_kv_than_its_budget(
        self, engine: EngineInstance, env: Environment
    ) -> None:
        plan = engine.plan
        budget = plan.kv_budget
        assert budget is not None, "the run-phase plan has no KV budget"
        block = budget.block_size_tokens
        capacity = budget.num_gpu_blocks * block
        prompt = max(1, min(plan.max_model_len // 2, 4 * plan.max_num_batched_tokens))
        n = min(plan.max_num_seqs, 2 + capacity // prompt)
        shapes, _ = drive_engine(engine, env, [_request(i, prompt, 8) for i in range(n)])
        for s in shapes:
            blocks = sum(-(-(c.context_tokens + c.new_tokens) // block) for c in s.seqs)
            assert blocks <= budget.num_gpu_blocks, (
                f"step {s.step_id} computes over {blocks} KV blocks of {block} tokens; the "
                f"KV budget has {budget.num_gpu_blocks} (an engine must admit, chunk or "
                "preempt within its budget)"
            )

    @pytest.mark.conformance
    def test_exports_the_metrics_it_declares(
        self, engine: EngineInstance, env: Environment
    ) -> None:
        names = self.metric_names
        assert names, (
            "set metric_names on the suite: the metrics this engine exports for routers "
            "(e.g. vllm:num_requests_waiting, vllm:num_requests_running)"
        )
        for r in [_request(i, 64, 4) for i in range(6)]:
            engine.add_request(r, 0)
        scrapes = [dict(engine.scrape())]
        for step in range(50):
            if step == 2:
                # A second wave arrives while the first runs: an engine that reports its
                # running batch only when it admits requests (SGLang's prefill report)
                # shows it then.
                for r in [_request(i, 64, 4) for i in range(6, 12)]:
                    engine.add_request(r, 0)
            shape = engine.schedule(0)
            if shape is None:
                break
            engine.complete(shape, 0)
            scrapes.append(dict(engine.scrape()))
        for name in names:
            for i, scrape in enumerate(scrapes):
                assert name in scrape, f"scrape {i} lacks declared metric {name!r}"
                assert isinstance(scrape[name], float) and math.isfinite(scrape[name]), (
                    f"{name!r} is {scrape[name]!r} in scrape {i}, not a finite float"
                )
        moved = [n for n in names if len({s[n] for s in scrapes}) > 1]
        assert moved, (
            f"none of the declared metrics {list(names)} changed while six requests ran; "
            "a router reading them learns nothing"
        )

    @pytest.mark.conformance
    def test_plugin_version_matches_its_distribution(self) -> None:
        dist = _distribution_of(type(self.factory))
        if dist is None:
            return  # not installed as a distribution (a throw-away test factory)
        installed = metadata.version(dist)
        expected = pep440_of(self.factory.plugin_version)
        assert Version(installed) == Version(expected), (
            f"plugin_version {self.factory.plugin_version!r} (PEP 440: {expected}) does not "
            f"match distribution {dist} {installed}; X-blis.N is released as X.postN"
        )

    @pytest.mark.conformance
    def test_too_long_prompt_is_refused(self, engine: EngineInstance) -> None:
        too_long = engine.plan.max_model_len + 1
        with pytest.raises(InputRefused):
            engine.add_request(_request(0, too_long, 1), 0)


class PrefixCachingConformance:
    """Add to an engine suite when the engine keeps a prefix cache (capability)."""

    factory: ClassVar[EngineFactory]
    spec: ClassVar[EnginePoolSpec]

    @pytest.mark.conformance
    def test_prefix_caching_saves_computation(
        self, blis_environment: Callable[[str], Environment]
    ) -> None:
        env = blis_environment("prefix")
        engine = self.factory.build(self.spec, env, "prefix")
        drive_engine(engine, env, [_request(0, 32, 2, shared=512)])
        shapes, _ = drive_engine(engine, env, [_request(1, 32, 2, shared=512)])
        computed = sum(c.new_tokens for s in shapes for c in s.seqs)
        assert computed < 512, f"the shared 512-token prefix was recomputed ({computed} tokens)"


class SpanConformance:
    """Add to an engine suite when the engine offers decode spans (``SpanEngine``)."""

    factory: ClassVar[EngineFactory]
    spec: ClassVar[EnginePoolSpec]

    @pytest.mark.conformance
    def test_a_span_advances_every_context_by_one_token(
        self, blis_environment: Callable[[str], Environment]
    ) -> None:
        """A span is what the simulator prices ahead from its first shape: boundary ``i``
        is boundary 0's decode step with the step id and every sequence's context plus
        ``i`` (``DecodeSpan.shape``)."""
        env = blis_environment("span")
        engine = self.factory.build(self.spec, env, "span")
        assert isinstance(engine, SpanEngine), "a suite with spans needs a SpanEngine"
        for i in range(6):
            engine.add_request(_request(i, 40 + 7 * i, 60), 0)
        offered = 0
        for _ in _step_through(engine, env):
            span = engine.decode_span()
            if span is not None:
                offered += 1
                first = span.shape(0)
                assert first.mode is StepMode.DECODE_ONLY
                for k in range(span.num_steps):
                    seqs = tuple(SeqChunk(q.new_tokens, q.context_tokens + k) for q in first.seqs)
                    want = dataclasses.replace(first, step_id=first.step_id + k, seqs=seqs)
                    assert span.shape(k) == want, f"boundary {k} of a span"
        assert offered, "a SpanEngine offered no span over six steady decodes"


class KVEventConformance:
    """Add to an engine suite when the engine can stop its KV events (``KVEventEngine``)."""

    factory: ClassVar[EngineFactory]
    spec: ClassVar[EnginePoolSpec]

    @pytest.mark.conformance
    def test_stopped_kv_events_change_nothing_else(
        self, blis_environment: Callable[[str], Environment]
    ) -> None:
        """With its KV events stopped the engine makes the same steps, outcomes (their
        ``kv_events`` aside: none) and metrics as with them (prompts sharing a prefix, so
        blocks are cached, hit and evicted)."""
        requests = [_request(i, 40 + 9 * i, 24, shared=64) for i in range(8)]
        runs = []
        for stop in (False, True):
            env = blis_environment("kv-events")
            engine = self.factory.build(self.spec, env, "kv-events")
            assert isinstance(engine, KVEventEngine), "this suite needs a KVEventEngine"
            if stop:
                engine.stop_kv_events()
            shapes, outcomes = drive_engine(engine, env, requests)
            runs.append((shapes, outcomes, dict(engine.scrape())))
        (shapes, outcomes, scrape), (quiet_shapes, quiet_outcomes, quiet_scrape) = runs
        assert any(o.kv_events for o in outcomes), "the engine made no KV events to stop"
        assert not any(o.kv_events for o in quiet_outcomes), "KV events made after the stop"
        assert quiet_shapes == shapes, "the steps changed with the KV events stopped"
        assert quiet_outcomes == [dataclasses.replace(o, kv_events=()) for o in outcomes], (
            "the outcomes changed with the KV events stopped"
        )
        assert quiet_scrape == scrape, "the metrics changed with the KV events stopped"


class UnpromptedOutputsConformance:
    """Add to an engine suite when the engine can be told that no prompt holds a generated
    token (``UnpromptedOutputsEngine``)."""

    factory: ClassVar[EngineFactory]
    spec: ClassVar[EnginePoolSpec]

    @pytest.mark.conformance
    def test_unprompted_outputs_change_nothing(
        self, blis_environment: Callable[[str], Environment]
    ) -> None:
        """Told (after its KV events are stopped, as the simulator tells it) that no
        prompt holds a generated token, the engine makes the same steps, outcomes and
        metrics as without (prompts sharing a prefix, outputs long enough to fill
        blocks)."""
        requests = [_request(i, 30 + 7 * i, 40 + 5 * i, shared=64) for i in range(12)]
        runs = []
        for told in (False, True):
            env = blis_environment("unprompted")
            engine = self.factory.build(self.spec, env, "unprompted")
            assert isinstance(engine, UnpromptedOutputsEngine), "this suite needs one"
            if isinstance(engine, KVEventEngine):
                engine.stop_kv_events()
            if told:
                engine.outputs_unprompted()
            shapes, outcomes = drive_engine(engine, env, requests)
            runs.append((shapes, outcomes, dict(engine.scrape())))
        (shapes, outcomes, scrape), (told_shapes, told_outcomes, told_scrape) = runs
        assert told_shapes == shapes, "the steps changed with the outputs unprompted"
        assert told_outcomes == outcomes, "the outcomes changed with the outputs unprompted"
        assert told_scrape == scrape, "the metrics changed with the outputs unprompted"


class SelectiveScrapeConformance:
    """Add to an engine suite when the engine scrapes some keys alone
    (``SelectiveScrapeEngine``). Set ``metric_names`` as for :class:`EngineConformance`."""

    factory: ClassVar[EngineFactory]
    spec: ClassVar[EnginePoolSpec]
    metric_names: ClassVar[tuple[str, ...]] = ()

    @pytest.mark.conformance
    def test_a_selective_scrape_is_the_scrape_under_its_keys(
        self, blis_environment: Callable[[str], Environment]
    ) -> None:
        """Between steps, ``scrape_keys`` gives ``scrape()``'s values under the keys
        asked for: the declared metrics alone, with one key of another sample (a
        counter's or a histogram's), and with a key it does not export."""
        env = blis_environment("scrape-keys")
        engine = self.factory.build(self.spec, env, "scrape-keys")
        assert isinstance(engine, SelectiveScrapeEngine), "this suite needs one"
        for i in range(6):
            engine.add_request(_request(i, 30 + 11 * i, 12 + i), 0)
        names = frozenset(self.metric_names)
        steps = 0
        for steps in _step_through(engine, env):
            full = dict(engine.scrape())
            others = sorted(set(full) - names)
            other = {others[steps % len(others)]} if others else set()
            for keys in (names, names | other, names | {"blis:no-such-sample"}):
                want = {k: full[k] for k in keys if k in full}
                assert dict(engine.scrape_keys(keys)) == want, f"step {steps}: {sorted(keys)}"
            if steps in (1, 8):
                for key, value in full.items():
                    assert dict(engine.scrape_keys(frozenset({key}))) == {key: value}, key
        assert steps > 8
