"""The decisions of a reader's data side, without I/O: :class:`FetchCore`.

The core keeps one :class:`OwnedSegment` per segment its reader owns (the group session adds and
drops them), decides what to read next from which segments, applies the replies (contiguity,
truncation, sealed tails, epochs, hostile records), accounts for reading ahead and hands events
out, round-robin over segments, as :class:`~readergroup.client.event_read.EventRead` values
(``take``; ``take_one`` is the per-event fast path, O(1) when the next segment's buffer has an
event). Whatever needs Redis is a *plan*: a generator that yields :data:`Effect` values (a read
to send, a reply to wait for, a question to the segment store) and is sent back their outcomes
(or has their exceptions thrown in). Two drivers run the same plans: the threaded
:class:`~readergroup.client.fetcher.Fetcher` and the asyncio
:class:`~readergroup.client.aio_fetcher.AsyncFetcher`; so there is one copy of every decision.
Every plan mutates state only between its yields, so a plan abandoned at a yield (a cancelled
task, a lost connection) leaves the core consistent: an event leaves its buffer only when it is
handed out, and a reply not applied is read again.

Reading ahead: when a read filled a whole batch of a segment (more is waiting), the next read of
such segments is sent at once (:class:`Start`) and its reply is collected when the buffers run
low, so the round trip overlaps the application's processing. While replies keep coming back
full, up to :data:`MAX_READS_AHEAD` reads are outstanding, each from where the one before ends,
bounded by ``prefetch_events`` and ``prefetch_bytes`` (events buffered or asked for) and, per
segment, ``max_buffered_events``. Replies are applied oldest first, each only to the segment it
was requested for and only if that segment's fetch position is still the one it was requested
at (a segment released, fenced or re-acquired meanwhile, or a read chained after a reply that
came back short, is dropped as stale).

Positions per segment: *fetch* (the next offset to read from Redis), *returned* (after the last
event handed out) and *consumed* (after the last event the application moved past), plus
*committed* (kept by the session). An event leaves its buffer only when it is handed out.

Epochs (``epoch.lua``, :mod:`readergroup.core.epochs`): each segment remembers the epochs it
read and reads on after the epoch of its last entry, so an entry of another epoch (at or past
its position) shows the log may have diverged in a failover; then the segment's history is
read, and offsets it had read that the log no longer has are reported lost
(:class:`DataLostError`) and read again: the events there now are new, never skipped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeAlias, TypeVar

from readergroup.client.event_read import EventRead
from readergroup.client.serializers import Serializer
from readergroup.core.epochs import committed_divergence, diverged_at, epoch_at, read_epoch
from readergroup.core.errors import (
    CorruptSegmentError,
    DataLostError,
    ReaderGroupError,
    RedisUnavailableError,
    SerializationError,
    TruncatedDataError,
    WrongKeyTypeError,
)
from readergroup.core.group_config import ReaderConfig
from readergroup.core.group_state import SegKey
from readergroup.core.routing import segment_name
from readergroup.storage.segment_records import (
    LAST_EPOCH,
    event_offset,
    id_epoch,
    position_id,
    stored_events,
)
from statesync.clock import Clock

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger("readergroup.client.fetcher")
"""(Named after the fetcher, whose lines these were: logging configured by name keeps them.)"""


class ReadHandle(Protocol):
    """A read sent and not answered yet, as a driver started it (:class:`Start`): the core
    only keeps it, compares its positions and gives it up (:meth:`cancel`, not blocking)."""

    positions: dict[str, str]

    def cancel(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the segment store (a read of :class:`~readergroup.storage.segment_store.
    SegmentStorage`: ``epochs``, ``read_raw``, ``lost_in_failover``, ``segment_states`` or
    ``epoch_histories``) ``method(*args)``; sent back its answer."""

    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Read:
    """``XREAD COUNT limit BLOCK block`` of ``positions`` now; sent back key -> raw entries.
    ``wait``: a blocking wait (the threaded driver lets go of the hand-out gate's lock)."""

    positions: dict[str, str]
    block: float
    limit: int
    wait: bool = True


@dataclass(frozen=True, slots=True)
class Start:
    """Send ``XREAD COUNT limit`` (``block``: with ``BLOCK``) of ``positions`` without waiting
    for its reply; sent back the :class:`ReadHandle`. ``segments``: every key is a segment's
    data key (a read ahead): a driver whose reply arrives before it is taken may make its
    entries :func:`~readergroup.storage.segment_records.stored_events` at once (the reply's
    lists then die young instead of being promoted by Python's garbage collector while they
    wait)."""

    positions: dict[str, str]
    limit: int
    block: float | None = None
    segments: bool = False


@dataclass(frozen=True, slots=True)
class Ready:
    """Wait up to ``timeout`` s for ``read``'s reply; sent back whether it arrived."""

    read: ReadHandle
    timeout: float
    wait: bool = False


@dataclass(frozen=True, slots=True)
class Receive:
    """``read``'s reply if it arrives within ``timeout`` s (key -> raw entries), else ``None``
    (it stays outstanding); an error is thrown in (the read is then given up)."""

    read: ReadHandle
    timeout: float
    wait: bool = False


@dataclass(frozen=True, slots=True)
class Pause:
    """Back off ``seconds`` (Redis unreachable)."""

    seconds: float


Effect: TypeAlias = Ask | Read | Start | Ready | Receive | Pause
"""What a plan asks its driver to do."""

Plan: TypeAlias = Generator[Effect, Any, R]
"""A decision that needs Redis: yields effects, is sent their outcomes, returns an ``R``."""


