"""The coefficient registry: how fast each primitive family runs, with its trust rank (§9).

Every entry prices one primitive family for a (kernel implementation, chip, dtype) key,
``*`` meaning any (an impl ``<prefix>*`` matches every impl starting with the prefix,
less specific than an exact impl), with one formula shared by all families::

    seconds = overhead_us * 1e-6 + per_item_us * 1e-6 * items
              + max(c, m, l) + (1 - overlap) * (c + m + l - max(c, m, l))
    c = flops / (compute_efficiency * peak_flops[dtype])
    m = bytes_moved / (memory_efficiency * memory_bandwidth)
    l = link_bytes / (link_efficiency * link_bandwidth)

``overlap`` (default 1, the roofline) is the fraction of the lesser resources' times
that the kernel hides under the greatest: 0 for a kernel that reads its operands and
then computes on them, so that the two add.

``items`` counts sequences or requests for the host families (``host_step``,
``host_request``) and is 0 otherwise. ``method: roofline`` entries hold achievable
fractions of peak; what they price ranks ``roofline`` whatever the provenance
(``assumed``/``literature``) of the fractions. ``method: fitted`` entries price at their
own rank, and as ``transferred`` outside their ``covered`` range (``flops``,
``bytes_moved``, ``link_bytes``: ``[lo, hi]`` per work, per kernel; ``ranks``; ``items``
for the host families). A fitted entry of one chip also prices a chip built on the
same die (the catalog's ``die``: H100 and H200 share GH100), as ``transferred``: the same
kernels on the same SMs, priced against the other chip's own peaks; a chip's own entries
win over its sibling's, the nearest sibling's (by memory bandwidth) over a farther one's,
a sibling's roofline fractions are never borrowed, and host paths (``host_request``, run
on the host CPU) are not looked up this way. A family with no
fitted entry of its own for a key borrows the fitted entries of the family whose kernels
do the same work (:data:`FAMILY_TRANSFER`: an expert GEMM streams its weights through
the same tensor-core tiles as a dense GEMM of its dtype), again as ``transferred``, below
any entry of its own family but above the floor. A fitted entry may
state a ``spread`` per fitted parameter
(``[lo, hi]`` holding its value): the coefficients' own uncertainty, which prices nothing
and is not hashed; ``--coefficient-draws`` draws from it
(:mod:`blis_core.runner.coefficients`).

``host_request`` also prices the path outside the engine core (see
:meth:`~blis_core.cost.environment.SimEnvironment.frontend_delay_us`): impl
``frontend:<host_work>`` (``overhead_us`` + ``per_item_us`` per input token: HTTP,
IPC, the API server's fixed work), ``tokenize:<engine kind>/<tokenizer>`` (the catalog
model's ``tokenizer`` encoding the prompt in that engine's API server: ``per_item_us`` x
n + ``per_item_sq_us`` x n^2 for n input tokens, any chip since it runs on the host CPU)
and ``stream:<host_work>`` (``overhead_us`` per streamed step: output processing,
detokenisation, SSE). Their floor is the ``frontend:*``/``tokenize:*``/``stream:*``
entries of ``roofline.yaml``.

Entries come from the installed cost methods that are coefficient sets
(:class:`~blis_core.contracts.cost.CoefficientSet` plugins: ``blis-cost-roofline`` ships
the floor, ``blis-cost-calibrated`` the fitted entries), each entry remembering its
provider, or from a directory path that replaces them all; the content hash is over the
canonical parsed entries (not their provider), so the same entries give the same hash
however they were loaded. Refused, naming file, key and cause: two entries for one key
whose covered ``ranks`` overlap (an absent range covers every count: one key may hold an
entry per disjoint range of ranks, e.g. a collective fitted on 2-4 ranks and another on
8), an unknown family, rank, method, parameter or unit, a coefficient for a chip the catalog
lacks, and a negative or non-finite coefficient.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blis_core.contracts.cost import CoefficientRank, CoefficientSet
from blis_core.contracts.errors import InputRefused
from blis_core.cost.catalog import Catalog, content_hash, load_catalog, parse_quantity
from blis_core.cost.catalog import read_yaml_documents as _read_yaml

__all__ = [
    "FAMILIES",
    "FAMILY_TRANSFER",
    "PATH_PROVIDER",
    "CoefficientEntry",
    "RankTotals",
    "Registry",
    "effective_rank",
    "entries_to_yaml_doc",
    "load_registry",
]

#: provider of the entries read from a ``--registry`` path
PATH_PROVIDER = "registry-path"

FAMILIES: tuple[str, ...] = (
    "gemm",
    "moe_gemm",
    "attention_prefill",
    "attention_decode",
    "elementwise",
    "embedding",
    "logits",
    "sampling",
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "sendrecv",
    "kv_transfer",
    "page_in",
    "host_step",
    "host_request",
)
#: family -> the family whose fitted entries price it (as ``transferred``) when none of
#: its own is fitted for the key: the expert GEMMs of an MoE layer are GEMMs over the
#: same weight dtype (decode streams each touched expert's weights, prefill multiplies
#: through the same tiles), so a chip's measured GEMM efficiency is the physical prior
#: for them, not the floor's assumed fraction.
FAMILY_TRANSFER: Mapping[str, str] = {"moe_gemm": "gemm"}
_PARAMS = (
    "compute_efficiency",
    "memory_efficiency",
    "link_efficiency",
    "overhead_us",
    "per_item_us",
    "per_item_sq_us",
    "per_kernel_us",
    "overlap",
)
_COVER_KEYS = ("flops", "bytes_moved", "link_bytes", "ranks", "items")
_METHODS = ("roofline", "fitted")
_ENTRY_KEYS = {"family", "impl", "hardware", "dtype", "rank", "method", "params", "covered",
               "source", "spread"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CoefficientEntry:
    """One registry entry. ``rank`` is the provenance of the parameters; see module doc."""

    family: str
    impl: str
    hardware: str
    dtype: str
    rank: CoefficientRank
    method: str
    params: Mapping[str, float]
    covered: Mapping[str, tuple[float, float]]
    source: str
    provider: str = ""  # the cost method (coefficient set) that supplied it; not hashed
    spread: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """The coefficients' own uncertainty: per fitted parameter, the interval ``[lo, hi]``
    (holding the value) its fit leaves plausible, by the method ``source`` states (e.g. a
    90 % bootstrap interval). A parameter without one has no stated uncertainty."""

    @property
    def price_rank(self) -> CoefficientRank:
        """Rank of a price this entry gives inside its covered range."""
        return CoefficientRank.ROOFLINE if self.method == "roofline" else self.rank

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        """Uniqueness key: (family, impl, hardware, dtype, price rank)."""
        return (self.family, self.impl, self.hardware, self.dtype, int(self.price_rank))

    @property
    def rank_span(self) -> tuple[float, float]:
        """The collective ranks the entry covers: its ``covered`` ``ranks``, else all."""
        return self.covered.get("ranks", (0.0, math.inf))

    def shares_slot(self, other: CoefficientEntry) -> bool:
        """Whether ``other`` claims the work ``self`` does: one :attr:`key` and
        overlapping :attr:`rank_span` (entries for one key on disjoint ranges of ranks,
        e.g. a collective fitted on 2-4 ranks and another on 8, are distinct)."""
        (alo, ahi), (blo, bhi) = self.rank_span, other.rank_span
        return self.key == other.key and alo <= bhi and blo <= ahi

    def param(self, name: str, default: float) -> float:
        """Parameter ``name``, or ``default`` when the entry does not set it."""
        return self.params.get(name, default)

    def to_json(self) -> dict[str, Any]:
        """Canonical JSON-able form of what prices (hashed: the registry's content hash).

        ``spread`` is left out: it changes no price; a run that draws from it records the
        spreads it drew from in its Result (``coefficient_uncertainty``)."""
        return {
            "family": self.family,
            "impl": self.impl,
            "hardware": self.hardware,
            "dtype": self.dtype,
            "rank": self.rank.name.lower(),
            "method": self.method,
            "params": dict(sorted(self.params.items())),
            "covered": {k: list(v) for k, v in sorted(self.covered.items())},
            "source": self.source,
        }

    def to_document(self) -> dict[str, Any]:
        """The entry as a registry file writes it: :meth:`to_json` and any ``spread``."""
        doc = self.to_json()
        if self.spread:
            doc["spread"] = {k: list(v) for k, v in sorted(self.spread.items())}
        return doc


def _specificity(e: CoefficientEntry) -> int:
    impl = 0 if e.impl == "*" else 4 if not e.impl.endswith("*") else 3
    return impl + (e.hardware != "*") * 2 + (e.dtype != "*")


def effective_rank(
    entry: CoefficientEntry, hardware: str, ranks: int | None = None, family: str | None = None
) -> int:
    """The rank ``entry`` prices work of ``family`` on chip ``hardware`` spanning ``ranks``
    at, before its FLOP and byte ranges are checked: its own, or ``transferred`` when it
    was fitted on another chip (a die sibling) or for another family
    (:data:`FAMILY_TRANSFER`), or its covered ``ranks`` exclude ``ranks``."""
    rank = int(entry.price_rank)
    if (
        entry.hardware not in ("*", hardware)
        or (family is not None and entry.family != family)
        or not _covers_ranks(entry, ranks)
    ):
        return max(rank, int(CoefficientRank.TRANSFERRED))
    return rank


def _covers_ranks(entry: CoefficientEntry, ranks: int | None) -> bool:
    """Whether ``entry``'s covered ``ranks`` (if it states them) include ``ranks``."""
    rng = entry.covered.get("ranks")
    return ranks is None or rng is None or rng[0] <= ranks <= rng[1]


def impl_matches(pattern: str, impl: str) -> bool:
    """``*`` (any), the exact impl, or a prefix pattern ``<prefix>*`` (e.g. ``frontend:*``)."""
    if pattern == "*" or pattern == impl:
        return True
    return pattern.endswith("*") and impl.startswith(pattern[:-1])


@dataclass
class Registry:
    """Validated registry content; :meth:`best` answers the most trusted entry for a key."""

    entries: tuple[CoefficientEntry, ...]
    content_hash: str
    origin: str
    providers: tuple[str, ...] = ()
    _cache: dict[
        tuple[str, str, str, str, int | None, tuple[str, ...]], CoefficientEntry | None
    ] = field(default_factory=dict, repr=False)

    def best(
        self,
        family: str,
        impl: str,
        hardware: str,
        dtype: str,
        ranks: int | None = None,
        siblings: tuple[str, ...] = (),
    ) -> CoefficientEntry | None:
        """The entry of the smallest price rank matching the key (then the most specific).

        With ``ranks`` (the number of ranks a collective spans, known when a plan is
        compiled), an entry whose covered ``ranks`` range excludes it counts as
        ``transferred``, so an entry fitted elsewhere never shadows one that covers the
        case. ``siblings`` are the chips on ``hardware``'s die
        (:meth:`~blis_core.cost.catalog.Catalog.die_siblings`): their fitted entries
        match too, as ``transferred`` (their efficiencies priced against this chip's own
        peaks), so they rank above the roofline floor and below anything fitted on the
        chip itself, the nearest sibling's first (their order). The fitted entries of
        ``FAMILY_TRANSFER[family]`` match the same way, as ``transferred`` and after every
        entry of ``family`` of that rank (the floor's fractions are never borrowed across
        families). ``None`` only when no entry
        matches at all; the embedded registry holds a roofline entry for every family on
        every chip (``*``), so this never happens with it.
        """
        key = (family, impl, hardware, dtype, ranks, siblings)
        if key in self._cache:
            return self._cache[key]
        donor = FAMILY_TRANSFER.get(family)
        found = [
            e
            for e in self.entries
            if (e.family == family or (e.family == donor and e.method == "fitted"))
            and impl_matches(e.impl, impl)
            and (e.hardware in ("*", hardware) or (e.hardware in siblings and e.method == "fitted"))
            and e.dtype in ("*", dtype)
        ]

        best = min(
            found,
            key=lambda e: (
                effective_rank(e, hardware, ranks, family),
                e.family != family,
                # Among entries of one rank, one whose covered ranks exclude the case comes
                # after those that cover it: on a die sibling every fitted entry is
                # ``transferred``, and specificity alone let a collective fitted on 2-4
                # ranks price 8.
                not _covers_ranks(e, ranks),
                siblings.index(e.hardware) + 1 if e.hardware in siblings else 0,
                -_specificity(e),
            ),
            default=None,
        )
        self._cache[key] = best
        return best

    def roofline(
        self, family: str, impl: str, hardware: str, dtype: str
    ) -> CoefficientEntry | None:
        """The most specific roofline entry for a key (the floor)."""
        found = [
            e
            for e in self.entries
            if e.method == "roofline"
            and e.family == family
            and impl_matches(e.impl, impl)
            and e.hardware in ("*", hardware)
            and e.dtype in ("*", dtype)
        ]
        return max(found, key=_specificity, default=None)

    def restricted(self, providers: Sequence[str]) -> Registry:
        """The registry of the entries that ``providers`` supplied (hash recomputed)."""
        keep = set(providers)
        if keep >= set(self.providers):
            return self
        return build_registry(
            [e for e in self.entries if e.provider in keep],
            self.origin,
            providers=tuple(p for p in self.providers if p in keep),
        )

    def covers(self, family: str, hardware: str) -> bool:
        """Whether some entry prices ``family`` for every kernel implementation (impl
        ``*``) on chip ``hardware`` (or on every chip)."""
        return any(
            e.family == family and e.hardware in ("*", hardware) and e.impl == "*"
            for e in self.entries
        )


class RankTotals:
    """Running totals of priced seconds per rank (one per Environment, not global)."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds: list[float] = [0.0] * len(CoefficientRank)

    def add(self, rank: CoefficientRank | int, seconds: float) -> None:
        """Count ``seconds`` of priced time at ``rank``."""
        self.seconds[int(rank)] += seconds

    def rank_shares(self) -> dict[str, float]:
        """Each rank that priced anything and its share of all priced time (sums to 1)."""
        total = sum(self.seconds)
        if total <= 0.0:
            return {}
        return {
            CoefficientRank(i).name.lower(): s / total for i, s in enumerate(self.seconds) if s > 0
        }


def _rank(value: object, path: str, label: str) -> CoefficientRank:
    names = [r.name.lower() for r in CoefficientRank]
    if not isinstance(value, str) or value not in names:
        raise InputRefused.one(path, value, f"unknown rank; known: {names}", label)
    return CoefficientRank[value.upper()]


def _entry(raw: object, path: str, label: str, catalog: Catalog, provider: str) -> CoefficientEntry:
    if not isinstance(raw, Mapping):
        raise InputRefused.one(path, raw, "expected a mapping", label)
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise InputRefused.one(f"{path}.{sorted(unknown)[0]}", None, "unknown field", label)
    for need in ("family", "hardware", "rank", "method", "source"):
        if raw.get(need) in (None, ""):
            raise InputRefused.one(f"{path}.{need}", None, "missing", label)
    family = str(raw["family"])
    if family not in FAMILIES:
        raise InputRefused.one(
            f"{path}.family", family, f"unknown family; known: {FAMILIES}", label
        )
    hardware = str(raw["hardware"])
    if hardware != "*" and hardware not in catalog.hardware:
        raise InputRefused.one(
            f"{path}.hardware", hardware, "coefficient for a chip the catalog lacks", label
        )
    method = str(raw["method"])
    if method not in _METHODS:
        raise InputRefused.one(
            f"{path}.method", method, f"unknown method; known: {_METHODS}", label
        )
    params_raw = raw.get("params") or {}
    if not isinstance(params_raw, Mapping):
        raise InputRefused.one(f"{path}.params", params_raw, "expected a mapping", label)
    params: dict[str, float] = {}
    for name, value in params_raw.items():
        ppath = f"{path}.params.{name}"
        if name not in _PARAMS:
            raise InputRefused.one(ppath, value, f"unknown parameter; known: {_PARAMS}", label)
        if name.endswith("_us"):
            number = parse_quantity(value, "us", ppath, label)
        else:
            number = _plain(value, ppath, label)
        if not math.isfinite(number) or number < 0:
            raise InputRefused.one(ppath, value, "coefficient must be finite and >= 0", label)
        if name.endswith("efficiency") and not 0 < number <= 1.5:
            raise InputRefused.one(ppath, value, "efficiency must be in (0, 1.5]", label)
        if name == "overlap" and number > 1:
            raise InputRefused.one(ppath, value, "overlap is a fraction in [0, 1]", label)
        params[str(name)] = number
    covered_raw = raw.get("covered") or {}
    if not isinstance(covered_raw, Mapping):
        raise InputRefused.one(f"{path}.covered", covered_raw, "expected a mapping", label)
    covered: dict[str, tuple[float, float]] = {}
    for name, rng in covered_raw.items():
        cpath = f"{path}.covered.{name}"
        if name not in _COVER_KEYS:
            raise InputRefused.one(cpath, rng, f"unknown range key; known: {_COVER_KEYS}", label)
        if not isinstance(rng, list | tuple) or len(rng) != 2:
            raise InputRefused.one(cpath, rng, "expected [lo, hi]", label)
        lo, hi = _plain(rng[0], cpath, label), _plain(rng[1], cpath, label)
        if lo < 0 or hi < lo or math.isnan(hi):
            raise InputRefused.one(cpath, rng, "range must satisfy 0 <= lo <= hi", label)
        covered[str(name)] = (lo, hi)
    spread = _spread(raw.get("spread") or {}, params, f"{path}.spread", label)
    return CoefficientEntry(
        family=family,
        impl=str(raw.get("impl") or "*"),
        hardware=hardware,
        dtype=str(raw.get("dtype") or "*"),
        rank=_rank(raw["rank"], f"{path}.rank", label),
        method=method,
        params=params,
        covered=covered,
        source=str(raw["source"]),
        provider=provider,
        spread=spread,
    )


def _spread(
    raw: object, params: Mapping[str, float], path: str, label: str
) -> dict[str, tuple[float, float]]:
    """``spread``: per parameter the entry sets, ``[lo, hi]`` holding its value."""
    if not isinstance(raw, Mapping):
        raise InputRefused.one(path, raw, "expected a mapping", label)
    out: dict[str, tuple[float, float]] = {}
    for name, rng in raw.items():
        spath = f"{path}.{name}"
        if name not in params:
            raise InputRefused.one(
                spath, rng, "spread of a parameter the entry does not set", label
            )
        if not isinstance(rng, list | tuple) or len(rng) != 2:
            raise InputRefused.one(spath, rng, "expected [lo, hi]", label)
        lo, hi = _plain(rng[0], spath, label), _plain(rng[1], spath, label)
        if not 0 <= lo <= params[name] <= hi:
            raise InputRefused.one(
                spath, rng, f"must satisfy 0 <= lo <= value ({params[name]:g}) <= hi", label
            )
        out[str(name)] = (lo, hi)
    return out


def _plain(value: object, path: str, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputRefused.one(path, value, "expected a number", label)
    number = float(value)
    if not math.isfinite(number):
        raise InputRefused.one(path, value, "coefficient must be finite and >= 0", label)
    return number


def build_registry(
    entries: Sequence[CoefficientEntry],
    origin: str,
    label: str = "",
    providers: Sequence[str] = (),
) -> Registry:
    """A Registry from entries; refuses two entries for one key and overlapping ranks
    (:meth:`CoefficientEntry.shares_slot`)."""
    seen: dict[tuple[str, str, str, str, int], list[CoefficientEntry]] = {}
    for e in entries:
        clash = next((o for o in seen.get(e.key, ()) if o.shares_slot(e)), None)
        if clash is not None:
            raise InputRefused.one(
                f"{e.family}/{e.impl}/{e.hardware}/{e.dtype}",
                e.price_rank.name.lower(),
                "two entries for one key" + _overlap(clash, e) + _claimants(clash, e),
                label,
            )
        seen.setdefault(e.key, []).append(e)
    ordered = tuple(sorted(entries, key=lambda e: (e.key, e.rank_span)))
    return Registry(
        entries=ordered,
        content_hash=content_hash([e.to_json() for e in ordered]),
        origin=origin,
        providers=tuple(providers) or tuple(sorted({e.provider for e in ordered})),
    )


def _overlap(a: CoefficientEntry, b: CoefficientEntry) -> str:
    if "ranks" not in a.covered and "ranks" not in b.covered:
        return ""
    return f" on overlapping ranks ({list(a.rank_span)} and {list(b.rank_span)})"


def _claimants(a: CoefficientEntry, b: CoefficientEntry) -> str:
    if a.provider == b.provider:
        return ""
    return f" (cost methods {a.provider!r} and {b.provider!r} both supply it)"


def load_registry(
    path: Path | None = None,
    catalog: Catalog | None = None,
    sets: Sequence[CoefficientSet] = (),
) -> Registry:
    """The registry of the coefficient sets ``sets``, or the one in directory/file ``path``.

    ``path`` replaces the sets' entries wholesale (provider ``registry-path``). Entries
    are checked against ``catalog`` (the embedded catalog when None): an entry for a chip
    the catalog lacks is refused. Each document holds ``kind: coefficients`` and
    ``entries``. See the module doc for what else is refused.
    """
    cat = catalog if catalog is not None else load_catalog(None)
    documents: list[tuple[str, str, Any]] = []
    if path is not None:
        documents = [(PATH_PROVIDER, label, doc) for label, doc in _read_yaml("", path)]
    else:
        for cs in sets:
            documents.extend((cs.name, label, doc) for label, doc in cs.documents())
    entries: list[CoefficientEntry] = []
    where: dict[tuple[str, str, str, str, int], list[tuple[CoefficientEntry, str]]] = {}
    for provider, label, doc in documents:
        if not isinstance(doc, Mapping) or doc.get("kind") != "coefficients":
            raise InputRefused.one("kind", None, "expected 'kind: coefficients'", label)
        raw_entries = doc.get("entries")
        if not isinstance(raw_entries, list):
            raise InputRefused.one("entries", raw_entries, "expected a list", label)
        for i, raw in enumerate(raw_entries):
            e = _entry(raw, f"entries.{i}", label, cat, provider)
            clash = next((w for w in where.get(e.key, ()) if w[0].shares_slot(e)), None)
            if clash is not None:
                raise InputRefused.one(
                    f"entries.{i}",
                    f"{e.family}/{e.impl}/{e.hardware}/{e.dtype}/{e.price_rank.name.lower()}",
                    f"two entries for one key{_overlap(clash[0], e)} (first in {clash[1]})",
                    label,
                )
            where.setdefault(e.key, []).append((e, label))
            entries.append(e)
    if path is not None:
        return build_registry(entries, str(path), providers=(PATH_PROVIDER,))
    return build_registry(entries, "installed", providers=tuple(cs.name for cs in sets))


def entries_to_yaml_doc(entries: Sequence[CoefficientEntry]) -> dict[str, Any]:
    """A ``kind: coefficients`` document holding ``entries`` (for writing fitted files)."""
    return {"kind": "coefficients", "entries": [e.to_document() for e in entries]}
