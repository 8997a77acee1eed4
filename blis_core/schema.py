"""JSON Schema of every document that crosses a package boundary (``blis schema``)."""

from __future__ import annotations

from typing import Any

from blis_core.contracts.plan import PoolPlan
from blis_core.contracts.result import Result
from blis_core.contracts.scenario import Deployment, Scenario
from blis_core.contracts.scoring import ScoringRecord
from blis_core.contracts.shape_schema import STEP_SHAPE_ADAPTER, TRANSFER_ADAPTER

__all__ = ["schemas"]


def schemas() -> dict[str, dict[str, Any]]:
    """Document name -> its JSON Schema (validation mode)."""
    return {
        "scenario": Scenario.model_json_schema(),
        "deployment": Deployment.model_json_schema(),
        "result": Result.model_json_schema(),
        "scoring-record": ScoringRecord.model_json_schema(),
        "pool-plan": PoolPlan.model_json_schema(),
        "step-shape": STEP_SHAPE_ADAPTER.json_schema(),
        "transfer": TRANSFER_ADAPTER.json_schema(),
    }
