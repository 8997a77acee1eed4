"""Calibration from the Vidur operator profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from blis_core.contracts.cost import CoefficientRank
from blis_core.contracts.errors import InputRefused
from blis_core.cost import Catalog, Registry, fit_vidur
from blis_core.cost.fit import GRID_STEP

VIDUR = Path("/work/shared/data/operator-profiles/vidur")
pytestmark = pytest.mark.skipif(not VIDUR.exists(), reason="shared Vidur profiles not present")


def test_fit_produces_calibrated_entries_with_ranges(catalog: Catalog, registry: Registry) -> None:
    report = fit_vidur(VIDUR, catalog, registry, leave_one_out="A100-80GB-SXM", resamples=0)
    assert not any(e.spread for e in report.entries)  # no resamples, no stated spread
    keys = {(e.family, e.hardware) for e in report.entries}
    assert ("gemm", "H100-SXM") in keys and ("allreduce", "A100-80GB-SXM") in keys
    for e in report.entries:
        assert e.rank is CoefficientRank.CALIBRATED and e.covered and "vidur" in e.source
    assert report.in_sample["gemm@H100-SXM"] < 0.2
    assert set(report.loo["gemm"]) == {"transferred", "roofline"}


def test_embedded_fit_is_what_fit_produces(catalog: Catalog, registry: Registry) -> None:
    report = fit_vidur(VIDUR, catalog, registry)
    embedded = {  # the Vidur-calibrated entries (others are calibrated from serving runs)
        e.key: e
        for e in registry.entries
        if e.rank is CoefficientRank.CALIBRATED and "vidur" in e.source
    }
    assert {e.key for e in report.entries} == set(embedded)
    for e in report.entries:
        assert embedded[e.key].params == pytest.approx(dict(e.params))
        assert set(e.spread) == set(e.params) == set(embedded[e.key].spread)
        for k, ends in e.spread.items():
            assert embedded[e.key].spread[k] == pytest.approx(ends)
        for k, (lo, hi) in e.spread.items():
            assert lo <= e.params[k] <= hi
            if k.endswith("efficiency"):  # never narrower than the grid resolves
                assert hi - lo >= GRID_STEP - 1e-9


def test_fit_refusals(catalog: Catalog, registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(InputRefused):
        fit_vidur(tmp_path, catalog, registry)
    with pytest.raises(InputRefused) as exc:
        fit_vidur(VIDUR, catalog, registry, leave_one_out="L40S")
    assert exc.value.errors[0].path == "--leave-one-out"
