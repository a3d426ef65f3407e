"""The segment data plane's reads on ``redis.asyncio``: :class:`AsyncSegmentReads`, the awaitable
twin of the reads of :class:`~readergroup.storage.segment_store.SegmentStore` and
:class:`~readergroup.storage.multi_read.MultiKeyReader` that a reader's data side needs (``XREAD
BLOCK`` over segments and state logs, reads started without waiting for their replies, and the
checks of a segment's log: epochs, tail, head, offsets lost in failovers). The same commands,
and the same pure parsing (:mod:`readergroup.storage.segment_records`,
:mod:`readergroup.storage.multi_read`); errors translated the same way.

On a Redis Cluster (``nodes`` given, of a ``RedisCluster``) as the threaded
:class:`~readergroup.storage.multi_read.MultiKeyReader` reads one: an ``XREAD`` per hash slot
(:func:`~readergroup.storage.multi_read.by_slot`), the slots of one node in one round trip, the
nodes at once (:func:`~readergroup.storage.aio_cluster.by_node`: redirections and nodes that
do not answer are handled there), the replies merged; with nothing anywhere, a block of at most
:data:`~readergroup.storage.multi_read.CLUSTER_BLOCK_SECONDS` on the first key alone (the
group's log, for readers). ``XRANGE`` goes to the node holding its segment.

Cancelling a task awaiting one of these reads closes the connection it was using (redis-py's
asyncio client disconnects on any ``BaseException`` while it reads a reply, and
:func:`~readergroup.storage.aio_append.pooled` on any escaping one), so no half-read reply is
left on a pooled connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from readergroup.core.errors import ReaderGroupError, WrongKeyTypeError
from readergroup.storage.aio_append import raised, raw_by_node
from readergroup.storage.keys import KeyLayout
from readergroup.storage.multi_read import (
    CLUSTER_BLOCK_SECONDS,
    MAX_BLOCK_SECONDS,
    MAX_PARKED_BLOCK_SECONDS,
    by_key,
    by_slot,
    first_alone,
    not_streams,
    xread_command,
)
from readergroup.storage.segment_records import (
    HISTORY_FIELDS,
    META_FIELDS,
    SegmentState,
    histories_of,
    lost_between,
    parse_epochs,
    parse_lost_ranges,
    range_bounds,
    segment_state_of,
)
from readergroup.storage.translate import translate_errors
from statesync.aio_redis_backend import AsyncClient, AsyncNodeClients


async def _raw(client: Any, *command: Any) -> Any:
    """``command``'s reply as the server sent it (no response callback: the client given, a
    ``redis.asyncio.Redis``, is left as it is), on a connection of its pool. A connection a
    cancellation or an error interrupts is closed before it goes back to the pool
    (``redis.asyncio`` disconnects on any exception while it sends or reads)."""
    pool = client.connection_pool
    connection = await pool.get_connection()
    try:
        await connection.send_command(*command)
        return await connection.read_response()
    finally:
        await pool.release(connection)


class AsyncSegmentReads:
    """Reads of segments under ``keys`` on ``client`` (a ``redis.asyncio.Redis`` returning
    bytes). ``blocking_client`` (default ``client``) carries ``XREAD BLOCK``: its socket timeout
    must be ``None`` or longer than
    :data:`~readergroup.storage.multi_read.MAX_PARKED_BLOCK_SECONDS`.
    ``XREAD`` and ``XRANGE`` replies are read raw (parsed here, as the threaded connection
    does), without changing the clients' response callbacks."""

    def __init__(
        self,
        client: AsyncClient,
        keys: KeyLayout,
        blocking_client: AsyncClient | None = None,
        *,
        nodes: AsyncNodeClients | None = None,
        blocking_nodes: AsyncNodeClients | None = None,
    ):
        """On a cluster: ``client`` and ``blocking_client`` its ``RedisCluster`` clients,
        ``nodes`` and ``blocking_nodes`` their :class:`~statesync.aio_redis_backend.
        AsyncNodeClients` (shared: their owner closes them)."""
        self._client = client
        self._blocking = blocking_client or client
        self._keys = keys
        self._nodes = nodes if nodes is not None and nodes.cluster else None
        self.cluster = self._nodes is not None
        """Whether these reads go to a Redis Cluster."""
        self._blocking_nodes = blocking_nodes or nodes

    # -- reads over many keys ---------------------------------------------------------------
    async def read_keys(
        self, positions: Mapping[str, str], timeout: float, limit: int
    ) -> dict[str, Any]:
        """``XREAD BLOCK`` over stream keys (segments and state logs) in one call: key -> raw
        entries of the keys that had something (at most 5 s per call). Raises
        :class:`WrongKeyTypeError` naming the keys that are not streams."""
        if not positions:
            return {}
        try:
            return await self.xread(positions, limit, timeout)
        except ReaderGroupError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            keys = list(positions)
            with translate_errors("read"):
                async with self._client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.type(key)
                    wrong = not_streams(keys, await pipe.execute())
            if not wrong:
                raise
            raise WrongKeyTypeError(wrong) from exc

    async def xread(
        self,
        positions: Mapping[str, str],
        limit: int,
        block: float | None = None,
        longest: float = MAX_BLOCK_SECONDS,
    ) -> dict[str, Any]:
        """One ``XREAD COUNT limit`` (``block``: ``BLOCK``, at most ``longest`` s) of
        ``positions``: key -> raw entries (a key of the wrong type: a
        :class:`ReaderGroupError` naming ``WRONGTYPE``). On a cluster, one per slot (see the
        module doc)."""
        if self._nodes is not None:
            return await self._xread_by_slot(self._nodes, positions, limit, block)
        with translate_errors("read"):
            command = xread_command(positions, limit, block, longest)
            reply = await _raw(self._blocking, *command)
        return by_key(reply)

    async def _xread_by_slot(
        self,
        nodes: AsyncNodeClients,
        positions: Mapping[str, str],
        limit: int,
        block: float | None,
    ) -> dict[str, Any]:
        cluster = nodes.client
        assert isinstance(cluster, RedisCluster)
        slots = by_slot(positions, cluster.keyslot)
        commands = [xread_command(streams, limit) for streams in slots]
        result: dict[str, Any] = {}
        with translate_errors("read"):
            for reply in raised(await raw_by_node(nodes, [next(iter(s)) for s in slots], commands)):
                result.update(by_key(reply))
            if result or block is None:
                return result
            single = first_alone(positions)
            wait = xread_command(single, limit, min(block, CLUSTER_BLOCK_SECONDS))
            [reply] = raised(await raw_by_node(self._blocking_nodes or nodes, list(single), [wait]))
        return by_key(reply)

    def start(
        self, positions: Mapping[str, str], limit: int, block: float | None = None
    ) -> AsyncPendingRead:
        """Send :meth:`xread` in a task of its own now; its reply is awaited later (a parked
        read: ``block`` up to :data:`~readergroup.storage.multi_read.MAX_PARKED_BLOCK_SECONDS`)."""
        task = asyncio.ensure_future(
            self.xread(positions, limit, block, longest=MAX_PARKED_BLOCK_SECONDS)
        )
        return AsyncPendingRead(positions, task)

    # -- one segment's log -----------------------------------------------------------------
    async def epochs(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]:
        """The segment's epochs, ``(epoch, first offset)`` oldest first (see
        :meth:`~readergroup.storage.segment_store.SegmentStore.epochs`)."""
        meta = self._keys.segment(scope, stream, segment).meta
        with translate_errors("read"):
            return parse_epochs(await self._client.hget(meta, "epochs"))

    async def epoch_histories(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, tuple[int, list[tuple[int, int]]]]:
        """Each existing segment's tail and epochs, in one round trip, on the connections
        reads use."""
        metas = [self._keys.segment(scope, stream, segment).meta for segment in segments]
        return histories_of(segments, await self._hmget_each(self._blocking, metas, HISTORY_FIELDS))

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        """Head, tail, bytes and sealed flag of each segment, in one round trip."""
        metas = [self._keys.segment(scope, stream, segment).meta for segment in segments]
        replies = await self._hmget_each(self._client, metas, META_FIELDS)
        return {
            segment: segment_state_of(segment, fields)
            for segment, fields in zip(segments, replies, strict=True)
        }

    async def lost_in_failover(
        self, scope: str, stream: str, segment: int, begin: int, end: int
    ) -> bool:
        """Whether offsets ``[begin, end)`` were all lost in failovers (meta field ``lost``)."""
        meta = self._keys.segment(scope, stream, segment).meta
        with translate_errors("read"):
            ranges = parse_lost_ranges(await self._client.hget(meta, "lost"))
        return lost_between(ranges, begin, end)

    async def read_raw(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> Any:
        """The raw ``XRANGE`` reply for events ``[start, stop)`` (``stop=-1``: to the tail)."""
        events = self._keys.segment(scope, stream, segment).events
        command = ("XRANGE", events, *range_bounds(start, stop), "COUNT", limit)
        with translate_errors("read"):
            if self._nodes is not None:
                [reply] = raised(await raw_by_node(self._nodes, [events], [command]))
                return reply
            return await _raw(self._client, *command)

    @staticmethod
    async def _hmget_each(
        client: AsyncClient, keys: Sequence[str], fields: Sequence[str]
    ) -> list[Any]:
        with translate_errors("read"):
            async with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, *fields)
                replies: list[Any] = await pipe.execute()
        return replies


