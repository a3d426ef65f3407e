"""``ReaderGroupManager`` and ``ReaderGroup``: create, inspect and administer reader groups."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from readergroup.admin.group_member import GroupMember
from readergroup.admin.group_positions import cuts_by_stream, resolve_group, resolve_start
from readergroup.admin.stream_manager import StreamManager
from readergroup.core import catalog, planning, reset_planning
from readergroup.core.closing import Closing
from readergroup.core.config import ClientConfig
from readergroup.core.errors import (
    CheckpointError,
    DataLostError,
    InvalidConfigError,
    ReaderGroupError,
    ReaderGroupInUseError,
    ReaderGroupNotFoundError,
    ScopeNotFoundError,
    StreamNotFoundError,
)
from readergroup.core.group_config import START_WORDS, ReaderGroupConfig, StartPosition
from readergroup.core.group_state import (
    STATE_TYPES,
    UPDATE_TYPES,
    Checkpoint,
    CreateCheckpoint,
    FailCheckpoint,
    GroupState,
    ResetGroup,
    SegKey,
    check_new_checkpoint,
    new_group,
    without_lags,
)
from readergroup.core.group_view import MemberView, group_state_word, members_of
from readergroup.core.log_format import NEWEST_FORMAT
from readergroup.core.membership import Plan, plan_remove
from readergroup.core.names import group_sync_name, validate_name
from readergroup.core.stream_cut import StreamCut
from readergroup.storage import vanished
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.storage.translate import fetch_state, translate_errors
from statesync import Decision, StateSynchronizer

logger = logging.getLogger(__name__)


def plan_checkpoint(name: str, now_ms: int, silent: bool = False) -> Plan[None]:
    """The generator that creates checkpoint ``name`` (refused when a duplicate or too many)."""

    def create(state: GroupState) -> Decision[None]:
        check_new_checkpoint(state, name)
        return [CreateCheckpoint(name, now_ms, silent)], None

    return create


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """A completed checkpoint: its positions, and the same as one stream cut per stream."""

    name: str
    positions: dict[SegKey, int]
    completed_ms: int

    @property
    def stream_cuts(self) -> dict[str, StreamCut]:
        return cuts_by_stream(self.positions)


@dataclass(frozen=True, slots=True)
class ResetResult:
    """What a reset did: the positions the group restarts from, and the readers declared
    offline because they did not acknowledge it in time."""

    starts: dict[SegKey, int]
    declared_offline: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Lag:
    """How far behind: events and bytes not yet processed, and the age of the oldest."""

    events: int = 0
    bytes: int = 0
    ms: int = 0

    def __add__(self, other: Lag) -> Lag:
        return Lag(self.events + other.events, self.bytes + other.bytes, max(self.ms, other.ms))


@dataclass(frozen=True, slots=True)
class SegmentLag:
    stream: str
    segment: int
    reader: str | None
    """Owner, or ``None`` while unassigned or waiting for predecessors."""
    position: int
    tail: int
    lag: Lag


@dataclass(frozen=True, slots=True)
class GroupMetrics:
    """Lag per segment, per reader and for the whole group, as of the last commits.

    ``ms`` is the server-clock age of the oldest event not yet committed (0 when caught up):
    how far behind in time, which Kafka's lag in offsets cannot say.
    """

    server_ms: int
    segments: list[SegmentLag]
    readers: dict[str, Lag]
    total: Lag


@dataclass(frozen=True, slots=True)
class SegmentDistribution:
    """Who owns what: reader -> segments, and the segments nobody owns yet."""

    assigned: dict[str, list[SegKey]]
    unassigned: list[SegKey]
    future: list[SegKey]
    completed: int


class ReaderGroup:
    """A handle on one reader group (from :meth:`ReaderGroupManager.get_reader_group`)."""

    def __init__(
        self, connection: Connection, scope: str, name: str, writer_label: str | None = None
    ) -> None:
        self._connection = connection
        self._streams = StreamManager(connection)
        self.scope = scope
        self.name = name
        self.sync: StateSynchronizer[GroupState] = connection.synchronizer(
            group_sync_name(scope, name), UPDATE_TYPES, STATE_TYPES, writer_label=writer_label
        )
        self.heartbeats = connection.heartbeat_store(self.sync.name)
        self.refresh()

    def refresh(self) -> GroupState:
        state: GroupState = fetch_state(
            self.sync,
            lambda: ReaderGroupNotFoundError(
                f"reader group {self.scope}/{self.name} does not exist"
            ),
            "read group",
        )
        return state

    @property
    def config(self) -> ReaderGroupConfig:
        return self.refresh().config

    def server_time_ms(self) -> int:
        """The Redis server's clock (the one event times and heartbeats are stamped with)."""
        return self._connection.server_time_ms()

    def get_online_readers(self) -> list[str]:
        return sorted(self.refresh().readers)

    def members(self) -> list[MemberView]:
        """Every member with its segments, ``host/pid``, heartbeat age (server clock) and the
        log format it announced (an older version's is lower); ``stale`` marks those whose
        heartbeat is older than the session timeout."""
        state = self.refresh()
        now, beats = self.heartbeats.beat("", 0)
        clients, announced = self.heartbeats.clients(), self.heartbeats.announcements()
        return members_of(state, beats, clients, now, announced)

    def older_readers_online(self) -> list[str]:
        """The online members running a version older than this one (they announced an older
        log format, or none), sorted."""
        return sorted(
            m.reader for m in self.members() if not m.stale and m.log_format < NEWEST_FORMAT
        )

    def compact_log(self) -> int:
        """Snapshot the group's log at its head; return that revision. A reader joining reads
        the log from its newest snapshot, which every supported version reads: stop every
        reader of the group, compact, and readers of the previous version can join although
        entries of a newer log format were written (the last reader to leave does this itself;
        this is for readers that crashed). With no member live, the readers' lags are left out
        of the snapshot (they need a newer form of it; nobody ranks by them)."""
        live = any(not m.stale for m in self.members())
        with translate_errors("compact the group log"):
            self.sync.compact(None if live else without_lags)
        return self.sync.revision

    def missing_streams(self) -> list[str]:
        """The streams the group reads that no longer exist."""
        missing = []
        for scope, stream in self.refresh().config.scoped_streams(self.scope):
            try:
                self._streams.stream_state(scope, stream)
            except StreamNotFoundError:
                missing.append(f"{scope}/{stream}")
        return missing

    def status(self) -> str:
        """``stable``, ``rebalancing``, ``empty`` or ``dead`` (see
        :mod:`readergroup.core.group_view`)."""
        members = self.members()
        return group_state_word(self.sync.state, members, self.missing_streams())

    def get_segment_distribution(self) -> SegmentDistribution:
        state = self.refresh()
        assigned: dict[str, list[SegKey]] = {r: [] for r in state.readers}
        for segment, assignment in sorted(state.assigned.items()):
            assigned.setdefault(assignment.reader, []).append(segment)
        return SegmentDistribution(
            assigned, sorted(state.unassigned), sorted(state.future), len(state.completed)
        )

    def is_end_of_data(self) -> bool:
        """A bounded group whose every segment was read to its end cut."""
        return self.refresh().end_of_data

    def get_stream_cuts(self) -> dict[str, StreamCut]:
        """The group's committed positions as one stream cut per stream."""
        return cuts_by_stream(self.refresh().positions())

    # -- checkpoints ------------------------------------------------------------------------
    def initiate_checkpoint(
        self,
        name: str,
        timeout: float = 30.0,
        *,
        declare_offline: bool = False,
        silent: bool = False,
    ) -> CheckpointResult:
        """Take a group-wide checkpoint; block until every reader online now acknowledged it.

        Each reader hands the application an event with ``is_checkpoint`` True and
        ``checkpoint_name`` ``name`` (the place to save its state) and acknowledges on its next
        read; other readers keep reading meanwhile. After ``timeout`` the checkpoint fails with
        CheckpointError naming the readers that did not acknowledge (and, with
        ``declare_offline``, they are declared offline so the group moves on). At most three
        checkpoints may be outstanding.
        """
        validate_name(name, "checkpoint")
        now = self._connection.server_time_ms()
        with translate_errors("checkpoint"):
            self.sync.update_state(plan_checkpoint(name, now, silent))
        deadline = time.monotonic() + timeout
        while True:
            checkpoint = self.refresh().checkpoint(name)
            if checkpoint is None or checkpoint.failed:
                reason = checkpoint.failed if checkpoint else "it was dropped"
                raise CheckpointError(f"checkpoint {name!r} failed: {reason}")
            if checkpoint.completed_ms >= 0:
                logger.info(
                    "checkpoint %r of %s/%s completed: %d segment positions",
                    name,
                    self.scope,
                    self.name,
                    len(checkpoint.positions),
                )
                return CheckpointResult(name, dict(checkpoint.positions), checkpoint.completed_ms)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._fail_checkpoint(checkpoint, timeout, declare_offline)
            with translate_errors("checkpoint"):
                self.sync.wait_for_updates(min(remaining, 1.0))  # blocks on the state log

    def _fail_checkpoint(self, checkpoint: Checkpoint, timeout: float, offline: bool) -> NoReturn:
        pending = checkpoint.pending
        reason = f"readers {list(pending)} did not acknowledge it within {timeout}s" + (
            " and were declared offline" if offline else ""
        )
        with translate_errors("checkpoint"):
            self.sync.update_state(lambda s: [FailCheckpoint(checkpoint.name, reason)])
        logger.warning(
            "checkpoint %r of %s/%s failed: %s", checkpoint.name, self.scope, self.name, reason
        )
        if offline:
            for reader_id in pending:
                self.reader_offline(reader_id)
        raise CheckpointError(f"checkpoint {checkpoint.name!r} failed: {reason}", pending)

    def generate_stream_cuts(self, timeout: float = 30.0) -> dict[str, StreamCut]:
        """A silent checkpoint: each reader reports its processed positions without handing the
        application an event. Returns one stream cut per stream."""
        name = f"silent-{uuid.uuid4().hex[:12]}"
        return self.initiate_checkpoint(name, timeout, silent=True).stream_cuts

    # -- resets -----------------------------------------------------------------------------
    def reset_reader_group(
        self,
        start: StartPosition | Mapping[str, StartPosition] | CheckpointResult | None = None,
        *,
        shift_by: int | None = None,
        timeout: float = 30.0,
    ) -> dict[SegKey, int]:
        """Start the group over while its readers run; return the new start positions.

        ``start``: a completed checkpoint (the result, or its name), a StreamCut, a server time
        in ms, ``"head"``/``"earliest"``, ``"tail"``/``"latest"``, a mapping per stream (streams
        it does not name keep their committed positions), or ``None`` for the configured start;
        or ``shift_by=N`` to move every segment N events forward (negative: back, as Kafka's
        ``--shift-by``) from its committed position, within that segment. A cut or checkpoint
        of a stream the group does not read is refused (InvalidStreamCutError) and nothing
        changes. Running readers re-initialize transparently: they drop what they buffered,
        acknowledge, and acquire segments at the new positions. This call returns once every
        online reader acknowledged (readers that do not within ``timeout`` are declared
        offline: see :meth:`apply_reset`), so no read that starts afterwards returns an event
        from before the reset point.
        """
        plan = self.plan_reset(start, shift_by=shift_by)
        return self.apply_reset(plan, timeout=timeout).starts

    def apply_reset(self, plan: Mapping[SegKey, int], *, timeout: float = 30.0) -> ResetResult:
        """Apply a plan from :meth:`plan_reset` (or an edited one): every stream the group reads
        must have positions, each within its segment's data; otherwise nothing changes. Returns
        the positions and the readers declared offline because they did not acknowledge the
        reset within ``timeout``."""
        state = self.refresh()
        starts = dict(plan)
        reset_planning.check_plan(
            f"{self.scope}/{self.name}", state.positions(), starts, self._bounds(starts)
        )
        end = self._end_for(state, starts)
        update = ResetGroup(
            tuple(sorted(starts.items())), None if end is None else tuple(end.items())
        )
        with translate_errors("reset"):
            self.sync.update_state(lambda s: [update])
        logger.info(
            "reset %s/%s to %d segment positions; waiting for its readers to acknowledge",
            self.scope,
            self.name,
            len(starts),
        )
        deadline = time.monotonic() + timeout
        declared: list[str] = []
        while self.refresh().reset_pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for reader_id in self.sync.state.reset_pending:
                    if self.reader_offline(reader_id):
                        declared.append(reader_id)
                if declared:
                    logger.warning(
                        "reset of %s/%s: readers %s did not acknowledge within %ss and were "
                        "declared offline",
                        self.scope,
                        self.name,
                        declared,
                        timeout,
                    )
                break
            with translate_errors("reset"):
                self.sync.wait_for_updates(min(remaining, 1.0))
        return ResetResult(starts, tuple(declared))

    def plan_reset(
        self,
        start: StartPosition | Mapping[str, StartPosition] | CheckpointResult | None = None,
        *,
        shift_by: int | None = None,
        to_offset: int | None = None,
        streams: Sequence[str] | None = None,
        segments: Sequence[int] | None = None,
    ) -> dict[SegKey, int]:
        """The start positions ``reset_reader_group`` would use, without changing anything.

        ``to_offset=N`` puts every selected segment at offset N (within its data, like
        Kafka's ``--to-offset``). ``streams`` and ``segments`` select what moves; the rest keeps
        its committed position. Anything naming a stream or segment the group does not read
        is refused.
        """
        state = self.refresh()
        group = f"{self.scope}/{self.name}"
        group_streams = [f"{s}/{t}" for s, t in state.config.scoped_streams(self.scope)]
        if sum(x is not None for x in (start, shift_by, to_offset)) > 1:
            raise InvalidConfigError("give one of start, shift_by and to_offset")
        if isinstance(start, StreamCut):
            start = {start.scoped_stream: start}
        if isinstance(start, Mapping):
            named = {s if "/" in s else f"{self.scope}/{s}": p for s, p in start.items()}
            reset_planning.check_streams(group, group_streams, named)
            if streams is None:
                streams = list(named)
            start = named
        chosen = reset_planning.select_streams(group, group_streams, streams)
        current = state.positions()
        target: dict[SegKey, int]
        if shift_by is not None:
            target = self._clamped(current, chosen, lambda p: p + shift_by)
        elif to_offset is not None:
            target = self._clamped(current, chosen, lambda p: to_offset)
        elif isinstance(start, CheckpointResult) or (
            isinstance(start, str) and start not in START_WORDS
        ):
            if isinstance(start, CheckpointResult):
                target = dict(start.positions)
            else:
                checkpoint = state.checkpoint(start)
                if checkpoint is None or checkpoint.completed_ms < 0:
                    raise CheckpointError(f"no completed checkpoint named {start!r} in {group}")
                target = dict(checkpoint.positions)
            reset_planning.check_streams(group, group_streams, {k[0] for k in target})
        else:
            target = {}
            for scoped in sorted(chosen):
                scope, _, stream = scoped.partition("/")
                if start is None:
                    position = state.config.start_for(stream, scoped)
                elif isinstance(start, Mapping):
                    position = start[scoped]
                else:
                    position = start
                cut = resolve_start(self._streams, scope, stream, position)
                target.update({(scoped, s): o for s, o in cut.positions.items()})
        return reset_planning.merge_plan(group, current, target, chosen, segments)

    def _bounds(self, positions: Mapping[SegKey, int]) -> dict[SegKey, tuple[int, int]]:
        """``(head, tail)`` of every existing segment named in ``positions``."""
        bounds: dict[SegKey, tuple[int, int]] = {}
        for scoped, cut in cuts_by_stream(positions).items():
            states = self._connection.segments.segment_states(
                cut.scope, cut.stream, list(cut.positions)
            )
            for segment, seg in states.items():
                if seg.exists:
                    bounds[(scoped, segment)] = (seg.head, seg.tail)
        return bounds

    def _clamped(
        self, current: Mapping[SegKey, int], streams: Collection[str], move: Callable[[int], int]
    ) -> dict[SegKey, int]:
        """``move`` applied to the committed positions of ``streams``, kept within the data."""
        chosen = {k: p for k, p in current.items() if k[0] in streams}
        bounds = self._bounds(chosen)
        return {
            key: min(bounds[key][1], max(bounds[key][0], move(position)))
            for key, position in chosen.items()
            if key in bounds
        }

    def _end_for(self, state: GroupState, starts: Mapping[SegKey, int]) -> dict[SegKey, int] | None:
        if state.end is None:
            return None
        cuts: dict[str, StartPosition] = dict(cuts_by_stream(starts))
        return resolve_group(self._streams, self.scope, state.config, cuts)[1]

    # -- lag --------------------------------------------------------------------------------
    def get_metrics(self) -> GroupMetrics:
        """Lag per segment, reader and group in events, bytes and milliseconds."""
        state = self.refresh()
        now = self._connection.server_time_ms()
        owners = {s: a.reader for s, a in state.assigned.items()}
        by_stream: dict[str, dict[int, int]] = {}
        for (scoped, segment), position in state.positions().items():
            by_stream.setdefault(scoped, {})[segment] = position
        rows: list[SegmentLag] = []
        for scoped, known in sorted(by_stream.items()):
            scope, _, stream = scoped.partition("/")
            positions = self._still_to_read(state, scoped, known)
            probe = self._connection.segments.lag_probe(scope, stream, positions)
            for segment, position in sorted(positions.items()):
                tail, size, byte_at, server_at = probe[segment]
                end = state.end.get((scoped, segment), tail) if state.end else tail
                tail = min(tail, end)
                lag = Lag(
                    max(0, tail - position),
                    max(0, size - byte_at) if position < tail else 0,
                    max(0, now - server_at) if server_at >= 0 and position < tail else 0,
                )
                rows.append(
                    SegmentLag(scoped, segment, owners.get((scoped, segment)), position, tail, lag)
                )
        readers: dict[str, Lag] = {r: Lag() for r in state.readers}
        total = Lag()
        for row in rows:
            total = total + row.lag
            if row.reader is not None:
                readers[row.reader] = readers.get(row.reader, Lag()) + row.lag
        return GroupMetrics(now, rows, readers, total)

    def _still_to_read(
        self, state: GroupState, scoped: str, known: Mapping[int, int]
    ) -> dict[int, int]:
        """Every segment of ``scoped`` the group has yet to read, from where it will start:
        the ``known`` positions, and the successors it reaches later (waiting for their
        predecessors or not named by the group yet, as after a reset to before a scale) from
        their heads, up to the group's end cut if it has one."""
        scope, _, stream = scoped.partition("/")
        try:
            metadata = self._streams.stream_state(scope, stream)
        except StreamNotFoundError:  # deleted: only what the group names (all of it gone)
            return {**{s: 0 for (k, s) in state.future if k == scoped}, **known}
        end = None
        if state.end is not None:
            end = {s: o for (k, s), o in state.end.items() if k == scoped}
        ranges = planning.plan_ranges(metadata, known, end, {})
        return {**{r.segment: r.start for r in ranges}, **known}

    # -- notifications ----------------------------------------------------------------------
    def watch(
        self,
        on_segments_changed: Callable[[int], Any] | None = None,
        on_end_of_data: Callable[[], Any] | None = None,
    ) -> GroupWatcher:
        """Call ``on_segments_changed(count)`` whenever the number of segments the group reads
        (assigned plus unassigned) changes, and ``on_end_of_data()`` once a bounded group is
        done. Driven by blocking on the group's state log, not by polling. ``stop()`` it."""
        return GroupWatcher(self, on_segments_changed, on_end_of_data)

    def reader_offline(self, reader_id: str, positions: dict[SegKey, int] | None = None) -> bool:
        """Declare ``reader_id`` offline: its segments return at the given ``positions``, but
        never before their last committed ones (a committed position does not move back; to
        re-read, reset the group). ``False`` if it was not online. Decided on the group's
        newest state, however old this handle is; only that reader generation's heartbeat is
        deleted."""
        plan = plan_remove(reader_id, None, tuple((positions or {}).items()))
        with translate_errors("reader offline"):
            removed = self.sync.update_state(plan)
            if removed is not None:
                self.heartbeats.forget(reader_id, removed)
        if removed is not None:
            logger.info(
                "reader %r (generation %d) declared offline in %s/%s; its segments return to the "
                "group",
                reader_id,
                removed,
                self.scope,
                self.name,
            )
        return removed is not None


