"""The decisions of reader-group administration, written once (see
:mod:`readergroup.core.calls`): :class:`GroupSteps` (one group: inspection, checkpoints,
resets, lag, declaring readers offline) and :class:`GroupManagerSteps` (a scope's groups:
create, list, delete) hold, as procedures, everything the threaded
:class:`~readergroup.admin.group_manager.ReaderGroup` and
:class:`~readergroup.admin.group_manager.ReaderGroupManager` do blocking and the asyncio
:class:`~readergroup.aio.group_manager.AsyncReaderGroup` and
:class:`~readergroup.aio.group_manager.AsyncReaderGroupManager` await, on the connection
given (threaded or asyncio). Waits (a checkpoint's, a reset's) are waits on the group's state
log (``wait_for_updates``), bounded by ``timeout`` on the injected ``clock``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from readergroup.admin.group_positions import cuts_by_stream, resolve_group, resolve_start
from readergroup.admin.stream_steps import StreamSteps, fetch_state_steps
from readergroup.core import catalog, planning, reset_planning
from readergroup.core.calls import Call, Steps, call_on
from readergroup.core.errors import (
    CheckpointError,
    DataLostError,
    InvalidConfigError,
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
from readergroup.storage.translate import translate_errors
from statesync import Decision

# the manager's logger name, kept: operators configure and grep it (``-v`` prints it)
logger = logging.getLogger("readergroup.admin.group_manager")

WAIT_SLICE = 1.0
"""Longest single wait on the group's log while a checkpoint or reset is awaited (seconds)."""


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


Start = StartPosition | Mapping[str, StartPosition] | CheckpointResult | None
"""What a reset starts the group from (see :meth:`GroupSteps.plan_reset`)."""