class AsyncPendingRead:
    """A read started by :meth:`AsyncSegmentReads.start`, running in its own task: the
    handle :class:`~readergroup.client.fetch_core.FetchCore` keeps. Cancelling the task that
    awaits it does not cancel it (the reply waits for the next call); :meth:`cancel` does."""

    def __init__(self, positions: Mapping[str, str], task: asyncio.Future[dict[str, Any]]):
        self.positions = dict(positions)
        self.task = task

    async def ready(self, timeout: float, interrupt: asyncio.Future[Any] | None = None) -> bool:
        """Whether the reply (or an error) is there within ``timeout`` s (not cancelling the
        read when the wait is cancelled); ``interrupt`` done ends the wait early."""
        task = self.task
        if not task.done() and timeout > 0:
            waits: tuple[asyncio.Future[Any], ...] = (
                (task,) if interrupt is None else (task, interrupt)
            )
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return task.done()

    async def result(self, timeout: float) -> dict[str, Any] | None:
        """The reply if it is there within ``timeout`` s, else ``None`` (it stays outstanding);
        its error is raised."""
        if not await self.ready(timeout):
            return None
        return self.task.result()

    def cancel(self) -> None:
        """Give the read up (its connection is closed). Idempotent."""
        self.positions = {}
        if self.task.done():
            if not self.task.cancelled():
                self.task.exception()  # (retrieved: not logged as never retrieved)
            return
        self.task.cancel()
