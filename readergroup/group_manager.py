"""``ReaderGroupManager`` and ``ReaderGroup``: create, inspect and administer reader groups."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

from readergroup import catalog
from readergroup.config import ClientConfig
from readergroup.errors import InvalidStreamCutError, ReaderGroupError, ScopeNotFoundError
from readergroup.group_config import ReaderGroupConfig, StartPosition
from readergroup.group_state import (
    STATE_TYPES,
    UPDATE_TYPES,
    GroupState,
    RemoveReader,
    SegKey,
    new_group,
)
from readergroup.membership import GroupMember
from readergroup.names import group_sync_name, validate_name
from readergroup.redis_io import RedisConnection, translate_errors
from readergroup.stream_cut import StreamCut
from readergroup.stream_manager import StreamManager
from statesync import StateSynchronizer, SynchronizerNotFoundError


class ReaderGroupNotFoundError(ReaderGroupError, LookupError):
    """The reader group does not exist in the scope."""


class RedisHeartbeatStore:
    """Heartbeats in a Redis hash beside the group's state (same hash tag), stamped by the
    server's clock inside ``heartbeat.lua``."""

    def __init__(self, connection: RedisConnection, key: str) -> None:
        self._connection = connection
        self._key = key

    def beat(self, reader_id: str, generation: int) -> tuple[int, dict[str, tuple[int, int]]]:
        return self._connection.heartbeat(self._key, reader_id, generation)

    def forget(self, reader_id: str) -> None:
        self._connection.forget_heartbeat(self._key, reader_id)


def heartbeat_key(connection: RedisConnection, sync_name: str) -> str:
    return f"{connection.config.key_prefix}:{{{sync_name}}}:heartbeats"


@dataclass(frozen=True, slots=True)
class SegmentDistribution:
    """Who owns what: reader -> segments, and the segments nobody owns yet."""

    assigned: dict[str, list[SegKey]]
    unassigned: list[SegKey]
    future: list[SegKey]
    completed: int


class ReaderGroup:
    """A handle on one reader group (from :meth:`ReaderGroupManager.get_reader_group`)."""

    def __init__(self, connection: RedisConnection, scope: str, name: str) -> None:
        self._connection = connection
        self.scope = scope
        self.name = name
        self.sync: StateSynchronizer[GroupState] = connection.synchronizer(
            group_sync_name(scope, name), UPDATE_TYPES, STATE_TYPES
        )
        self.heartbeats = RedisHeartbeatStore(connection, heartbeat_key(connection, self.sync.name))
        self.refresh()

    def refresh(self) -> GroupState:
        try:
            with translate_errors("read group"):
                self.sync.fetch_updates()
        except ReaderGroupError as exc:
            if isinstance(exc.__cause__, SynchronizerNotFoundError):
                raise ReaderGroupNotFoundError(
                    f"reader group {self.scope}/{self.name} does not exist"
                ) from exc
            raise
        state: GroupState = self.sync.state
        return state

    @property
    def config(self) -> ReaderGroupConfig:
        return self.refresh().config

    def get_online_readers(self) -> list[str]:
        return sorted(self.refresh().readers)

    def get_segment_distribution(self) -> SegmentDistribution:
        state = self.refresh()
        assigned: dict[str, list[SegKey]] = {r: [] for r in state.readers}
        for segment, assignment in sorted(state.assigned.items()):
            assigned.setdefault(assignment.reader, []).append(segment)
        return SegmentDistribution(
            assigned, sorted(state.unassigned), sorted(state.future), len(state.completed)
        )

    def reader_offline(self, reader_id: str, positions: dict[SegKey, int] | None = None) -> bool:
        """Declare ``reader_id`` offline: its segments return at ``positions`` where given,
        else at their last committed positions. ``False`` if it was not online."""

        def remove(state: GroupState) -> Any:
            record = state.readers.get(reader_id)
            if record is None:
                return [], False
            given = tuple((positions or {}).items())
            return [RemoveReader(reader_id, record.generation, given)], True

        with translate_errors("reader offline"):
            removed = bool(self.sync.update_state(remove))
            self.heartbeats.forget(reader_id)
        return removed


