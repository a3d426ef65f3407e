"""What the admin and client layers use of a connection, as a Protocol:
:class:`~readergroup.storage.connection.RedisConnection` on Redis and
:class:`~readergroup.testing.memory_connection.MemoryConnection` in memory (so one reader/writer
test suite runs on both, and ``mypy --strict`` checks both against this)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from readergroup.core.config import ClientConfig
from readergroup.core.membership import HeartbeatStore
from readergroup.core.names import is_group_sync_name
from readergroup.storage.format_negotiation import NegotiatedFormat
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_store import SegmentStorage
from statesync import LogBackend, StateSynchronizer, SyncConfig, Update


class SynchronizerSource:
    """Opens state synchronizers on a connection's log backend with its synchronizer config:
    the one implementation of :meth:`Connection.synchronizer` both connections inherit."""

    log_backend: LogBackend
    _sync_config: SyncConfig

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        writer_label: str | None = None,
    ) -> StateSynchronizer[Any]:
        """A state synchronizer on this connection (it does not own the connection). A reader
        group's appends in the format its members negotiated (:class:`NegotiatedFormat`)."""
        is_group = is_group_sync_name(name)
        return StateSynchronizer(
            self.log_backend,
            name,
            update_types=update_types,
            state_types=state_types,
            config=self._sync_config,
            writer_label=writer_label,
            entry_version=NegotiatedFormat(self.heartbeat_store(name)) if is_group else None,
        )

    def heartbeat_store(self, sync_name: str) -> GroupHeartbeats:
        raise NotImplementedError  # each connection's own


class GroupHeartbeats(HeartbeatStore, Protocol):
    """One group's heartbeats, with the readers' host/pid records."""

    def register(self, reader_id: str, client: str) -> None: ...

    def clients(self) -> dict[str, str]: ...

    def announcements(self) -> dict[str, tuple[int, int, int]]: ...

    def delete(self) -> None: ...


class PendingRead(Protocol):
    """A read of several keys sent ahead of need (see
    :class:`~readergroup.storage.read_ahead.ReadAhead`). Call :meth:`result` or :meth:`cancel`
    exactly once."""

    positions: dict[str, str]

    def ready(self, timeout: float = 0.0) -> bool: ...

    def result(self, timeout: float) -> dict[str, Any] | None: ...

    def cancel(self) -> None: ...


class CreatedRecords(Protocol):
    """The hash commands :mod:`readergroup.storage.vanished` sends (its created-records)."""

    def hexists(self, name: str, key: str, /) -> Any: ...

    def hset(self, name: str, key: str, value: Any, /) -> Any: ...

    def hdel(self, name: str, key: str, /) -> Any: ...


class Subscribers(Protocol):
    """External retention subscribers' published cuts (see
    :class:`~readergroup.storage.subscriber_store.SubscriberStore`)."""

    def publish(self, scope: str, stream: str, subscriber: str, cut: str) -> None: ...

    def unsubscribe(self, scope: str, stream: str, subscriber: str) -> None: ...

    def published(self, scope: str, stream: str) -> dict[str, str]: ...

    def delete(self, scope: str, stream: str) -> None: ...


class Connection(Protocol):
    """One backend's stores, synchronizers and blocking reads, shared by everything a factory
    or manager creates."""

    config: ClientConfig
    keys: KeyLayout
    cluster: bool

    @property
    def segments(self) -> SegmentStorage: ...

    @property
    def records(self) -> CreatedRecords: ...

    @property
    def subscribers(self) -> Subscribers: ...

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        writer_label: str | None = None,
    ) -> StateSynchronizer[Any]: ...

    def server_time_ms(self) -> int: ...

    def primary_switches(self) -> int:
        """A number that changes whenever the connection's clients learn that the primary they
        use changed (a Sentinel switch, a cluster slot moved) without an error reaching their
        user: positions held on the old primary may then be gone. Constant where no switch can
        go unnoticed."""
        ...

    def close(self) -> None: ...

    def forget_stream(self, scope: str, stream: str) -> None:
        """Delete what a stream being deleted leaves beside its segments and metadata: its
        subscribers' cuts (and, on Redis, the Spark sink's record of committed jobs), so that
        a stream created again under its name starts clean."""
        ...

    def heartbeat_store(self, sync_name: str) -> GroupHeartbeats: ...

    def wake_on(
        self, sync_name: str, after_revision: int, *, wakes_only: bool = False
    ) -> tuple[str, str]: ...

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]: ...

    def read_keys(
        self, positions: Mapping[str, str], timeout: float, limit: int
    ) -> dict[str, Any]: ...

    def read_ahead(
        self, positions: Mapping[str, str], limit: int, *, block: float | None = None
    ) -> PendingRead: ...
