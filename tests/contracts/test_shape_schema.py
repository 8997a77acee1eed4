"""The step shape's and transfer's adapters (``blis_core.contracts.shape_schema``) stand
for the compiled contract classes: the same fields, schema and values."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pickle
from importlib import resources
from typing import Any

import pytest
from pydantic import ValidationError

from blis_core.contracts import (
    STEP_SHAPE_ADAPTER,
    TRANSFER_ADAPTER,
    GraphMode,
    SeqChunk,
    StepMode,
    StepShape,
    Transfer,
)
from blis_core.contracts.shape_schema import DOCUMENT_CLASSES, contract_docstrings
from blis_core.schema import schemas

SHAPE = StepShape(
    step_id=4,
    mode=StepMode.MIXED,
    seqs=(SeqChunk(12, 0), SeqChunk(1, 700)),
    padded_tokens=16,
    graph_mode=GraphMode.PIECEWISE,
    num_spec_tokens=2,
    stage=1,
    num_stages=2,
    dp_rank_tokens=(16, 8),
    draft_passes=3,
    page_in_bytes=(4096,),
)
TRANSFER = Transfer("t0", "r0", "gpu", "cpu", "full", 48, 3)


# The document's seqs hold its own SeqChunk, with the validator that accepts the contract's.
_DOCUMENT_TYPE = {
    "tuple[SeqChunk, ...]": "tuple[Annotated[SeqChunk, WrapValidator(_chunk_document)], ...]"
}


def _annotations_in_source(class_name: str) -> list[tuple[str, str]]:
    """A class's field annotations as written in ``shape.py`` (a compiled class's fields
    carry the types themselves, not their text)."""
    source = resources.files("blis_core.contracts").joinpath("shape.py").read_text("utf-8")
    (node,) = [
        n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name
    ]
    return [
        (stmt.target.id, ast.unparse(stmt.annotation))
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
    ]


@pytest.mark.parametrize("contract", sorted(DOCUMENT_CLASSES, key=lambda c: c.__name__))
def test_each_document_class_has_its_contracts_name_fields_and_docstring(
    contract: type[Any],
) -> None:
    document = DOCUMENT_CLASSES[contract]
    assert document.__name__ == contract.__name__
    # A compiled contract class keeps no docstring: the document's is read from the source.
    assert document.__doc__ == contract_docstrings()[contract.__name__] != ""
    assert inspect.cleandoc(contract.__doc__ or "") in (document.__doc__, "")
    assert [(f.name, f.default) for f in dataclasses.fields(document)] == [
        (f.name, f.default) for f in dataclasses.fields(contract)
    ]
    assert [(f.name, str(f.type)) for f in dataclasses.fields(document)] == [
        (name, _DOCUMENT_TYPE.get(text, text))
        for name, text in _annotations_in_source(contract.__name__)
    ]


def test_the_schema_is_the_contracts() -> None:
    schema = schemas()["step-shape"]
    assert schema["title"] == "StepShape"
    assert schema["description"] == contract_docstrings()["StepShape"]
    assert schema["description"].startswith("One step across the data-parallel ranks")
    assert schema["required"] == ["step_id", "mode", "seqs", "padded_tokens"]
    assert list(schema["properties"]) == [f.name for f in dataclasses.fields(StepShape)]
    assert schema["properties"]["seqs"]["items"] == {"$ref": "#/$defs/SeqChunk"}
    assert schema["$defs"]["SeqChunk"]["required"] == ["new_tokens", "context_tokens"]
    transfer = schemas()["transfer"]
    assert transfer["title"] == "Transfer"
    assert list(transfer["properties"]) == [f.name for f in dataclasses.fields(Transfer)]
    assert STEP_SHAPE_ADAPTER.json_schema(mode="serialization") == schema


def test_a_mapping_validates_into_the_contract_class() -> None:
    doc = STEP_SHAPE_ADAPTER.dump_python(SHAPE, mode="json")
    shape = STEP_SHAPE_ADAPTER.validate_python(doc)
    assert type(shape) is StepShape and all(type(c) is SeqChunk for c in shape.seqs)
    assert shape == SHAPE and hash(shape) == hash(SHAPE)
    assert STEP_SHAPE_ADAPTER.validate_json(STEP_SHAPE_ADAPTER.dump_json(SHAPE)) == SHAPE
    transfer = TRANSFER_ADAPTER.validate_python(TRANSFER_ADAPTER.dump_python(TRANSFER))
    assert type(transfer) is Transfer and transfer == TRANSFER


def test_contract_instances_are_accepted_and_serialised_as_their_fields() -> None:
    assert STEP_SHAPE_ADAPTER.validate_python(SHAPE) is SHAPE
    assert TRANSFER_ADAPTER.validate_python(TRANSFER) is TRANSFER
    mixed = {"step_id": 1, "mode": "decode_only", "seqs": [SeqChunk(1, 5)], "padded_tokens": 1}
    assert STEP_SHAPE_ADAPTER.validate_python(mixed).seqs == (SeqChunk(1, 5),)
    doc = STEP_SHAPE_ADAPTER.dump_python(SHAPE, mode="json")
    assert doc["seqs"] == [
        {"new_tokens": 12, "context_tokens": 0},
        {"new_tokens": 1, "context_tokens": 700},
    ]
    assert doc["graph_mode"] == "piecewise" and doc["dp_rank_tokens"] == [16, 8]
    assert TRANSFER_ADAPTER.dump_python(TRANSFER) == dataclasses.asdict(TRANSFER)


def test_bad_fields_are_named() -> None:
    with pytest.raises(ValidationError) as info:
        STEP_SHAPE_ADAPTER.validate_python(
            {"step_id": "x", "mode": "zz", "seqs": [[1, 2]], "padded_tokens": 1}
        )
    assert sorted(tuple(e["loc"]) for e in info.value.errors()) == [
        ("mode",),
        ("seqs", 0),
        ("step_id",),
    ]


def test_contract_classes_pickle_and_replace() -> None:
    for obj in (SHAPE, TRANSFER, SHAPE.seqs[1]):
        assert pickle.loads(pickle.dumps(obj)) == obj
    assert dataclasses.replace(SHAPE, stage=0).stage == 0
    assert SHAPE.scheduled_tokens == 13
