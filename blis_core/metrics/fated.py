"""The ledger's requests once they have a fate: columns of integers, in arrival order.

A record object with its integers held as Python objects took about 0.6 KB a request
(657 MB at 1,000,000 requests on one instance, every record kept to the end of the run).
A fated request's record never changes again but for the few fields a request timed out
by the client may still get from the engine it was sent to, so the ledger writes it here
at its fate (:meth:`FatedColumns.write`) and lets the object go: eight bytes a field,
one byte its fate, four its reason and its instance (codes into tables of the distinct
strings), and its id's UTF-8 bytes, about 120 bytes a request in all.

Row ``i`` is the ``i``-th request to arrive (:meth:`FatedColumns.add` at its arrival);
a row is a request's once its fate code is not 0. The statistics read the columns whole
(:meth:`FatedColumns.column`), a reader of requests one row at a time
(:meth:`~blis_core.metrics.ledger.RequestLedger.record`,
:meth:`~blis_core.metrics.ledger.RequestLedger.requests`).
"""

from __future__ import annotations

from array import array
from typing import Final

import numpy as np

from blis_core.contracts.errors import SimulationError

__all__ = ["FATES", "FATE_CODES", "INT_FIELDS", "Fate", "FatedColumns"]


class Fate:
    """Fate names (strings, so they read well in a Result)."""

    # Final: class constants, not instance defaults (which is how mypyc reads a bare one).
    COMPLETED: Final = "completed"
    DROPPED: Final = "dropped"
    TIMED_OUT: Final = "timed_out"
    IN_FLIGHT: Final = "in_flight_at_horizon"
    QUEUED: Final = "queued_at_horizon"
    NOT_STARTED: Final = "not_started"


FATES: Final = (
    "",
    Fate.COMPLETED,
    Fate.DROPPED,
    Fate.TIMED_OUT,
    Fate.IN_FLIGHT,
    Fate.QUEUED,
    Fate.NOT_STARTED,
)
"""Fate names by code (0: none yet)."""

FATE_CODES: Final = {name: code for code, name in enumerate(FATES)}

INT_FIELDS: Final = (
    "arrival_us",
    "input_tokens",
    "dispatched_us",
    "scheduled_us",
    "first_token_us",
    "last_token_us",
    "output_tokens",
    "timed_out_us",
    "cached_tokens",
    "gaps_at",
    "gap_count",
)
"""The record's integer fields, one 8-byte column each."""

_GROW: Final = 4096
"""Rows the columns grow by at a time."""


