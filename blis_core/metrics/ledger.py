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

A request's record object lives only while it has no fate: at its fate the ledger
writes it into columns (:class:`~blis_core.metrics.fated.FatedColumns`, about 120
bytes a request, its gaps already spilled) and lets it go, so what a run keeps of its
finished requests is those columns and the spilled gaps. Read the requests with
:meth:`RequestLedger.requests`, :meth:`RequestLedger.record` or the columns themselves
(:attr:`RequestLedger.fated`).
"""

from __future__ import annotations

import tempfile
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Final

from blis_core.contracts.engine import TokenEmission
from blis_core.contracts.errors import InputRefused, SimulationError
from blis_core.metrics.fated import FATE_CODES, FATES, Fate, FatedColumns

__all__ = [
    "GAP_TYPECODE",
    "MAX_NARROW_GAP_US",
    "SPILL_BUFFER_BYTES",
    "Fate",
    "GapSpill",
    "RequestLedger",
    "RequestRecord",
]


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
    row: int = -1
    """The request's row in the ledger's columns (its place in arrival order)."""
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
        row: int = -1,
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
        self.row = row
        self.run = run


class RequestLedger:
    """Records arrivals, progress and fates of every request of one replication.

    A request's record is an object while it has no fate and a row of :attr:`fated`
    after (module doc). A request timed out by the client or dropped may still hear
    from the engine it was sent to (its acceptance, its first scheduling, its cached
    prompt), written into its row; a completed one hears nothing more (news of it is a
    :class:`SimulationError`)."""

    def __init__(self, spill: GapSpill | None = None) -> None:
        self._live: dict[str, RequestRecord] = {}
        self.fated = FatedColumns()
        """Every request's row in arrival order, written at its fate (module doc)."""
        self._late: dict[str, int] = {}
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

    def row_gaps(self, row: int) -> array:  # type: ignore[type-arg]
        """The inter-chunk gaps (µs) of the fated request of ``row``, as a new array."""
        fated = self.fated
        typecode = "q" if fated.wide[row] else GAP_TYPECODE
        count = fated.gap_count[row]
        if not count:
            return array(typecode)
        return self._spill.get(fated.gaps_at[row], count, typecode)

    def release(self) -> None:
        """Free the spilled gaps (the ledger's rows stay, their gaps unreadable)."""
        self._spill.close()

    @property
    def in_system(self) -> int:
        """Requests that arrived and have no fate yet."""
        return self._in_system

    @property
    def arrivals(self) -> int:
        """Requests that arrived."""
        return len(self.fated)

    # -- reading --------------------------------------------------------------------

    def record(self, request_id: str) -> RequestRecord:
        """The record of ``request_id``: its own while it has no fate, made from its row
        after (a scan of every id: for a few requests, not for all)."""
        rec = self._live.get(request_id)
        if rec is not None:
            return rec
        row = self.fated.find(request_id)
        if row < 0:
            raise SimulationError(f"request {request_id!r} never arrived")
        return self._record_at(row)

    def requests(self) -> Iterator[tuple[str, RequestRecord]]:
        """Every request's id and record, in arrival order (a fated one's record made
        from its row as it is read)."""
        live = {rec.row: rec for rec in self._live.values()}
        fated = self.fated
        for row in range(len(fated)):
            rec = live.get(row)
            yield fated.request_id(row), rec if rec is not None else self._record_at(row)

    def _record_at(self, row: int) -> RequestRecord:
        fated = self.fated
        typecode = "q" if fated.wide[row] else GAP_TYPECODE
        gaps_at = fated.gaps_at[row]
        return RequestRecord(
            fated.arrival_us[row],
            fated.input_tokens[row],
            fated.dispatched_us[row],
            fated.scheduled_us[row],
            fated.first_token_us[row],
            fated.last_token_us[row],
            fated.output_tokens[row],
            _SPILLED[typecode] if gaps_at >= 0 else array(typecode),
            fated.fate_of(row),
            fated.reason_of(row),
            fated.timed_out_us[row],
            fated.instance_of(row),
            fated.cached_tokens[row],
            gaps_at,
            fated.gap_count[row],
            row,
        )

    def _no_record(self, request_id: str, what: str) -> SimulationError:
        row = self.fated.find(request_id)
        if row < 0:
            return SimulationError(f"request {request_id!r} never arrived; cannot be {what}")
        return SimulationError(
            f"request {request_id!r} already has fate {self.fated.fate_of(row)!r}; "
            f"cannot also be {what}"
        )

    # -- progress -----------------------------------------------------------------

    def arrived(self, request_id: str, now_us: int, input_tokens: int) -> None:
        """A request arrived (the client sent it)."""
        if request_id in self._live:
            raise SimulationError(f"request {request_id!r} arrived twice")
        row = self.fated.add(request_id)
        self._live[request_id] = RequestRecord(now_us, input_tokens, row=row)
        self._in_system += 1
        self.backlog_times_us.append(now_us)
        self.backlog_counts.append(self._in_system)

    def _late_row(self, request_id: str, what: str) -> int:
        row = self._late.get(request_id)
        if row is None:
            raise self._no_record(request_id, what)
        return row

    def dispatched(self, request_id: str, now_us: int, instance: str = "") -> None:
        """The router sent the request to an engine (``instance``, which accepted it)."""
        rec = self._live.get(request_id)
        if rec is not None:
            rec.dispatched_us = now_us
            rec.instance = instance
            return
        row = self._late_row(request_id, "dispatched")
        self.fated.set_field(row, "dispatched_us", now_us)
        self.fated.set_instance(row, instance)

    def scheduled(self, request_id: str, step_start_us: int) -> None:
        """An engine step that computes the request started (first time only counts)."""
        rec = self._live.get(request_id)
        if rec is not None:
            if rec.scheduled_us < 0:
                rec.scheduled_us = step_start_us
            return
        row = self._late_row(request_id, "scheduled")
        if self.fated.scheduled_us[row] < 0:
            self.fated.set_field(row, "scheduled_us", step_start_us)

    def cached(self, request_id: str, cached_tokens: int) -> None:
        """Prompt tokens the engine found cached when it first scheduled the request."""
        rec = self._live.get(request_id)
        if rec is not None:
            if rec.cached_tokens < 0:
                rec.cached_tokens = cached_tokens
            return
        row = self._late_row(request_id, "cached")
        if self.fated.cached_tokens[row] < 0:
            self.fated.set_field(row, "cached_tokens", cached_tokens)

    def tokens(self, request_id: str, num_tokens: int, now_us: int) -> None:
        """``num_tokens`` output tokens reached the client in one chunk (discarded for a
        request already timed out or dropped)."""
        self.emitted((TokenEmission(request_id, num_tokens),), now_us)

    def emitted(self, emissions: tuple[TokenEmission, ...], now_us: int, source: str = "") -> None:
        """Each emission's tokens reached the client in one chunk at ``now_us``: what
        :meth:`tokens` records for each, in one call (a step report carries one
        emission per running request). ``source`` names the engine that reported them:
        from the second report of one engine in a row with the same tuple (the same
        object), the reports are kept as a run, once a report ("": never). Tokens of a
        request with a fate are discarded."""
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
        live = self._live
        for em in emissions:
            rec = live.get(em.request_id)
            if rec is None:
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
        live = self._live
        run = _Run(emissions, src, src.last_us)
        members = run.members
        tokens = run.tokens
        last_us = src.last_us
        for em in emissions:
            rec = live.get(em.request_id)
            if rec is None:
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

    def _fate(self, request_id: str, fate: str, reason: str, timed_out_us: int = -1) -> None:
        rec = self._live.pop(request_id, None)
        if rec is None:
            raise self._no_record(request_id, repr(fate))
        run = rec.run
        if run is not None:
            # Its chunks so far are the run's reports so far; any later are discarded.
            run.settle(rec, run.tokens_of(rec))
        rec.fate, rec.reason = fate, reason
        rec.timed_out_us = timed_out_us
        self._in_system -= 1
        self._keep(rec)
        if fate != Fate.COMPLETED:
            self._late[request_id] = rec.row

    def _keep(self, rec: RequestRecord) -> None:
        """Spill a fated record's gaps (final now: tokens after a fate are discarded) and
        write it into its row."""
        gaps = rec.chunk_gaps_us
        if gaps:
            rec.gaps_at = self._spill.put(gaps)
            rec.gap_count = len(gaps)
            rec.chunk_gaps_us = _SPILLED[gaps.typecode]
        self.fated.write(
            rec.row,
            (
                rec.arrival_us,
                rec.input_tokens,
                rec.dispatched_us,
                rec.scheduled_us,
                rec.first_token_us,
                rec.last_token_us,
                rec.output_tokens,
                rec.timed_out_us,
                rec.cached_tokens,
                rec.gaps_at,
                rec.gap_count,
            ),
            rec.fate,
            rec.reason,
            rec.instance,
            gaps.itemsize == 8,
        )

    def has_fate(self, request_id: str) -> bool:
        """Whether the request has a fate (one that never arrived reads as having one:
        nothing more may be written to it)."""
        return request_id not in self._live

    def completed(self, request_id: str, reason: str) -> None:
        """The engine finished the request (``length`` or ``stop``)."""
        self._fate(request_id, Fate.COMPLETED, reason)

    def dropped(self, request_id: str, reason: str) -> None:
        """The request was refused (router shed, no endpoint, engine rejection)."""
        self._fate(request_id, Fate.DROPPED, reason)

    def timed_out(self, request_id: str, now_us: int = -1) -> None:
        """The client gave up at the request's deadline (``now_us``, when known)."""
        self._fate(request_id, Fate.TIMED_OUT, "deadline", now_us)

    def close(self, arrivals_generated: int) -> dict[str, int]:
        """Write horizon fates for every request without one; assert arrivals == fates.

        A request that an engine had started computing is in flight; one dispatched to an
        engine but never scheduled is queued; one never dispatched is not started. Every
        request is a row of :attr:`fated` after.
        """
        for src in self._sources.values():
            if src.run is not None:
                self._end_run(src.run)
        self._sources.clear()
        for rec in self._live.values():
            if rec.scheduled_us >= 0:
                rec.fate = Fate.IN_FLIGHT
            elif rec.dispatched_us >= 0:
                rec.fate = Fate.QUEUED
            else:
                rec.fate = Fate.NOT_STARTED
            self._keep(rec)
        self._live.clear()
        self._late.clear()
        fated = self.fated
        reason_codes, reasons = fated.codes("reason")
        dropped = FATE_CODES[Fate.DROPPED]
        counts: dict[str, int] = {}
        fates = fated.column("fate").tolist()
        for code, reason in zip(fates, reason_codes.tolist(), strict=True):
            key = f"{FATES[code]}:{reasons[reason]}" if code == dropped else FATES[code]
            counts[key] = counts.get(key, 0) + 1
        if arrivals_generated != len(fated):
            raise SimulationError(
                f"the workload generated {arrivals_generated} arrivals but the ledger holds "
                f"{len(fated)} fates"
            )
        return counts
