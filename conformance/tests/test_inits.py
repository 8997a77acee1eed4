"""``assert_init_follows_fields`` passes an ``__init__`` that ``dataclasses`` would have
written and names each way one can drift from its fields."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from blis_conformance.inits import (
    assert_init_follows_fields,
    explicit_init_dataclasses,
    explicit_inits_compiled_by,
    has_explicit_init,
    modules_compiled_by,
)


@dataclass(frozen=True, slots=True)
class Frozen:
    a: int
    b: str = "x"

    def __init__(self, a: int, b: str = "x") -> None:
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)


@dataclass(slots=True)
class WithFactory:
    a: int
    items: list[int] = field(default_factory=list)
    flag: bool = field(default=False, kw_only=True)

    def __init__(self, a: int, items: list[int] | None = None, *, flag: bool = False) -> None:
        self.a = a
        self.items = [] if items is None else items
        self.flag = flag


@dataclass(slots=True)
class Generated:
    a: int


@dataclass(frozen=True, slots=True)
class WrongDefault:
    a: int
    b: str = "x"

    def __init__(self, a: int, b: str = "y") -> None:
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)


@dataclass(slots=True)
class WrongOrder:
    a: int
    b: int

    def __init__(self, b: int, a: int) -> None:
        self.a = a
        self.b = b


@dataclass(slots=True)
class Crossed:
    a: int
    b: int = 0

    def __init__(self, a: int, b: int = 0) -> None:
        self.a = b
        self.b = a


@dataclass(slots=True)
class SharedDefault:
    items: list[int] = field(default_factory=list)

    def __init__(self, items: list[int] | None = None) -> None:
        self.items = _SHARED if items is None else items


_SHARED: list[int] = []


def test_an_init_as_dataclasses_writes_it_passes() -> None:
    assert_init_follows_fields(Frozen, a=1, b="z")
    assert_init_follows_fields(Frozen, a=1)
    assert_init_follows_fields(WithFactory, a=1, items=[2], flag=True)


@pytest.mark.parametrize(
    ("cls", "values", "says"),
    [
        (Generated, {"a": 1}, "takes the __init__ dataclasses writes"),
        (WrongDefault, {"a": 1}, "b: default 'y', field gives 'x'"),
        (WrongOrder, {"a": 1, "b": 2}, r"parameters \['b', 'a'\], fields \['a', 'b'\]"),
        (Crossed, {"a": 1, "b": 2}, "a: given 1 by keyword, holds 2"),
        (SharedDefault, {}, "two instances share one default"),
        (Frozen, {"b": "z"}, r"give a value for \['a'\]"),
    ],
)
def test_each_drift_is_named(cls: type, values: dict[str, object], says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        assert_init_follows_fields(cls, **values)


def test_the_classes_with_their_own_init_are_found(tmp_path: Path) -> None:
    module = sys.modules[__name__]
    assert has_explicit_init(Frozen) and not has_explicit_init(Generated)
    assert Frozen in explicit_init_dataclasses([module])
    assert Generated not in explicit_init_dataclasses([module])
    setup = tmp_path / "setup.py"
    setup.write_text('COMPILED = (\n    "blis_conformance/inits.py",\n)\n')
    assert [m.__name__ for m in modules_compiled_by(setup)] == ["blis_conformance.inits"]
    assert explicit_inits_compiled_by(setup) == {}  # the module defines no dataclass
    setup.write_text(f'COMPILED = (\n    "{__name__.replace(".", "/")}.py",\n)\n')
    found = explicit_inits_compiled_by(setup)
    assert found[f"{__name__}.Frozen"] is Frozen and f"{__name__}.Generated" not in found
    assert sorted(found.values(), key=id) == sorted(explicit_init_dataclasses([module]), key=id)
