"""blis-jitllm against the shared engine conformance suite, with the real Environment."""

from __future__ import annotations

from blis_conformance import EngineConformance
from blis_core.contracts.engine import EnginePoolSpec
from blis_core.contracts.plan import ParallelLayout

from blis_jitllm import JitllmEngineFactory


def _spec(**args: object) -> EnginePoolSpec:
    return EnginePoolSpec(
        pool="conformance",
        model="meta-llama/Llama-3.1-8B-Instruct",
        hardware="H100-SXM",
        layout=ParallelLayout(),
        args={"max-seq": 8192, "max-queue": -1, **args},
    )


_METRICS = ("jitllm_sessions", "jitllm_tokens_generated_total")


class TestJitllmConformance(EngineConformance):
    factory = JitllmEngineFactory()
    spec = _spec()
    metric_names = _METRICS


class TestJitllmJointAlwaysConformance(EngineConformance):
    """Every step joint (``-joint-steps always``)."""

    factory = JitllmEngineFactory()
    spec = _spec(**{"joint-steps": "always"})
    metric_names = _METRICS


class TestJitllmSeparateConformance(EngineConformance):
    """Every decode step's rows one after another (``-joint-steps never``)."""

    factory = JitllmEngineFactory()
    spec = _spec(**{"joint-steps": "never", "max-batch": 8})
    metric_names = _METRICS
