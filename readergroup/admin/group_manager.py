"""``ReaderGroupManager`` and ``ReaderGroup``: create, inspect and administer reader groups.

Their decisions are :mod:`readergroup.admin.group_steps`' procedures, run blocking here and
awaited by :mod:`readergroup.aio.group_manager`'s asyncio twins."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from readergroup.admin.group_member import GroupMember
from readergroup.admin.group_steps import (
    CheckpointResult,
    GroupManagerSteps,
    GroupMetrics,
    GroupSteps,
    Lag,
    ResetResult,
    SegmentDistribution,
    SegmentLag,
    Start,
    plan_checkpoint,
    watch,
)
from readergroup.core.calls import drive
from readergroup.core.closing import Closing
from readergroup.core.config import ClientConfig
from readergroup.core.errors import ReaderGroupError
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES, GroupState, SegKey
from readergroup.core.group_view import MemberView
from readergroup.core.names import validate_name
from readergroup.core.stream_cut import StreamCut
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.storage.translate import translate_errors
from statesync import StateSynchronizer

__all__ = [
    "CheckpointResult",
    "GroupMetrics",
    "GroupWatcher",
    "Lag",
    "ReaderGroup",
    "ReaderGroupManager",
    "ResetResult",
    "SegmentDistribution",
    "SegmentLag",
    "join_group",
    "plan_checkpoint",
]

logger = logging.getLogger(__name__)


class ReaderGroup:
    """A handle on one reader group (from :meth:`ReaderGroupManager.get_reader_group`).
    Each method runs :class:`~readergroup.admin.group_steps.GroupSteps`' procedure of the
    same name, blocking."""

    def __init__(
        self, connection: Connection, scope: str, name: str, writer_label: str | None = None
    ) -> None:
        self._connection = connection
        self.steps = GroupSteps(connection, scope, name, writer_label)
        self.scope = scope
        self.name = name
        self.sync: StateSynchronizer[GroupState] = self.steps.sync
        self.heartbeats = self.steps.heartbeats
        self.refresh()

    def refresh(self) -> GroupState:
        return drive(self.steps.refresh())

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
        return drive(self.steps.members())

    def older_readers_online(self) -> list[str]:
        """The online members running a version older than this one (they announced an older
        log format, or none), sorted."""
        return drive(self.steps.older_readers_online())

    def compact_log(self) -> int:
        """Snapshot the group's log at its head; return that revision. A reader joining reads
        the log from its newest snapshot, which every supported version reads: stop every
        reader of the group, compact, and readers of the previous version can join although
        entries of a newer log format were written (the last reader to leave does this itself;
        this is for readers that crashed). With no member live, the readers' lags are left out
        of the snapshot (they need a newer form of it; nobody ranks by them)."""
        return drive(self.steps.compact_log())

    def missing_streams(self) -> list[str]:
        """The streams the group reads that no longer exist."""
        return drive(self.steps.missing_streams())

    def status(self) -> str:
        """``stable``, ``rebalancing``, ``empty`` or ``dead`` (see
        :mod:`readergroup.core.group_view`)."""
        return drive(self.steps.status())

    def get_segment_distribution(self) -> SegmentDistribution:
        return drive(self.steps.get_segment_distribution())

    def is_end_of_data(self) -> bool:
        """A bounded group whose every segment was read to its end cut."""
        return drive(self.steps.is_end_of_data())

    def get_stream_cuts(self) -> dict[str, StreamCut]:
        """The group's committed positions as one stream cut per stream."""
        return drive(self.steps.get_stream_cuts())

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
        return drive(
            self.steps.initiate_checkpoint(
                name, timeout, declare_offline=declare_offline, silent=silent
            )
        )

    def generate_stream_cuts(self, timeout: float = 30.0) -> dict[str, StreamCut]:
        """A silent checkpoint: each reader reports its processed positions without handing the
        application an event. Returns one stream cut per stream."""
        return drive(self.steps.generate_stream_cuts(timeout))

    # -- resets -----------------------------------------------------------------------------
    def reset_reader_group(
        self, start: Start = None, *, shift_by: int | None = None, timeout: float = 30.0
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
        return drive(self.steps.reset_reader_group(start, shift_by=shift_by, timeout=timeout))

    def apply_reset(self, plan: Mapping[SegKey, int], *, timeout: float = 30.0) -> ResetResult:
        """Apply a plan from :meth:`plan_reset` (or an edited one): every stream the group reads
        must have positions, each within its segment's data; otherwise nothing changes. Returns
        the positions and the readers declared offline because they did not acknowledge the
        reset within ``timeout``."""
        return drive(self.steps.apply_reset(plan, timeout=timeout))

    def plan_reset(
        self,
        start: Start = None,
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
        return drive(
            self.steps.plan_reset(
                start, shift_by=shift_by, to_offset=to_offset, streams=streams, segments=segments
            )
        )

    # -- lag --------------------------------------------------------------------------------
    def get_metrics(self) -> GroupMetrics:
        """Lag per segment, reader and group in events, bytes and milliseconds."""
        return drive(self.steps.get_metrics())

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
        return drive(self.steps.reader_offline(reader_id, positions))


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
        drive(watch(self._sync, self._on_segments, self._on_end, self._stop, self._stop.is_set))

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
        self.steps = GroupManagerSteps(scope, connection, writer_label)
        self.scope = self.steps.scope
        self._connection = connection
        self._owns_connection = owns_connection
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
        return drive(self.steps.create_reader_group(name, config))

    def get_reader_group(self, name: str) -> ReaderGroup:
        validate_name(name, "reader group")
        return ReaderGroup(self._connection, self.scope, name, self._writer_label)

    def list_reader_groups(self) -> list[str]:
        return drive(self.steps.list_reader_groups())

    def delete_reader_group(self, name: str, *, force: bool = False) -> bool:
        """Delete the group's state and heartbeats; ``False`` if it did not exist.

        Like Kafka, a group with online readers (a heartbeat within the session timeout) is not
        deleted: ReaderGroupInUseError names them. With ``force`` it is, and those readers get
        ReaderGroupNotFoundError on their next read.
        """
        return drive(self.steps.delete_reader_group(name, force=force))


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
