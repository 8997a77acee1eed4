"""Canonical JSON: one byte form, stable floats, content hash."""

from __future__ import annotations

import math

import pytest

from blis_core.io.canonical import canonical_json, content_hash


def test_sorted_keys_compact_and_newline() -> None:
    assert canonical_json({"b": 1, "a": [1.5, (2, 3)]}) == '{"a":[1.5,[2,3]],"b":1}\n'


def test_last_bit_float_noise_does_not_change_bytes() -> None:
    assert canonical_json(0.1 + 0.2) == canonical_json(0.3)
    assert canonical_json(-0.0) == canonical_json(0.0)


def test_non_finite_refused() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        canonical_json({"x": math.nan})


def test_hash_changes_with_content() -> None:
    assert content_hash({"a": 1}) != content_hash({"a": 2})
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
    assert content_hash({}).startswith("sha256:")