class GroupWatcher:
    """A background thread that blocks on a group's state log and calls listeners."""

    def __init__(
        self,
        group: ReaderGroup,
        on_segments_changed: Callable[[int], Any] | None,
        on_end_of_data: Callable[[], Any] | None,
    ) -> None:
        self._sync: StateSynchronizer[GroupState] = group._connection.synchronizer(
            group.sync.name, UPDATE_TYPES, STATE_TYPES
        )
        self._on_segments = on_segments_changed
        self._on_end = on_end_of_data
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"rg-watch-{group.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        count, ended = -1, False
        while not self._stop.is_set():
            try:
                self._sync.fetch_updates()
                state: GroupState = self._sync.state
                segments = len(state.assigned) + len(state.unassigned)
                if segments != count and self._on_segments is not None:
                    self._on_segments(segments)
                count = segments
                if state.end_of_data and not ended:
                    ended = True
                    if self._on_end is not None:
                        self._on_end()
                self._sync.wait_for_updates(0.5)
            except Exception:  # a listener's or an outage's error must not end the watch
                logger.warning(
                    "watcher of %s: retrying after an error", self._sync.name, exc_info=True
                )
                self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class ReaderGroupManager(Closing):
    """Creates, lists and deletes the reader groups of one scope.

    Example::

        with ReaderGroupManager.from_url("shop", url) as rgm:
            rgm.create_reader_group("billing", ReaderGroupConfig(streams=["shop/orders"]))
    """

    def __init__(
        self,
        scope: str,
        connection: Connection,
        *,
        owns_connection: bool = False,
        writer_label: str | None = None,
    ) -> None:
        """``writer_label`` names this client's writes in the groups' state logs (their
        audit trail), e.g. ``"cli:host"``."""
        self.scope = validate_name(scope, "scope")
        self._connection = connection
        self._owns_connection = owns_connection
        self._streams = StreamManager(connection)
        self._writer_label = writer_label

    @classmethod
    def from_url(
        cls,
        scope: str,
        url: str,
        config: ClientConfig | None = None,
        *,
        writer_label: str | None = None,
    ) -> ReaderGroupManager:
        return cls(
            scope,
            RedisConnection.from_url(url, config),
            owns_connection=True,
            writer_label=writer_label,
        )

    def close(self) -> None:
        if self._owns_connection:
            self._connection.close()

    def create_reader_group(self, name: str, config: ReaderGroupConfig) -> bool:
        """Create group ``name``; ``False`` if it existed (its configuration is kept)."""
        validate_name(name, "reader group")
        if not isinstance(config, ReaderGroupConfig):
            raise TypeError("config must be a ReaderGroupConfig")
        scope = self.scope
        foreign = [f"{s}/{t}" for s, t in config.scoped_streams(scope) if s != scope]
        if foreign:
            raise InvalidConfigError(
                f"reader group {scope}/{name} cannot read {foreign}: a group reads streams of "
                "its own scope only (scopes are the isolation boundary)"
            )
        # validates every stream, start and end first
        starts, end = resolve_group(self._streams, scope, config)
        now = self._connection.server_time_ms()

        def add(state: catalog.Catalog) -> Decision[bool]:
            if name in catalog.groups_of(state):
                return [], False
            streams = tuple(t for _, t in config.scoped_streams(scope))
            return [catalog.AddGroup(name, now, streams)], True

        created = self._streams.update_catalog(scope, add)
        sync = self._connection.synchronizer(
            group_sync_name(scope, name), UPDATE_TYPES, STATE_TYPES, writer_label=self._writer_label
        )
        lost = lambda: DataLostError(  # noqa: E731
            f"the state of reader group {scope}/{name} vanished from Redis; "
            "delete_reader_group removes what is left of it"
        )
        initial = new_group(scope, name, config, starts, now, end)
        vanished.initialize_once(self._connection, scope, sync, initial, lost)
        if created:
            logger.info("created reader group %s/%s reading %s", scope, name, list(config.streams))
        return created

    def get_reader_group(self, name: str) -> ReaderGroup:
        validate_name(name, "reader group")
        return ReaderGroup(self._connection, self.scope, name, self._writer_label)

    def list_reader_groups(self) -> list[str]:
        return sorted(catalog.groups_of(self._streams.catalog(self.scope)))

    def delete_reader_group(self, name: str, *, force: bool = False) -> bool:
        """Delete the group's state and heartbeats; ``False`` if it did not exist.

        Like Kafka, a group with online readers (a heartbeat within the session timeout) is not
        deleted: ReaderGroupInUseError names them. With ``force`` it is, and those readers get
        ReaderGroupNotFoundError on their next read.
        """
        validate_name(name, "reader group")
        sync_name = group_sync_name(self.scope, name)
        if not force:
            try:
                online = [m for m in self.get_reader_group(name).members() if not m.stale]
            except ReaderGroupNotFoundError:
                online = []
            if online:
                raise ReaderGroupInUseError(
                    f"reader group {self.scope}/{name} has online readers "
                    f"{[m.reader for m in online]}; stop them (or declare them offline) first, "
                    "or force the deletion"
                )

        def remove(state: catalog.Catalog) -> Decision[bool]:
            if name not in catalog.groups_of(state):
                return [], False
            return [catalog.RemoveGroup(name)], True

        try:  # first: only the scope's admin gets past this step
            removed = self._streams.update_catalog(self.scope, remove)
        except ScopeNotFoundError:
            removed = False
        sync = self._connection.synchronizer(sync_name, UPDATE_TYPES, STATE_TYPES)
        vanished.forget(self._connection, self.scope, sync_name)
        with translate_errors("delete reader group"):
            existed = sync.delete()
        self._connection.heartbeat_store(sync_name).delete()
        if removed or existed:
            logger.info(
                "deleted reader group %s/%s%s", self.scope, name, " (forced)" if force else ""
            )
        return removed or existed


def join_group(
    connection: Connection, scope: str, group: str, reader_id: str, *, takeover: bool = False
) -> tuple[GroupMember, ReaderGroupConfig]:
    """Join ``reader_id`` to ``scope/group``; return its member handle and the group config
    (``takeover``: see :meth:`GroupMember.join`)."""
    validate_name(reader_id, "reader id")
    handle = ReaderGroup(connection, scope, group)
    sync = connection.synchronizer(
        handle.sync.name, UPDATE_TYPES, STATE_TYPES, writer_label=reader_id
    )
    try:  # informational (describe --members): a failure must not stop the reader joining
        handle.heartbeats.register(reader_id, f"{socket.gethostname()}/{os.getpid()}")
    except ReaderGroupError as exc:
        logger.warning("reader %s: could not record its host/pid: %s", reader_id, exc)
    with translate_errors("join"):
        sync.fetch_updates()
        config: ReaderGroupConfig = sync.state.config
        member = GroupMember(
            sync,
            handle.heartbeats,
            reader_id,
            session_timeout_ms=int(config.session_timeout * 1000),
            max_moves=config.max_segment_moves,
            judge_every_ms=int(config.heartbeat_interval * 1000),
        )
        member.join(takeover=takeover)
    return member, config
