"""Registry loading, refusals, rank order and rank shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from blis_core.contracts.cost import CoefficientRank, PrimitiveWork
from blis_core.contracts.errors import InputRefused
from blis_core.cost import (
    Catalog,
    RankTotals,
    Registry,
    RegistryMethod,
    RooflineMethod,
    load_registry,
)
from blis_core.cost.registry import FAMILIES
from blis_core.runner import make_host
from blis_core.runner.run import coefficient_sets


def _installed_copy(d: Path) -> Path:
    """The installed coefficient sets' documents, written as a registry directory."""
    d.mkdir()
    for cs in coefficient_sets(make_host()):
        for i, (_label, doc) in enumerate(cs.documents()):
            (d / f"{cs.name}-{i}.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return d


def _write(tmp_path: Path, entry: str) -> Path:
    d = _installed_copy(tmp_path / "reg")
    (d / "zz-extra.yaml").write_text("kind: coefficients\nentries:\n  - " + entry + "\n")
    return d


def test_roofline_covers_every_family_on_every_chip(catalog: Catalog, registry: Registry) -> None:
    for chip in catalog.hardware:
        for family in FAMILIES:
            assert registry.best(family, "any-impl", chip, "bf16") is not None
            work = PrimitiveWork(family, "x", chip, "bf16", 1e9, 1e6, 1e6, 2, (3,))
            answer = RegistryMethod(catalog, registry).price(work)
            assert answer is not None and answer[0] > 0
            if not family.startswith("host"):  # host work has no roofline: rank assumed
                floor = RooflineMethod(catalog, registry).price(work)
                assert floor is not None and floor[1] is CoefficientRank.ROOFLINE


def test_path_and_embedded_registry_hash_agree(
    catalog: Catalog, registry: Registry, tmp_path: Path
) -> None:
    d = _installed_copy(tmp_path / "reg")
    assert load_registry(d, catalog).content_hash == registry.content_hash


def test_calibrated_beats_roofline_and_out_of_range_is_transferred(
    catalog: Catalog, registry: Registry
) -> None:
    best = registry.best("gemm", "cublas", "H100-SXM", "bf16")
    assert best is not None and best.price_rank is CoefficientRank.CALIBRATED
    method = RegistryMethod(catalog, registry)
    inside = PrimitiveWork("gemm", "cublas", "H100-SXM", "bf16", flops=2 * 256 * 4096 * 4096,
                           bytes_moved=4096 * 4096 * 2.0 + 256 * 8192 * 2)  # fmt: skip
    outside = PrimitiveWork("gemm", "cublas", "H100-SXM", "bf16", flops=1e17, bytes_moved=1e12)
    assert (
        method.price(inside) is not None and method.price(inside)[1] is CoefficientRank.CALIBRATED
    )  # type: ignore[index]
    assert method.price(outside)[1] is CoefficientRank.TRANSFERRED  # type: ignore[index]
    l40 = registry.best("gemm", "cublas", "L40S", "bf16")
    assert l40 is not None and l40.price_rank is CoefficientRank.ROOFLINE


@pytest.mark.parametrize(
    ("entry", "path", "cause"),
    [
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {overhead_us: -1}}", "entries.0.params.overhead_us", "finite and >= 0"),
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {compute_efficiency: .nan}}", "entries.0.params.compute_efficiency", "finite"),
        ("{family: gemm, hardware: TPU-v9, rank: literature, method: fitted, source: s}",
         "entries.0.hardware", "chip the catalog lacks"),
        ("{family: warp_drive, hardware: H100-SXM, rank: literature, method: fitted, source: s}",
         "entries.0.family", "unknown family"),
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {overhead_us: 3 fortnights}}", "entries.0.params.overhead_us", "unknown unit"),
        ("{family: gemm, impl: '*', hardware: H100-SXM, dtype: bf16, rank: calibrated, "
         "method: fitted, source: s}", "entries.0", "two entries for one key"),
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {overhead_us: 5}, spread: {overhead_us: [6, 7]}}",
         "entries.0.spread.overhead_us", "lo <= value (5) <= hi"),
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {overhead_us: 5}, spread: {memory_efficiency: [0.5, 0.6]}}",
         "entries.0.spread.memory_efficiency", "does not set"),
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {overhead_us: 5}, spread: {overhead_us: 4}}",
         "entries.0.spread.overhead_us", "expected [lo, hi]"),
    ],
)  # fmt: skip
def test_bad_registry_refused(
    catalog: Catalog, tmp_path: Path, entry: str, path: str, cause: str
) -> None:
    with pytest.raises(InputRefused) as exc:
        load_registry(_write(tmp_path, entry), catalog)
    err = exc.value.errors[0]
    assert err.path == path and cause in err.cause
    assert "zz-extra.yaml" in exc.value.source


def test_a_spread_is_read_and_written_and_changes_no_price_or_hash(
    catalog: Catalog, tmp_path: Path
) -> None:
    entry = (
        "{family: gemm, hardware: H100-SXM, rank: measured, method: fitted, source: s, "
        "params: {overhead_us: 5}SPREAD}"
    )
    for sub in "abc":
        (tmp_path / sub).mkdir()
    plain = load_registry(_write(tmp_path / "a", entry.replace("SPREAD", "")), catalog)
    spread = ", spread: {overhead_us: [4, 6.5]}"
    stated = load_registry(_write(tmp_path / "b", entry.replace("SPREAD", spread)), catalog)
    assert plain.content_hash == stated.content_hash  # what prices is the same
    e = stated.best("gemm", "*", "H100-SXM", "bf16")
    assert e is not None and e.spread == {"overhead_us": (4.0, 6.5)}
    assert "spread" not in e.to_json() and e.to_document()["spread"] == {"overhead_us": [4, 6.5]}
    back = load_registry(_write(tmp_path / "c", json.dumps(e.to_document())), catalog)
    assert back.best("gemm", "*", "H100-SXM", "bf16").spread == e.spread  # type: ignore[union-attr]


def test_rank_shares_sum_to_one() -> None:
    totals = RankTotals()
    totals.add(CoefficientRank.CALIBRATED, 3.0)
    totals.add(CoefficientRank.ROOFLINE, 1.0)
    assert totals.rank_shares() == {"calibrated": 0.75, "roofline": 0.25}
    assert RankTotals().rank_shares() == {}
