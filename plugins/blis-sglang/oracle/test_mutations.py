"""Mutation sweep: every deliberate break of a ported function is caught by the oracle.

For each mutant of :mod:`mutations`, the standard scenarios (its aimed-at family first,
then families interleaved) run with the mutant installed until the oracle reports a
divergence; an exception from the port counts as caught (the real scheduler raises on
none of the standard scenarios). A mutant that survives them all fails the test.
"""

from __future__ import annotations

import itertools

import pytest
from harness import Divergence, quiet, run_scenario
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
    if not mutant.family:
        return ORDER
    return [c for c in ORDER if c[0] == mutant.family] + [c for c in ORDER if c[0] != mutant.family]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant: Mutant) -> None:
    """Some standard scenario diverges (or the port fails) with ``mutant`` installed."""
    caught = None
    with quiet(), mutant.applied():
        for tried, (family, seed) in enumerate(_order(mutant), 1):
            try:
                run_scenario(make_scenario(family, seed))
            except Divergence as e:
                caught = f"{str(e).splitlines()[0]} after {tried} scenario(s)"
                break
            except Exception as e:  # the port failing is a catch too
                caught = f"port raised {type(e).__name__} in {family}-{seed}"
                break
    if caught is None:
        pytest.fail(f"mutant {mutant.name} survived all {len(ORDER)} standard scenarios")
    print(f"\nmutant {mutant.name}: caught: {caught}")
