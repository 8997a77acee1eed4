"""Ground-truth adapters: real measurements in the formats people have, as points."""

from __future__ import annotations

from blis_scorers.adapters.inference_sim_training import ADAPTER as INFERENCE_SIM_TRAINING
from blis_scorers.adapters.inference_sim_training import InferenceSimTraining

ADAPTERS = (INFERENCE_SIM_TRAINING,)

__all__ = ["ADAPTERS", "INFERENCE_SIM_TRAINING", "InferenceSimTraining"]
