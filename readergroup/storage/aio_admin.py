"""What the asyncio managers need of Redis, on ``redis.asyncio``:
:class:`AsyncAdminConnection`, the asyncio twin of the parts of
:class:`~readergroup.storage.connection.RedisConnection` that
:mod:`readergroup.admin.stream_steps` and :mod:`readergroup.admin.group_steps` call (the same
method names, awaited): state synchronizers (:class:`~statesync.AsyncStateSynchronizer`),
group heartbeats (:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`),
the created-records hashes, and the segment administration of :class:`AsyncSegmentAdmin`
(the same scripts, keys and reply parsing as :class:`~readergroup.storage.segment_store.
SegmentStore`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
import redis.asyncio

from readergroup.core.config import ClientConfig
from readergroup.core.log_format import UNANNOUNCED_FORMAT
from readergroup.core.names import is_group_sync_name
from readergroup.core.routing import segment_name
from readergroup.storage import segment_status
from readergroup.storage.aio_append import (
    AsyncSegmentAppends,
    commands_by_node,
    raised,
    raw_by_node,
)
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.aio_synchronizers import AsyncSynchronizers, sync_config_of
from readergroup.storage.aio_txn_store import async_transactions
from readergroup.storage.keys import KeyLayout
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_store import (
    creation_commands,
    lag_probe_commands,
    lag_probe_of,
)
from readergroup.storage.translate import as_text, translate_errors
from statesync.aio_redis_backend import AsyncClient, AsyncNodeClients, AsyncRedisLogBackend


async def close_client(client: redis.asyncio.Redis) -> None:
    """Close ``client`` and disconnect its pool's sockets (a client made on a pool of its own
    leaves the pool connected when closed)."""
    await client.aclose()
    await client.connection_pool.disconnect()


class AsyncSynchronizerSource(AsyncSynchronizers):
    """The asyncio managers' synchronizers (Redis and memory): a reader group's entries are
    appended in the format every supported version reads
    (:data:`~readergroup.core.log_format.UNANNOUNCED_FORMAT`: an administrator's appends are
    few, so it does not negotiate)."""

    def entry_version_of(self, name: str) -> Any:
        return (lambda state: UNANNOUNCED_FORMAT) if is_group_sync_name(name) else None


class AsyncSegmentAdmin(AsyncSegmentAppends):
    """Segment administration, awaited: creation, truncation, time lookups, lag probes and
    deletion, besides the appends, states, seals and openings of
    :class:`~readergroup.storage.aio_append.AsyncSegmentAppends`."""

    def __init__(
        self,
        client: AsyncClient,
        keys: KeyLayout,
        config: ClientConfig,
        nodes: AsyncNodeClients | None = None,
    ):
        super().__init__(client, keys, config.durability, nodes)
        for name in ("create_closed_segment", "truncate_segment", "offset_at_time"):
            self._scripts[name] = client.register_script(script_source(name))

    async def create_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        """Create segments' meta hashes (idempotent: an existing segment is left alone)."""
        commands = creation_commands(self._keys, scope, stream, segments, now_ms)
        with translate_errors("create segments"):
            raised(await commands_by_node(self._nodes, [c[1] for c in commands], commands))

    async def create_closed_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        """Create a scale's successors closed (see ``create_closed_segment.lua``)."""
        await self._run_each("create_closed_segment", scope, stream, segments, args=[now_ms])

    async def truncate(self, scope: str, stream: str, segment: int, offset: int) -> int:
        """Delete events below ``offset``; return how many were removed."""
        [reply] = await self._run_each(
            "truncate_segment", scope, stream, [segment], keys=2, args=[offset]
        )
        return int(reply[2])

    async def offset_at_time(
        self, scope: str, stream: str, segment: int, server_ms: int
    ) -> tuple[int, int]:
        """The first offset appended at or after ``server_ms`` (at least the head; the tail
        when every event is older), and the tail (``EVALSHA_RO``: a read-only role may)."""
        meta, events, _ = self._keys.segment(scope, stream, segment)
        script = self._scripts["offset_at_time"]
        with translate_errors("offset_at_time"):
            try:
                reply = await self._client.evalsha_ro(script.sha, 2, meta, events, server_ms)
            except redis.exceptions.NoScriptError:
                await self._client.script_load(script.script)
                reply = await self._client.evalsha_ro(script.sha, 2, meta, events, server_ms)
        segment_status.check("offset_at_time", segment_name(scope, stream, segment), reply)
        return int(reply[1]), int(reply[2])

    async def lag_probe(
        self, scope: str, stream: str, positions: Mapping[int, int]
    ) -> dict[int, tuple[int, int, int, int]]:
        """Per segment ``(tail, bytes, byte offset at position, server ms at position)`` in one
        round trip (see :meth:`~readergroup.storage.segment_store.SegmentStore.lag_probe`)."""
        commands = lag_probe_commands(self._keys, scope, stream, positions)
        with translate_errors("lag"):
            replies = raised(await raw_by_node(self._nodes, [c[1] for c in commands], commands))
        return lag_probe_of(positions, replies)

    async def delete_segments(self, scope: str, stream: str, segments: Sequence[int]) -> None:
        """Delete segments' keys: one DEL per segment (its keys share a hash slot), on the
        node holding it."""
        commands = [("DEL", *self._keys.segment(scope, stream, s)) for s in segments]
        with translate_errors("delete segments"):
            raised(await commands_by_node(self._nodes, [c[1] for c in commands], commands))


