"""What an asyncio reader needs of Redis beside its factory's
:class:`~readergroup.storage.aio_connection.AsyncConnection`: the state logs
(:class:`~statesync.AsyncRedisLogBackend` on the same client, with a blocking twin for ``XREAD
BLOCK``), the segment reads (:class:`~readergroup.storage.aio_reads.AsyncSegmentReads`) and the
groups' heartbeats (:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.aio_reads import AsyncSegmentReads
from statesync import AsyncStateSynchronizer, SyncConfig, Update
from statesync.aio_redis_backend import AsyncRedisLogBackend


class AsyncReaderConnection:
    """The reader side of an :class:`AsyncConnection` (it does not own it; :meth:`close`
    closes only the clients it made)."""

    def __init__(self, connection: AsyncConnection) -> None:
        config = connection.config
        self.connection = connection
        self.config = config
        self.keys = connection.keys
        self.client = connection.client
        self.segments = connection.segments
        self.log_backend = AsyncRedisLogBackend(
            connection.client, key_prefix=config.key_prefix, acks=config.durability
        )
        blocking = self.log_backend.blocking_client
        assert isinstance(blocking, Redis)  # (no cluster in the asyncio API yet)
        self.reads = AsyncSegmentReads(connection.client, connection.keys, blocking)
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
        blocking = self.log_backend.blocking_client
        assert isinstance(blocking, Redis)
        await blocking.aclose()
        await blocking.connection_pool.disconnect()
