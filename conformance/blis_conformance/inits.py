"""Explicit dataclass ``__init__``s held to their fields.

mypyc compiles a dataclass's methods but not the ``__init__`` that ``dataclasses``
writes, which stays interpreted; a dataclass built every step gets an ``__init__`` of its
own instead (``buildtools/mypyc_build.py``), which ``@dataclass`` keeps. That
``__init__`` must stay the one ``dataclasses`` would write: the init fields in order,
under their names, with their defaults, each argument in its own field, a fresh object
from a field's ``default_factory`` on every call. By this package's convention a factory
field's parameter defaults to ``None``, which stands for the factory's product.

:func:`assert_init_follows_fields` checks one class; :func:`explicit_init_dataclasses`
lists the classes of some modules (:func:`modules_compiled_by`: those a ``setup.py``
compiles) that have such an ``__init__``, and :func:`explicit_inits_compiled_by` names
those of one ``setup.py``, so that a test can require each to be checked.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "assert_init_follows_fields",
    "explicit_init_dataclasses",
    "explicit_inits_compiled_by",
    "has_explicit_init",
    "modules_compiled_by",
]


def has_explicit_init(cls: type) -> bool:
    """Whether ``cls`` defines its ``__init__`` itself rather than taking the one
    ``dataclasses`` writes (compiled by ``exec`` from a string)."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return False
    code = getattr(init, "__code__", None)
    return code is None or code.co_filename != "<string>"


def explicit_init_dataclasses(modules: Iterable[ModuleType]) -> list[type]:
    """The dataclasses defined in ``modules`` that have an ``__init__`` of their own."""
    return [
        obj
        for module in modules
        for obj in vars(module).values()
        if isinstance(obj, type)
        and obj.__module__ == module.__name__
        and dataclasses.is_dataclass(obj)
        and has_explicit_init(obj)
    ]


def modules_compiled_by(setup_py: Path) -> list[ModuleType]:
    """The modules named by the ``COMPILED`` tuple of paths in ``setup_py`` (relative to
    its folder, as ``blis-core``'s and ``blis-vllm``'s ``setup.py`` give them), imported."""
    for node in ast.parse(setup_py.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            paths: tuple[str, ...] = ast.literal_eval(node.value)
            return [
                importlib.import_module(path.removesuffix(".py").replace("/", "."))
                for path in paths
            ]
    raise ValueError(f"{setup_py}: no COMPILED = (...) assignment")


def explicit_inits_compiled_by(setup_py: Path) -> dict[str, type]:
    """The dataclasses with an ``__init__`` of their own in the modules ``setup_py``
    compiles, by qualified name (``module.Class``)."""
    classes = explicit_init_dataclasses(modules_compiled_by(setup_py))
    return {f"{c.__module__}.{c.__qualname__}": c for c in classes}


def _expected_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return None
    return inspect.Parameter.empty


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _signature_drift(cls: type, init_fields: list[dataclasses.Field[Any]]) -> list[str]:
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        # A compiled class whose defaults mypyc cannot write into a text signature (an
        # enum member): its source's ``__init__`` is checked where it runs as source.
        if getattr(cls.__dict__["__init__"], "__code__", None) is None:
            return []
        raise
    drift = []
    names = [p.name for p in params]
    wanted = [f.name for f in init_fields]
    if names != wanted:
        drift.append(f"parameters {names}, fields {wanted}")
    compiled = getattr(cls.__dict__["__init__"], "__code__", None) is None
    for p, f in zip(params, init_fields, strict=False):
        if p.name != f.name:
            continue
        expected = _expected_default(f)
        if not _same(p.default, expected):
            drift.append(f"{f.name}: default {p.default!r}, field gives {expected!r}")
        if f.kw_only:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                drift.append(f"{f.name}: a keyword-only field, parameter is {p.kind.description}")
        elif p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD and not (
            # mypyc's text signatures mark some parameters positional-only that are not;
            # the calls by keyword below check them.
            compiled and p.kind is inspect.Parameter.POSITIONAL_ONLY
        ):
            drift.append(f"{f.name}: parameter is {p.kind.description}")
    return drift


def assert_init_follows_fields(cls: type, **values: Any) -> None:
    """Fail unless ``cls``'s own ``__init__`` is the one ``dataclasses`` would write.

    ``values`` gives a value for every init field without a default, and may give one
    for others. Checked: the signature's parameters against ``dataclasses.fields(cls)``
    (names, order, defaults, keyword-only; where the signature can be read); built from
    the fields without a default only, every other field holds its default or a fresh
    product of its factory; built from ``values`` by keyword and, for the positional
    fields, by position, every given field holds what was given (equal, of its type: a
    compiled class keeps an ``int`` unboxed). Give distinct values to tell fields apart.
    """
    assert dataclasses.is_dataclass(cls), f"{cls.__qualname__} is not a dataclass"
    assert has_explicit_init(cls), f"{cls.__qualname__} takes the __init__ dataclasses writes"
    init_fields = [f for f in dataclasses.fields(cls) if f.init]
    required = [f.name for f in init_fields if _expected_default(f) is inspect.Parameter.empty]
    unknown = sorted(set(values) - {f.name for f in init_fields})
    assert not unknown, f"{cls.__qualname__}: no init fields {unknown}"
    missing = [name for name in required if name not in values]
    assert not missing, f"{cls.__qualname__}: give a value for {missing}"

    drift = _signature_drift(cls, init_fields)
    given = {name: values[name] for name in required}
    first, second = cls(**given), cls(**given)
    for f in init_fields:
        got = getattr(first, f.name)
        if f.name in given:
            if not _same(got, given[f.name]):
                drift.append(f"{f.name}: given {given[f.name]!r}, holds {got!r}")
        elif f.default is not dataclasses.MISSING:
            if not _same(got, f.default):
                drift.append(f"{f.name}: holds {got!r} by default, field default {f.default!r}")
        elif f.default_factory is not dataclasses.MISSING:
            factory = f.default_factory
            product = factory()
            if not _same(got, product):
                drift.append(f"{f.name}: holds {got!r} by default, factory gives {product!r}")
            elif product is not factory() and got is getattr(second, f.name):
                drift.append(f"{f.name}: two instances share one default {got!r}")
    if first.__dataclass_params__.eq and first != second:  # type: ignore[attr-defined]
        drift.append("two instances built from the same values differ")

    by_keyword = cls(**values)
    positional = [f.name for f in init_fields if not f.kw_only]
    if all(name in values for name in positional):
        keywords = {k: v for k, v in values.items() if k not in positional}
        by_position = cls(*(values[name] for name in positional), **keywords)
    else:
        by_position = by_keyword
    for built, how in ((by_keyword, "by keyword"), (by_position, "by position")):
        for name, value in values.items():
            if not _same(getattr(built, name), value):
                drift.append(f"{name}: given {value!r} {how}, holds {getattr(built, name)!r}")
    assert not drift, f"{cls.__qualname__}.__init__ differs from its fields: " + "; ".join(drift)
