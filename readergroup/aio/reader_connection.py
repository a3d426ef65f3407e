"""What an asyncio reader needs of Redis beside its factory's
:class:`~readergroup.storage.aio_connection.AsyncConnection`: the state logs
(:class:`~statesync.AsyncRedisLogBackend` on the same client, with a blocking twin for ``XREAD
BLOCK``), the segment reads (:class:`~readergroup.storage.aio_reads.AsyncSegmentReads`), one
group's heartbeats (:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`), and
joining a group (:func:`join_group`, the asyncio twin of
:func:`readergroup.admin.group_manager.join_group`)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from readergroup.admin.aio_group_member import AsyncGroupMember, CachedAnnouncements
from readergroup.core.errors import ReaderGroupError, ReaderGroupNotFoundError
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES
from readergroup.core.names import group_sync_name, validate_name
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.format_negotiation import NegotiatedFormat
from readergroup.storage.translate import missing_as, translate_errors
from statesync import AsyncStateSynchronizer, SyncConfig, Update
from statesync.aio_redis_backend import AsyncRedisLogBackend

logger = logging.getLogger(__name__)


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

    async def close(self) -> None:
        """Close the blocking client the log backend made (the shared client stays open)."""
        blocking = self.log_backend.blocking_client
        assert isinstance(blocking, Redis)
        await blocking.aclose()
        await blocking.connection_pool.disconnect()


async def join_group(
    connection: AsyncReaderConnection,
    scope: str,
    group: str,
    reader_id: str,
    *,
    takeover: bool = False,
) -> tuple[AsyncGroupMember, ReaderGroupConfig]:
    """Join ``reader_id`` to ``scope/group``; its member handle and the group config
    (``takeover``: see :meth:`~readergroup.admin.group_member.MemberSteps.join_steps`). Raises
    :class:`ReaderGroupNotFoundError` if the group does not exist."""
    validate_name(reader_id, "reader id")
    name = group_sync_name(scope, group)
    heartbeats = AsyncHeartbeatStore(connection.client, connection.keys, name)
    announcements = CachedAnnouncements(heartbeats)
    sync = connection.synchronizer(
        name,
        UPDATE_TYPES,
        STATE_TYPES,
        writer_label=reader_id,
        entry_version=NegotiatedFormat(announcements),  # type: ignore[arg-type]
    )
    with missing_as(
        lambda: ReaderGroupNotFoundError(f"reader group {scope}/{group} does not exist"),
        "read group",
    ):
        await sync.follow()
    try:  # informational (describe --members): a failure must not stop the reader joining
        await heartbeats.register(reader_id, f"{socket.gethostname()}/{os.getpid()}")
    except ReaderGroupError as exc:
        logger.warning("reader %s: could not record its host/pid: %s", reader_id, exc)
    with translate_errors("join"):
        config: ReaderGroupConfig = sync.state.config
        member = AsyncGroupMember(
            sync,
            heartbeats,
            reader_id,
            session_timeout_ms=int(config.session_timeout * 1000),
            max_moves=config.max_segment_moves,
            judge_every_ms=int(config.heartbeat_interval * 1000),
            announcements=announcements,
        )
        await member.join(takeover=takeover)
    return member, config