@dataclass
class OwnedSegment:
    """Local bookkeeping for one owned segment (reading thread only)."""

    key: SegKey
    scope: str
    stream: str
    segment: int
    data_key: str
    token: int
    committed: int
    fetch: int
    returned: int
    consumed: int
    buffer: deque[Any] = field(default_factory=deque)
    """Fetched events not handed out yet, oldest first, as flat tuples
    (:func:`~readergroup.storage.segment_records.stored_events`)."""
    final_tail: int = -1
    """Where reading this segment ends: a sealed segment's tail once known, or a bounded
    group's end offset; -1 while it may still grow."""
    bounded: bool = False
    """``final_tail`` is a bounded group's end (complete there even if the segment is active)."""
    max_event_size: int = 0
    """The stream's ``max_event_size``: a larger stored event is an error, not an event."""
    pending: ReaderGroupError | None = None
    """An error to raise once the buffered events before ``pending_at`` are handed out."""
    pending_at: int = 0
    faulted: bool = False
    """Reading stopped at corrupt data in this segment: nothing more is fetched from it."""
    behind: bool = False
    """The last read of this segment filled a whole batch: more is probably waiting."""
    jumped: bool = False
    """Reading skipped truncated offsets: the buffer may not run on from *returned*, so events
    go out through the general path (which reads each event's offset) until it is drained."""
    epochs: list[tuple[int, int]] = field(default_factory=list)
    """The epochs fetched, each with the first offset fetched under it (reading order; empty
    until the first fetch: what other owners read before is not known)."""
    recent: deque[list[Any]] = field(default_factory=lambda: deque(maxlen=2))
    """The latest replies buffered: after a divergence, events handed out that a retry
    appended again unchanged (same key, payload and writer time) are not reported lost."""
    unchecked: bool = False
    """Acquired at a position not yet checked against the segment's log (a position past its
    tail, or read under an epoch the log no longer has up to there, was committed before a
    failover lost the offsets below it)."""
    epoch: int = -1
    """The log epoch the group's committed position was read under when this reader acquired
    the segment (of the event before it; -1: not known)."""
    rewind: tuple[int, int] | None = None
    """``(position, epoch)`` the group's committed position must move back to: the log
    diverged below it (reported lost; the session sends it)."""
    idle_mark: int = -1
    """*fetch* when the idle check last looked (see :meth:`FetchCore.plan_check_idle`)."""
    idle_at: float = 0.0
    """When (monotonic) the idle check looks at this segment's log next, if *fetch* stands."""
    short_since: float | None = None
    """When (monotonic) the log was first found shorter than *fetch* with nothing past where
    it diverged (a failover lost its tail, and no writer appended there since): the loss is
    reported only once something is appended there, or ``shrunk_log_grace`` has passed."""
    recheck_at: float | None = None
    handed_in: int = 0
    """The hand-out (:attr:`FetchCore.calls`) that last handed out an event of this segment: once
    a later one began, the application moved past every event of it handed out (see
    :meth:`FetchCore.moved_past`)."""
    """When (monotonic) this segment's log is looked at again (a shorter log held back, or the
    pre-commit check on the maintenance thread found it diverged); ``None``: not due."""
    origin: tuple[str, int, int] = field(init=False)
    """``(stream, segment, token)``: shared by every event handed out from this segment."""

    def __post_init__(self) -> None:
        self.origin = (self.key[0], self.segment, self.token)

    @classmethod
    def at(
        cls, key: SegKey, scope: str, stream: str, data_key: str, token: int, position: int
    ) -> OwnedSegment:
        """A segment just acquired, with every position at ``position``."""
        return cls(key, scope, stream, key[1], data_key, token, *(position,) * 4)

    @property
    def name(self) -> str:
        return segment_name(self.scope, self.stream, self.segment)

    def read_id(self) -> str:
        """The entry id to read after, for entries from *fetch* on: after the epoch of the
        last entry fetched, so a newer entry at that offset comes back too (the log diverged
        there); every epoch of the offset before *fetch* when that is not known."""
        if self.epochs:
            return position_id(self.fetch, self.epochs[-1][0])
        return f"{self.fetch}-{LAST_EPOCH}"

    @property
    def fetched_all(self) -> bool:
        """Nothing more will be fetched: read to its end (seal or end cut), or faulted."""
        return self.faulted or (self.final_tail >= 0 and self.fetch >= self.final_tail)

    def hold(self, error: ReaderGroupError, at: int, *, fault: bool = False) -> None:
        """Raise ``error`` when reading reaches offset ``at`` (events before it come first)."""
        if self.pending is None:
            self.pending, self.pending_at = error, at
        self.faulted = self.faulted or fault


class Outage:
    """Whether Redis is unreachable for a reader, logged once per outage."""

    def __init__(self, reader_id: str, session_timeout: float) -> None:
        self.reader_id = reader_id
        self.session_timeout = session_timeout
        self.error: RedisUnavailableError | None = None

    def lost(self, exc: RedisUnavailableError) -> None:
        """Reads return nothing while Redis is unreachable; past the session, fencing."""
        if self.error is None:
            logger.warning(
                "reader %r: Redis unreachable, reads return nothing until it is back "
                "(fenced after session_timeout=%ss)",
                self.reader_id,
                self.session_timeout,
                exc_info=exc,
            )
        self.error = exc

    def back(self) -> bool:
        """Redis answered; True when that ends an outage."""
        if self.error is not None:
            self.error = None
            logger.info("reader %r: Redis reachable again", self.reader_id)
            return True
        return False


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """What a fetch learned about the state logs it also read: which had new entries, and
    which are not streams (left out of later reads; their refresh reports the error)."""

    woken: frozenset[str] = frozenset()
    bad_logs: frozenset[str] = frozenset()
    news: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    """Per woken log: the raw entries read (a wake stream's say whom they are for)."""
    watched: bool = False
    """The state logs asked for were read (or are being waited on by a parked read): news
    there up to now would have been seen."""


NO_NEWS = FetchOutcome()
WATCHED = FetchOutcome(watched=True)


PARK_MIN_BLOCK = 0.05
"""Shortest wait (s) of a read call that parks its ``XREAD`` (a shorter one may end before the
reply to a read that found data arrives: it reads the plain way)."""
PARK_GRACE = 5.0
"""Seconds past its block after which a parked read still unanswered is given up."""

MAX_READS_AHEAD = 3
"""Most reads ahead outstanding per reader (each holds a pooled connection until answered)."""

SHORT_LOG_RECHECK = 0.25
"""Seconds between looks at a log held back as only shorter (see ``OwnedSegment.short_since``):
new events there are not read before the loss is reported, so they wait at most this long."""

IDLE_CHECK_SESSIONS = 3.0
"""A segment whose reads brought nothing for this many session timeouts has its log checked
(tail and epochs, one command) and again as often while that lasts: a failover may have
taken the log back below the reader's position, and new events may be going there."""


@dataclass(frozen=True, slots=True)
class LogLook:
    """What a segment's log must still hold, taken under the hand-out gate's lock for a check
    made outside it (the maintenance thread's pre-commit check): the segment, its *fetch* and
    the epochs it read up to there."""

    owned: OwnedSegment
    fetch: int
    epochs: tuple[tuple[int, int], ...]


def divergence(
    epochs: Sequence[tuple[int, int]], fetch: int, log: tuple[int, list[tuple[int, int]]]
) -> int | None:
    """Where a log (``(tail, epochs)``) diverged below what a reader fetched (up to ``fetch``
    under ``epochs``), or ``None`` when it still holds all of it."""
    tail, history = log
    if epochs:
        return diverged_at(epochs, history, fetch, tail)
    return tail if tail < fetch else None


@dataclass(slots=True)
class _Ahead:
    """A read ahead outstanding: data key -> (segment, fetch position) it was sent for, and
    the most events it asked for per segment."""

    read: ReadHandle
    targets: dict[str, tuple[OwnedSegment, int]]
    count: int


