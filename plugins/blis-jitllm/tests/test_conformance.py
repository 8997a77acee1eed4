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


def _box(model: str, hardware: str, machine: str, **args: object) -> EnginePoolSpec:
    """A pool on a catalog machine, for the host and several-device configurations."""
    return EnginePoolSpec(
        pool="conformance",
        model=model,
        hardware=hardware,
        layout=ParallelLayout(),
        args={"max-queue": -1, **args},
        machine=machine,
    )


_Q4 = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


class TestJitllmSplitConformance(EngineConformance):
    """A GGUF model larger than the card: 13 blocks on a laptop GPU, the rest on its host
    and the output head back on the card."""

    factory = JitllmEngineFactory()
    spec = _box(
        "meta-llama/Llama-3.1-8B-Instruct",
        "RTX3050Ti-Laptop-4GB",
        "laptop-rtx3050ti-i9-12900hk",
        **{"max-seq": 4096, "load": _Q4, "gpu-layers": 13},
    )
    metric_names = _METRICS


class TestJitllmHostOnlyConformance(EngineConformance):
    """Every block on the host (``-devices cpu``): no device KV pool."""

    factory = JitllmEngineFactory()
    spec = _box(
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        "RTX3050Ti-Laptop-4GB",
        "laptop-rtx3050ti-i9-12900hk",
        devices="cpu",
        load="tinyllama-1.1b-chat-v1.0.Q3_K_M.gguf",
    )
    metric_names = _METRICS


class TestJitllmTwoDevicesConformance(EngineConformance):
    """Blocks split over two V100s, each with its own KV pool."""

    factory = JitllmEngineFactory()
    spec = _box(
        "meta-llama/Llama-3.1-8B-Instruct",
        "V100-SXM2-16GB",
        "v100-sxm2-8x-e5-2680v4",
        **{"max-seq": 4096, "load": _Q4, "devices": "cuda:0=3.5G,cuda:1=3.5G"},
    )
    metric_names = _METRICS