class GroupSteps:
    """One reader group, as procedures on ``connection`` (threaded or asyncio). ``clock``:
    the monotonic clock waits are bounded by."""

    def __init__(
        self,
        connection: Any,
        scope: str,
        name: str,
        writer_label: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection
        self.streams = StreamSteps(connection)
        self.scope = scope
        self.name = name
        self.sync: Any = connection.synchronizer(
            group_sync_name(scope, name), UPDATE_TYPES, STATE_TYPES, writer_label=writer_label
        )
        self.heartbeats: Any = connection.heartbeat_store(self.sync.name)
        self._clock = clock

    def refresh(self) -> Steps[GroupState]:
        state: GroupState = yield from fetch_state_steps(
            self.sync,
            lambda: ReaderGroupNotFoundError(
                f"reader group {self.scope}/{self.name} does not exist"
            ),
            "read group",
        )
        return state

    def members(self) -> Steps[list[MemberView]]:
        """Every member with its segments, ``host/pid``, heartbeat age (server clock) and the
        log format it announced (an older version's is lower); ``stale`` marks those whose
        heartbeat is older than the session timeout."""
        state = yield from self.refresh()
        now, beats = yield call_on(self.heartbeats, "beat", "", 0)
        clients = yield call_on(self.heartbeats, "clients")
        announced = yield call_on(self.heartbeats, "announcements")
        return members_of(state, beats, clients, now, announced)

    def older_readers_online(self) -> Steps[list[str]]:
        """The online members running a version older than this one (they announced an older
        log format, or none), sorted."""
        members = yield from self.members()
        return sorted(m.reader for m in members if not m.stale and m.log_format < NEWEST_FORMAT)

    def compact_log(self) -> Steps[int]:
        """Snapshot the group's log at its head; return that revision (see
        :meth:`~readergroup.admin.group_manager.ReaderGroup.compact_log`)."""
        live = any(not m.stale for m in (yield from self.members()))
        with translate_errors("compact the group log"):
            yield call_on(self.sync, "compact", None if live else without_lags)
        revision: int = self.sync.revision
        return revision

    def missing_streams(self) -> Steps[list[str]]:
        """The streams the group reads that no longer exist."""
        missing = []
        for scope, stream in (yield from self.refresh()).config.scoped_streams(self.scope):
            try:
                yield from self.streams.stream_state(scope, stream)
            except StreamNotFoundError:
                missing.append(f"{scope}/{stream}")
        return missing

    def status(self) -> Steps[str]:
        """``stable``, ``rebalancing``, ``empty`` or ``dead`` (see
        :mod:`readergroup.core.group_view`)."""
        members = yield from self.members()
        missing = yield from self.missing_streams()
        return group_state_word(self.sync.state, members, missing)

    def get_segment_distribution(self) -> Steps[SegmentDistribution]:
        state = yield from self.refresh()
        assigned: dict[str, list[SegKey]] = {r: [] for r in state.readers}
        for segment, assignment in sorted(state.assigned.items()):
            assigned.setdefault(assignment.reader, []).append(segment)
        return SegmentDistribution(
            assigned, sorted(state.unassigned), sorted(state.future), len(state.completed)
        )

    def is_end_of_data(self) -> Steps[bool]:
        """A bounded group whose every segment was read to its end cut."""
        return (yield from self.refresh()).end_of_data

    def get_stream_cuts(self) -> Steps[dict[str, StreamCut]]:
        """The group's committed positions as one stream cut per stream."""
        return cuts_by_stream((yield from self.refresh()).positions())

    # -- checkpoints ------------------------------------------------------------------------
    def initiate_checkpoint(
        self,
        name: str,
        timeout: float = 30.0,
        *,
        declare_offline: bool = False,
        silent: bool = False,
    ) -> Steps[CheckpointResult]:
        """Take a group-wide checkpoint; done once every reader online now acknowledged it
        (see :meth:`~readergroup.admin.group_manager.ReaderGroup.initiate_checkpoint`)."""
        validate_name(name, "checkpoint")
        now = yield from self.streams.server_time_ms()
        with translate_errors("checkpoint"):
            yield call_on(self.sync, "update_state", plan_checkpoint(name, now, silent))
        deadline = self._clock() + timeout
        while True:
            checkpoint = (yield from self.refresh()).checkpoint(name)
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
            remaining = deadline - self._clock()
            if remaining <= 0:
                yield from self._fail_checkpoint(checkpoint, timeout, declare_offline)
            with translate_errors("checkpoint"):  # waits on the state log
                yield call_on(self.sync, "wait_for_updates", min(remaining, WAIT_SLICE))

    def _fail_checkpoint(
        self, checkpoint: Checkpoint, timeout: float, offline: bool
    ) -> Steps[None]:
        pending = checkpoint.pending
        reason = f"readers {list(pending)} did not acknowledge it within {timeout}s" + (
            " and were declared offline" if offline else ""
        )
        with translate_errors("checkpoint"):
            failed = [FailCheckpoint(checkpoint.name, reason)]
            yield call_on(self.sync, "update_state", lambda s: failed)
        logger.warning(
            "checkpoint %r of %s/%s failed: %s", checkpoint.name, self.scope, self.name, reason
        )
        if offline:
            for reader_id in pending:
                yield from self.reader_offline(reader_id)
        raise CheckpointError(f"checkpoint {checkpoint.name!r} failed: {reason}", pending)

    def generate_stream_cuts(self, timeout: float = 30.0) -> Steps[dict[str, StreamCut]]:
        """A silent checkpoint: each reader reports its processed positions without handing the
        application an event. Returns one stream cut per stream."""
        name = f"silent-{uuid.uuid4().hex[:12]}"
        return (yield from self.initiate_checkpoint(name, timeout, silent=True)).stream_cuts

    # -- resets -----------------------------------------------------------------------------
    def reset_reader_group(
        self, start: Start = None, *, shift_by: int | None = None, timeout: float = 30.0
    ) -> Steps[dict[SegKey, int]]:
        """:meth:`plan_reset`, then :meth:`apply_reset`; the new start positions."""
        plan = yield from self.plan_reset(start, shift_by=shift_by)
        return (yield from self.apply_reset(plan, timeout=timeout)).starts

    def apply_reset(
        self, plan: Mapping[SegKey, int], *, timeout: float = 30.0
    ) -> Steps[ResetResult]:
        """Apply a plan from :meth:`plan_reset` (see
        :meth:`~readergroup.admin.group_manager.ReaderGroup.apply_reset`)."""
        state = yield from self.refresh()
        starts = dict(plan)
        bounds = yield from self._bounds(starts)
        reset_planning.check_plan(f"{self.scope}/{self.name}", state.positions(), starts, bounds)
        end = yield from self._end_for(state, starts)
        update = ResetGroup(
            tuple(sorted(starts.items())), None if end is None else tuple(end.items())
        )
        with translate_errors("reset"):
            yield call_on(self.sync, "update_state", lambda s: [update])
        logger.info(
            "reset %s/%s to %d segment positions; waiting for its readers to acknowledge",
            self.scope,
            self.name,
            len(starts),
        )
        deadline = self._clock() + timeout
        declared: list[str] = []
        while (yield from self.refresh()).reset_pending:
            remaining = deadline - self._clock()
            if remaining <= 0:
                for reader_id in self.sync.state.reset_pending:
                    if (yield from self.reader_offline(reader_id)):
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
                yield call_on(self.sync, "wait_for_updates", min(remaining, WAIT_SLICE))
        return ResetResult(starts, tuple(declared))

    def plan_reset(
        self,
        start: Start = None,
        *,
        shift_by: int | None = None,
        to_offset: int | None = None,
        streams: Sequence[str] | None = None,
        segments: Sequence[int] | None = None,
    ) -> Steps[dict[SegKey, int]]:
        """The start positions ``reset_reader_group`` would use, without changing anything
        (see :meth:`~readergroup.admin.group_manager.ReaderGroup.plan_reset`)."""
        state = yield from self.refresh()
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
            target = yield from self._clamped(current, chosen, lambda p: p + shift_by)
        elif to_offset is not None:
            target = yield from self._clamped(current, chosen, lambda p: to_offset)
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
                cut = yield from resolve_start(self.streams, scope, stream, position)
                target.update({(scoped, s): o for s, o in cut.positions.items()})
        return reset_planning.merge_plan(group, current, target, chosen, segments)

    def _bounds(self, positions: Mapping[SegKey, int]) -> Steps[dict[SegKey, tuple[int, int]]]:
        """``(head, tail)`` of every existing segment named in ``positions``."""
        bounds: dict[SegKey, tuple[int, int]] = {}
        for scoped, cut in cuts_by_stream(positions).items():
            states = yield from self.streams.segment_states(
                cut.scope, cut.stream, list(cut.positions)
            )
            for segment, seg in states.items():
                if seg.exists:
                    bounds[(scoped, segment)] = (seg.head, seg.tail)
        return bounds

    def _clamped(
        self, current: Mapping[SegKey, int], streams: Collection[str], move: Callable[[int], int]
    ) -> Steps[dict[SegKey, int]]:
        """``move`` applied to the committed positions of ``streams``, kept within the data."""
        chosen = {k: p for k, p in current.items() if k[0] in streams}
        bounds = yield from self._bounds(chosen)
        return {
            key: min(bounds[key][1], max(bounds[key][0], move(position)))
            for key, position in chosen.items()
            if key in bounds
        }

    def _end_for(
        self, state: GroupState, starts: Mapping[SegKey, int]
    ) -> Steps[dict[SegKey, int] | None]:
        if state.end is None:
            return None
        cuts: dict[str, StartPosition] = dict(cuts_by_stream(starts))
        _, end = yield from resolve_group(self.streams, self.scope, state.config, cuts)
        return end

    # -- lag --------------------------------------------------------------------------------
    def get_metrics(self) -> Steps[GroupMetrics]:
        """Lag per segment, reader and group in events, bytes and milliseconds."""
        state = yield from self.refresh()
        now = yield from self.streams.server_time_ms()
        owners = {s: a.reader for s, a in state.assigned.items()}
        by_stream: dict[str, dict[int, int]] = {}
        for (scoped, segment), position in state.positions().items():
            by_stream.setdefault(scoped, {})[segment] = position
        rows: list[SegmentLag] = []
        for scoped, known in sorted(by_stream.items()):
            scope, _, stream = scoped.partition("/")
            positions = yield from self._still_to_read(state, scoped, known)
            probe = yield call_on(self.connection.segments, "lag_probe", scope, stream, positions)
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
    ) -> Steps[dict[int, int]]:
        """Every segment of ``scoped`` the group has yet to read, from where it will start:
        the ``known`` positions, and the successors it reaches later (waiting for their
        predecessors or not named by the group yet, as after a reset to before a scale) from
        their heads, up to the group's end cut if it has one."""
        scope, _, stream = scoped.partition("/")
        try:
            metadata = yield from self.streams.stream_state(scope, stream)
        except StreamNotFoundError:  # deleted: only what the group names (all of it gone)
            return {**{s: 0 for (k, s) in state.future if k == scoped}, **known}
        end = None
        if state.end is not None:
            end = {s: o for (k, s), o in state.end.items() if k == scoped}
        ranges = planning.plan_ranges(metadata, known, end, {})
        return {**{r.segment: r.start for r in ranges}, **known}

    def reader_offline(
        self, reader_id: str, positions: dict[SegKey, int] | None = None
    ) -> Steps[bool]:
        """Declare ``reader_id`` offline (see
        :meth:`~readergroup.admin.group_manager.ReaderGroup.reader_offline`); ``False`` if it
        was not online."""
        plan = plan_remove(reader_id, None, tuple((positions or {}).items()))
        with translate_errors("reader offline"):
            removed = yield call_on(self.sync, "update_state", plan)
            if removed is not None:
                yield call_on(self.heartbeats, "forget", reader_id, removed)
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


