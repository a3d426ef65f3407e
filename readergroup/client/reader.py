"""``EventStreamReader``: one member of a reader group, reading the segments it owns.

A reader runs two threads:

* the **application's**, inside ``read_next_event``/``read_batch``: it serves buffered events,
  fetches more with one ``XREAD BLOCK`` over every owned segment *and* the group's state log
  and the streams' metadata logs (so a rebalance or a scale wakes it at once, with no polling),
  releases and acquires segments (fair share), completes sealed segments read to their end,
  and commits;
* a **heartbeat** thread: renews the heartbeat, removes members whose session expired (judged
  on Redis server time), and gives the segments back when the application stopped calling
  ``read_next_event`` for ``max_poll_interval``.

Positions: for each owned segment the reader tracks *returned* (after the last event handed
out) and *consumed* (after the last event the application moved past: every event returned
before the current read call, commit-on-get). Auto-commit and releases use *consumed*; manual
mode commits *returned* on ``commit()`` and releases at the committed position. Either way an
event is never skipped: a crash re-delivers from the last commit (at-least-once).

Fencing: a reader that has not renewed its heartbeat within ``session_timeout`` (on its own
monotonic clock, measured from when the last successful heartbeat was *sent*) stops handing out
events and raises :class:`ReaderNotInGroupError`; by then other members may have taken its
segments, and its commits are refused by the state's conditional updates.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from readergroup.admin.group_member import GroupMember
from readergroup.client.serializers import Serializer
from readergroup.core.errors import (
    CoordinationError,
    CorruptSegmentError,
    ReaderGroupError,
    ReaderGroupNotFoundError,
    RedisUnavailableError,
    SerializationError,
    TruncatedDataError,
    WrongKeyTypeError,
)
from readergroup.core.group_config import AUTO, ReaderConfig, ReaderGroupConfig
from readergroup.core.group_state import STATE_TYPES as GROUP_STATE_TYPES
from readergroup.core.group_state import UPDATE_TYPES as GROUP_UPDATE_TYPES
from readergroup.core.group_state import (
    Assignment,
    GroupState,
    ReaderAlreadyOnlineError,
    ReaderNotInGroupError,
    SegKey,
    SegmentNotOwnedError,
)
from readergroup.core.names import split_scoped_stream, stream_sync_name
from readergroup.core.routing import segment_name
from readergroup.core.stream_metadata import STATE_TYPES, UPDATE_TYPES, StreamState
from readergroup.storage.redis_io import RedisConnection, SegmentEvent, translate_errors
from statesync import BadEntryError, StateSynchronizer, SynchronizerNotFoundError
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK

T = TypeVar("T")

logger = logging.getLogger(__name__)

REJOIN_MAX_DELAY = 2.0
"""Cap (seconds) of the jittered backoff between attempts to rejoin after being fenced."""


class EventRead(Generic[T]):
    """What ``read_next_event`` returns. ``event`` is ``None`` when nothing came in time.

    Attributes: ``event``, ``routing_key``, ``stream`` (``"scope/stream"``), ``segment``,
    ``offset``, ``position`` (``(stream, segment, offset + 1)``: where the reader stands in that
    segment after this event), ``timestamp`` (the writer's clock at ``write_event``, ms),
    ``server_time_ms`` (when Redis appended it), ``fencing_token`` (grows with every change of
    the segment's owner: pass it to your sink to refuse a reader that lost the segment),
    ``is_checkpoint`` and ``checkpoint_name``. Details are decoded from the stored event on
    first access, so reading many events stays cheap.
    """

    __slots__ = ("_raw", "checkpoint_name", "event", "fencing_token", "is_checkpoint", "stream")

    def __init__(
        self,
        event: T | None,
        raw: SegmentEvent | None = None,
        stream: str | None = None,
        fencing_token: int | None = None,
        *,
        is_checkpoint: bool = False,
        checkpoint_name: str | None = None,
    ) -> None:
        self.event = event
        self._raw = raw
        self.stream = stream
        self.fencing_token = fencing_token
        self.is_checkpoint = is_checkpoint
        self.checkpoint_name = checkpoint_name

    @property
    def routing_key(self) -> str | None:
        return None if self._raw is None else self._raw.routing_key

    @property
    def segment(self) -> int | None:
        return None if self._raw is None else self._raw.segment

    @property
    def offset(self) -> int | None:
        return None if self._raw is None else self._raw.offset

    @property
    def timestamp(self) -> int | None:
        return None if self._raw is None else self._raw.writer_ms

    @property
    def server_time_ms(self) -> int | None:
        return None if self._raw is None else self._raw.server_ms

    @property
    def position(self) -> tuple[str, int, int] | None:
        if self._raw is None or self.stream is None:
            return None
        return self.stream, self._raw.segment, self._raw.offset + 1

    def __repr__(self) -> str:
        if self.is_checkpoint:
            return f"EventRead(checkpoint={self.checkpoint_name!r})"
        if self._raw is None:
            return "EventRead(event=None)"
        return (
            f"EventRead(event={self.event!r}, routing_key={self.routing_key!r}, "
            f"stream={self.stream!r}, segment={self.segment}, offset={self.offset})"
        )


_NOTHING: EventRead[Any] = EventRead(None)


class RebalanceListener(Protocol):
    """Called from the reading thread when this reader's segments change.

    A listener may also define ``on_segments_lost(reader_id, segments)``: called instead of
    ``on_segments_released`` when the reader was fenced (session expired, e.g. during a Redis
    outage) and the segments may already be read by others; nothing can be committed for them.
    """

    def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None: ...

    def on_segments_released(self, reader_id: str, segments: Sequence[SegKey]) -> None: ...


@dataclass
class _Owned:
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
    buffer: deque[SegmentEvent] = field(default_factory=deque)
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

    @property
    def name(self) -> str:
        return segment_name(self.scope, self.stream, self.segment)

    def hold(self, error: ReaderGroupError, at: int, *, fault: bool = False) -> None:
        """Raise ``error`` when reading reaches offset ``at`` (events before it come first)."""
        if self.pending is None:
            self.pending, self.pending_at = error, at
        self.faulted = self.faulted or fault


class EventStreamReader(Generic[T]):
    """Reads events of type ``T`` as member ``reader_id`` of a reader group.

    Create with :meth:`EventStreamClientFactory.create_reader`. Use as a context manager or an
    iterator (``for event in reader``). Only one thread may read; ``close`` may come from any.
    """

    def __init__(
        self,
        connection: RedisConnection,
        member: GroupMember,
        group_config: ReaderGroupConfig,
        serializer: Serializer[T],
        config: ReaderConfig | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._connection = connection
        self._member = member
        self._group = group_config
        self._serializer = serializer
        self._config = config or ReaderConfig()
        self._clock = clock or SYSTEM_CLOCK
        self._rng = rng or random.Random()  # noqa: S311 (backoff jitter, not secrets)
        self._outage: RedisUnavailableError | None = None
        """Set while Redis cannot be reached (reads return nothing; logged once)."""
        self.reader_id = member.reader_id
        self._owned: dict[SegKey, _Owned] = {}
        self._listeners: list[RebalanceListener] = []
        self._streams: dict[str, StateSynchronizer[StreamState]] = {}
        self._fenced: str | None = None
        self._gone = False
        """The group was deleted under this reader: every read raises ReaderGroupNotFoundError."""
        self._closed = False
        self._stop = threading.Event()
        self._group_dirty = True
        self._streams_dirty = True
        self._round_robin: deque[SegKey] = deque()
        self._session = group_config.session_timeout
        now = self._clock.monotonic()
        self._last_refresh = now
        self._last_commit = now
        self._last_poll = now
        self._last_beat_ok = now
        self._group_log = connection.log_backend.keys(member.sync.name).log
        self._seen_revision = -1
        self._group_generation = -1
        self._checkpoint_due: str | None = None
        """A checkpoint to hand to the application before any further event."""
        self._checkpoint_ack: tuple[str, dict[SegKey, int]] | None = None
        """A checkpoint handed out, to acknowledge when the application next reads."""
        self._handled_checkpoints: set[str] = set()
        self._end_of_data = False
        self._errors: deque[ReaderGroupError] = deque()
        """Errors to raise on the next read call, after the events returned before them."""
        self._stuck_at: dict[str, int] = {}
        """State log -> revision of a bad entry its synchronizer stopped at: the XREAD waits
        for entries after it (never transferring the bad one again and again)."""
        self._bad_logs: set[str] = set()
        """State logs whose key has the wrong type: left out of the XREAD (their refresh
        reports the error)."""
        """Group-log revision the reading thread last acted on (the heartbeat thread may have
        fetched further; the reading thread must still be woken for those entries)."""
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name=f"rg-heartbeat-{self.reader_id}", daemon=True
        )
        self._heartbeat_thread.start()

    # -- public API -------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._member.generation

    def add_rebalance_listener(self, listener: RebalanceListener) -> None:
        self._listeners.append(listener)

    def owned_segments(self) -> dict[SegKey, int]:
        """Owned segment -> fencing token."""
        return {key: owned.token for key, owned in self._owned.items()}

    def fencing_token(self, stream: str, segment: int) -> int | None:
        owned = self._owned.get((stream, segment))
        return None if owned is None else owned.token

    def read_next_event(self, timeout: float | None = None) -> EventRead[T]:
        """The next event of any owned segment, or ``EventRead(None)`` after ``timeout`` s
        (default: ``group_refresh_time``). Raises ReaderNotInGroupError once fenced."""
        batch = self._read(1, self._group.group_refresh_time if timeout is None else timeout)
        return batch[0] if batch else _NOTHING

    def is_end_of_data(self) -> bool:
        """Whether this reader's bounded group has read every segment to its end cut."""
        return self._end_of_data

    def read_batch(
        self, max_events: int = 1000, timeout: float | None = None
    ) -> list[EventRead[T]]:
        """Up to ``max_events`` events at once (for throughput); empty after ``timeout``."""
        if max_events < 1:
            raise ValueError("max_events must be >= 1")
        return self._read(
            max_events, self._group.group_refresh_time if timeout is None else timeout
        )

    def commit(self, positions: Mapping[SegKey, int] | None = None) -> None:
        """Commit how far the application has processed: by default every returned event;
        or the given ``segment -> position`` (segments no longer owned are refused)."""
        self._check_usable()
        if positions is None:
            chosen = {
                k: (o.token, o.returned) for k, o in self._owned.items() if o.returned > o.committed
            }
        else:
            chosen = {}
            for key, position in positions.items():
                owned = self._owned.get(key)
                if owned is None:
                    raise SegmentNotOwnedError(f"reader {self.reader_id!r} does not own {key}")
                chosen[key] = (owned.token, position)
        self._commit(chosen)

    def run(self, handler: Any, *, max_workers: int = 4, **options: Any) -> Any:
        """Handle events with ``handler`` in ``max_workers`` threads, each segment strictly in
        order, committing after the handler returns; stops on SIGINT/SIGTERM or ``stop``.
        See :func:`readergroup.client.runner.run`."""
        from readergroup.client.runner import run

        return run(self, handler, max_workers=max_workers, **options)

    def close(self) -> None:
        """Graceful leave: acknowledge a checkpoint handed out (at the positions it was handed
        out at, as the next read would); in auto mode commit everything returned and give
        segments back there; in manual mode give them back at the last committed positions.
        Then stop."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._heartbeat_thread.join(10)
        if self._fenced is None:
            for owned in self._owned.values():
                owned.consumed = owned.returned
            try:
                with translate_errors("leave"):
                    self._acknowledge_checkpoint()
                    self._absorb_reset()
                    if self._group.commit_mode == AUTO:  # manual mode commits only on commit()
                        self._commit(self._auto_positions())
                    self._member.leave(
                        {k: self._release_position(o) for k, o in self._owned.items()}
                    )
            except ReaderGroupError:
                pass  # the session will expire and others take over at committed positions
        self._owned.clear()

    def __enter__(self) -> EventStreamReader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[EventRead[T]]:
        """Yield events until the reader is closed (timeouts are skipped). A fenced reader
        (its session expired, e.g. during a Redis outage) rejoins by itself (:meth:`rejoin`)."""
        while not self._closed:
            try:
                event = self.read_next_event()
            except ReaderNotInGroupError:
                if self._closed:
                    return
                self.rejoin()
                continue
            if event.event is not None or event.is_checkpoint:
                yield event

    def rejoin(self, stop: threading.Event | None = None) -> int:
        """Join the group again after being fenced, as a new generation under the same id;
        return the generation (``-1`` if ``stop`` was set or the reader closed first).

        Retries with jittered backoff (capped at :data:`REJOIN_MAX_DELAY` s) for as long as
        Redis cannot be reached or the previous session still looks alive; any other error is
        raised. Segments start over from the group's committed positions, so events handed
        out after the last commit come again (at-least-once). Reading thread only."""
        failures = 0
        while not self._closed and not (stop is not None and stop.is_set()):
            if self._fenced is None:
                return self._member.generation
            try:
                return self._rejoin_once()
            except (RedisUnavailableError, ReaderAlreadyOnlineError) as exc:
                failures += 1
                delay = self._rng.uniform(0, min(REJOIN_MAX_DELAY, 0.05 * 2 ** min(failures, 8)))
                logger.warning("reader %r: rejoin failed, retrying: %s", self.reader_id, exc)
                self._clock.sleep(delay)
        return -1

    def _rejoin_once(self) -> int:
        self._stop.set()  # the fenced heartbeat thread must be gone before a new generation
        self._heartbeat_thread.join(self._connection.config.socket_timeout + 1)
        if self._heartbeat_thread.is_alive():
            raise RedisUnavailableError(
                f"reader {self.reader_id!r}: the previous heartbeat is still waiting on Redis"
            )
        with translate_errors("rejoin"):
            generation = self._member.join()
        now = self._clock.monotonic()
        self._fenced = None
        self._outage = None
        self._owned.clear()
        self._round_robin.clear()
        self._checkpoint_due = self._checkpoint_ack = None
        self._group_dirty = self._streams_dirty = True
        self._seen_revision = -1
        self._last_beat_ok = self._last_poll = self._last_refresh = self._last_commit = now
        self._stop = threading.Event()
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name=f"rg-heartbeat-{self.reader_id}", daemon=True
        )
        self._heartbeat_thread.start()
        logger.info("reader %r rejoined its group as generation %d", self.reader_id, generation)
        return generation

    # -- reading ----------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self._closed:
            raise ReaderGroupError("the reader is closed")
        if self._gone:
            raise self._group_gone()
        if self._fenced is not None:
            self._fence(self._fenced)  # the heartbeat thread may have set it: drop segments
            raise ReaderNotInGroupError(self._fenced)
        if self._clock.monotonic() - self._last_beat_ok > self._session:
            self._fence(
                f"reader {self.reader_id!r} could not renew its heartbeat within the session "
                f"timeout ({self._session}s); its segments may be owned by others now"
            )
            raise ReaderNotInGroupError(self._fenced or "")

    def _group_gone(self) -> ReaderGroupNotFoundError:
        group = self._member.sync.name.removeprefix("group:")
        return ReaderGroupNotFoundError(
            f"reader group {group} of reader {self.reader_id!r} was deleted; it reads no more"
        )

    def _group_deleted(self, error: ReaderGroupError) -> bool:
        """Whether ``error`` came from the group's state having been deleted (a deleted stream's
        metadata also reads as a missing synchronizer: the group's own log is checked)."""
        if not isinstance(error.__cause__, SynchronizerNotFoundError):
            return False
        try:
            with translate_errors("read group"):
                self._connection.synchronizer(
                    self._member.sync.name, GROUP_UPDATE_TYPES, GROUP_STATE_TYPES
                ).fetch_updates()
        except ReaderGroupError as exc:
            return isinstance(exc.__cause__, SynchronizerNotFoundError)
        return False

    def _on_group_deleted(self) -> None:
        """Stop for good: fenced, heartbeats stopped, and its heartbeat row removed (a beat may
        have recreated the hash after the deletion)."""
        if not self._gone:
            logger.warning("reader %s: its group was deleted", self.reader_id)
        self._gone = True
        self._fence(str(self._group_gone()))
        self._stop.set()
        try:
            self._member.heartbeats.forget(self.reader_id, self._member.generation)
        except ReaderGroupError as exc:
            logger.warning("reader %s: could not remove its heartbeat: %s", self.reader_id, exc)

    def _fence(self, reason: str) -> None:
        if self._fenced is None:
            self._fenced = reason
        lost = list(self._owned)
        self._owned.clear()
        if lost:
            logger.warning("reader %r fenced, segments lost: %s", self.reader_id, reason)
            self._notify(lost=lost)

    def _read(self, max_events: int, timeout: float) -> list[EventRead[T]]:
        self._check_usable()
        now = self._clock.monotonic()
        self._last_poll = now
        for owned in self._owned.values():  # commit-on-get: what was returned is processed
            owned.consumed = owned.returned
        if self._errors:
            raise self._errors.popleft()
        deadline = now + max(0.0, timeout)
        while True:
            try:
                with translate_errors("read"):
                    self._acknowledge_checkpoint()
                    self._maintain()
            except ReaderNotInGroupError as exc:
                self._fence(str(exc))
                raise
            except RedisUnavailableError as exc:  # buffered events still go out; then back off
                self._redis_lost(exc)
                self._check_usable()  # a call that hung past the session hands out nothing
            except ReaderGroupError as exc:
                if self._group_deleted(exc):
                    self._on_group_deleted()
                    raise self._group_gone() from exc
                if isinstance(exc, CoordinationError):
                    self._note_bad_entry(exc)
                raise
            if self._checkpoint_due is not None:
                return [self._hand_out_checkpoint()]
            events = self._take(max_events)
            if events:
                return events
            if self._end_of_data:
                return []
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return []
            self._fetch(min(remaining, self._group.group_refresh_time))
            self._check_usable()

    def _note_bad_entry(self, exc: CoordinationError) -> None:
        cause = exc.__cause__
        if isinstance(cause, BadEntryError):
            self._stuck_at[self._connection.log_backend.keys(cause.name).log] = cause.revision

    def _log_position(self, log: str, revision: int) -> str:
        return f"{max(revision, self._stuck_at.get(log, 0), 0)}-0"

    def _redis_lost(self, exc: RedisUnavailableError) -> None:
        """Reads return nothing while Redis is unreachable; past the session, fencing."""
        if self._outage is None:
            logger.warning(
                "reader %r: Redis unreachable, reads return nothing until it is back "
                "(fenced after session_timeout=%ss): %s",
                self.reader_id,
                self._session,
                exc,
            )
        self._outage = exc

    def _redis_back(self) -> None:
        if self._outage is not None:
            self._outage = None
            logger.info("reader %r: Redis reachable again", self.reader_id)

    def _take(self, max_events: int) -> list[EventRead[T]]:
        """Up to ``max_events`` buffered events, round-robin over segments.

        An event that cannot become a value (too large, or any exception of the serializer)
        ends the call as a :class:`SerializationError` naming stream, segment and offset; the
        events taken before it are returned first and the error is raised on the next call.
        An event leaves its buffer only once it is in the returned list; if the serializer
        raises something that is not an ``Exception`` (``KeyboardInterrupt``), every event of
        the call goes back to its buffer."""
        out: list[EventRead[T]] = []
        taken: list[tuple[_Owned, SegmentEvent, int]] = []
        rotation = self._round_robin
        deserialize = self._serializer.deserialize
        try:
            for _ in range(len(rotation)):
                if len(out) >= max_events:
                    break
                key = rotation[0]
                rotation.rotate(-1)
                owned = self._owned.get(key)
                if owned is None:
                    continue
                buffer, stream, token, limit = (
                    owned.buffer,
                    key[0],
                    owned.token,
                    owned.max_event_size,
                )
                while len(out) < max_events:
                    if owned.pending is not None and (
                        not buffer or buffer[0].offset >= owned.pending_at
                    ):
                        error, owned.pending = owned.pending, None
                        return self._stop_at(out, error)
                    if not buffer:
                        break
                    raw = buffer[0]
                    payload = raw.payload
                    try:
                        if limit and len(payload) > limit:
                            raise SerializationError(
                                f"event is {len(payload)} bytes, over the stream's "
                                f"max_event_size of {limit}; not delivered"
                            )
                        value = deserialize(payload)
                    except Exception as exc:  # any serializer, built-in or the application's
                        buffer.popleft()
                        owned.returned = raw.offset + 1  # the error is this event's result
                        error = SerializationError(
                            f"{stream} segment {owned.segment} offset {raw.offset}: "
                            f"{type(exc).__name__}: {exc}"
                        )
                        error.__cause__ = exc
                        return self._stop_at(out, error)
                    buffer.popleft()
                    taken.append((owned, raw, owned.returned))
                    owned.returned = raw.offset + 1
                    out.append(EventRead(value, raw, stream, token))
        except BaseException:
            for owned, raw, before in reversed(taken):  # nothing taken is lost
                owned.buffer.appendleft(raw)
                owned.returned = before
            raise
        return out

    def _stop_at(self, out: list[EventRead[T]], error: ReaderGroupError) -> list[EventRead[T]]:
        """End a take at ``error``: raise it now, or after the events already taken."""
        if not out:
            raise error
        self._errors.append(error)
        return out

    def _hand_out_checkpoint(self) -> EventRead[T]:
        name, self._checkpoint_due = self._checkpoint_due, None
        assert name is not None
        self._checkpoint_ack = (name, {k: o.returned for k, o in self._owned.items()})
        return EventRead(None, is_checkpoint=True, checkpoint_name=name)

    def _acknowledge_checkpoint(self) -> None:
        """The application moved past the checkpoint event: report the positions it had."""
        if self._checkpoint_ack is not None:
            name, positions = self._checkpoint_ack
            self._checkpoint_ack = None
            self._member.ack_checkpoint(name, positions)
            self._group_dirty = True

    def _fetch(self, block: float) -> None:
        """One ``XREAD BLOCK`` over owned segments plus the group and stream logs."""
        positions: dict[str, str] = {}
        by_key: dict[str, _Owned] = {}
        for owned in self._owned.values():
            if owned.faulted or (owned.final_tail >= 0 and owned.fetch >= owned.final_tail):
                continue  # read to its end (seal or end cut), or stopped at corrupt data
            if len(owned.buffer) < self._config.max_buffered_events:
                positions[owned.data_key] = f"{owned.fetch}-0"
                by_key[owned.data_key] = owned
        if self._group_log not in self._bad_logs:
            positions[self._group_log] = self._log_position(self._group_log, self._seen_revision)
        stream_logs: dict[str, str] = {}
        for name, sync in self._streams.items():
            log = self._connection.log_backend.keys(sync.name).log
            if log not in self._bad_logs:
                positions[log] = self._log_position(log, sync.revision)
                stream_logs[log] = name
        try:
            reply = self._connection.read_keys(positions, block, self._config.read_batch)
        except RedisUnavailableError as exc:
            self._redis_lost(exc)
            self._clock.sleep(min(block, 0.5))  # back off; the lease check fences if it lasts
            return
        except WrongKeyTypeError as exc:
            for key in exc.keys:  # isolate the fault: the other keys are read next time
                target = by_key.get(key)
                if target is not None:
                    target.hold(
                        CorruptSegmentError(target.name, key, "the key is not a stream"),
                        target.fetch,
                        fault=True,
                    )
                else:  # a state log: its next refresh raises an error naming it
                    self._bad_logs.add(key)
                    self._group_dirty = self._streams_dirty = True
            return
        self._redis_back()
        for key, entries in reply.items():
            target = by_key.get(key)
            if target is not None:
                try:
                    self._buffer(target, entries)
                except RedisUnavailableError as exc:  # nothing buffered: fetched again later
                    self._redis_lost(exc)
            elif key == self._group_log:
                self._group_dirty = True
            elif key in stream_logs:
                self._streams_dirty = True

    def _buffer(self, owned: _Owned, entries: list[Any]) -> None:
        """Append fetched entries. Offsets are normally consecutive from the fetch position, so
        only the ends are checked; otherwise the entries are checked one by one: a gap at the
        start below the segment's head is truncation (reported once, reading goes on from the
        first event that exists), any other gap is corrupt data (the events before it are
        delivered, then the segment stops with a :class:`CorruptSegmentError`)."""
        if not entries:
            return
        segment = owned.segment
        events = [SegmentEvent(segment, entry[0], entry[1]) for entry in entries]
        first, last = events[0].offset, events[-1].offset
        if first != owned.fetch or last - first + 1 != len(events):
            events = [e for e in events if e.offset >= owned.fetch]  # overlap: drop the old part
            if not events:
                return
            if events[0].offset > owned.fetch and not self._skip_truncated(owned, events[0]):
                return
            run = 1
            while run < len(events) and events[run].offset == events[run - 1].offset + 1:
                run += 1
            if run < len(events):
                after, gap_at = events[run - 1].offset, events[run].offset
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
                events = events[:run]
            last = events[-1].offset
        if owned.bounded and last >= owned.final_tail:
            events = [e for e in events if e.offset < owned.final_tail]
        owned.buffer.extend(events)
        owned.fetch = last + 1

    def _skip_truncated(self, owned: _Owned, first: SegmentEvent) -> bool:
        """Entries resume at ``first`` after ``owned.fetch``: if truncation removed the events
        between (the head moved past them), report it once when reading reaches them and go
        on; otherwise hold a corrupt-data error there. True when reading goes on."""
        head = self._connection.segment_states(owned.scope, owned.stream, [owned.segment])[
            owned.segment
        ].head
        if head > owned.fetch:
            owned.hold(TruncatedDataError(owned.name, owned.fetch, head), owned.fetch)
            owned.fetch = first.offset
            return True
        owned.hold(
            CorruptSegmentError(
                owned.name,
                owned.data_key,
                f"offsets {owned.fetch}..{first.offset - 1} are missing below the head {head} "
                f"(the next entry has offset {first.offset})",
            ),
            owned.fetch,
            fault=True,
        )
        return False

    # -- group maintenance (reading thread) -------------------------------------------------
    def _maintain(self) -> None:
        now = self._clock.monotonic()
        refresh_due = now - self._last_refresh >= self._group.group_refresh_time
        if (
            self._group.commit_mode == AUTO
            and now - self._last_commit >= self._group.auto_commit_interval
        ):
            self._absorb_reset()  # never commit positions of a generation the group left
            self._commit(self._auto_positions())
            self._last_commit = now
        if self._group_dirty or refresh_due:
            self._group_dirty = False
            self._last_refresh = now
            self._rebalance()
        if self._streams_dirty or refresh_due:
            self._streams_dirty = False
            self._complete_finished()

    def _auto_positions(self) -> dict[SegKey, tuple[int, int]]:
        return {
            k: (o.token, o.consumed) for k, o in self._owned.items() if o.consumed > o.committed
        }

    def _release_position(self, owned: _Owned) -> int:
        return owned.consumed if self._group.commit_mode == AUTO else owned.committed

    def _commit(self, positions: Mapping[SegKey, tuple[int, int]]) -> None:
        if not positions:
            return
        try:
            self._member.commit(positions)
        except SegmentNotOwnedError:
            self._group_dirty = True  # ownership moved: reconcile on the next maintenance
            raise
        for key, (_, position) in positions.items():
            owned = self._owned.get(key)
            if owned is not None:
                owned.committed = max(owned.committed, position)

    def _rebalance(self) -> None:
        state = self._member.refresh()
        if state.generation != self._group_generation:
            self._reinitialize(state)
            state = self._member.state
        self._take_checkpoints(state)
        release_at = {k: self._release_position(o) for k, o in self._owned.items()}
        acquired, released = self._member.rebalance(release_at)
        state = self._member.state
        self._seen_revision = self._member.sync.revision
        self._end_of_data = state.end_of_data
        self._reconcile(state, released)
        for key, assignment in acquired.items():
            self._adopt(key, assignment)
        if acquired:
            self._notify(acquired=list(acquired))

    def _absorb_reset(self) -> None:
        """Re-initialize now if the group was reset since this reader last looked."""
        state = self._member.refresh()
        if state.generation != self._group_generation and self._group_generation >= 0:
            self._reinitialize(state)

    def _reinitialize(self, state: GroupState) -> None:
        """The group was reset (or this is the first look): start over from its state."""
        first = self._group_generation < 0
        self._group_generation = state.generation
        if not first:
            dropped = list(self._owned)
            self._owned.clear()
            self._round_robin.clear()
            self._checkpoint_due = None
            self._checkpoint_ack = None
            if dropped:
                self._notify(released=dropped)
        if self.reader_id in state.reset_pending:
            self._member.ack_reset(state.generation)

    def _take_checkpoints(self, state: GroupState) -> None:
        """Queue (or, if silent, acknowledge at once) checkpoints that wait for this reader."""
        for checkpoint in state.checkpoints:
            name = checkpoint.name
            if checkpoint.done or self.reader_id not in checkpoint.pending:
                continue
            if name in self._handled_checkpoints:
                continue
            if checkpoint.silent:
                self._handled_checkpoints.add(name)
                self._member.ack_checkpoint(name, {k: o.consumed for k, o in self._owned.items()})
            elif self._checkpoint_due is None and self._checkpoint_ack is None:
                self._handled_checkpoints.add(name)
                self._checkpoint_due = name

    def _reconcile(self, state: GroupState, released: list[SegKey]) -> None:
        """Drop local segments the group no longer gives this reader (released, taken away)."""
        mine = state.owned_by(self.reader_id)
        lost = [k for k, o in self._owned.items() if k not in mine or mine[k].token != o.token]
        for key in lost:
            del self._owned[key]
        for key, assignment in mine.items():
            if key not in self._owned:
                self._adopt(key, assignment)
        gone = sorted(set(lost) | set(released))
        if gone:
            self._notify(released=gone)

    def _adopt(self, key: SegKey, assignment: Assignment) -> None:
        scope, stream = split_scoped_stream(key[0], None)
        data_key = self._connection.segment_keys(scope, stream, key[1])[1]
        position = assignment.position
        owned = _Owned(
            key,
            scope,
            stream,
            key[1],
            data_key,
            assignment.token,
            position,
            position,
            position,
            position,
        )
        end = self._member.state.end
        if end is not None:
            owned.final_tail, owned.bounded = end.get(key, position), True
        self._owned[key] = owned
        if key not in self._round_robin:
            self._round_robin.append(key)
        stream_state: StreamState = self._stream_sync(key[0]).state
        owned.max_event_size = stream_state.config.max_event_size

    def _stream_sync(self, scoped: str) -> StateSynchronizer[StreamState]:
        sync = self._streams.get(scoped)
        if sync is None:
            scope, stream = split_scoped_stream(scoped, None)
            sync = self._connection.synchronizer(
                stream_sync_name(scope, stream), UPDATE_TYPES, STATE_TYPES
            )
            sync.follow()
            self._streams[scoped] = sync
        return sync

    def _complete_finished(self) -> None:
        """Complete owned segments that are sealed (or at a bounded end) and consumed."""
        if self._member.state.frozen_for(self.reader_id):
            return  # a checkpoint or reset awaits this reader: move nothing until then
        for scoped, sync in self._streams.items():
            sync.follow()
            state: StreamState = sync.state
            for owned in [o for o in self._owned.values() if o.key[0] == scoped]:
                record = state.segments.get(owned.segment)
                if record is None or (record.active and not owned.bounded):
                    continue
                if record.truncated:
                    self._truncated_away(owned)
                elif owned.final_tail < 0:
                    seg = self._connection.segment_states(
                        owned.scope, owned.stream, [owned.segment]
                    )
                    if not seg[owned.segment].sealed:  # an interrupted scale: finish its seal
                        self._connection.seal(owned.scope, owned.stream, owned.segment)
                        seg = self._connection.segment_states(
                            owned.scope, owned.stream, [owned.segment]
                        )
                    owned.final_tail = seg[owned.segment].tail
                if owned.consumed >= owned.final_tail and not owned.buffer and not owned.pending:
                    successors = tuple(
                        (
                            (scoped, succ),
                            tuple((scoped, p) for p in state.segments[succ].predecessors),
                            state.head.get(succ, 0),
                        )
                        for succ in record.successors
                    )
                    if not self._member.complete(
                        owned.key, owned.token, successors, owned.final_tail
                    ):
                        return  # a checkpoint or reset arrived: complete after it
                    del self._owned[owned.key]
                    self._notify(released=[owned.key])
                    self._group_dirty = True

    def _truncated_away(self, owned: _Owned) -> None:
        """The segment is wholly behind the stream's head: its data is (being) deleted. Hand out
        what is buffered, report the loss of anything after it once, then complete it (its
        successors become readable from the head)."""
        if owned.final_tail < 0:
            seg = self._connection.segment_states(owned.scope, owned.stream, [owned.segment])
            if seg[owned.segment].exists and seg[owned.segment].sealed:
                owned.final_tail = seg[owned.segment].tail
        if owned.final_tail < 0 or owned.fetch < owned.final_tail:
            owned.hold(TruncatedDataError(owned.name, owned.fetch, -1), owned.fetch)
            owned.final_tail = owned.fetch  # nothing more can be fetched

    def _notify(
        self,
        acquired: Sequence[SegKey] = (),
        released: Sequence[SegKey] = (),
        lost: Sequence[SegKey] = (),
    ) -> None:
        for listener in self._listeners:
            if acquired:
                listener.on_segments_acquired(self.reader_id, list(acquired))
            if released:
                listener.on_segments_released(self.reader_id, list(released))
            if lost:
                on_lost = getattr(listener, "on_segments_lost", listener.on_segments_released)
                on_lost(self.reader_id, list(lost))

    # -- heartbeat thread -------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        interval = self._group.heartbeat_interval
        failed = False
        while not self._stop.is_set():
            sent = self._clock.monotonic()
            wait = interval
            try:
                with translate_errors("heartbeat"):
                    liveness = self._member.heartbeat()
                if liveness.member:
                    self._last_beat_ok = sent
                elif self._fenced is None:
                    self._fenced = (
                        f"reader {self.reader_id!r} was removed from the group (its session "
                        "expired, or reader_offline was called); create it again to rejoin"
                    )
                if liveness.removed:
                    self._group_dirty = True
                if liveness.next_expiry_ms is not None:
                    until = (liveness.next_expiry_ms - liveness.now_ms) / 1000
                    wait = max(0.05, min(interval, until))
                failed = False
            except ReaderGroupError as exc:
                if self._group_deleted(exc):
                    self._on_group_deleted()
                    return
                if not failed:
                    logger.warning("reader %r: heartbeat failed: %s", self.reader_id, exc)
                failed = True
                wait = min(interval, 0.5)
            if self._fenced is None and sent - self._last_poll > self._group.max_poll_interval:
                self._fenced = (
                    f"reader {self.reader_id!r} did not call read_next_event for "
                    f"max_poll_interval={self._group.max_poll_interval}s; its segments were "
                    "given back at their committed positions"
                )
                self._leave_quietly()
                return
            if self._fenced is not None:
                self._leave_quietly()
                return
            self._stop.wait(wait)

    def _leave_quietly(self) -> None:
        try:
            with translate_errors("leave"):
                self._member.leave()
        except ReaderGroupError:
            pass
