"""Roles of measured units, computed from a secret seed (design §10).

Every unit of ground truth has one role. Fitting reads ``fit`` units; ``anchor`` units
pin a change's baseline; ``report`` units are what published accuracy is computed on;
``select``, ``validate`` and ``held`` units judge a change and are never shown one by
one. A role is computed, not stored: the HMAC-SHA256 of the unit's group of near-copies
(:attr:`~blis_core.contracts.scoring.MeasuredPoint.near_copies`) under the seed, read as
a number in [0, 1), falls in one role's share (:data:`ROLE_SHARES`, in :class:`Role`
order). Near-copies (a configuration measured again, the stages of one run) therefore
share their role, and a new unit's role is fixed the moment its group is named, before
any job reads it.

Only the ``fit``, ``anchor`` and ``report`` lists may be published
(:func:`published_roles`, ``blis score --publish-roles``): InferenceX data are public,
and a list of held units would let a change be tuned against them. A job without the
seed selects from a published list; figures on the secret roles exist only as
aggregates over at least :data:`MIN_SECRET_UNITS` units.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Final

import yaml

from blis_core.contracts.errors import InputRefused
from blis_core.contracts.scoring import MeasuredPoint

__all__ = [
    "MIN_SECRET_UNITS",
    "PUBLISHED_ROLES",
    "ROLE_SEED_ENV",
    "ROLE_SHARES",
    "Role",
    "group_of",
    "load_seed",
    "published_roles",
    "read_published",
    "role_of",
]


class Role(str, Enum):
    """What a unit may be used for."""

    FIT = "fit"
    ANCHOR = "anchor"
    REPORT = "report"
    SELECT = "select"
    VALIDATE = "validate"
    HELD = "held"


ROLE_SHARES: Final[Mapping[Role, float]] = {
    Role.FIT: 0.40,
    Role.ANCHOR: 0.05,
    Role.REPORT: 0.15,
    Role.SELECT: 0.10,
    Role.VALIDATE: 0.10,
    Role.HELD: 0.20,
}
"""The share of groups each role draws (in :class:`Role` order; they sum to 1)."""

PUBLISHED_ROLES: Final = (Role.FIT, Role.ANCHOR, Role.REPORT)
"""The roles whose unit lists may be published."""

MIN_SECRET_UNITS: Final = 10
"""The fewest units a figure on ``select``, ``validate`` or ``held`` units aggregates."""

ROLE_SEED_ENV: Final = "BLIS_ROLE_SEED"
"""The environment variable holding the seed, when no seed file is named."""

_SCALE = float(1 << 64)


def group_of(point: MeasuredPoint) -> str:
    """The unit's group of near-copies (the unit itself when the adapter names none)."""
    return point.near_copies or point.unit


def role_of(seed: bytes, group: str, shares: Mapping[Role, float] = ROLE_SHARES) -> Role:
    """The role of ``group`` under ``seed``."""
    digest = hmac.new(seed, group.encode("utf-8"), hashlib.sha256).digest()
    u = int.from_bytes(digest[:8], "big") / _SCALE
    edge = 0.0
    for role in Role:
        edge += shares.get(role, 0.0)
        if u < edge:
            return role
    return Role.HELD  # the shares' rounding left [edge, 1)


def load_seed(path: str | None) -> bytes | None:
    """The seed: the stripped contents of ``path``, else :data:`ROLE_SEED_ENV` (unset or
    blank: no seed, ``None``). An empty seed file is refused (it would draw the same
    roles for everyone)."""
    if path is None:
        text = os.environ.get(ROLE_SEED_ENV, "").strip()
        return text.encode("utf-8") if text else None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise InputRefused.one("--role-seed-file", path, f"cannot read it: {err}") from err
    if not text:
        raise InputRefused.one("--role-seed-file", path, "the seed is empty")
    return text.encode("utf-8")


def published_roles(points: Iterable[MeasuredPoint], seed: bytes) -> dict[str, str]:
    """Unit → role of the units in a published role (:data:`PUBLISHED_ROLES`), sorted."""
    out: dict[str, str] = {}
    for point in points:
        role = role_of(seed, group_of(point))
        if role in PUBLISHED_ROLES:
            out[point.unit] = role.value
    return dict(sorted(out.items()))


def read_published(path: str) -> dict[str, Role]:
    """A published list (``unit: role`` YAML, as ``--publish-roles`` writes it); a secret
    role in it is refused by unit."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise InputRefused.one("--roles-from", path, f"cannot read it: {err}") from err
    units = doc.get("units") if isinstance(doc, dict) else None
    if not isinstance(units, dict):
        raise InputRefused.one("--roles-from", path, "expected a mapping 'units: {unit: role}'")
    out: dict[str, Role] = {}
    allowed = {r.value for r in PUBLISHED_ROLES}
    for unit, role in units.items():
        if role not in allowed:
            raise InputRefused.one(
                f"--roles-from {path}: units.{unit}",
                role,
                f"a published list holds only {', '.join(sorted(allowed))}",
            )
        out[str(unit)] = Role(role)
    return out
