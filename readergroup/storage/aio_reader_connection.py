"""What an asyncio reader needs of its backend, as Protocols: :class:`AsyncReaderConnection`
(the state logs' synchronizers and wake-up keys, the segment reads of :class:`AsyncReads`, the
groups' heartbeats of :class:`AsyncHeartbeats`, the segment states and seals of
:class:`~readergroup.storage.aio_connection_api.AsyncAppends`), checked by mypy against both
implementations: :class:`AsyncRedisReaderConnection` here, beside a factory's
:class:`~readergroup.storage.aio_connection.AsyncConnection` (the state logs on
:class:`~statesync.AsyncRedisLogBackend` with a blocking twin for ``XREAD BLOCK``, the segment
reads of :class:`~readergroup.storage.aio_reads.AsyncSegmentReads`, the heartbeats of
:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`), and the memory
backend's :class:`~readergroup.testing.aio_memory_reader.AsyncMemoryReaderConnection`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis

from readergroup.core.config import ClientConfig
from readergroup.core.group_state import ReaderRecord
from readergroup.core.log_format import Announcement
from readergroup.core.membership import Renewal
from readergroup.storage.aio_admin import AsyncAdminConnection, close_client
from readergroup.storage.aio_connection_api import AsyncAppends
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.aio_reads import AsyncPendingRead, AsyncSegmentReads
from readergroup.storage.aio_synchronizers import AsyncSynchronizers
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_records import SegmentState
from statesync import AsyncStateSynchronizer, Update
from statesync.aio_redis_backend import AsyncClient, AsyncRedisLogBackend

COMMAND_CONNECTIONS = 64
"""Sockets the readers of one factory use for commands at most (``XREAD BLOCK`` waits have
their own, unbounded: each parked reader holds one)."""


class AsyncReads(Protocol):
    """A reader's segment reads, awaited (see :class:`~readergroup.storage.aio_reads.
    AsyncSegmentReads` for what each means)."""

    cluster: bool
    """Whether the reads go to a Redis Cluster (one ``XREAD`` per slot: a reader then reads
    no further ahead and parks no read, as the threaded one on a cluster)."""

    async def read_keys(
        self, positions: Mapping[str, str], timeout: float, limit: int
    ) -> dict[str, Any]: ...

    async def xread(
        self, positions: Mapping[str, str], limit: int, block: float | None = None
    ) -> dict[str, Any]: ...

    def start(
        self, positions: Mapping[str, str], limit: int, block: float | None = None
    ) -> AsyncPendingRead: ...

    async def epochs(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]: ...

    async def epoch_histories(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, tuple[int, list[tuple[int, int]]]]: ...

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]: ...

    async def lost_in_failover(
        self, scope: str, stream: str, segment: int, begin: int, end: int
    ) -> bool: ...

    async def read_raw(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> Any: ...


class AsyncHeartbeats(Protocol):
    """One group's heartbeats, registered clients and announced log formats, awaited (see
    :class:`~readergroup.storage.heartbeat_store.RedisHeartbeatStore`)."""

    async def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]: ...

    async def renew(
        self,
        reader_id: str,
        generation: int,
        *,
        session_ms: int,
        judge_every_ms: int,
        judge: bool = False,
    ) -> Renewal: ...

    async def forget(self, reader_id: str, generation: int) -> None: ...

    async def register(self, reader_id: str, client: str) -> None: ...

    async def clients(self) -> dict[str, str]: ...

    async def announce(self, record: ReaderRecord, log_format: int) -> None: ...

    async def announcements(self) -> dict[str, Announcement]: ...

    async def withdraw(self, reader_id: str, generation: int) -> None: ...

    async def delete(self) -> None: ...


class AsyncReaderConnection(Protocol):
    """What the asyncio reader (its join, group session and fetcher) uses of its backend; one
    per factory, shared by its readers. :meth:`close` releases what it opened (the factory's
    connection stays open)."""

    @property
    def config(self) -> ClientConfig: ...

    @property
    def keys(self) -> KeyLayout: ...

    @property
    def segments(self) -> AsyncAppends: ...

    @property
    def reads(self) -> AsyncReads: ...

    def wake_on(
        self, sync_name: str, after_revision: int, *, wakes_only: bool
    ) -> tuple[str, str]: ...

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]: ...

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        *,
        writer_label: str | None = None,
        entry_version: Any = None,
    ) -> AsyncStateSynchronizer[Any]: ...

    def heartbeat_store(self, sync_name: str) -> AsyncHeartbeats: ...

    def primary_switches(self) -> int:
        """See :meth:`~readergroup.storage.connection_api.Connection.primary_switches`."""
        ...

    async def close(self) -> None: ...


def _queueing_twin(client: AsyncClient, socket_timeout: float) -> Redis | None:
    """A client like ``client`` whose pool waits for a free connection (``None`` for a pool
    that is not a plain one, such as a Sentinel's, or a cluster's client: that client is used
    as it is)."""
    if not isinstance(client, Redis):
        return None
    pool = client.connection_pool
    if type(pool) is not ConnectionPool:
        return None
    queueing = BlockingConnectionPool(
        connection_class=pool.connection_class,
        max_connections=COMMAND_CONNECTIONS,
        timeout=socket_timeout,
        **pool.connection_kwargs,
    )
    return Redis(connection_pool=queueing)


class AsyncRedisReaderConnection(AsyncSynchronizers):
    """The reader side of the Redis an asyncio factory's managers use (``admin``: the
    factory's :class:`~readergroup.storage.aio_admin.AsyncAdminConnection`, whose key layout,
    synchronizer configuration and client of blocking waits it shares: one set of connections
    per factory). It owns only its commands' client: :meth:`close` closes that."""

    log_backend: AsyncRedisLogBackend

    def __init__(self, admin: AsyncAdminConnection) -> None:
        connection = admin.connection
        config = connection.config
        self.connection = connection
        self.config = config
        self.keys = admin.keys
        self.sync_config = admin.sync_config
        self._own_client = _queueing_twin(connection.client, config.socket_timeout)
        self.client = self._own_client or connection.client
        """The readers' commands: a pool that queues a command for a free connection (up to
        the socket timeout) instead of failing, so hundreds of readers of one loop joining at
        once share :data:`COMMAND_CONNECTIONS` sockets."""
        self.segments = connection.segments
        blocking = admin.log_backend.blocking_client
        self.log_backend = AsyncRedisLogBackend(
            self.client,
            key_prefix=config.key_prefix,
            acks=config.durability,
            blocking_client=blocking,
            nodes=connection.nodes if connection.nodes.cluster else None,
        )
        self.reads = AsyncSegmentReads(
            self.client,
            self.keys,
            blocking,
            nodes=connection.nodes,
            blocking_nodes=connection.blocking_nodes,
        )

    def wake_on(self, sync_name: str, after_revision: int, *, wakes_only: bool) -> tuple[str, str]:
        return self.log_backend.wake_on(sync_name, after_revision, wakes_only=wakes_only)

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]:
        return self.log_backend.follower_wake_on(sync_name, after_revision, follower)

    def heartbeat_store(self, sync_name: str) -> AsyncHeartbeatStore:
        """The heartbeats of the group whose synchronizer is ``sync_name``."""
        client: Any = self.client  # (a cluster's client runs its script and hashes alike)
        return AsyncHeartbeatStore(client, self.keys, sync_name)

    def primary_switches(self) -> int:
        """The connection's (see :meth:`AsyncConnection.primary_switches
        <readergroup.storage.aio_connection.AsyncConnection.primary_switches>`)."""
        return self.connection.primary_switches()

    async def close(self) -> None:
        """Close the commands' client made here (the factory's connection and the managers'
        blocking client stay open: their owners close them)."""
        if self._own_client is not None:
            await close_client(self._own_client)


def _conforms(connection: AsyncRedisReaderConnection) -> AsyncReaderConnection:
    """mypy checks here that the Redis reader side has the asyncio reader's interface."""
    return connection
