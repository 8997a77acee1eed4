"""Mutation sweep: every deliberate break of a ported function is caught by the oracle.

For each mutant of :mod:`mutations`, standard scenarios run with the mutant installed
until the oracle reports a divergence; an exception from the port counts as caught (the
real scheduler raises on none of the standard scenarios).

* By default (CI) only the scenarios recorded in ``Mutant.caught_by`` run: each must
  still catch its mutant, and a mutant with none recorded fails.
* ``BLIS_MUTATION_SWEEP=full`` tries the recorded scenarios, then the aimed-at family,
  then every family interleaved, and prints the first catch (to record a new mutant's
  ``caught_by``). A mutant that survives them all fails the test.
"""

from __future__ import annotations

import itertools
import os

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


FULL = os.environ.get("BLIS_MUTATION_SWEEP") == "full"


def _order(mutant: Mutant) -> list[tuple[str, int]]:
    recorded = [(f, int(s)) for f, s in (c.rsplit("-", 1) for c in mutant.caught_by)]
    if not FULL:
        return recorded
    aimed = [c for c in ORDER if c[0] == mutant.family]
    rest = [c for c in ORDER if c[0] != mutant.family]
    return recorded + [c for c in aimed + rest if c not in recorded]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught(mutant: Mutant) -> None:
    """Some standard scenario diverges (or the port fails) with ``mutant`` installed."""
    caught = None
    if not mutant.caught_by and not FULL:
        pytest.fail(f"mutant {mutant.name}: no catching scenario recorded (run the full sweep)")
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
        tried_what = f"all {len(ORDER)} standard scenarios" if FULL else str(mutant.caught_by)
        pytest.fail(f"mutant {mutant.name} survived {tried_what}")
    print(f"\nmutant {mutant.name}: caught: {caught}")