class FetchCore(Generic[T]):
    """Buffers and hands out the events of a reader's owned segments, and decides their reads
    (the plans a driver runs). ``cluster``: reads ahead are off (keys of several slots need
    several nodes); ``switches``: the connection's primary switches now (see
    :meth:`plan_fetch`)."""

    def __init__(
        self,
        serializer: Serializer[T],
        config: ReaderConfig,
        outage: Outage,
        clock: Clock,
        *,
        cluster: bool = False,
        switches: int = 0,
    ) -> None:
        self._serializer = serializer
        self._config = config
        self._outage = outage
        self._clock = clock
        self.owned: dict[SegKey, OwnedSegment] = {}
        self._rotation: deque[SegKey] = deque()
        self._rotating: set[SegKey] = set()
        """The keys in ``_rotation`` (owned ones, and removed ones until it is compacted)."""
        self.errors: deque[ReaderGroupError] = deque()
        """Errors to raise on the next read call, after the events returned before them."""
        self._deserialize = serializer.deserialize
        self._ahead: deque[_Ahead] = deque()
        """Reads ahead outstanding, oldest first (each from where the one before ends)."""
        self._parked: ReadHandle | None = None
        """A blocking read outliving the read call that sent it (see :meth:`_plan_read`)."""
        self._parked_until = 0.0
        """When (monotonic) the parked read should have been answered: past it, it is given up."""
        self._cluster = cluster
        self._reads_ahead = config.prefetch_events > 0 and config.prefetch_bytes > 0 and not cluster
        self._event_bytes = 128
        """Payload bytes per event, estimated from the latest read (bounds reading ahead)."""
        self._idle_every = IDLE_CHECK_SESSIONS * outage.session_timeout
        self._idle_due = 0.0
        """When (monotonic) :meth:`plan_check_idle` next looks for idle segments."""
        self._check_all = False
        """An outage ended or the primary switched: :meth:`plan_check_idle` looks at every
        segment's log."""
        self._switches = switches
        """The connection's primary switches when last looked at (see
        :meth:`_note_primary_switch`)."""
        self.calls = 0
        """Hand-outs so far (one per :meth:`take_one` or :meth:`take`): each begins after the
        application moved past what the one before handed out."""
        self.rewound: set[SegKey] = set()
        """Segments whose ``rewind`` is set: the group's position must move back (the
        session sends it and clears this)."""

    # -- the segment table (changed by the group session) ------------------------------------
    def add(self, owned: OwnedSegment, *, serving: bool = True) -> None:
        """Own ``owned`` (read from its position); ``serving``: hand its events out (else it is
        read but held until :meth:`serve`)."""
        owned.unchecked = owned.fetch > 0
        owned.idle_mark, owned.idle_at = owned.fetch, self._clock.monotonic() + self._idle_every
        self.owned[owned.key] = owned
        if serving:
            self.serve(owned.key)
        else:
            self.hold(owned.key)  # (a key removed earlier may still be in the rotation)

    def serve(self, key: SegKey) -> None:
        """Hand out the events of owned segment ``key`` (in turn with the others)."""
        if key in self.owned and key not in self._rotating:
            self._rotating.add(key)
            self._rotation.append(key)

    def moved_past(self, owned: OwnedSegment) -> bool:
        """Whether the application moved past every event of ``owned`` handed out (it called
        again since); if so, its *consumed* position is brought up to *returned* (the fast
        path leaves other segments' to the next call of another kind)."""
        if owned.consumed != owned.returned and owned.handed_in < self.calls:
            owned.consumed = owned.returned
        return owned.consumed == owned.returned

    def seek(self, key: SegKey, offset: int) -> None:
        """Read owned segment ``key`` from ``offset`` on: what was buffered or read ahead is
        dropped, nothing pending of the old position is raised. (A position past the log's
        tail waits for events there; below its head, reading reports the truncation.)"""
        owned = self.owned[key]
        self._drop_ahead()
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.cancel()
        owned.buffer.clear()
        owned.recent.clear()
        owned.epochs.clear()
        owned.fetch = owned.returned = owned.consumed = offset
        owned.pending, owned.faulted, owned.jumped, owned.behind = None, False, False, False
        owned.unchecked, owned.rewind, owned.short_since, owned.recheck_at = False, None, None, None
        owned.idle_mark = offset
        self.rewound.discard(key)

    def hold(self, key: SegKey) -> None:
        """Hand out nothing more of ``key`` (it stays owned: read, committed, its positions
        kept) until :meth:`serve`."""
        if key in self._rotating:
            self._rotating.discard(key)
            self._rotation.remove(key)

    def remove(self, key: SegKey) -> None:
        self.owned.pop(key, None)
        if len(self._rotation) > 2 * len(self.owned) + 16:  # drop keys no longer owned
            self._rotation = deque(k for k in self._rotation if k in self.owned)
            self._rotating = set(self._rotation)

    def clear(self) -> list[SegKey]:
        """Forget every segment (buffers too); return the keys that were owned. (Reads ahead
        still outstanding are dropped when collected: their segments are no longer owned.)"""
        dropped = list(self.owned)
        self.owned.clear()
        self._rotation.clear()
        self._rotating.clear()
        return dropped

    def consume_returned(self) -> None:
        """Commit-on-get: every event returned so far has been processed. (Called at the start
        of every read call but ``read_next_event``'s fast path, which hands out one event and
        moves its own segment's *consumed* up to it; the other segments' lag until the next
        call of another kind: their commits and releases come later, never too early.)"""
        for owned in self.owned.values():
            owned.consumed = owned.returned

    def close(self) -> None:
        """Give up the reads ahead and a parked read still outstanding (their connections are
        closed)."""
        self._drop_ahead()
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.cancel()

    # -- hand-out ----------------------------------------------------------------------------
    def take_one(self) -> EventRead[T] | None:
        """The fast path of ``read_next_event``: the next buffered event, round-robin over the
        segments (skipping those with nothing buffered, as :meth:`take` does), when it can go
        out at once; ``None`` (an error pending or a gap on the way, an event over the size
        limit, nothing buffered) sends the caller down the general path (:meth:`take`)."""
        rotation = self._rotation
        if not rotation:
            return None
        key = rotation[0]
        owned = self.owned.get(key)
        if owned is None or not owned.buffer or owned.pending is not None or owned.jumped:
            for _ in range(len(rotation)):  # the next segment with something to hand out
                key = rotation[0]
                owned = self.owned.get(key)
                if owned is not None:
                    if owned.pending is not None or owned.jumped:
                        return None
                    if owned.buffer:
                        break
                rotation.rotate(-1)
            else:
                return None
            if owned is None:  # (for the type checker: the loop breaks only on a segment)
                return None
        entry = owned.buffer[0]
        payload = entry[2]
        if owned.max_event_size and len(payload) > owned.max_event_size:
            return None  # the general path reports it
        try:
            value = self._deserialize(payload)
        except Exception as exc:  # any serializer, built-in or the application's
            owned.buffer.popleft()
            owned.returned = event_offset(entry) + 1  # the error is this event's result
            raise self._undeliverable(owned, entry, exc) from exc
        owned.buffer.popleft()
        owned.consumed = owned.returned  # commit-on-get: this segment's earlier events
        self.calls += 1
        owned.handed_in = self.calls
        owned.returned += 1  # == its offset + 1: the buffer is contiguous from *returned*
        rotation.rotate(-1)
        return EventRead(value, entry, owned.origin)

    @staticmethod
    def _undeliverable(owned: OwnedSegment, entry: Any, exc: Exception) -> ReaderGroupError:
        error = SerializationError(
            f"{owned.key[0]} segment {owned.segment} offset {event_offset(entry)}: "
            f"{type(exc).__name__}: {exc}"
        )
        error.__cause__ = exc
        return error

    def take(self, max_events: int, *, refill: bool = False) -> list[EventRead[T]]:
        """Up to ``max_events`` buffered events, round-robin over segments; with ``refill``,
        a read ahead that has arrived is added to the buffers when they run short (only then:
        fewer events held means less work for Python's garbage collector).

        An event that cannot become a value (too large, or any exception of the serializer)
        ends the call as a :class:`SerializationError` naming stream, segment and offset; the
        events taken before it are returned first and the error is raised on the next call.
        An event leaves its buffer only once it is in the returned list; if the serializer
        raises something that is not an ``Exception`` (``KeyboardInterrupt``), every event of
        the call goes back to its buffer."""
        out: list[EventRead[T]] = []
        # undo log: (segment, index in ``out`` of its first event, its *returned* before)
        visits: list[tuple[OwnedSegment, int, int]] = []
        self.calls += 1
        try:
            error = self._take_round(out, visits, max_events)
            if error is None and refill and len(out) < max_events and self._refill():
                error = self._take_round(out, visits, max_events)
            for owned, _, before in visits:
                if owned.returned != before:
                    owned.handed_in = self.calls
        except BaseException:
            end = len(out)
            for owned, start, before in reversed(visits):  # nothing taken is lost
                owned.buffer.extendleft(
                    e._entry for e in reversed(out[start:end]) if e._entry is not None
                )
                owned.returned, end = before, start
            raise
        return out if error is None else self._stop_at(out, error)

    def _refill(self) -> bool:
        """Apply a read ahead that has arrived, without waiting (:meth:`take` with ``refill``);
        True when that buffered events. The threaded driver's; the asyncio driver collects
        before it takes."""
        return False

    def _take_round(
        self,
        out: list[EventRead[T]],
        visits: list[tuple[OwnedSegment, int, int]],
        max_events: int,
    ) -> ReaderGroupError | None:
        """One turn over the segments for :meth:`take`; the error that ends the take, if any."""
        rotation = self._rotation
        deserialize = self._deserialize
        for _ in range(len(rotation)):
            if len(out) >= max_events:
                break
            key = rotation[0]
            rotation.rotate(-1)
            owned = self.owned.get(key)
            if owned is None:
                continue
            buffer, origin, limit = owned.buffer, owned.origin, owned.max_event_size
            visits.append((owned, len(out), owned.returned))
            if owned.pending is None and not owned.jumped:  # the common case, tightly
                failed = self._take_run(owned, out, max_events)
                if failed is not None:
                    return failed
            while len(out) < max_events:
                if owned.pending is not None and (
                    not buffer or event_offset(buffer[0]) >= owned.pending_at
                ):
                    error, owned.pending = owned.pending, None
                    return error
                if not buffer:
                    break
                entry = buffer[0]
                payload = entry[2]
                try:
                    if limit and len(payload) > limit:
                        raise SerializationError(
                            f"event is {len(payload)} bytes, over the stream's "
                            f"max_event_size of {limit}; not delivered"
                        )
                    value = deserialize(payload)
                except Exception as exc:  # any serializer, built-in or the application's
                    buffer.popleft()
                    owned.returned = event_offset(entry) + 1  # the error is this event's result
                    return self._undeliverable(owned, entry, exc)
                buffer.popleft()
                # the buffer runs on from *returned* unless reading jumped a truncated gap
                owned.returned = event_offset(entry) + 1 if owned.jumped else owned.returned + 1
                out.append(EventRead(value, entry, origin))
            if owned.jumped and not buffer and owned.pending is None:
                owned.jumped = False  # past the gap: contiguous from *returned* again
        return None

    def _take_run(
        self, owned: OwnedSegment, out: list[EventRead[T]], max_events: int
    ) -> ReaderGroupError | None:
        """Move ``owned``'s buffered events into ``out`` (up to ``max_events`` in all) while
        no error is pending and the buffer runs on from *returned*; stop before an event over
        the size limit (the general loop reports it). Returns the error a serializer raised
        (that event is consumed as the error, as in :meth:`take`)."""
        buffer, origin, limit = owned.buffer, owned.origin, owned.max_event_size
        deserialize = self._deserialize
        popleft, append = buffer.popleft, out.append
        first = len(out)
        for _ in range(min(max_events - first, len(buffer))):
            entry = buffer[0]
            payload = entry[2]
            if limit and len(payload) > limit:
                break
            try:
                value = deserialize(payload)
            except Exception as exc:  # any serializer, built-in or the application's
                popleft()
                owned.returned += len(out) - first + 1  # the error is this event's result
                return self._undeliverable(owned, entry, exc)
            popleft()
            append(EventRead(value, entry, origin))
        owned.returned += len(out) - first
        return None

    def _stop_at(self, out: list[EventRead[T]], error: ReaderGroupError) -> list[EventRead[T]]:
        """End a take at ``error``: raise it now, or after the events already taken."""
        if not out:
            raise error
        self.errors.append(error)
        return out

    @property
    def reading_ahead(self) -> bool:
        """Whether reads ahead are outstanding (a fetch then waits on them, not on the logs)."""
        return bool(self._ahead)

    # -- reads -------------------------------------------------------------------------------
    def plan_fetch(
        self, block: float, logs: Mapping[str, str], hold: float = 0.0, switches: int = 0
    ) -> Plan[FetchOutcome]:
        """Fetch more: wait up to ``block`` s for the read ahead if one is outstanding; else (or
        if it found nothing) one ``XREAD BLOCK`` over owned segments with room plus the state
        logs ``logs`` (log key -> the entry id to read after), so news there wakes it too.

        ``hold`` (s, longer than ``block``): how long that ``XREAD`` may block on the server;
        it then outlives this call when nothing comes within ``block`` (see :meth:`_plan_read`).
        ``switches``: the connection's primary switches now (see :meth:`_note_primary_switch`)."""
        self._note_primary_switch(switches)
        if self._ahead:
            began = self._clock.monotonic()
            yield Ready(self._ahead[0].read, block, wait=True)
            if (yield from self.plan_collect(0.0)) or self._ahead:
                return NO_NEWS
            block = max(0.0, block - (self._clock.monotonic() - began))
        try:
            if any(owned.unchecked for owned in self.owned.values()):
                yield from self._plan_check_positions()
            if self._clock.monotonic() >= self._idle_due:
                yield from self.plan_check_idle()  # (and the logs due for another look)
        except RedisUnavailableError as exc:
            self._outage.lost(exc)
            yield Pause(min(block, 0.5))
            return NO_NEWS
        positions, by_key = self._fetch_positions(logs)
        asked = {key: owned.fetch for key, owned in by_key.items()}
        limit = self._config.read_batch
        try:
            reply = yield from self._plan_read(positions, block, hold, limit)
        except RedisUnavailableError as exc:
            self._outage.lost(exc)
            yield Pause(min(block, 0.5))  # back off; the lease check fences if it lasts
            return NO_NEWS
        except WrongKeyTypeError as exc:
            bad: set[str] = set()
            for key in exc.keys:  # isolate the fault: the other keys are read next time
                target = by_key.get(key)
                if target is not None:
                    logger.warning("%s: key %s is not a stream; reading it stops", target.name, key)
                    target.hold(
                        CorruptSegmentError(target.name, key, "the key is not a stream"),
                        target.fetch,
                        fault=True,
                    )
                else:
                    bad.add(key)
            return FetchOutcome(bad_logs=frozenset(bad))
        if reply is None:
            return WATCHED if logs else NO_NEWS  # the parked XREAD waits on
        self._answered()
        return (yield from self._plan_apply(reply, by_key, asked, limit))

    def _fetch_positions(
        self, logs: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, OwnedSegment]]:
        """What a fetch's ``XREAD`` reads: key -> the entry id to read after (owned segments
        with room, then the state logs ``logs``), and data key -> its segment."""
        positions: dict[str, str] = {}
        by_key: dict[str, OwnedSegment] = {}
        for owned in self.owned.values():
            if owned.fetched_all:
                continue
            if len(owned.buffer) < self._config.max_buffered_events:
                positions[owned.data_key] = owned.read_id()
                by_key[owned.data_key] = owned
        positions.update(logs)
        return positions, by_key

    def parked_wait(self, logs: Mapping[str, str], switches: int = 0) -> ReadHandle | None:
        """The parked read a fetch over the state logs ``logs`` would do nothing but wait on
        now, if any: no read ahead outstanding, no primary switch, no position to check, no
        idle look due, and the parked ``XREAD`` (not expired, no reply yet) reads exactly what
        the fetch would. A driver may wait on it directly (an idle reader's read call, see
        :meth:`~readergroup.aio.session.AsyncGroupSession.serve`); a reply it brings is
        applied by a fetch (:meth:`plan_fetch` takes it at once). ``None``: make the fetch."""
        parked = self._parked
        if parked is None or self._ahead or switches != self._switches:
            return None
        now = self._clock.monotonic()
        if now >= self._idle_due or now > self._parked_until:
            return None
        if any(owned.unchecked for owned in self.owned.values()):
            return None
        positions, _ = self._fetch_positions(logs)
        return parked if parked.positions == positions else None

    def parked_left(self) -> float:
        """Seconds a wait on the parked read (see :meth:`parked_wait`) may last: until its
        reply is overdue (its server-side block and :data:`PARK_GRACE`; the reply, empty or
        not, normally ends the wait at the block's end), or the next idle look is due,
        whichever is first."""
        return max(0.0, min(self._idle_due, self._parked_until) - self._clock.monotonic())

    def _answered(self) -> None:
        """Redis answered a read: if that ends an outage, a failover may be why, so every
        segment's log is looked at on the next fetch."""
        if self._outage.back():
            self._look_at_every_log()

    def _note_primary_switch(self, switches: int) -> None:
        """If the connection learned of a primary switch since the last fetch (one that broke
        no connection of this reader: idle connections closed, a cluster slot redirected),
        give up the reads ahead and look at every segment's log in this fetch: the new
        primary's may end below a reader's position, and events going there would not reach
        the reader before its log did."""
        if switches != self._switches:
            self._switches = switches
            logger.info(
                "reader %r: its client learned of a primary switch; checking every owned "
                "segment's log",
                self._outage.reader_id,
            )
            self._drop_ahead()
            self._look_at_every_log()

    def _look_at_every_log(self) -> None:
        """Have the next :meth:`plan_check_idle` (due now) look at every owned segment's log."""
        self._idle_due, self._check_all = 0.0, True

    def _plan_apply(
        self,
        reply: dict[str, Any],
        by_key: dict[str, OwnedSegment],
        asked: dict[str, int],
        limit: int,
    ) -> Plan[FetchOutcome]:
        """Buffer a fetch's reply (``asked``: each segment's fetch position when it was sent)
        and say which state logs had news."""
        news: dict[str, Sequence[Any]] = {}
        for owned in by_key.values():
            owned.behind = False
        for key, entries in reply.items():
            target = by_key.get(key)
            if target is None:
                news[key] = entries
                continue
            if self.owned.get(target.key) is not target or target.fetch != asked[key]:
                continue  # taken out (released, fenced) while the read waited: stale
            yield from self._plan_buffer_reply(target, entries, limit)
        yield from self.plan_read_ahead()
        return FetchOutcome(woken=frozenset(news), news=news, watched=True)

    def _plan_read(
        self, positions: dict[str, str], block: float, hold: float, limit: int
    ) -> Plan[dict[str, Any] | None]:
        """One ``XREAD BLOCK`` of ``positions``: key -> entries, or ``None`` when a parked read
        has nothing yet.

        With ``hold`` longer than ``block`` (and ``block`` at least :data:`PARK_MIN_BLOCK`, off
        cluster) the ``XREAD`` blocks up to ``hold`` on the server and, when nothing comes
        within ``block``, stays *parked*: the next call over the same positions waits on it
        again instead of sending another, so an idle reader sends one ``XREAD`` per ``hold``
        (up to ``heartbeat_interval``) whatever its read timeout, as Kafka's fetch request stays
        in flight across ``poll`` calls. Other positions (a move, a wake-up acted on) give the
        parked read up (its connection is closed)."""
        parked, self._parked = self._parked, None
        if parked is not None and (
            parked.positions != positions or self._clock.monotonic() > self._parked_until
        ):
            parked.cancel()
            parked = None
        if parked is None:
            if self._cluster or block < PARK_MIN_BLOCK or hold <= block:
                reply: dict[str, Any] = yield Read(positions, block, limit)
                return reply
            parked = yield Start(positions, limit, hold)
            self._parked_until = self._clock.monotonic() + hold + PARK_GRACE
        try:
            answer: dict[str, Any] | None = yield Receive(parked, block, wait=True)
        except RedisUnavailableError:
            raise
        except ReaderGroupError:  # e.g. a key of the wrong type: a plain read names it
            fallback: dict[str, Any] = yield Read(positions, 0.0, limit, wait=False)
            return fallback
        except BaseException:  # the call was abandoned (a cancelled task): the read waits on,
            self._parked = parked  # for the next call (a read its driver gave up has no
            raise  # positions left, so that call sends another)
        if answer is None:
            self._parked = parked
        return answer

    def _plan_check_positions(self) -> Plan[None]:
        """Segments acquired since the last fetch, at positions their logs may no longer hold:
        a position committed past the tail, or read under an epoch that ends below it in the
        log's history (the offsets below it were lost in a failover; a writer may have put
        new events there since). Report them lost and read from where the log diverged: none
        of those new events is skipped, and the group's position moves back there."""
        unchecked = [owned for owned in self.owned.values() if owned.unchecked]
        logs = yield from self.plan_histories(unchecked)
        for owned in unchecked:
            owned.unchecked = False
            log = logs.get(owned.key)
            if log is None:
                continue
            tail, history = log
            position = owned.fetch
            if owned.epoch >= 0:
                at = committed_divergence(owned.epoch, history, tail, position)
            else:
                at = tail if tail < position else None
            if at is not None:
                logger.warning(
                    "%s: the log no longer holds the committed position %d (read under "
                    "epoch %d; the log has %d events): diverged at %d in a failover; "
                    "reading from there",
                    owned.name,
                    position,
                    owned.epoch,
                    tail,
                    at,
                )
                owned.hold(
                    DataLostError(
                        f"segment {owned.name}: offsets {at}..{position - 1} were lost in a "
                        f"failover after the group committed position {position} (read "
                        f"under log epoch {owned.epoch}; the segment's log epochs are "
                        f"{_epochs_text(history[1:])}, {tail} events); reading goes on from "
                        f"{at} (new events there are delivered)"
                    ),
                    at,
                )
                owned.fetch = owned.returned = owned.consumed = at
                owned.buffer.clear()
            if owned.fetch > 0 and (at is not None or owned.epoch >= 0):
                owned.epochs[:] = [epoch_at(history, owned.fetch - 1)]
            if at is not None:
                owned.rewind = (at, owned.epochs[0][0] if owned.epochs else -1)
                self.rewound.add(owned.key)

    def epochs_of(
        self,
        positions: Iterable[tuple[SegKey, int]],
        table: Mapping[SegKey, OwnedSegment] | None = None,
    ) -> dict[SegKey, int]:
        """The epoch each owned segment's position was read under (of the event before it),
        where known: what a commit of it carries. ``table``: the segments (by default those
        owned now; segments taken out for a release or a leave are given)."""
        owned_now = self.owned if table is None else table
        out: dict[SegKey, int] = {}
        for key, position in positions:
            owned = owned_now.get(key)
            if owned is None or position <= 0:
                continue
            epoch = read_epoch(owned.epochs, position - 1) if owned.epochs else -1
            if epoch < 0 and owned.unchecked and position == owned.fetch:
                epoch = owned.epoch  # acquired there, not looked at yet: as committed
            if epoch >= 0:
                out[key] = epoch
        return out

    def plan_check_idle(self) -> Plan[None]:
        """Look at the logs of segments whose reads brought nothing for a while (a fetch
        position that stood still for ``IDLE_CHECK_SESSIONS`` session timeouts), and of every
        segment after an outage: a failover may have taken a log back below a reader's
        position, and events going there would not reach the reader before the log did."""
        now = self._clock.monotonic()
        self._idle_due = now + self._idle_every / 4
        every, self._check_all = self._check_all, False
        due: list[SegKey] = []
        for key, owned in self.owned.items():
            if owned.fetched_all or owned.unchecked:
                continue
            if owned.recheck_at is not None and now >= owned.recheck_at:
                owned.recheck_at = None
                due.append(key)
            elif every:
                owned.idle_mark, owned.idle_at = owned.fetch, now + self._idle_every
                due.append(key)
            elif owned.fetch != owned.idle_mark:
                owned.idle_mark, owned.idle_at = owned.fetch, now + self._idle_every
            elif now >= owned.idle_at:
                owned.idle_at = now + self._idle_every
                if owned.fetch > 0:
                    due.append(key)
        if due:
            yield from self.plan_verify(due)
        rechecks = [o.recheck_at for o in self.owned.values() if o.recheck_at is not None]
        self._idle_due = min([self._idle_due, *rechecks])

    def plan_verify(self, keys: Iterable[SegKey]) -> Plan[list[SegKey]]:
        """Check that the logs of owned segments ``keys`` still hold what was fetched from
        them (tail and epochs, one command each, pipelined per stream); where one diverged,
        report the events handed out that are gone and read again from where it did (see
        :meth:`_plan_rewind`). Returns the segments that diverged."""
        looked = self._checkable(keys)
        diverged: list[SegKey] = []
        now = self._clock.monotonic()
        logs = yield from self.plan_histories(looked)
        for owned in looked:
            log = logs.get(owned.key)
            if log is None:
                continue
            at = divergence(owned.epochs, owned.fetch, log)
            if at is not None and self._held_back(owned, at, log[0], now):
                continue
            owned.short_since = None
            if at is not None:
                yield from self._plan_rewind(owned, at, log[1])
                diverged.append(owned.key)
        return diverged

    def _held_back(self, owned: OwnedSegment, at: int, tail: int, now: float) -> bool:
        """Whether the divergence of ``owned``'s log at ``at`` waits before it is reported: the
        log is only shorter (nothing past ``at`` yet: a writer's retry usually appends the
        same events there again, which are then neither reported lost nor delivered twice),
        for up to ``shrunk_log_grace``. Looked at again every :data:`SHORT_LOG_RECHECK`."""
        if tail > at:
            return False  # another epoch's events are there now: it diverged
        if owned.short_since is None:
            owned.short_since = now
            logger.warning(
                "%s: the log ends at %d, below the %d events fetched (a failover lost its "
                "tail); waiting up to %.1fs for a writer's retry before reporting the loss "
                "(commits past %d are refused meanwhile)",
                owned.name,
                tail,
                owned.fetch,
                self._config.shrunk_log_grace,
                at,
            )
        if now - owned.short_since >= self._config.shrunk_log_grace:
            return False
        owned.recheck_at = now + SHORT_LOG_RECHECK
        return True

    def plan_histories(
        self, segments: Sequence[OwnedSegment]
    ) -> Plan[dict[SegKey, tuple[int, list[tuple[int, int]]]]]:
        """Each of ``segments``' log tail and epochs (one command each, pipelined per stream;
        a segment that no longer exists is left out). Reads nothing else of the fetcher."""
        by_stream: dict[tuple[str, str], list[OwnedSegment]] = {}
        for owned in segments:
            by_stream.setdefault((owned.scope, owned.stream), []).append(owned)
        out: dict[SegKey, tuple[int, list[tuple[int, int]]]] = {}
        for (scope, stream), group in by_stream.items():
            logs = yield Ask("epoch_histories", (scope, stream, [o.segment for o in group]))
            out.update((o.key, logs[o.segment]) for o in group if o.segment in logs)
        return out

    def looks(self, keys: Iterable[SegKey]) -> list[LogLook]:
        """(Under the gate's lock.) What the logs of owned segments ``keys`` must still hold,
        for :meth:`plan_histories` outside the lock and :meth:`commit_limits` after it."""
        return [LogLook(owned, owned.fetch, tuple(owned.epochs)) for owned in self._checkable(keys)]

    def _checkable(self, keys: Iterable[SegKey]) -> list[OwnedSegment]:
        """The owned segments of ``keys`` whose logs can be checked: fetched from, and
        looked at since they were acquired."""
        out: list[OwnedSegment] = []
        for key in keys:
            owned = self.owned.get(key)
            if owned is not None and owned.fetch > 0 and not owned.unchecked:
                out.append(owned)
        return out

    def commit_limits(
        self,
        looks: Sequence[LogLook],
        logs: Mapping[SegKey, tuple[int, list[tuple[int, int]]]],
    ) -> dict[SegKey, int]:
        """(Under the gate's lock.) Where each looked-at log diverged below what was fetched
        (no commit may pass it); each such segment still owned is looked at again by the
        reading thread's next fetch, which reports the loss and reads from there (or holds
        it back while the log is only shorter, see :meth:`_held_back`)."""
        limits: dict[SegKey, int] = {}
        for look in looks:
            log = logs.get(look.owned.key)
            at = None if log is None else divergence(look.epochs, look.fetch, log)
            if at is None:
                continue
            limits[look.owned.key] = at
            if self.owned.get(look.owned.key) is look.owned:
                look.owned.recheck_at = 0.0
                self._idle_due = 0.0
        return limits

    def plan_read_ahead(self) -> Plan[None]:
        """Send the next read of the segments that are behind (their last read filled a batch),
        unless reads ahead are outstanding or the reader holds ``prefetch_events`` /
        ``prefetch_bytes``."""
        if not self._reads_ahead or self._ahead:
            return None
        config = self._config
        room = self._room()
        count = min(config.read_batch, room)
        targets: dict[str, tuple[OwnedSegment, int]] = {}
        for owned in self.owned.values():
            if room < count or count < 1:
                break
            if (
                not owned.behind
                or owned.fetched_all
                or len(owned.buffer) + count > config.max_buffered_events
            ):
                continue
            room -= count
            targets[owned.data_key] = (owned, owned.fetch)
        if targets:
            yield from self._plan_send_ahead(targets, count)
        return None

    def _room(self, unparsed: int = 0) -> int:
        """How many more events reading ahead may bring: ``prefetch_events`` (and
        ``prefetch_bytes``) less those buffered, asked for by reads outstanding, or in a reply
        not parsed yet (``unparsed``)."""
        config = self._config
        held = sum(len(o.buffer) for o in self.owned.values()) + unparsed
        held += sum(ahead.count * len(ahead.targets) for ahead in self._ahead)
        return min(config.prefetch_events, config.prefetch_bytes // self._event_bytes) - held

    def _plan_send_ahead(
        self, targets: dict[str, tuple[OwnedSegment, int]], count: int
    ) -> Plan[bool]:
        positions = {
            key: owned.read_id() if owned.fetch == position else f"{position}-{LAST_EPOCH}"
            for key, (owned, position) in targets.items()
        }
        try:
            read = yield Start(positions, count, segments=True)
        except RedisUnavailableError as exc:
            self._outage.lost(exc)
            return False
        except ReaderGroupError as exc:
            logger.warning("could not read ahead; reading on demand instead", exc_info=exc)
            return False
        self._ahead.append(_Ahead(read, targets, count))
        return True

    def plan_collect(self, timeout: float) -> Plan[bool]:
        """Apply the oldest read ahead's reply if it arrives within ``timeout`` s (and keep
        reading ahead); True when that buffered events."""
        if not self._ahead or not (yield Ready(self._ahead[0].read, timeout)):
            return False
        head = self._ahead.popleft()
        targets, count = head.targets, head.count
        if not self._ahead:  # the next read goes out before this reply is parsed
            live = {k for k, (owned, position) in targets.items() if owned.fetch == position}
            yield from self._plan_chain(head, live, count * len(targets))
        try:
            reply = yield Receive(head.read, 0.0)
        except RedisUnavailableError as exc:
            self._drop_ahead()  # the reads after it were sent from where it would have ended
            self._outage.lost(exc)
            return False
        except ReaderGroupError as exc:  # e.g. a key of the wrong type: fetch() isolates it
            self._drop_ahead()
            logger.warning("reading ahead failed; reading on demand instead", exc_info=exc)
            return False
        if reply is None:  # (ready, yet no reply: give it up)
            head.read.cancel()
            return False
        self._answered()
        buffered = False
        full: set[str] = set()
        for key, (owned, position) in targets.items():
            if self.owned.get(owned.key) is not owned or owned.fetch != position:
                continue  # released, fenced or re-acquired since, or a chained read after a
                # short reply: stale
            owned.behind = False
            entries = reply.get(key)
            if entries:
                buffered = (yield from self._plan_buffer_reply(owned, entries, count)) or buffered
                if owned.behind:
                    full.add(key)
        # more is waiting: keep up to MAX_READS_AHEAD reads outstanding, each from where the
        # one before ends (for the segments whose reads so far came back full)
        while full and self._ahead and len(self._ahead) < MAX_READS_AHEAD:
            if not (yield from self._plan_chain(self._ahead[-1], full)):
                break
        yield from self.plan_read_ahead()
        return buffered

    def _drop_ahead(self) -> None:
        while self._ahead:
            self._ahead.popleft().read.cancel()

    def _plan_chain(self, last: _Ahead, keys: set[str], unparsed: int = 0) -> Plan[bool]:
        """Send the read of the segments ``keys`` that follows ``last`` (outstanding, or its
        reply not parsed yet: ``unparsed`` events), from where ``last`` ends if its reply is
        full; if a reply proves short, the reads chained after it are dropped as stale when they
        arrive (and chain nothing). The read also asks for news of the reader's other segments
        that no read outstanding covers (while reads ahead are outstanding nothing is read on
        demand). Within the bounds of :meth:`plan_read_ahead`; per segment, buffered and asked-for
        events stay within ``max_buffered_events``. True when a read was sent."""
        config, count = self._config, last.count
        room = self._room(unparsed)
        chained: dict[str, tuple[OwnedSegment, int]] = {}
        for key, (owned, position) in last.targets.items():
            if room < count:
                break
            asked = sum(ahead.count for ahead in self._ahead if key in ahead.targets)
            if (
                key in keys
                and self.owned.get(owned.key) is owned
                and not owned.fetched_all
                and not (0 <= owned.final_tail <= position + count)
                and len(owned.buffer) + asked + (count if unparsed else 0) + count
                <= config.max_buffered_events
            ):
                room -= count
                chained[key] = (owned, position + count)
        if chained:  # the other segments, which no read ahead covers, are looked at too
            covered = set(last.targets).union(*(ahead.targets for ahead in self._ahead))
            for owned in self.owned.values():
                if room < count:
                    break
                if (
                    owned.data_key not in covered
                    and not owned.fetched_all
                    and len(owned.buffer) + count <= config.max_buffered_events
                ):
                    room -= count
                    chained[owned.data_key] = (owned, owned.fetch)
        return bool(chained) and (yield from self._plan_send_ahead(chained, count))

    def _plan_buffer_reply(self, owned: OwnedSegment, entries: list[Any], limit: int) -> Plan[bool]:
        """Buffer one segment's part of a reply; True when it added events."""
        before = len(owned.buffer)
        try:
            yield from self._plan_buffer(owned, entries)
        except RedisUnavailableError as exc:  # nothing buffered: fetched again later
            self._outage.lost(exc)
            return False
        owned.behind = len(entries) >= limit
        return len(owned.buffer) > before

    def _plan_buffer(self, owned: OwnedSegment, entries: list[Any]) -> Plan[None]:
        """Append fetched entries. Offsets are normally consecutive from the fetch position, so
        only the ends are checked; otherwise the entries are checked one by one: a gap at the
        start below the segment's head is truncation (reported once, reading goes on from the
        first event that exists), any other gap is corrupt data (the events before it are
        delivered, then the segment stops with a :class:`CorruptSegmentError`)."""
        if not entries:
            return
        entries = stored_events(entries)
        known = owned.epochs[-1][0] if owned.epochs else -1
        if (id_epoch(entries[0][0]) != known or id_epoch(entries[-1][0]) != known) and not (
            yield from self._plan_epochs_hold(owned, entries)
        ):
            return  # the log diverged: read again from where it did
        first, last = event_offset(entries[0]), event_offset(entries[-1])
        if first != owned.fetch or last - first + 1 != len(entries):
            # overlap: drop the old part
            entries = [e for e in entries if event_offset(e) >= owned.fetch]
            if not entries:
                return
            first = event_offset(entries[0])
            if first > owned.fetch and not (yield from self._plan_skip_truncated(owned, first)):
                return
            run = 1
            while run < len(entries) and event_offset(entries[run]) == first + run:
                run += 1
            if run < len(entries) and (
                yield from self._plan_lost(owned, first + run, event_offset(entries[run]))
            ):
                entries = entries[:run]  # the next fetch starts at the gap: reported there
            elif run < len(entries):
                after, gap_at = first + run - 1, event_offset(entries[run])
                logger.warning(
                    "%s: the entry after offset %d has offset %d; reading it stops there",
                    owned.name,
                    after,
                    gap_at,
                )
                owned.hold(
                    CorruptSegmentError(
                        owned.name,
                        owned.data_key,
                        f"the entry after offset {after} has offset {gap_at} (entries "
                        "out of sequence, not written by this library)",
                    ),
                    after + 1,
                    fault=True,
                )
                entries = entries[:run]
            last = first + len(entries) - 1
        owned.recent.append(entries)
        if owned.bounded and last >= owned.final_tail:
            entries = entries[: max(0, owned.final_tail - first)]  # (contiguous from *first*)
        if entries:
            self._event_bytes = max(1, (len(entries[0][2]) + len(entries[-1][2])) // 2)
        owned.buffer.extend(entries)
        owned.fetch = last + 1

    def _plan_epochs_hold(self, owned: OwnedSegment, entries: list[tuple[Any, ...]]) -> Plan[bool]:
        """Entries of an epoch not read before came: True if the log still holds every offset
        fetched from this segment (the new epochs are recorded); else rewind to where it
        diverged and return False."""
        fetch, epochs = owned.fetch, owned.epochs
        changes: list[tuple[int, int]] = []
        for entry in entries:
            epoch, offset = id_epoch(entry[0]), event_offset(entry)
            current = changes[-1][0] if changes else epochs[-1][0] if epochs else -1
            if epoch != current and offset >= fetch - 1:
                changes.append((epoch, max(offset, fetch)))
        if not epochs:  # the first fetch: nothing read before to check
            epochs.extend(changes)
            return True
        history = yield Ask("epochs", (owned.scope, owned.stream, owned.segment))
        at = diverged_at(epochs, history, fetch)
        if at is None:
            epochs.extend(changes)
            return True
        yield from self._plan_rewind(owned, at, history)
        return False

    def _plan_same_until(self, owned: OwnedSegment, at: int) -> Plan[int]:
        """The first offset from ``at`` on whose event, handed out before the divergence at
        ``at``, is not in the log unchanged (key, payload and writer time): a writer's retry
        appends the same events again under the new epoch. At most *returned*."""
        returned = owned.returned
        if returned <= at:
            return at
        before: dict[int, tuple[Any, ...]] = {}
        for entries in owned.recent:
            for entry in entries:
                offset = event_offset(entry)
                if at <= offset < returned:
                    before[offset] = entry[1:4]  # routing key, payload, writer ms
        if at not in before:
            return at
        now = yield Ask(
            "read_raw", (owned.scope, owned.stream, owned.segment, at, returned, returned - at)
        )
        offset = at
        for entry in stored_events(now):
            if event_offset(entry) != offset or before.get(offset) != entry[1:4]:
                break
            offset += 1
        return offset

    def _plan_rewind(
        self, owned: OwnedSegment, diverged: int, history: list[tuple[int, int]]
    ) -> Plan[None]:
        """The log no longer has the offsets from ``diverged`` that this reader fetched
        (another epoch's entries are there now): forget them, report those already handed out
        that are not there unchanged as lost, and read on from the first of them."""
        read = _epochs_text(owned.epochs)
        at = yield from self._plan_same_until(owned, diverged)
        if owned.returned > at:
            logger.warning(
                "%s: offsets %d..%d were handed out and are gone (the log diverged in a "
                "failover); the events now there are read",
                owned.name,
                at,
                owned.returned - 1,
            )
            lost = DataLostError(
                f"segment {owned.name}: offsets {at}..{owned.returned - 1} were lost in a "
                f"failover after they were read (read under log epochs {read}; the segment's "
                f"log epochs are {_epochs_text(history[1:])}); the events now at those "
                "offsets are delivered next"
            )
            if owned.pending is None:
                owned.hold(lost, at)
            else:
                self.errors.append(lost)
        else:
            logger.warning(
                "%s: the log diverged at offset %d in a failover; every event handed out is "
                "still there unchanged (a writer's retry appended it again); reading on from %d",
                owned.name,
                diverged,
                at,
            )
        while owned.buffer and event_offset(owned.buffer[-1]) >= at:
            owned.buffer.pop()
        owned.fetch = at
        owned.returned = min(owned.returned, at)
        owned.consumed = min(owned.consumed, at)
        kept = [(epoch, first) for epoch, first in owned.epochs if first < diverged]
        ends = [start for _, start in history[1:]] + [at]
        kept += [  # the log's epochs over [diverged, at): its events there were read unchanged
            (epoch, max(start, diverged))
            for (epoch, start), end in zip(history, ends, strict=True)
            if diverged < at and start < at and end > diverged
        ]
        owned.epochs[:] = kept
        owned.recent.clear()
        owned.short_since = owned.recheck_at = None
        if owned.committed > owned.fetch:  # the group's position too: a crash resumes here
            owned.rewind = (owned.fetch, read_epoch(owned.epochs, owned.fetch - 1))
            self.rewound.add(owned.key)

    def _plan_lost(self, owned: OwnedSegment, begin: int, end: int) -> Plan[bool]:
        lost: bool = yield Ask(
            "lost_in_failover", (owned.scope, owned.stream, owned.segment, begin, end)
        )
        return lost

    def _plan_skip_truncated(self, owned: OwnedSegment, first: int) -> Plan[bool]:
        """Entries resume at ``first`` after ``owned.fetch``: if truncation removed the events
        between (the head moved past them), report it once when reading reaches them and go
        on; otherwise hold a corrupt-data error there. True when reading goes on."""
        states = yield Ask("segment_states", (owned.scope, owned.stream, [owned.segment]))
        head: int = states[owned.segment].head
        if head > owned.fetch:
            owned.hold(TruncatedDataError(owned.name, owned.fetch, head), owned.fetch)
            owned.fetch = first
            owned.jumped = True
            return True
        if (yield from self._plan_lost(owned, owned.fetch, first)):
            logger.warning(
                "%s: offsets %d..%d were lost in a failover; reading goes on after them",
                owned.name,
                owned.fetch,
                first - 1,
            )
            lost = DataLostError(
                f"segment {owned.name}: offsets {owned.fetch}..{first - 1} were lost in "
                "a failover (acknowledged, then a replica without them took over); reading "
                "goes on after them"
            )
            owned.hold(lost, owned.fetch)
            owned.fetch = first
            owned.jumped = True
            return True
        logger.warning(
            "%s: offsets %d..%d are missing below the head %d; reading it stops there",
            owned.name,
            owned.fetch,
            first - 1,
            head,
        )
        owned.hold(
            CorruptSegmentError(
                owned.name,
                owned.data_key,
                f"offsets {owned.fetch}..{first - 1} are missing below the head {head} "
                f"(the next entry has offset {first})",
            ),
            owned.fetch,
            fault=True,
        )
        return False


def _epochs_text(epochs: Sequence[tuple[int, int]]) -> str:
    """``(epoch, first offset)`` pairs for a message: "3 from offset 0, 5 from offset 12"."""
    return ", ".join(f"{epoch} from offset {first}" for epoch, first in epochs) or "none"


def advance(plan: Plan[R], sent: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Resume ``plan`` with an effect's outcome ``sent`` (or its ``error`` thrown in): ``(True,
    what it returned)`` once it is done, else ``(False, the next effect)``. Both drivers step
    plans with this."""
    try:
        effect = plan.send(sent) if error is None else plan.throw(error)
    except StopIteration as stop:
        return True, stop.value
    return False, effect