WATCH_SECONDS = 0.5
"""Longest wait of a group watcher on the group's log, and its pause after an error."""


def watch(
    sync: Any,
    on_segments_changed: Callable[[int], Any] | None,
    on_end_of_data: Callable[[], Any] | None,
    pause: Any,
    stopped: Callable[[], bool] = lambda: False,
) -> Steps[None]:
    """A group watcher (until ``stopped()``): call ``on_segments_changed(count)`` whenever
    the number of segments the group reads (assigned plus unassigned) changes and
    ``on_end_of_data()`` once a bounded group is done, waiting on the group's log ``sync``
    in between; the listeners are calls too (an asyncio driver awaits one that is a
    coroutine function). An error (a listener's, an outage) is logged and, after
    ``pause.wait(WATCH_SECONDS)``, the watch goes on."""
    count, ended = -1, False
    while not stopped():
        try:
            yield call_on(sync, "fetch_updates")
            state: GroupState = sync.state
            segments = len(state.assigned) + len(state.unassigned)
            if segments != count and on_segments_changed is not None:
                yield Call("__call__", (segments,), target=on_segments_changed)
            count = segments
            if state.end_of_data and not ended:
                ended = True
                if on_end_of_data is not None:
                    yield Call("__call__", target=on_end_of_data)
            yield call_on(sync, "wait_for_updates", WATCH_SECONDS)
        except Exception:  # a listener's or an outage's error must not end the watch
            logger.warning("watcher of %s: retrying after an error", sync.name, exc_info=True)
            yield call_on(pause, "wait", WATCH_SECONDS)