class ReaderGroupManager:
    """Creates, lists and deletes the reader groups of one scope.

    Example::

        with ReaderGroupManager.from_url("shop", url) as rgm:
            rgm.create_reader_group("billing", ReaderGroupConfig(streams=["shop/orders"]))
    """

    def __init__(
        self, scope: str, connection: RedisConnection, *, owns_connection: bool = False
    ) -> None:
        self.scope = validate_name(scope, "scope")
        self._connection = connection
        self._owns_connection = owns_connection
        self._streams = StreamManager(connection)

    @classmethod
    def from_url(
        cls, scope: str, url: str, config: ClientConfig | None = None
    ) -> ReaderGroupManager:
        return cls(scope, RedisConnection.from_url(url, config), owns_connection=True)

    def close(self) -> None:
        if self._owns_connection:
            self._connection.close()

    def __enter__(self) -> ReaderGroupManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _starts(self, config: ReaderGroupConfig) -> dict[SegKey, int]:
        starts: dict[SegKey, int] = {}
        for scope, stream in config.scoped_streams(self.scope):
            scoped = f"{scope}/{stream}"
            cut = self.resolve_start(scope, stream, config.start_for(stream, scoped))
            for segment, offset in cut.positions.items():
                starts[(scoped, segment)] = offset
        return starts

    def resolve_start(self, scope: str, stream: str, start: StartPosition) -> StreamCut:
        """The stream cut a start position means now."""
        if isinstance(start, StreamCut):
            if (start.scope, start.stream) != (scope, stream):
                raise InvalidStreamCutError(
                    f"start cut is for {start.scoped_stream}, not {scope}/{stream}"
                )
            self._streams.check_cut(start)
            return start
        if start == "head":
            return self._streams.head_cut(scope, stream)
        if start == "tail":
            return self._streams.tail_cut(scope, stream)
        assert isinstance(start, int)
        return self._streams.cut_at_time(scope, stream, start)

    def create_reader_group(self, name: str, config: ReaderGroupConfig) -> bool:
        """Create group ``name``; ``False`` if it existed (its configuration is kept)."""
        validate_name(name, "reader group")
        if not isinstance(config, ReaderGroupConfig):
            raise TypeError("config must be a ReaderGroupConfig")
        starts = self._starts(config)  # validates every stream and start first
        now = self._connection.server_time_ms()
        scope = self.scope

        def add(state: catalog.Catalog) -> Any:
            if scope not in catalog.scopes_of(state):
                raise ScopeNotFoundError(f"scope {scope!r} does not exist")
            if name in catalog.groups_of(state, scope):
                return [], False
            return [catalog.AddGroup(scope, name, now)], True

        created = bool(self._streams.update_catalog(add))
        sync = self._connection.synchronizer(
            group_sync_name(scope, name), UPDATE_TYPES, STATE_TYPES
        )
        with translate_errors("create reader group"):
            sync.initialize(new_group(scope, name, config, starts, now))
        return created

    def get_reader_group(self, name: str) -> ReaderGroup:
        validate_name(name, "reader group")
        return ReaderGroup(self._connection, self.scope, name)

    def list_reader_groups(self) -> list[str]:
        return sorted(catalog.groups_of(self._streams.catalog(), self.scope))

    def delete_reader_group(self, name: str) -> bool:
        """Delete the group's state and heartbeats; ``False`` if it did not exist."""
        validate_name(name, "reader group")
        sync_name = group_sync_name(self.scope, name)
        sync = self._connection.synchronizer(sync_name, UPDATE_TYPES, STATE_TYPES)
        with translate_errors("delete reader group"):
            existed = sync.delete()
            self._connection.client.delete(heartbeat_key(self._connection, sync_name))
        scope = self.scope

        def remove(state: catalog.Catalog) -> Any:
            if name not in catalog.groups_of(state, scope):
                return [], False
            return [catalog.RemoveGroup(scope, name)], True

        return bool(self._streams.update_catalog(remove)) or existed


def join_group(
    connection: RedisConnection, scope: str, group: str, reader_id: str
) -> tuple[GroupMember, ReaderGroupConfig]:
    """Join ``reader_id`` to ``scope/group``; return its member handle and the group config."""
    validate_name(reader_id, "reader id")
    handle = ReaderGroup(connection, scope, group)
    sync = connection.synchronizer(
        handle.sync.name, UPDATE_TYPES, STATE_TYPES, writer_label=reader_id
    )
    with translate_errors("join"):
        sync.fetch_updates()
        config: ReaderGroupConfig = sync.state.config
        member = GroupMember(
            sync,
            handle.heartbeats,
            reader_id,
            session_timeout_ms=int(config.session_timeout * 1000),
            max_moves=config.max_segment_moves,
        )
        member.join()
    return member, config
