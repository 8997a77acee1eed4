"""Generated reference docs are current, and every scenario-level field is described."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import BaseModel

from blis_core.contracts.plan import ParallelLayout
from blis_core.contracts.scenario import (
    ComponentSelection,
    Deployment,
    ExperimentalFrame,
    PoolSpec,
    RouterSpec,
    Scenario,
    ServiceLevelObjectives,
)

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> object:
    spec = importlib.util.spec_from_file_location(
        "gen_scenario_doc", ROOT / "scripts" / "gen_scenario_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scenario_reference_is_generated_from_the_models() -> None:
    expected = _generator().render()  # type: ignore[attr-defined]
    assert (ROOT / "docs" / "scenario.md").read_text(encoding="utf-8") == expected, (
        "docs/scenario.md is stale: run python scripts/gen_scenario_doc.py"
    )


def test_every_deployment_and_frame_field_is_described() -> None:
    models: list[type[BaseModel]] = [
        Scenario,
        Deployment,
        PoolSpec,
        ComponentSelection,
        RouterSpec,
        ParallelLayout,
        ExperimentalFrame,
        ServiceLevelObjectives,
    ]
    for model in models:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"


def test_readme_keeps_exactly_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert setup.count("```bash") == 2
    assert "blis run" in setup and "tox" in setup
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = setup.split("```bash\n")[2].split("\n```", 1)[0].strip()
    assert test_command.startswith('python3 -m pip install "tox>=4.20,<5" && python3 -m tox')
    assert test_command in ci.splitlines(), "CI must run the README's test command"
