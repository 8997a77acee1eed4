"""T7 mutation sweep: every deliberate break of a ported function is caught.

For each mutant of :mod:`mutations`, the standard scenarios (families interleaved,
so every family is tried early; a mutant's aimed-at family first when it names one)
are run with the mutant installed until the oracle reports a divergence; a mutant
that survives the whole standard set fails the test.
A mutant that makes the port raise where upstream decided is caught as a divergence
too (``harness.Driver`` reports the upstream decision next to the port's exception).
"""

from __future__ import annotations

import itertools

import pytest
from harness import Divergence, quiet_vllm, run_scenario
from mutations import MUTANTS, Mutant
from scenarios import make_scenario, standard_scenarios


def _interleaved() -> list[tuple[str, int]]:
    by_family: dict[str, list[tuple[str, int]]] = {}
    for fam, seed in standard_scenarios():
        by_family.setdefault(fam, []).append((fam, seed))
    rounds = itertools.zip_longest(*by_family.values())
    return [case for rnd in rounds for case in rnd if case is not None]


ORDER = _interleaved()


def _order(mutant: Mutant) -> list[tuple[str, int]]:
    """The standard scenarios, the mutant's aimed-at family (if any) first."""
    if not mutant.family:
        return ORDER
    return [c for c in ORDER if c[0] == mutant.family] + [c for c in ORDER if c[0] != mutant.family]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant: Mutant) -> None:
    """Some standard scenario diverges (or fails) with ``mutant`` installed."""
    with quiet_vllm(), mutant.applied():
        for tried, (family, seed) in enumerate(_order(mutant), 1):
            try:
                run_scenario(make_scenario(family, seed))
            except Divergence as e:
                print(
                    f"\nmutant {mutant.name} ({mutant.breaks}): caught by {family}-{seed} "
                    f"after {tried} scenario(s), at iteration {e.iteration}: {e.what}"
                )
                return
    pytest.fail(f"mutant {mutant.name} survived all {len(ORDER)} standard scenarios")
