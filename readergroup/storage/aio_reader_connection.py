"""What an asyncio reader needs of Redis beside its factory's
:class:`~readergroup.storage.aio_connection.AsyncConnection`: the state logs
(:class:`~statesync.AsyncRedisLogBackend` on the same client, with a blocking twin for ``XREAD
BLOCK``), the segment reads (:class:`~readergroup.storage.aio_reads.AsyncSegmentReads`) and the
groups' heartbeats (:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis

from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.aio_reads import AsyncSegmentReads
from statesync import AsyncStateSynchronizer, SyncConfig, Update
from statesync.aio_redis_backend import AsyncRedisLogBackend

COMMAND_CONNECTIONS = 64
"""Sockets the readers of one factory use for commands at most (``XREAD BLOCK`` waits have
their own, unbounded: each parked reader holds one)."""


def _queueing_twin(client: Redis, socket_timeout: float) -> Redis | None:
    """A client like ``client`` whose pool waits for a free connection (``None`` for a pool
    that is not a plain one, such as a Sentinel's: that client is used as it is)."""
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


class AsyncReaderConnection:
    """The reader side of an :class:`AsyncConnection` (it does not own it; :meth:`close`
    closes only the clients it made)."""

    def __init__(self, connection: AsyncConnection) -> None:
        config = connection.config
        self.connection = connection
        self.config = config
        self.keys = connection.keys
        self._own_client = _queueing_twin(connection.client, config.socket_timeout)
        self.client = self._own_client or connection.client
        """The readers' commands: a pool that queues a command for a free connection (up to
        the socket timeout) instead of failing, so hundreds of readers of one loop joining at
        once share :data:`COMMAND_CONNECTIONS` sockets."""
        self.segments = connection.segments
        self.log_backend = AsyncRedisLogBackend(
            self.client, key_prefix=config.key_prefix, acks=config.durability
        )
        blocking = self.log_backend.blocking_client
        assert isinstance(blocking, Redis)  # (no cluster in the asyncio API yet)
        self.reads = AsyncSegmentReads(self.client, connection.keys, blocking)
        self.sync_config = SyncConfig(
            key_prefix=config.key_prefix,
            retry=config.retry,
            socket_timeout=config.socket_timeout,
            compact_every=config.compact_every,
            acks=config.durability,
        )

    def wake_on(self, sync_name: str, after_revision: int, *, wakes_only: bool) -> tuple[str, str]:
        return self.log_backend.wake_on(sync_name, after_revision, wakes_only=wakes_only)

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]:
        return self.log_backend.follower_wake_on(sync_name, after_revision, follower)

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        *,
        writer_label: str | None = None,
        entry_version: Any = None,
    ) -> AsyncStateSynchronizer[Any]:
        """An asyncio state synchronizer on this connection's logs."""
        return AsyncStateSynchronizer(
            self.log_backend,
            name,
            update_types=update_types,
            state_types=state_types,
            config=self.sync_config,
            writer_label=writer_label,
            entry_version=entry_version,
        )

    def heartbeat_store(self, sync_name: str) -> AsyncHeartbeatStore:
        """The heartbeats of the group whose synchronizer is ``sync_name``."""
        return AsyncHeartbeatStore(self.client, self.keys, sync_name)

    async def close(self) -> None:
        """Close the blocking client the log backend made (the shared client stays open)."""
        clients = [self.log_backend.blocking_client]
        if self._own_client is not None:
            clients.append(self._own_client)
        for client in clients:
            assert isinstance(client, Redis)
            await client.aclose()
            await client.connection_pool.disconnect()
