"""The request ledger: each request's fate written once, latency samples derived from it.

The ledger is the one place a request's life is recorded (design §8.7). A fate is
written exactly once; writing a second is a SimulationError. At the end of a run every
arrival must have a fate: :meth:`RequestLedger.close` assigns the horizon fates and
asserts that arrivals equal fates.

A request's inter-chunk gaps (one 4-byte integer a streamed token) are most of what the
ledger holds: a run of a million requests of 512 tokens streams 2 GB of them. Once a
request has its fate they never change, so they leave the record (:class:`GapSpill`):
into a buffer, which goes to an unnamed temporary file each time it reaches
:data:`SPILL_BUFFER_BYTES` (a run with fewer gaps than that never touches the disk;
the file has no name, so nothing is left behind however the process ends). Read them
with :meth:`RequestLedger.gaps`.

Most step reports of a steady batch carry the emissions of the report before them (an
engine's decode span reports one tuple a boundary): each request's next gap is the same
report-to-report time. The ledger keeps such a run of reports from one engine once
(:class:`_Run`: the gaps a report, not a request) and writes them into each member's
record when the run ends, when the member gets its fate, or at :meth:`RequestLedger.close`;
every record reads as if each report had been written to each request.
"""

from __future__ import annotations

import tempfile
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Final

from blis_core.contracts.engine import TokenEmission
from blis_core.contracts.errors import InputRefused, SimulationError

__all__ = [
    "GAP_TYPECODE",
    "MAX_NARROW_GAP_US",
    "SPILL_BUFFER_BYTES",
    "Fate",
    "GapSpill",
    "RequestLedger",
    "RequestRecord",
]


class Fate:
    """Fate names (strings, so they read well in a Result)."""

    # Final: class constants, not instance defaults (which is how mypyc reads a bare one).
    COMPLETED: Final = "completed"
    DROPPED: Final = "dropped"
    TIMED_OUT: Final = "timed_out"
    IN_FLIGHT: Final = "in_flight_at_horizon"
    QUEUED: Final = "queued_at_horizon"
    NOT_STARTED: Final = "not_started"


GAP_TYPECODE = next(code for code in "ilq" if array(code).itemsize == 4)
"""The ``array`` typecode of a 4-byte signed integer (``i`` on every mainstream platform)."""

MAX_NARROW_GAP_US = 2**31 - 1
"""The longest gap a 4-byte integer holds (about 35 minutes)."""

SPILL_BUFFER_BYTES = 8 << 20
"""Gaps of fated requests held in memory before they are written to the spill file."""

_SPILLED: Final = {code: array(code) for code in (GAP_TYPECODE, "q")}
"""The one empty array of each gap typecode a spilled record keeps (its typecode says how
its gaps read back): never appended to, as a request with a fate gets no more tokens."""


