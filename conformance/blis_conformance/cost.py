"""Conformance suites for cost methods and scorers. Subclass and set the class attributes."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest

from blis_core.contracts.cost import CoefficientRank, CostMethod, PrimitiveWork
from blis_core.contracts.scoring import ScorerFactory

__all__ = ["CostMethodConformance", "ScorerConformance", "sample_work"]


def sample_work(hardware: str = "H100-SXM") -> list[PrimitiveWork]:
    """A spread of primitive work items, one per family, on ``hardware``."""
    return [
        PrimitiveWork(
            "gemm",
            "cublas",
            hardware,
            "bfloat16",
            flops=2e12,
            bytes_moved=4e8,
            shape=(2048, 4096, 4096),
        ),
        PrimitiveWork(
            "attention_decode", "FLASH_ATTN", hardware, "bfloat16", flops=1e9, bytes_moved=2e9
        ),
        PrimitiveWork("elementwise", "torch", hardware, "bfloat16", bytes_moved=1e8),
        PrimitiveWork("allreduce", "nccl", hardware, "bfloat16", link_bytes=6e7, ranks=4),
        PrimitiveWork("host_step", "python", hardware, "bfloat16"),
    ]


class CostMethodConformance:
    """Tests every cost method must pass. Set ``method`` (and ``hardware`` if needed)."""

    method: ClassVar[CostMethod]
    hardware: ClassVar[str] = "H100-SXM"

    @pytest.mark.conformance
    def test_has_a_name(self) -> None:
        assert isinstance(self.method.name, str) and self.method.name

    @pytest.mark.conformance
    def test_answers_are_finite_non_negative_seconds_with_a_rank(self) -> None:
        answered = 0
        for work in sample_work(self.hardware):
            answer = self.method.price(work)
            if answer is None:
                continue
            answered += 1
            seconds, rank = answer
            assert math.isfinite(seconds) and seconds >= 0, (work.family, seconds)
            assert isinstance(rank, CoefficientRank)
        assert answered > 0, "the method priced none of the sample work"

    @pytest.mark.conformance
    def test_same_work_same_price(self) -> None:
        for work in sample_work(self.hardware):
            assert self.method.price(work) == self.method.price(work)


class ScorerConformance:
    """Tests every scorer must pass. Set ``scorer``."""

    scorer: ClassVar[ScorerFactory]

    @pytest.mark.conformance
    def test_metadata(self) -> None:
        assert self.scorer.name and self.scorer.version
        assert isinstance(self.scorer, ScorerFactory)