class FatedColumns:
    """Fated requests' records as columns; row ``i`` is the ``i``-th arrival."""

    __slots__ = (
        "_ends",
        "_ids",
        "_instance_codes",
        "_instances",
        "_reason_codes",
        "_reasons",
        "_rows",
        "arrival_us",
        "cached_tokens",
        "dispatched_us",
        "fate",
        "first_token_us",
        "gap_count",
        "gaps_at",
        "input_tokens",
        "instance",
        "last_token_us",
        "output_tokens",
        "reason",
        "scheduled_us",
        "timed_out_us",
        "wide",
    )

    def __init__(self) -> None:
        self._ids = bytearray()
        self._ends = array("q")
        self._rows = 0
        self.arrival_us = array("q")
        self.input_tokens = array("q")
        self.dispatched_us = array("q")
        self.scheduled_us = array("q")
        self.first_token_us = array("q")
        self.last_token_us = array("q")
        self.output_tokens = array("q")
        self.timed_out_us = array("q")
        self.cached_tokens = array("q")
        self.gaps_at = array("q")
        self.gap_count = array("q")
        self.fate = array("b")
        self.wide = array("b")
        """1 where the request's gaps are 8-byte integers (``q``), 0 for 4-byte ones."""
        self.reason = array("i")
        self.instance = array("i")
        self._reasons: list[str] = []
        self._reason_codes: dict[str, int] = {}
        self._instances: list[str] = []
        self._instance_codes: dict[str, int] = {}

    def __len__(self) -> int:
        """Requests arrived (rows, fated or not)."""
        return len(self._ends)

    def add(self, request_id: str) -> int:
        """A request arrived: its row (the number of arrivals before it)."""
        row = len(self._ends)
        self._ids += request_id.encode()
        self._ends.append(len(self._ids))
        return row

    def request_id(self, row: int) -> str:
        """The id of the request of ``row``."""
        start = self._ends[row - 1] if row else 0
        return self._ids[start : self._ends[row]].decode()

    def find(self, request_id: str) -> int:
        """The row of ``request_id`` (-1: it never arrived); a scan of every id."""
        key = request_id.encode()
        start = 0
        ids = self._ids
        for row, end in enumerate(self._ends):
            if end - start == len(key) and ids[start:end] == key:
                return row
            start = end
        return -1

    def write(
        self,
        row: int,
        fields: tuple[int, ...],
        fate: str,
        reason: str,
        instance: str,
        wide: bool,
    ) -> None:
        """Write a fated request's record into ``row``: its :data:`INT_FIELDS` in order."""
        while row >= self._rows:
            self._grow()
        (
            self.arrival_us[row],
            self.input_tokens[row],
            self.dispatched_us[row],
            self.scheduled_us[row],
            self.first_token_us[row],
            self.last_token_us[row],
            self.output_tokens[row],
            self.timed_out_us[row],
            self.cached_tokens[row],
            self.gaps_at[row],
            self.gap_count[row],
        ) = fields
        self.fate[row] = FATE_CODES[fate]
        self.wide[row] = 1 if wide else 0
        self.reason[row] = _code(self._reasons, self._reason_codes, reason)
        self.instance[row] = _code(self._instances, self._instance_codes, instance)

    def set_field(self, row: int, name: str, value: int) -> None:
        """Change one integer field of a fated row (a timed-out request's late news)."""
        if not 0 <= row < self._rows or not self.fate[row]:
            raise SimulationError(f"row {row} of the ledger's columns holds no fated request")
        getattr(self, name)[row] = value

    def set_instance(self, row: int, instance: str) -> None:
        """Change the instance of a fated row."""
        self.instance[row] = _code(self._instances, self._instance_codes, instance)

    def _grow(self) -> None:
        zeros = bytes(_GROW * 8)
        for name in INT_FIELDS:
            getattr(self, name).frombytes(zeros)
        self.fate.frombytes(bytes(_GROW))
        self.wide.frombytes(bytes(_GROW))
        self.reason.frombytes(bytes(_GROW * 4))
        self.instance.frombytes(bytes(_GROW * 4))
        self._rows += _GROW

    def _cover_arrivals(self) -> int:
        """Grow the columns over every arrival (a row without a fate reads 0); the
        number of arrivals."""
        n = len(self._ends)
        while n > self._rows:
            self._grow()
        return n

    # -- reading --------------------------------------------------------------------

    def fate_of(self, row: int) -> str:
        """The fate of ``row`` ("" while it has none)."""
        return FATES[self.fate[row]] if row < self._rows else ""

    def reason_of(self, row: int) -> str:
        """The reason of ``row``'s fate."""
        return self._reasons[self.reason[row]]

    def instance_of(self, row: int) -> str:
        """The instance ``row``'s request was dispatched to ("" if none)."""
        return self._instances[self.instance[row]]

    def column(self, name: str) -> np.ndarray:
        """A copy of one column over every arrival (``fate``: the fate codes, int8; an
        integer field: int64); a row without a fate yet reads 0 in every column."""
        n = self._cover_arrivals()
        dtype = np.int8 if name == "fate" else np.int64
        return np.frombuffer(getattr(self, name), dtype=dtype, count=n).copy()

    def codes(self, name: str) -> tuple[np.ndarray, tuple[str, ...]]:
        """``reason`` or ``instance``: the codes of every row (as :meth:`column`) and the
        strings they name."""
        n = self._cover_arrivals()
        table = self._reasons if name == "reason" else self._instances
        return np.frombuffer(getattr(self, name), dtype=np.int32, count=n).copy(), tuple(table)


def _code(table: list[str], codes: dict[str, int], value: str) -> int:
    """The code of ``value`` in ``table`` (appended the first time it is seen)."""
    code = codes.get(value)
    if code is None:
        code = codes[value] = len(table)
        table.append(value)
    return code
