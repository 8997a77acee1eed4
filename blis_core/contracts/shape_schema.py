"""The JSON Schema of :class:`~blis_core.contracts.shape.StepShape` and
:class:`~blis_core.contracts.shape.Transfer`, and the validation of shapes read from files
(``blis cost price --shape FILE``, ``blis schema``).

:mod:`blis_core.contracts.shape` is compiled with mypyc, and pydantic cannot build a
compiled dataclass (it makes the instance without arguments, then sets its fields). So
pydantic validates into plain dataclasses of the same names, fields and docstrings (the
schema's titles and descriptions are theirs; the docstrings are read from ``shape.py``'s
source, since a compiled class keeps none), which :data:`STEP_SHAPE_ADAPTER` and
:data:`TRANSFER_ADAPTER` then turn into the contract's classes; an instance of a
contract's class is accepted as it is, and serialised as its fields.
``tests/contracts/test_shape_schema.py`` holds each document class to the fields of its
contract class.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any

from pydantic import ConfigDict, PlainSerializer, TypeAdapter, ValidatorFunctionWrapHandler
from pydantic.functional_validators import WrapValidator

from blis_core.contracts import shape
from blis_core.contracts.plan import GraphMode, PlanPart
from blis_core.contracts.shape import StepMode

__all__ = ["DOCUMENT_CLASSES", "STEP_SHAPE_ADAPTER", "TRANSFER_ADAPTER", "contract_docstrings"]


def _fields_of(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _chunk_document(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if isinstance(value, shape.SeqChunk):
        value = _fields_of(value)
    return handler(value)


_DOCUMENT_CONFIG = ConfigDict(extra="forbid")
"""A key the contract does not define is refused by name, not ignored."""


@dataclass(frozen=True, slots=True)
class SeqChunk:
    __pydantic_config__ = _DOCUMENT_CONFIG

    new_tokens: int
    context_tokens: int


@dataclass(frozen=True, slots=True)
class StepShape:
    __pydantic_config__ = _DOCUMENT_CONFIG

    step_id: int
    mode: StepMode
    seqs: tuple[Annotated[SeqChunk, WrapValidator(_chunk_document)], ...]
    padded_tokens: int
    graph_mode: GraphMode = GraphMode.NONE
    num_spec_tokens: int = 0
    stage: int = 0
    num_stages: int = 1
    dp_rank_tokens: tuple[int, ...] = ()
    draft_passes: int = 0
    page_in_bytes: tuple[int, ...] = ()
    parts: tuple[PlanPart, ...] = ()


@dataclass(frozen=True, slots=True)
class Transfer:
    __pydantic_config__ = _DOCUMENT_CONFIG

    transfer_id: str
    request_id: str
    src: str
    dst: str
    kv_group: str
    num_tokens: int
    num_blocks: int


DOCUMENT_CLASSES: dict[type[Any], type[Any]] = {
    shape.SeqChunk: SeqChunk,
    shape.StepShape: StepShape,
    shape.Transfer: Transfer,
}
"""Each contract class of :mod:`blis_core.contracts.shape` -> the document class pydantic
validates in its place (same name, fields and docstring)."""


def contract_docstrings() -> dict[str, str]:
    """Each class of ``blis_core/contracts/shape.py`` -> its docstring, from the source."""
    source = resources.files("blis_core.contracts").joinpath("shape.py").read_text("utf-8")
    return {
        node.name: ast.get_docstring(node) or ""
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef)
    }


_DOCSTRINGS = contract_docstrings()
for _document in DOCUMENT_CLASSES.values():
    _document.__doc__ = _DOCSTRINGS[_document.__name__]


def _as(cls: type[Any], chunk: type[Any], value: Any) -> Any:
    """``value``'s fields as a ``cls``, a step shape's sequences as ``chunk``s (a
    contract's classes from a document's, or the other way)."""
    fields = _fields_of(value)
    if "seqs" in fields:
        fields["seqs"] = tuple(chunk(c.new_tokens, c.context_tokens) for c in value.seqs)
    return cls(**fields)


def _step_shape(value: Any, handler: ValidatorFunctionWrapHandler) -> shape.StepShape:
    if isinstance(value, shape.StepShape):
        return value
    out: shape.StepShape = _as(shape.StepShape, shape.SeqChunk, handler(value))
    return out


def _transfer(value: Any, handler: ValidatorFunctionWrapHandler) -> shape.Transfer:
    if isinstance(value, shape.Transfer):
        return value
    out: shape.Transfer = _as(shape.Transfer, shape.SeqChunk, handler(value))
    return out


def _step_shape_document(value: shape.StepShape | StepShape) -> StepShape:
    if isinstance(value, StepShape):
        return value
    out: StepShape = _as(StepShape, SeqChunk, value)
    return out


def _transfer_document(value: shape.Transfer | Transfer) -> Transfer:
    if isinstance(value, Transfer):
        return value
    out: Transfer = _as(Transfer, SeqChunk, value)
    return out


STEP_SHAPE_ADAPTER: TypeAdapter[shape.StepShape] = TypeAdapter(
    Annotated[  # type: ignore[arg-type]
        StepShape,
        WrapValidator(_step_shape),
        PlainSerializer(_step_shape_document, return_type=StepShape),
    ]
)
"""Validates a step shape (a mapping, or a :class:`~blis_core.contracts.shape.StepShape`)
into the contract's class; its JSON Schema is ``blis schema``'s ``step-shape``."""

TRANSFER_ADAPTER: TypeAdapter[shape.Transfer] = TypeAdapter(
    Annotated[  # type: ignore[arg-type]
        Transfer,
        WrapValidator(_transfer),
        PlainSerializer(_transfer_document, return_type=Transfer),
    ]
)
"""Validates a KV transfer into :class:`~blis_core.contracts.shape.Transfer`; its JSON
Schema is ``blis schema``'s ``transfer``."""