class AsyncSubscriberStore:
    """External retention subscribers' published cuts, awaited (the keys and replies of
    :class:`~readergroup.storage.subscriber_store.SubscriberStore`)."""

    def __init__(self, client: AsyncClient, keys: KeyLayout) -> None:
        self._client = client
        self._keys = keys

    async def publish(self, scope: str, stream: str, subscriber: str, cut: str) -> None:
        with translate_errors("publish subscriber"):
            await self._client.hset(self._keys.subscribers(scope, stream), subscriber, cut)

    async def unsubscribe(self, scope: str, stream: str, subscriber: str) -> None:
        with translate_errors("unsubscribe"):
            await self._client.hdel(self._keys.subscribers(scope, stream), subscriber)

    async def published(self, scope: str, stream: str) -> dict[str, str]:
        with translate_errors("read subscribers"):
            raw = await self._client.hgetall(self._keys.subscribers(scope, stream))
        return {as_text(name): as_text(cut) for name, cut in raw.items()}

    async def delete(self, scope: str, stream: str) -> None:
        with translate_errors("delete subscribers"):
            await self._client.delete(self._keys.subscribers(scope, stream))


class AsyncAdminConnection(AsyncSynchronizerSource):
    """The asyncio managers' view of an :class:`~readergroup.storage.aio_connection.
    AsyncConnection` (it does not own it; :meth:`close` closes only what it opened: the
    client of the synchronizers' blocking waits). Use it from the connection's event loop."""

    log_backend: AsyncRedisLogBackend

    def __init__(self, connection: AsyncConnection) -> None:
        self.connection = connection
        self.config: ClientConfig = connection.config
        self.keys = connection.keys
        client = connection.client
        self.log_backend = AsyncRedisLogBackend(
            client,
            key_prefix=self.config.key_prefix,
            acks=self.config.durability,
            blocking_client=connection.cluster_blocking or connection.blocking_client(),
            nodes=connection.nodes,
        )
        self.sync_config = sync_config_of(self.config)
        self.segments = AsyncSegmentAdmin(client, self.keys, self.config, connection.nodes)
        self.records = client
        self.subscribers = AsyncSubscriberStore(client, self.keys)
        """The created-records of :mod:`readergroup.storage.vanished` (hashes)."""

    def heartbeat_store(self, sync_name: str) -> AsyncHeartbeatStore:
        """The heartbeats of the reader group whose synchronizer is ``sync_name``."""
        client: Any = self.connection.client  # (a cluster's runs its script and hashes alike)
        return AsyncHeartbeatStore(client, self.keys, sync_name)

    async def server_time_ms(self) -> int:
        return await self.connection.server_time_ms()

    async def forget_stream(self, scope: str, stream: str) -> None:
        """Delete what is kept beside a deleted stream: its retention subscribers, the
        Spark sink's record of committed jobs and its transactions (as the threaded connection
        does)."""
        with translate_errors("forget stream"):
            await self.connection.client.delete(
                self.keys.subscribers(scope, stream), self.keys.staged_jobs(scope, stream)
            )
        await async_transactions(self.connection, scope, stream).delete_all()

    async def close(self) -> None:
        """Close the client of blocking waits (shared with the factory's readers: see
        :class:`~readergroup.storage.aio_reader_connection.AsyncRedisReaderConnection`; a
        cluster's is the connection's, which closes it)."""
        blocking = self.log_backend.blocking_client
        if isinstance(blocking, redis.asyncio.Redis):
            await close_client(blocking)
