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


class TestJitllmSplitConformance(EngineConformance):
    """A GGUF model larger than the card: 13 blocks on a laptop GPU, the rest and the
    output head on its host."""

    factory = JitllmEngineFactory()
    spec = EnginePoolSpec(
        pool="conformance",
        model="meta-llama/Llama-3.1-8B-Instruct",
        hardware="RTX3050Ti-Laptop-4GB",
        layout=ParallelLayout(),
        args={
            "max-seq": 4096,
            "max-queue": -1,
            "load": "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            "gpu-layers": 13,
        },
        machine="laptop-rtx3050ti-i9-12900hk",
    )
    metric_names = _METRICS


class TestJitllmHostOnlyConformance(EngineConformance):
    """Every block on the host (``-devices cpu``): no device KV pool."""

    factory = JitllmEngineFactory()
    spec = EnginePoolSpec(
        pool="conformance",
        model="TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        hardware="RTX3050Ti-Laptop-4GB",
        layout=ParallelLayout(),
        args={"max-queue": -1, "devices": "cpu", "load": "tinyllama-1.1b-chat-v1.0.Q3_K_M.gguf"},
        machine="laptop-rtx3050ti-i9-12900hk",
    )
    metric_names = _METRICS


class TestJitllmTwoDevicesConformance(EngineConformance):
    """Blocks split over two V100s, each with its own KV pool."""

    factory = JitllmEngineFactory()
    spec = EnginePoolSpec(
        pool="conformance",
        model="meta-llama/Llama-3.1-8B-Instruct",
        hardware="V100-SXM2-16GB",
        layout=ParallelLayout(),
        args={
            "max-seq": 4096,
            "max-queue": -1,
            "load": "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            "devices": "cuda:0=3.5G,cuda:1=3.5G",
        },
        machine="v100-sxm2-8x-e5-2680v4",
    )
    metric_names = _METRICS