class GapSpill:
    """Append-only store of gap arrays: an in-memory buffer flushed to an unnamed
    temporary file (made at the first flush) whenever it reaches ``buffer_bytes``.
    :meth:`put` returns the byte offset an array is read back from."""

    __slots__ = ("_buffer", "_buffer_bytes", "_file", "_flushed")

    def __init__(self, buffer_bytes: int | None = None) -> None:
        self._buffer = bytearray()
        self._buffer_bytes = SPILL_BUFFER_BYTES if buffer_bytes is None else buffer_bytes
        self._file: IO[bytes] | None = None
        self._flushed = 0

    @property
    def on_disk(self) -> int:
        """Bytes written to the file so far."""
        return self._flushed

    def put(self, gaps: array) -> int:  # type: ignore[type-arg]
        """Keep ``gaps``; returns its offset."""
        offset = self._flushed + len(self._buffer)
        self._buffer += gaps.tobytes()
        if len(self._buffer) >= self._buffer_bytes:
            try:
                if self._file is None:
                    # held open for the ledger's life; unnamed, so never left behind
                    self._file = tempfile.TemporaryFile(prefix="blis-gaps-")  # noqa: SIM115
                self._file.seek(0, 2)
                self._file.write(self._buffer)
                self._file.flush()
            except OSError as err:
                raise InputRefused.one(
                    "TMPDIR",
                    tempfile.gettempdir(),
                    f"a run keeps its finished requests' token gaps in a temporary file "
                    f"there and could not write it ({err}); free space or point TMPDIR "
                    "elsewhere",
                ) from err
            self._flushed += len(self._buffer)
            self._buffer = bytearray()
        return offset

    def get(self, offset: int, count: int, typecode: str) -> array:  # type: ignore[type-arg]
        """The ``count`` gaps of ``typecode`` kept at ``offset``."""
        out = array(typecode)
        size = count * out.itemsize
        if offset >= self._flushed:
            start = offset - self._flushed
            out.frombytes(self._buffer[start : start + size])
        else:
            assert self._file is not None
            self._file.seek(offset)
            out.frombytes(self._file.read(size))
        return out

    def close(self) -> None:
        """Free the buffer and the file (the store is empty after)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._buffer = bytearray()
        self._flushed = 0


class _Run:
    """Reports from one engine that carried the same emissions tuple one after another.

    Every member (a request of the tuple without a fate) had its last chunk at the
    report before the run's first, so each owes the same gaps: ``gaps``, one a report,
    and ``tokens[i]`` output tokens a report. A member is owed them while its record's
    ``run`` is this run."""

    __slots__ = ("emissions", "gaps", "last_us", "members", "source", "tokens")

    def __init__(
        self, emissions: tuple[TokenEmission, ...], source: _Source, first_us: int
    ) -> None:
        self.emissions = emissions
        self.source = source
        self.members: list[RequestRecord] = []
        self.tokens: list[int] = []
        self.gaps = array(GAP_TYPECODE)
        self.last_us = first_us

    def report(self, now_us: int) -> None:
        """One more report of the run, at ``now_us``."""
        gap = now_us - self.last_us
        if gap > MAX_NARROW_GAP_US and self.gaps.itemsize == 4:
            self.gaps = array("q", self.gaps)
        self.gaps.append(gap)
        self.last_us = now_us

    def tokens_of(self, rec: RequestRecord) -> int:
        """A member's output tokens a report."""
        for member, num_tokens in zip(self.members, self.tokens, strict=True):
            if member is rec:
                return num_tokens
        raise SimulationError("a request the ledger's run does not hold")

    def settle(self, rec: RequestRecord, num_tokens: int) -> None:
        """Write the run's reports so far into ``rec`` (a member) and let it go."""
        rec.run = None
        gaps = self.gaps
        owed = rec.chunk_gaps_us
        if owed.typecode == gaps.typecode:
            owed.extend(gaps)
        elif gaps.itemsize == 8:
            rec.chunk_gaps_us = array("q", owed)
            rec.chunk_gaps_us.extend(gaps)
        else:
            owed.fromlist(gaps.tolist())
        rec.last_token_us = self.last_us
        rec.output_tokens += num_tokens * len(gaps)


class _Source:
    """One engine's last report: its emissions and time, and the run it is in."""

    __slots__ = ("last", "last_us", "run")

    def __init__(self) -> None:
        self.last: tuple[TokenEmission, ...] | None = None
        self.last_us = -1
        self.run: _Run | None = None


@dataclass(slots=True)
class RequestRecord:
    """What the ledger knows about one request; times in µs."""

    arrival_us: int
    input_tokens: int
    dispatched_us: int = -1
    scheduled_us: int = -1
    first_token_us: int = -1
    last_token_us: int = -1
    output_tokens: int = 0
    chunk_gaps_us: array = field(default_factory=lambda: array(GAP_TYPECODE))  # type: ignore[type-arg]
    """Gaps between consecutive streamed chunks: 4-byte integers, widened to 8 bytes for a
    request that waits more than :data:`MAX_NARROW_GAP_US` between two chunks. Emptied
    when the request's gaps are spilled (``gaps_at``): read them with
    :meth:`RequestLedger.gaps`."""
    fate: str = ""
    reason: str = ""
    timed_out_us: int = -1
    instance: str = ""
    cached_tokens: int = -1
    gaps_at: int = -1
    """Offset of the gaps in the ledger's spill (-1: still in ``chunk_gaps_us``)."""
    gap_count: int = 0
    """How many gaps were spilled."""
    run: _Run | None = field(default=None, repr=False, compare=False)
    """The ledger's run of reports whose gaps this record is still owed, or ``None``: set
    and cleared by the ledger alone, ``None`` for every record after
    :meth:`RequestLedger.close` (read a record's fields after it)."""

    # NOTE: an explicit __init__ (the fields in order, their defaults; the gaps' factory
    # field takes None for a fresh array): compiled, the one `dataclasses` writes would
    # stay interpreted for every request (tests/test_explicit_inits.py holds it to the
    # fields).
    def __init__(
        self,
        arrival_us: int,
        input_tokens: int,
        dispatched_us: int = -1,
        scheduled_us: int = -1,
        first_token_us: int = -1,
        last_token_us: int = -1,
        output_tokens: int = 0,
        chunk_gaps_us: array | None = None,  # type: ignore[type-arg]
        fate: str = "",
        reason: str = "",
        timed_out_us: int = -1,
        instance: str = "",
        cached_tokens: int = -1,
        gaps_at: int = -1,
        gap_count: int = 0,
        run: _Run | None = None,
    ) -> None:
        self.arrival_us = arrival_us
        self.input_tokens = input_tokens
        self.dispatched_us = dispatched_us
        self.scheduled_us = scheduled_us
        self.first_token_us = first_token_us
        self.last_token_us = last_token_us
        self.output_tokens = output_tokens
        self.chunk_gaps_us = array(GAP_TYPECODE) if chunk_gaps_us is None else chunk_gaps_us
        self.fate = fate
        self.reason = reason
        self.timed_out_us = timed_out_us
        self.instance = instance
        self.cached_tokens = cached_tokens
        self.gaps_at = gaps_at
        self.gap_count = gap_count
        self.run = run


