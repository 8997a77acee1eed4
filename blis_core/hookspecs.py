"""Hook specifications of the ``blis`` pluggy project: the plugin-facing API.

Plugins import :data:`hookimpl` from here and contract types from
:mod:`blis_core.contracts`; nothing else of blis-core. Specs are grouped by lifecycle.
None is ``firstresult``; none is historic. Per-event hooks (step pricing, routing) are
called only when some plugin implements them, so an unused hook costs nothing on the
hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from blis_core.contracts.cost import CoefficientSet, CostMethod, StepPrice
    from blis_core.contracts.engine import EngineFactory, StepOutcome
    from blis_core.contracts.plan import PoolPlan
    from blis_core.contracts.registry import Registrar
    from blis_core.contracts.request import InferenceRequest
    from blis_core.contracts.result import Result
    from blis_core.contracts.router import RouterFactory, RoutingDecision
    from blis_core.contracts.scoring import ScorerFactory
    from blis_core.contracts.shape import StepShape

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "blis"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -------------------------------------------------------------------------
# Registration: each plugin kind adds its factories. Called once per load.
# -------------------------------------------------------------------------


@hookspec
def blis_register_engines(registry: Registrar[EngineFactory]) -> None:
    """Add the engine factories this plugin provides (one per upstream release).

    :param registry: collects :class:`~blis_core.contracts.engine.EngineFactory` objects;
        a second factory with the same ``kind@upstream_release`` is an error.

    Implemented by engine plugins (entry-point group ``blis.engines``).
    """


@hookspec
def blis_register_routers(registry: Registrar[RouterFactory]) -> None:
    """Add the router factories this plugin provides.

    :param registry: collects :class:`~blis_core.contracts.router.RouterFactory` objects.

    Implemented by router plugins (entry-point group ``blis.routers``).
    """


@hookspec
def blis_register_cost_methods(registry: Registrar[CostMethod | CoefficientSet]) -> None:
    """Add the cost methods (ways to price primitive work) this plugin provides.

    :param registry: collects :class:`~blis_core.contracts.cost.CoefficientSet` objects
        (registry entries, priced on the compiled fast path) and
        :class:`~blis_core.contracts.cost.CostMethod` objects (asked per kernel); a second
        method with the same ``name`` is an error.

    Implemented by cost-method plugins (group ``blis.cost_methods``): the roofline floor
    (``blis-cost-roofline``) and the calibrated entries (``blis-cost-calibrated``) register
    through this hook like any third party's method.
    """


@hookspec
def blis_register_scorers(registry: Registrar[ScorerFactory]) -> None:
    """Add accuracy scorers this plugin provides.

    :param registry: collects :class:`~blis_core.contracts.scoring.ScorerFactory` objects.

    Implemented by scorer plugins (group ``blis.scorers``).
    """


# -------------------------------------------------------------------------
# Engine construction
# -------------------------------------------------------------------------


@hookspec
def blis_engine_planned(pool: str, plan: PoolPlan) -> None:
    """Observe a pool's final plan, once per pool, after its KV budget is decided.

    :param pool: the pool's name in the scenario.
    :param plan: the run-phase :class:`~blis_core.contracts.plan.PoolPlan`.

    Implemented by any plugin that audits or records plans; return value ignored.
    """


# -------------------------------------------------------------------------
# Step pricing
# -------------------------------------------------------------------------


@hookspec
def blis_step_priced(instance: str, shape: StepShape, duration_us: int) -> None:
    """Observe each priced step (called only when implemented; it is on the hot path).

    :param instance: the engine instance that formed the step.
    :param shape: the padded step.
    :param duration_us: the price the Environment returned.
    """


@hookspec
def blis_step_completed(instance: str, outcome: StepOutcome, now_us: int) -> None:
    """Observe each completed step (called only when implemented; it is on the hot path).

    Per instance, calls come in the order of the steps and ``now_us`` is the step's end.
    Across instances the order of calls is not that of time: an instance may complete
    several steps ahead of the kernel's clock (run-ahead), each with its own time.

    :param instance: the engine instance that ran the step.
    :param outcome: the :class:`~blis_core.contracts.engine.StepOutcome` the client and
        the router receive (a P/D prefill leg's part removed).
    :param now_us: simulated time at which the step ended.
    """


@hookspec
def blis_step_explained(instance: str, shape: StepShape, price: StepPrice) -> None:
    """Observe a step priced with its breakdown (``blis cost price`` and traces).

    :param instance: engine instance name, or ``""`` outside a run.
    :param shape: the step.
    :param price: its :class:`~blis_core.contracts.cost.StepPrice`.
    """


# -------------------------------------------------------------------------
# Router decisions
# -------------------------------------------------------------------------


@hookspec
def blis_route_decided(request: InferenceRequest, decision: RoutingDecision, now_us: int) -> None:
    """Observe each routing decision (called only when implemented).

    :param request: the routed request.
    :param decision: the router's :class:`~blis_core.contracts.router.RoutingDecision`.
    :param now_us: simulated time of the decision.
    """


# -------------------------------------------------------------------------
# Metric emission
# -------------------------------------------------------------------------


@hookspec
def blis_result_written(result: Result) -> None:
    """Observe a finished run's :class:`~blis_core.contracts.result.Result`.

    :param result: the canonical Result, after its content hash is set.

    Implemented by exporters (dashboards, scorers that watch runs).
    """