class GroupManagerSteps:
    """The reader groups of ``scope``, as procedures on ``connection`` (threaded or
    asyncio)."""

    def __init__(self, scope: str, connection: Any, writer_label: str | None = None) -> None:
        self.scope = validate_name(scope, "scope")
        self.connection = connection
        self.streams = StreamSteps(connection)
        self.writer_label = writer_label

    def create_reader_group(self, name: str, config: ReaderGroupConfig) -> Steps[bool]:
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
        starts, end = yield from resolve_group(self.streams, scope, config)
        now = yield from self.streams.server_time_ms()

        def add(state: catalog.Catalog) -> Decision[bool]:
            if name in catalog.groups_of(state):
                return [], False
            streams = tuple(t for _, t in config.scoped_streams(scope))
            return [catalog.AddGroup(name, now, streams)], True

        created = yield from self.streams.update_catalog(scope, add)
        sync = self.connection.synchronizer(
            group_sync_name(scope, name), UPDATE_TYPES, STATE_TYPES, writer_label=self.writer_label
        )
        lost = lambda: DataLostError(  # noqa: E731
            f"the state of reader group {scope}/{name} vanished from Redis; "
            "delete_reader_group removes what is left of it"
        )
        initial = new_group(scope, name, config, starts, now, end)
        yield from vanished.initialize_once(self.connection, scope, sync, initial, lost)
        if created:
            logger.info("created reader group %s/%s reading %s", scope, name, list(config.streams))
        return created

    def group(self, name: str, clock: Callable[[], float] = time.monotonic) -> GroupSteps:
        """The procedures of group ``name`` (nothing read yet)."""
        validate_name(name, "reader group")
        return GroupSteps(self.connection, self.scope, name, self.writer_label, clock=clock)

    def list_reader_groups(self) -> Steps[list[str]]:
        return sorted(catalog.groups_of((yield from self.streams.catalog(self.scope))))

    def delete_reader_group(self, name: str, *, force: bool = False) -> Steps[bool]:
        """Delete the group's state and heartbeats; ``False`` if it did not exist. Refused
        (ReaderGroupInUseError naming them) while it has online readers, unless ``force``."""
        validate_name(name, "reader group")
        sync_name = group_sync_name(self.scope, name)
        if not force:
            try:
                members = yield from self.group(name).members()
                online = [m for m in members if not m.stale]
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
            removed = yield from self.streams.update_catalog(self.scope, remove)
        except ScopeNotFoundError:
            removed = False
        sync = self.connection.synchronizer(sync_name, UPDATE_TYPES, STATE_TYPES)
        yield from vanished.forget(self.connection, self.scope, sync_name)
        with translate_errors("delete reader group"):
            existed = yield call_on(sync, "delete")
        yield call_on(self.connection.heartbeat_store(sync_name), "delete")
        if removed or existed:
            logger.info(
                "deleted reader group %s/%s%s", self.scope, name, " (forced)" if force else ""
            )
        return bool(removed or existed)