class RequestLedger:
    """Records arrivals, progress and fates of every request of one replication."""

    def __init__(self, spill: GapSpill | None = None) -> None:
        self.records: dict[str, RequestRecord] = {}
        # The number of requests in the system at each arrival (the overload test's
        # series), as two columns of 8-byte integers: a tuple an arrival took ~100 bytes.
        self.backlog_times_us = array("q")
        self.backlog_counts = array("q")
        self._in_system = 0
        self._spill = GapSpill() if spill is None else spill
        self._sources: dict[str, _Source] = {}

    def gaps(self, rec: RequestRecord) -> array:  # type: ignore[type-arg]
        """The record's inter-chunk gaps (µs), spilled or not (a spilled record's are read
        back as a new array)."""
        if rec.gaps_at < 0:
            return rec.chunk_gaps_us
        return self._spill.get(rec.gaps_at, rec.gap_count, rec.chunk_gaps_us.typecode)

    def release(self) -> None:
        """Free the spilled gaps (the ledger's records stay, their gaps unreadable)."""
        self._spill.close()

    @property
    def in_system(self) -> int:
        """Requests that arrived and have no fate yet."""
        return self._in_system

    # -- progress -----------------------------------------------------------------

    def arrived(self, request_id: str, now_us: int, input_tokens: int) -> None:
        """A request arrived (the client sent it)."""
        if request_id in self.records:
            raise SimulationError(f"request {request_id!r} arrived twice")
        self.records[request_id] = RequestRecord(now_us, input_tokens)
        self._in_system += 1
        self.backlog_times_us.append(now_us)
        self.backlog_counts.append(self._in_system)

    def dispatched(self, request_id: str, now_us: int, instance: str = "") -> None:
        """The router sent the request to an engine (``instance``, which accepted it)."""
        rec = self.records[request_id]
        rec.dispatched_us = now_us
        rec.instance = instance

    def scheduled(self, request_id: str, step_start_us: int) -> None:
        """An engine step that computes the request started (first time only counts)."""
        rec = self.records[request_id]
        if rec.scheduled_us < 0:
            rec.scheduled_us = step_start_us

    def cached(self, request_id: str, cached_tokens: int) -> None:
        """Prompt tokens the engine found cached when it first scheduled the request."""
        rec = self.records[request_id]
        if rec.cached_tokens < 0:
            rec.cached_tokens = cached_tokens

    def tokens(self, request_id: str, num_tokens: int, now_us: int) -> None:
        """``num_tokens`` output tokens reached the client in one chunk (discarded for a
        request already timed out or dropped)."""
        self.emitted((TokenEmission(request_id, num_tokens),), now_us)

    def emitted(self, emissions: tuple[TokenEmission, ...], now_us: int, source: str = "") -> None:
        """Each emission's tokens reached the client in one chunk at ``now_us``: what
        :meth:`tokens` records for each, in one call (a step report carries one
        emission per running request). ``source`` names the engine that reported them:
        from the second report of one engine in a row with the same tuple (the same
        object), the reports are kept as a run, once a report ("": never)."""
        if source:
            src = self._sources.get(source)
            if src is None:
                src = self._sources[source] = _Source()
            run = src.run
            if run is not None:
                if run.emissions is emissions:
                    run.report(now_us)
                    return
                self._end_run(run)
            elif src.last is emissions and emissions:
                run = self._start_run(emissions, src, now_us)
                if run is not None:
                    return
            src.last = emissions
            src.last_us = now_us
        self._emit_each(emissions, now_us)

    def _emit_each(self, emissions: Iterable[TokenEmission], now_us: int) -> None:
        records = self.records
        for em in emissions:
            rec = records[em.request_id]
            if rec.fate:
                continue  # tokens of a request already timed out or dropped are discarded
            if rec.run is not None:
                self._end_run(rec.run)
            if rec.first_token_us < 0:
                rec.first_token_us = now_us
            else:
                gap = now_us - rec.last_token_us
                if gap > MAX_NARROW_GAP_US and rec.chunk_gaps_us.itemsize == 4:
                    rec.chunk_gaps_us = array("q", rec.chunk_gaps_us)
                rec.chunk_gaps_us.append(gap)
            rec.last_token_us = now_us
            rec.output_tokens += em.num_tokens

    def _start_run(
        self, emissions: tuple[TokenEmission, ...], src: _Source, now_us: int
    ) -> _Run | None:
        """A run of ``src``'s reports from this one (its second with ``emissions``), or
        ``None`` where a request of the tuple had a chunk since the first (another
        engine's, or the tuple names it twice): those reports are written request by
        request."""
        records = self.records
        run = _Run(emissions, src, src.last_us)
        members = run.members
        tokens = run.tokens
        last_us = src.last_us
        for em in emissions:
            rec = records[em.request_id]
            if rec.fate:
                continue
            if rec.run is not None or rec.last_token_us != last_us:
                for member in members:
                    member.run = None
                return None
            rec.run = run
            members.append(rec)
            tokens.append(em.num_tokens)
        run.report(now_us)
        src.run = run
        return run

    def _end_run(self, run: _Run) -> None:
        """Settle every member still owed ``run``'s gaps; its engine's next report is
        written request by request."""
        for rec, num_tokens in zip(run.members, run.tokens, strict=True):
            if rec.run is run:
                run.settle(rec, num_tokens)
        src = run.source
        src.run = None
        src.last = None

    # -- fates --------------------------------------------------------------------

    def _fate(self, request_id: str, fate: str, reason: str) -> None:
        rec = self.records[request_id]
        if rec.fate:
            raise SimulationError(
                f"request {request_id!r} already has fate {rec.fate!r}; cannot also be {fate!r}"
            )
        run = rec.run
        if run is not None:
            # Its chunks so far are the run's reports so far; any later are discarded.
            run.settle(rec, run.tokens_of(rec))
        rec.fate, rec.reason = fate, reason
        self._in_system -= 1
        gaps = rec.chunk_gaps_us
        if gaps:
            # Final now (tokens after a fate are discarded): out of the record.
            rec.gaps_at = self._spill.put(gaps)
            rec.gap_count = len(gaps)
            rec.chunk_gaps_us = _SPILLED[gaps.typecode]

    def has_fate(self, request_id: str) -> bool:
        """Whether the request's fate is written."""
        return bool(self.records[request_id].fate)

    def completed(self, request_id: str, reason: str) -> None:
        """The engine finished the request (``length`` or ``stop``)."""
        self._fate(request_id, Fate.COMPLETED, reason)

    def dropped(self, request_id: str, reason: str) -> None:
        """The request was refused (router shed, no endpoint, engine rejection)."""
        self._fate(request_id, Fate.DROPPED, reason)

    def timed_out(self, request_id: str, now_us: int = -1) -> None:
        """The client gave up at the request's deadline (``now_us``, when known)."""
        self._fate(request_id, Fate.TIMED_OUT, "deadline")
        self.records[request_id].timed_out_us = now_us

    def close(self, arrivals_generated: int) -> dict[str, int]:
        """Write horizon fates for every request without one; assert arrivals == fates.

        A request that an engine had started computing is in flight; one dispatched to an
        engine but never scheduled is queued; one never dispatched is not started.
        """
        for src in self._sources.values():
            if src.run is not None:
                self._end_run(src.run)
        self._sources.clear()
        for rec in self.records.values():
            if rec.fate:
                continue
            if rec.scheduled_us >= 0:
                rec.fate = Fate.IN_FLIGHT
            elif rec.dispatched_us >= 0:
                rec.fate = Fate.QUEUED
            else:
                rec.fate = Fate.NOT_STARTED
        counts: dict[str, int] = {}
        for rec in self.records.values():
            key = f"{rec.fate}:{rec.reason}" if rec.fate == Fate.DROPPED else rec.fate
            counts[key] = counts.get(key, 0) + 1
        if arrivals_generated != len(self.records):
            raise SimulationError(
                f"the workload generated {arrivals_generated} arrivals but the ledger holds "
                f"{len(self.records)} fates"
            )
        return counts
