"""Registry loading, refusals, rank order and rank shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import blis_core
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
from blis_core.cost.catalog import _hardware_doc, load_catalog
from blis_core.cost.registry import FAMILIES, CoefficientEntry, build_registry, effective_rank
from blis_core.cost.roofline import entry_constants, link_bandwidth
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
        ("{family: gemm, hardware: H100-SXM, rank: literature, method: fitted, source: s, "
         "params: {overlap: 1.5}}", "entries.0.params.overlap", "a fraction in [0, 1]"),
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


@pytest.mark.parametrize(("overlap", "want"), [(None, 3.0), (1.0, 3.0), (0.0, 5.0), (0.5, 4.0)])
def test_overlap_adds_the_lesser_resources_share_to_the_greatest(
    catalog: Catalog, overlap: float | None, want: float
) -> None:
    """overlap 1 (or unset) is the roofline's max; 0 adds compute and memory; between,
    that share of the lesser time is added to the greater."""
    hw = catalog.chip("H100-SXM")
    params = {"compute_efficiency": 1.0, "memory_efficiency": 1.0}
    if overlap is not None:
        params["overlap"] = overlap
    e = CoefficientEntry("moe_gemm", "*", "H100-SXM", "fp4", CoefficientRank.CALIBRATED,
                         "fitted", params, {}, "test")  # fmt: skip
    c = entry_constants(e, hw, "bf16", link_bandwidth(catalog, hw))
    flops = 3.0 / c.s_per_flop  # 3 s of compute
    nbytes = 2.0 / c.s_per_byte  # 2 s of memory
    assert c.seconds(flops, nbytes, 0.0, 0.0) == pytest.approx(want, rel=1e-12)
    assert c.seconds(flops, 0.0, 0.0, 0.0) == pytest.approx(3.0, rel=1e-12)


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


def test_a_die_siblings_fitted_entry_prices_a_chip_with_none_of_its_own_transferred(
    catalog: Catalog, registry: Registry
) -> None:
    # Nearest memory bandwidth first: 3.35 TB/s (H100 SXM), 4.8 (H200), 4.0 (GH200),
    # 2.0 (H100 PCIe).
    assert catalog.die_siblings("H200-SXM") == ("GH200-96GB", "H100-SXM", "H100-PCIe")
    assert catalog.die_siblings("H100-SXM") == ("GH200-96GB", "H200-SXM", "H100-PCIe")
    assert catalog.die_siblings("H100-PCIe") == ("H100-SXM", "GH200-96GB", "H200-SXM")
    assert catalog.die_siblings("GH200-96GB") == ("H100-SXM", "H200-SXM", "H100-PCIe")
    assert catalog.die_siblings("L40S") == ()
    siblings = catalog.die_siblings("H200-SXM")
    # Without siblings the H200 has only the floor for a norm; with them, the H100's
    # fitted elementwise entry (its GEMMs have an entry of their own, measured on it).
    floor = registry.best("elementwise", "rms_norm", "H200-SXM", "bf16")
    assert floor is not None and floor.price_rank is CoefficientRank.ROOFLINE
    moved = registry.best("elementwise", "rms_norm", "H200-SXM", "bf16", None, siblings)
    h100 = registry.best("elementwise", "rms_norm", "H100-SXM", "bf16")
    assert moved is h100 and moved is not None and moved.method == "fitted"
    assert effective_rank(moved, "H200-SXM") == CoefficientRank.TRANSFERRED
    assert effective_rank(moved, "H100-SXM") == CoefficientRank.CALIBRATED
    # Priced against the H200's own peaks, at rank transferred even inside the range.
    work = PrimitiveWork("elementwise", "rms_norm", "H200-SXM", "bf16", flops=4 * 256 * 8192,
                         bytes_moved=3 * 256 * 8192 * 2.0)  # fmt: skip
    answer = RegistryMethod(catalog, registry).price(work)
    assert answer is not None and answer[1] is CoefficientRank.TRANSFERRED
    c = entry_constants(
        moved, catalog.chip("H200-SXM"), "bf16", link_bandwidth(catalog, catalog.chip("H200-SXM"))
    )
    assert answer[0] == pytest.approx(c.seconds(work.flops, work.bytes_moved, 0.0, 0.0))
    on_h100 = RegistryMethod(catalog, registry).price(
        PrimitiveWork("elementwise", "rms_norm", "H100-SXM", "bf16", work.flops, work.bytes_moved)
    )
    assert on_h100 is not None and answer[0] < on_h100[0]  # the H200's HBM3e is faster


def test_a_chips_own_fitted_entry_beats_its_die_siblings() -> None:
    def entry(hardware: str, eff: float) -> CoefficientEntry:
        return CoefficientEntry(
            family="gemm", impl="*", hardware=hardware, dtype="*",
            rank=CoefficientRank.CALIBRATED, method="fitted",
            params={"memory_efficiency": eff}, covered={"ranks": (1, 2)}, source="test",
        )  # fmt: skip

    own, sibling = entry("H200-SXM", 0.5), entry("H100-SXM", 0.9)
    reg = build_registry([own, sibling], "test")
    assert reg.best("gemm", "x", "H200-SXM", "bf16", 1, ("H100-SXM",)) is own
    # Out of its ranks range the own entry is transferred too: still preferred.
    assert reg.best("gemm", "x", "H200-SXM", "bf16", 8, ("H100-SXM",)) is own
    # A sibling's roofline fractions are never borrowed: the floor is the chip's own.
    floor = CoefficientEntry(
        family="gemm", impl="*", hardware="H100-SXM", dtype="*", rank=CoefficientRank.ASSUMED,
        method="roofline", params={"memory_efficiency": 0.7}, covered={}, source="test",
    )  # fmt: skip
    borrowed = build_registry([floor], "t").best("gemm", "x", "H200-SXM", "bf16", 1, ("H100-SXM",))
    assert borrowed is None


def test_a_key_fitted_on_several_die_siblings_is_priced_from_the_nearest() -> None:
    def entry(hardware: str, impl: str) -> CoefficientEntry:
        return CoefficientEntry(
            family="gemm", impl=impl, hardware=hardware, dtype="*",
            rank=CoefficientRank.CALIBRATED, method="fitted",
            params={"memory_efficiency": 0.8}, covered={}, source="test",
        )  # fmt: skip

    near, far = entry("H100-SXM", "*"), entry("H200-SXM", "*")
    for order in ([near, far], [far, near]):
        reg = build_registry(order, "test")
        assert reg.best("gemm", "x", "H100-PCIe", "bf16", 1, ("H100-SXM", "H200-SXM")) is near
        assert reg.best("gemm", "x", "H100-PCIe", "bf16", 1, ("H200-SXM", "H100-SXM")) is far
    # The nearer sibling's entry wins over a farther one's more specific entry.
    specific = entry("H200-SXM", "x")
    reg = build_registry([specific, near], "test")
    assert reg.best("gemm", "x", "H100-PCIe", "bf16", 1, ("H100-SXM", "H200-SXM")) is near


def test_on_a_die_sibling_a_collective_covering_the_ranks_beats_a_more_specific_one() -> None:
    # The H100's two fitted all-reduce entries on the H200: the serving fit (impl nccl, 2-4
    # ranks) and the operator profile (any impl, 2-8 ranks). Both are transferred there;
    # at 8 ranks the one that covers them must price, not the more specific one.
    def entry(impl: str, ranks: tuple[int, int], latency_us: float) -> CoefficientEntry:
        return CoefficientEntry(
            family="allreduce", impl=impl, hardware="H100-SXM", dtype="*",
            rank=CoefficientRank.CALIBRATED, method="fitted",
            params={"link_efficiency": 0.8, "overhead_us": latency_us},
            covered={"ranks": ranks}, source="test",
        )  # fmt: skip

    serving, profile = entry("nccl", (2, 4), 8.0), entry("*", (2, 8), 22.6)
    reg = build_registry([serving, profile], "test")
    siblings = ("H100-SXM",)
    assert reg.best("allreduce", "nccl", "H200-SXM", "bf16", 8, siblings) is profile
    assert reg.best("allreduce", "nccl", "H200-SXM", "bf16", 4, siblings) is serving
    # On the H100 itself the serving fit is calibrated within its ranks, transferred beyond.
    assert reg.best("allreduce", "nccl", "H100-SXM", "bf16", 4) is serving
    assert reg.best("allreduce", "nccl", "H100-SXM", "bf16", 8) is profile


def test_one_key_holds_an_entry_per_disjoint_range_of_ranks() -> None:
    """A collective fitted on 2-4 ranks and another fitted on 8, for one key, are both
    kept, each pricing its own ranks (on the chip and on its die sibling); overlapping
    ranges, or a range beside an entry that states none, are refused."""

    def entry(ranks: tuple[int, int] | None, latency_us: float) -> CoefficientEntry:
        return CoefficientEntry(
            family="allreduce", impl="nccl", hardware="H100-SXM", dtype="bf16",
            rank=CoefficientRank.CALIBRATED, method="fitted",
            params={"link_efficiency": 0.72, "overhead_us": latency_us},
            covered={} if ranks is None else {"ranks": ranks}, source="test",
        )  # fmt: skip

    few, eight = entry((2, 4), 8.0), entry((8, 8), 9.0)
    profile = CoefficientEntry(
        family="allreduce", impl="*", hardware="H100-SXM", dtype="bf16",
        rank=CoefficientRank.CALIBRATED, method="fitted",
        params={"link_efficiency": 0.72, "overhead_us": 22.6}, covered={"ranks": (2, 8)},
        source="test",
    )  # fmt: skip
    reg = build_registry([eight, profile, few], "test")
    assert reg.best("allreduce", "nccl", "H100-SXM", "bf16", 4) is few
    assert reg.best("allreduce", "nccl", "H100-SXM", "bf16", 8) is eight
    assert reg.best("allreduce", "nccl", "H100-SXM", "bf16", 6) is profile
    assert reg.best("allreduce", "nccl", "H200-SXM", "bf16", 8, ("H100-SXM",)) is eight
    # The hash does not depend on the order the entries came in.
    assert build_registry([few, profile, eight], "t").content_hash == reg.content_hash
    for clash in (entry((4, 8), 9.0), entry(None, 9.0)):
        with pytest.raises(InputRefused) as exc:
            build_registry([few, clash], "test")
        assert "two entries for one key on overlapping ranks" in exc.value.errors[0].cause


def test_a_registry_file_with_overlapping_ranks_for_one_key_is_refused(
    catalog: Catalog, tmp_path: Path
) -> None:
    d = tmp_path / "reg"
    d.mkdir()

    def raw(ranks: tuple[int, int]) -> dict[str, object]:
        return {"family": "allreduce", "impl": "nccl", "hardware": "H100-SXM", "dtype": "bf16",
                "rank": "calibrated", "method": "fitted", "params": {"overhead_us": 8.0},
                "covered": {"ranks": list(ranks)}, "source": "s"}  # fmt: skip

    doc = {"kind": "coefficients", "entries": [raw(r) for r in ((2, 4), (8, 8), (4, 6))]}
    (d / "a.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(InputRefused) as exc:
        load_registry(d, catalog)
    err = exc.value.errors[0]
    assert err.path == "entries.2" and "overlapping ranks ([2.0, 4.0] and [4.0, 6.0])" in err.cause
    doc["entries"].pop()
    (d / "a.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert len(load_registry(d, catalog).entries) == 2


def test_expert_gemms_without_a_fit_of_their_own_borrow_the_chips_fitted_gemm() -> None:
    def entry(family: str, dtype: str, eff: float, method: str = "fitted") -> CoefficientEntry:
        rank = CoefficientRank.CALIBRATED if method == "fitted" else CoefficientRank.ASSUMED
        return CoefficientEntry(
            family=family, impl="*", hardware="A100-80GB-SXM", dtype=dtype, rank=rank,
            method=method, params={"memory_efficiency": eff}, covered={}, source="test",
        )  # fmt: skip

    dense, floor = entry("gemm", "bf16", 0.86), entry("moe_gemm", "*", 0.7, "roofline")
    reg = build_registry([dense, floor], "test")
    borrowed = reg.best("moe_gemm", "fused_moe_triton", "A100-80GB-SXM", "bf16")
    assert borrowed is dense
    assert effective_rank(dense, "A100-80GB-SXM", None, "moe_gemm") == CoefficientRank.TRANSFERRED
    assert effective_rank(dense, "A100-80GB-SXM", None, "gemm") == CoefficientRank.CALIBRATED
    # Only the same dtype: FP8 experts keep the floor when only a BF16 GEMM was fitted.
    assert reg.best("moe_gemm", "fused_moe_triton", "A100-80GB-SXM", "fp8") is floor
    # The family's own fitted entry wins; the donor family's floor is never borrowed.
    own = entry("moe_gemm", "bf16", 0.85)
    assert (
        build_registry([dense, floor, own], "t").best("moe_gemm", "x", "A100-80GB-SXM", "bf16")
        is own
    )
    gemm_floor = entry("gemm", "*", 0.9, "roofline")
    assert (
        build_registry([gemm_floor, floor], "t").best("moe_gemm", "x", "A100-80GB-SXM", "bf16")
        is floor
    )
    # The transfer does not run the other way: a dense GEMM never borrows an MoE fit.
    assert (
        build_registry([own, gemm_floor], "t").best("gemm", "x", "A100-80GB-SXM", "bf16")
        is gemm_floor
    )


def test_a_chip_without_a_die_hashes_as_before_dies_existed(
    catalog: Catalog, tmp_path: Path
) -> None:
    d = tmp_path / "cat"
    d.mkdir()
    for f in sorted((Path(blis_core.__file__).parent / "data" / "catalog").glob("*.yaml")):
        text = f.read_text(encoding="utf-8")
        (d / f.name).write_text(
            "\n".join(line for line in text.splitlines() if line.strip() != "die: GH100") + "\n",
            encoding="utf-8",
        )
    bare = load_catalog(d)
    assert bare.die_siblings("H200-SXM") == ()
    assert bare.content_hash != catalog.content_hash
    # A die stated only where it is set: the chips without one hash as before.
    assert "die" not in _hardware_doc(bare.chip("H200-SXM"))
    assert _hardware_doc(catalog.chip("H200-SXM"))["die"] == "GH100"
