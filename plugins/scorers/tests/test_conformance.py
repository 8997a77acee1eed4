"""Every scorer and adapter of blis-scorers passes the shared conformance suites."""

from __future__ import annotations

from pathlib import Path

from blis_conformance import GroundTruthAdapterConformance, ScorerConformance
from dataset import write_dataset

from blis_scorers import DISTRIBUTION, FATES, INFERENCE_SIM_TRAINING, LATENCY, THROUGHPUT


class TestLatency(ScorerConformance):
    scorer = LATENCY


class TestDistribution(ScorerConformance):
    scorer = DISTRIBUTION


class TestThroughput(ScorerConformance):
    scorer = THROUGHPUT


class TestFates(ScorerConformance):
    scorer = FATES


class TestInferenceSimTraining(GroundTruthAdapterConformance):
    adapter = INFERENCE_SIM_TRAINING

    def make_sample(self, folder: Path) -> Path:
        return write_dataset(folder)
