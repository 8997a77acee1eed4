"""Trace replay: loading recorded request traces and turning rows into requests.

Two formats:

* ``replay_json``: inference-sim-training ``replay/<exp>.json``, an object with a
  ``config`` block and ``requests``, each with ``arrival_time_us`` (int >= 0),
  ``input_tokens`` (int >= 1), ``output_tokens`` (int >= 0), ``prefix_group``
  (string, empty for none) and ``has_error`` (bool). Other keys are ignored.
* ``csv``: header ``arrival_s,input_tokens,output_tokens[,prefix_group][,session_id]
  [,prompt]``, arrival in seconds since the start of the trace. ``prompt`` spells the
  prompt's content as segments ``key:tokens`` joined by ``|`` (``sys/3:1045|q/17:150``):
  rows naming the same key send the same tokens there, so a replay states exactly which
  prompts share which prefix; the segments' tokens add up to ``input_tokens``.

Every malformed row is refused with an :class:`~blis_core.contracts.errors.InputRefused`
whose source is the file and whose field paths name the row and column
(``requests.12.input_tokens`` for JSON, ``line 14.input_tokens`` for CSV, lines counted
from 1 with the header as line 1). Rows are replayed in arrival order (a stable sort).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from blis_core.contracts.errors import FieldError, InputRefused
from blis_core.contracts.request import InferenceRequest, PromptSegment, output_content_key
from blis_core.contracts.time import seconds_to_us
from blis_core.contracts.workload import TraceSpec
from blis_core.workload.arrivals import ScheduledArrival

__all__ = ["Trace", "TraceContent", "load_replay_json", "load_trace", "load_trace_csv"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_MAX_ERRORS: Final = 50
_MAX_INT: Final = 2**53  # beyond any token count or microsecond time; fits int64 arrays
_CSV_REQUIRED: Final = ("arrival_s", "input_tokens", "output_tokens")
_CSV_OPTIONAL: Final = ("prefix_group", "session_id", "prompt")

Segments = tuple[tuple[str, int], ...]
"""A row's explicit prompt: (content key, tokens) per segment."""


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace, sorted by arrival; one entry per row in every array.

    ``row`` is each entry's position in the file (JSON index or CSV line number).
    ``config`` is the replay file's ``config`` block (empty for CSV). ``prompt`` holds
    a row's explicit segments (CSV ``prompt`` column), ``None`` where it has none.
    """

    path: str
    arrival_us: IntArray
    input_tokens: IntArray
    output_tokens: IntArray
    has_error: BoolArray
    prefix_group: tuple[str | None, ...]
    session_id: tuple[str | None, ...]
    row: IntArray
    config: Mapping[str, object] = field(default_factory=dict)
    prompt: tuple[Segments | None, ...] = ()

    def __len__(self) -> int:
        return len(self.arrival_us)


class _Errors:
    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[FieldError] = []

    def add(self, path: str, value: object, cause: str) -> None:
        if len(self.items) < _MAX_ERRORS:
            self.items.append(FieldError(path, value, cause))

    def raise_if_any(self) -> None:
        if self.items:
            raise InputRefused(self.items, self.source)


def _int_field(
    errors: _Errors, path: str, value: object, minimum: int, *, text: bool = False
) -> int:
    if text and isinstance(value, str):
        try:
            parsed: object = int(value.strip())
        except ValueError:
            errors.add(path, value, "not an integer")
            return minimum
        value_checked = parsed
    else:
        value_checked = value
    if isinstance(value_checked, bool) or not isinstance(value_checked, int):
        errors.add(path, value, "not an integer")
        return minimum
    if value_checked < minimum:
        errors.add(path, value, f"must be >= {minimum}")
        return minimum
    if value_checked > _MAX_INT:
        errors.add(path, value, f"must be <= {_MAX_INT}")
        return minimum
    return value_checked


def _build(
    path: str,
    arrival_us: list[int],
    inputs: list[int],
    outputs: list[int],
    errors_flag: list[bool],
    groups: list[str | None],
    sessions: list[str | None],
    rows: list[int],
    config: Mapping[str, object],
    prompts: list[Segments | None] | None = None,
) -> Trace:
    arr = np.asarray(arrival_us, dtype=np.int64)
    order = np.argsort(arr, kind="stable")
    return Trace(
        path=path,
        arrival_us=arr[order],
        input_tokens=np.asarray(inputs, dtype=np.int64)[order],
        output_tokens=np.asarray(outputs, dtype=np.int64)[order],
        has_error=np.asarray(errors_flag, dtype=np.bool_)[order],
        prefix_group=tuple(groups[i] for i in order),
        session_id=tuple(sessions[i] for i in order),
        row=np.asarray(rows, dtype=np.int64)[order],
        config=dict(config),
        prompt=tuple(prompts[i] for i in order) if prompts is not None else (None,) * len(arr),
    )


def load_replay_json(path: str | Path) -> Trace:
    """Load an inference-sim-training replay file; refuse malformed rows (all of them)."""
    src = str(path)
    errors = _Errors(src)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise InputRefused.one("", src, f"cannot read replay JSON: {exc}", src) from exc
    if not isinstance(doc, dict):
        raise InputRefused.one("", type(doc).__name__, "top level must be an object", src)
    requests = doc.get("requests")
    if not isinstance(requests, list):
        raise InputRefused.one("requests", requests, "must be a list of request objects", src)
    config = doc.get("config", {})
    if not isinstance(config, dict):
        raise InputRefused.one("config", config, "must be an object", src)
    arrival: list[int] = []
    inputs: list[int] = []
    outputs: list[int] = []
    failed: list[bool] = []
    groups: list[str | None] = []
    rows: list[int] = []
    for i, req in enumerate(requests):
        base = f"requests.{i}"
        if not isinstance(req, dict):
            errors.add(base, req, "must be an object")
            continue
        missing = [k for k in ("arrival_time_us", "input_tokens", "output_tokens") if k not in req]
        for key in missing:
            errors.add(f"{base}.{key}", None, "missing")
        if missing:
            continue
        arrival.append(_int_field(errors, f"{base}.arrival_time_us", req["arrival_time_us"], 0))
        inputs.append(_int_field(errors, f"{base}.input_tokens", req["input_tokens"], 1))
        outputs.append(_int_field(errors, f"{base}.output_tokens", req["output_tokens"], 0))
        group = req.get("prefix_group", "")
        if group is not None and not isinstance(group, str):
            errors.add(f"{base}.prefix_group", group, "must be a string")
            group = None
        groups.append(group or None)
        has_error = req.get("has_error", False)
        if not isinstance(has_error, bool):
            errors.add(f"{base}.has_error", has_error, "must be true or false")
            has_error = False
        failed.append(has_error)
        rows.append(i)
    errors.raise_if_any()
    sessions: list[str | None] = [None] * len(arrival)
    return _build(src, arrival, inputs, outputs, failed, groups, sessions, rows, config)


def load_trace_csv(path: str | Path) -> Trace:
    """Load a CSV trace; refuse an unknown or missing header column and every bad row."""
    src = str(path)
    errors = _Errors(src)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except OSError as exc:
        raise InputRefused.one("", src, f"cannot read CSV trace: {exc}", src) from exc
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [h.strip() for h in next(reader, [])]
    unknown = [h for h in header if h not in _CSV_REQUIRED + _CSV_OPTIONAL]
    missing = [h for h in _CSV_REQUIRED if h not in header]
    if unknown or missing or len(set(header)) != len(header):
        cause = (
            f"expected columns {','.join(_CSV_REQUIRED)}[,prefix_group][,session_id]"
            f"[,prompt]; "
            f"unknown {unknown}, missing {missing}"
        )
        raise InputRefused.one("line 1", ",".join(header), cause, src)
    col = {name: i for i, name in enumerate(header)}
    arrival: list[int] = []
    inputs: list[int] = []
    outputs: list[int] = []
    groups: list[str | None] = []
    sessions: list[str | None] = []
    prompts: list[Segments | None] = []
    rows: list[int] = []
    for record in reader:
        line = reader.line_num
        if not record or all(not c.strip() for c in record):
            continue
        base = f"line {line}"
        if len(record) != len(header):
            cause = f"has {len(record)} fields, the header has {len(header)}"
            errors.add(base, ",".join(record), cause)
            continue
        cell = record[col["arrival_s"]].strip()
        try:
            seconds = float(cell)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_INT / 1e6:
            errors.add(
                f"{base}.arrival_s", cell, f"must be a number of seconds in [0, {_MAX_INT / 1e6:g}]"
            )
            seconds = 0.0
        arrival.append(seconds_to_us(seconds))
        inputs.append(
            _int_field(errors, f"{base}.input_tokens", record[col["input_tokens"]], 1, text=True)
        )
        outputs.append(
            _int_field(errors, f"{base}.output_tokens", record[col["output_tokens"]], 0, text=True)
        )
        groups.append(
            record[col["prefix_group"]].strip() or None if "prefix_group" in col else None
        )
        sessions.append(record[col["session_id"]].strip() or None if "session_id" in col else None)
        cell = record[col["prompt"]].strip() if "prompt" in col else ""
        prompts.append(_segments(errors, f"{base}.prompt", cell, inputs[-1]) if cell else None)
        rows.append(line)
    errors.raise_if_any()
    failed = [False] * len(arrival)
    return _build(src, arrival, inputs, outputs, failed, groups, sessions, rows, {}, prompts)


def _segments(errors: _Errors, path: str, cell: str, input_tokens: int) -> Segments | None:
    """Parse a ``prompt`` cell; refuse a bad segment or a total other than the input."""
    out: list[tuple[str, int]] = []
    for part in cell.split("|"):
        key, sep, count = part.strip().rpartition(":")
        try:
            tokens = int(count) if sep else 0
        except ValueError:
            tokens = 0
        if not key or tokens < 1:
            errors.add(path, cell, f"segment {part.strip()!r} is not key:tokens with tokens >= 1")
            return None
        out.append((key, tokens))
    total = sum(t for _, t in out)
    if total != input_tokens:
        errors.add(path, cell, f"segments hold {total} tokens, input_tokens is {input_tokens}")
        return None
    return tuple(out)


def load_trace(path: str | Path, format: str = "auto") -> Trace:
    """Load a trace in ``format`` (``auto``: ``.csv`` is CSV, anything else replay JSON)."""
    fmt = format
    if fmt == "auto":
        fmt = "csv" if str(path).lower().endswith(".csv") else "replay_json"
    if fmt == "csv":
        return load_trace_csv(path)
    if fmt == "replay_json":
        return load_replay_json(path)
    raise InputRefused.one("format", format, "must be auto, replay_json or csv", str(path))


def _config_prefix_len(trace: Trace) -> int:
    value = trace.config.get("system_prompt_len", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(slots=True)
class _Last:
    request_id: str
    prompt: tuple[PromptSegment, ...]
    input_tokens: int
    output_tokens: int


class TraceContent:
    """Turns trace rows into requests (open loop, the trace's own times).

    Row ``r`` (after dropping ``has_error`` rows when ``skip_errors``) becomes a request
    with ``max_output_tokens = max(1, output_tokens)`` (a recorded 0 means the answer
    was lost; the server still produced at least one token). Its prompt is the group's
    shared prefix ``{entity}/prefix/{group}`` (``prefix_len_tokens``, at most the input)
    then a unique segment. A row of a session whose input is at least the previous
    turn's input plus output repeats that turn's prompt and answer and adds the rest
    as a new segment, so multi-turn context is shared exactly; otherwise it starts
    afresh. A row with an explicit ``prompt`` (CSV column) sends exactly those segments.
    """

    def __init__(
        self, trace: Trace, spec: TraceSpec, entity: str, *, ignore_eos: bool = True
    ) -> None:
        keep = ~trace.has_error if spec.skip_errors else np.ones(len(trace), dtype=np.bool_)
        self._idx = np.flatnonzero(keep)
        self._trace = trace
        self._entity = entity
        self._ignore_eos = ignore_eos
        self._prefix_len = (
            spec.prefix_len_tokens
            if spec.prefix_len_tokens is not None
            else _config_prefix_len(trace)
        )
        arrivals = trace.arrival_us[self._idx]
        if arrivals.size and spec.time_scale != 1.0:
            arrivals = np.asarray(
                [seconds_to_us(float(a) * spec.time_scale / 1e6) for a in arrivals],
                dtype=np.int64,
            )
        self._arrival_us = arrivals
        self._last: dict[str, _Last] = {}
        self._turns: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._idx)

    @property
    def prompts_outputs(self) -> bool:
        """Whether a prompt may hold an earlier request's answer: a row of a session
        (CSV ``session_id``) may continue its session's last turn."""
        return any(s is not None for s in self._trace.session_id)

    def scheduled(self, k: int) -> ScheduledArrival:
        """The ``k``-th replayed row as a scheduled arrival."""
        return ScheduledArrival(k, int(self._arrival_us[k]), 0, k)

    def session_of(self, item: ScheduledArrival) -> str | None:
        """Session id of the row (CSV ``session_id``), or ``None``."""
        return self._trace.session_id[int(self._idx[item.index])]

    def build(self, item: ScheduledArrival, request_id: str, arrival_us: int) -> InferenceRequest:
        """The request for replayed row ``item.index``."""
        r = int(self._idx[item.index])
        t = self._trace
        n_in = int(t.input_tokens[r])
        n_out = max(1, int(t.output_tokens[r]))
        group = t.prefix_group[r]
        session = t.session_id[r]
        prompt: tuple[PromptSegment, ...] = ()
        prev = self._last.get(session) if session is not None else None
        explicit = t.prompt[r] if t.prompt else None
        if explicit is not None:
            prompt = tuple(PromptSegment(f"{self._entity}/segment/{key}", n) for key, n in explicit)
        elif prev is not None and n_in >= prev.input_tokens + prev.output_tokens:
            rest = n_in - prev.input_tokens - prev.output_tokens
            prompt = (
                *prev.prompt,
                PromptSegment(output_content_key(prev.request_id), prev.output_tokens),
            )
            if rest:
                prompt = (*prompt, PromptSegment(f"{self._entity}/prompt/{request_id}", rest))
        else:
            shared = min(self._prefix_len, n_in) if group is not None else 0
            if shared:
                prompt = (PromptSegment(f"{self._entity}/prefix/{group}", shared),)
            if n_in - shared:
                prompt = (
                    *prompt,
                    PromptSegment(f"{self._entity}/prompt/{request_id}", n_in - shared),
                )
        turn = 0
        if session is not None:
            self._last[session] = _Last(request_id, prompt, n_in, n_out)
            turn = self._turns.get(session, 0)
            self._turns[session] = turn + 1
        return InferenceRequest(
            request_id=request_id,
            arrival_us=arrival_us,
            prompt=prompt,
            max_output_tokens=n_out,
            ignore_eos=self._ignore_eos,
            session_id=session,
            turn=turn,
            prefix_group=f"{self._entity}/prefix/{group}" if group is not None else None,
        )

    def on_done(self, request_id: str, output_tokens: int, failed: bool) -> None:
        """Nothing to update: a replayed row's prompt comes from the trace."""
