"""Appends on ``redis.asyncio``: the threaded writer's appends, driven with awaits on one
connection of the pool, from the same steps (so the same requests and reply parsing):

* a round of enough events as native explicit-id ``XADD``s in one ``WATCH``ed transaction
  (:mod:`readergroup.storage.native_append`, :func:`~readergroup.storage.native_append.
  native_steps`: less Redis CPU per event), two round trips;
* anything else, or a round the transaction refuses, through ``append_events.lua``
  (:mod:`readergroup.storage.script_append`, :func:`~readergroup.storage.script_append.
  append_steps`): one ``EVALSHA`` per batch and the acknowledgement wait in one round trip,
  ``SCRIPT LOAD`` only on ``NOSCRIPT``.

The server's ``run_id`` is learnt once per socket; each batch's reply is read by
:func:`~readergroup.storage.segment_store.append_replies`, as the threaded store reads it.

On a Redis Cluster every command runs on the node holding its key
(:func:`~readergroup.storage.aio_cluster.by_node`): a round's batches are grouped by node, each
node's go through ``append_events.lua`` with that node's acknowledgement wait in one round trip
(the native transaction is not used: its keys span slots), the nodes at once; the segment
scripts, states and deletions likewise, one pipeline per node.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis
import redis.asyncio

from readergroup.core.errors import NativeAppendConflictError
from readergroup.core.routing import segment_name
from readergroup.core.steps import StepDriver
from readergroup.storage import segment_status
from readergroup.storage.aio_cluster import asking_each, by_node, pipelined_by_node, redirected
from readergroup.storage.keys import KeyLayout
from readergroup.storage.native_append import (
    ASYNC_HIREDIS_PARSER,
    NOT_ENOUGH_DATA,
    Remember,
    RoundTrip,
    Transaction,
    goes_natively,
    native_steps,
)
from readergroup.storage.raw_connection import known_server, pack, remember_server
from readergroup.storage.script_append import append_steps
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_records import (
    META_FIELDS,
    AppendBatch,
    AppendReply,
    SegmentState,
)
from readergroup.storage.segment_store import append_replies, native_replies, segment_states_of
from readergroup.storage.translate import translate_errors
from statesync import Acks
from statesync.aio_redis_backend import AsyncClient, AsyncNodeClients

SCRIPTS_PER_ROUND = 512
"""Scripts sent in one pipelined round (as the threaded store's rounds)."""


def script_sha(source: str) -> str:
    """The name Redis gives a script (``EVALSHA``): the SHA-1 of its source."""
    return hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 (not a secret's hash)


_APPEND = script_source("append_events")
_APPEND_SHA = script_sha(_APPEND)


class AsyncSegmentAppends:
    """Appends to segments of every stream under one key prefix, awaited; and what completing
    an interrupted scale needs (segment states, seals, opening successors)."""

    def __init__(
        self,
        client: AsyncClient,
        keys: KeyLayout,
        acks: Acks,
        nodes: AsyncNodeClients | None = None,
    ) -> None:
        """``client``: a ``redis.asyncio.Redis``, or a cluster's ``RedisCluster`` with its
        ``nodes`` (shared: their owner closes them); every command runs on the server holding
        its key (see :func:`~readergroup.storage.aio_cluster.by_node`)."""
        self._client = client
        self._nodes = nodes or AsyncNodeClients(client)
        self._keys = keys
        self._acks = acks
        self._scripts = {
            name: client.register_script(script_source(name))
            for name in ("seal_segment", "open_segment")
        }

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        """Head, tail, bytes and sealed flag of each segment, in one round trip (per node)."""
        metas = [self._keys.segment(scope, stream, segment).meta for segment in segments]
        commands = [("HMGET", meta, *META_FIELDS) for meta in metas]
        with translate_errors("segment state"):
            replies = raised(await commands_by_node(self._nodes, metas, commands))
        return segment_states_of(segments, replies)

    async def seal_segments(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, int]:
        """Seal each of ``segments`` (idempotent, pipelined); return their final tails."""
        replies = await self._run_each("seal_segment", scope, stream, segments)
        return {segment: int(reply[1]) for segment, reply in zip(segments, replies, strict=True)}

    async def open_segments(self, scope: str, stream: str, segments: Sequence[int]) -> list[int]:
        """Open each of a scale's successors created closed; return those it opened."""
        replies = await self._run_each("open_segment", scope, stream, segments)
        return [segment for segment, reply in zip(segments, replies, strict=True) if reply[1]]

    async def _run_each(
        self,
        script: str,
        scope: str,
        stream: str,
        segments: Sequence[int],
        *,
        keys: int = 1,
        args: Sequence[Any] = (),
    ) -> list[Any]:
        """``script`` (on each segment's first ``keys`` keys, with ``args``) for each of
        ``segments``, pipelined in rounds of :data:`SCRIPTS_PER_ROUND` (one pipeline per node
        on a cluster); the first refusal raises, naming its segment."""
        runner = self._scripts[script]
        replies: list[Any] = []
        for first in range(0, len(segments), SCRIPTS_PER_ROUND):
            chunk = segments[first : first + SCRIPTS_PER_ROUND]
            chunk_keys = [list(self._keys.segment(scope, stream, s))[:keys] for s in chunk]

            async def queue(pipe: Any, index: int, chunk_keys: Any = chunk_keys) -> None:
                await runner(keys=chunk_keys[index], args=list(args), client=pipe)

            with translate_errors(script):
                found = await pipelined_by_node(self._nodes, [k[0] for k in chunk_keys], queue)
                replies.extend(raised(found))
        for segment, reply in zip(segments, replies, strict=True):
            segment_status.check(script, segment_name(scope, stream, segment), reply)
        return replies

    async def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]:
        """Send every batch in one round trip (a round of enough events as native ``XADD``s in
        one transaction, :mod:`readergroup.storage.native_append`, in two); one reply per
        batch, in order (see :meth:`readergroup.storage.segment_store.SegmentStore.append`: a
        batch the server refuses gets a reply carrying the error; a failed round trip, or an
        acknowledgement shortfall, raises)."""
        wait = self._acks.wait_command()
        waits: list[Any] = []

        async def on_node(client: redis.asyncio.Redis, items: list[int], asking: bool) -> list[Any]:
            mine = [batches[index] for index in items]
            async with pooled(client) as connection:
                native = (
                    None
                    if self._nodes.cluster
                    else await _natively(connection, self._keys, mine, wait)
                )
                if native is not None:
                    appended, acknowledged = native
                    replies: list[Any] = native_replies(mine, appended)
                else:
                    replies, acknowledged = await _by_script(
                        connection, self._keys, mine, wait, asking
                    )
            if wait is not None and not all(map(redirected, replies)):
                waits.append(acknowledged)  # (the wait of a node that ran none: not counted)
            return replies

        metas = [self._keys.segment(b.scope, b.stream, b.segment).meta for b in batches]
        with translate_errors("append"):
            replies = await by_node(self._nodes, metas, on_node)
        return append_replies(self._acks, batches, replies, waits, self._client)


async def _by_script(
    connection: Any,
    layout: KeyLayout,
    batches: Sequence[AppendBatch],
    wait: Sequence[Any] | None,
    asking: bool = False,
) -> tuple[list[Any], Any]:
    """:func:`~readergroup.storage.script_append.append_by_script`'s round trips, awaited on
    ``connection``: each batch's reply and the acknowledgement wait's (``asking``: each
    command after ``ASKING``, to the node an ``ASK`` named)."""
    server = known_server(connection) or ""
    driver = StepDriver(append_steps(layout, _APPEND_SHA, _APPEND, batches, wait, server))
    while (step := driver.next()) is not None:
        driver.reply = await round_trip(connection, step, asking)
    replies, acknowledged, learnt = driver.result
    remember_server(connection, learnt)
    return replies, acknowledged


def raised(replies: list[Any]) -> list[Any]:
    """``replies``, the first error reply among them raised (as a lone command's would be)."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


async def commands_by_node(
    nodes: AsyncNodeClients, keys: Sequence[str], commands: Sequence[tuple[Any, ...]]
) -> list[Any]:
    """Each of ``commands`` (whose key is ``keys[i]``) on the server holding its key, one
    pipeline per node (see :func:`~readergroup.storage.aio_cluster.by_node`); replies parsed
    by redis-py, error replies as values."""

    async def queue(pipe: Any, index: int) -> None:
        pipe.execute_command(*commands[index])

    return await pipelined_by_node(nodes, keys, queue)


async def raw_by_node(
    nodes: AsyncNodeClients, keys: Sequence[str], commands: Sequence[tuple[Any, ...]]
) -> list[Any]:
    """As :func:`commands_by_node`, the replies as the server sent them (nothing parsed),
    on one pooled connection per node (:func:`pooled`)."""

    async def run(client: redis.asyncio.Redis, items: list[int], asking: bool) -> list[Any]:
        async with pooled(client) as connection:
            return await round_trip(connection, [commands[index] for index in items], asking)

    return await by_node(nodes, keys, run)


async def _natively(
    connection: Any, layout: KeyLayout, batches: Sequence[AppendBatch], wait: Sequence[Any] | None
) -> tuple[list[tuple[int, int, bytes, int]], Any] | None:
    """:func:`~readergroup.storage.native_append.append_natively`'s round trips, awaited on
    ``connection``; ``None``: the round takes the script (nothing written)."""
    if not goes_natively(batches):
        return None
    driver = StepDriver(native_steps(layout, batches, wait, known_server(connection)))
    try:
        while (step := driver.next()) is not None:
            if type(step) is Remember:
                remember_server(connection, step.server)
            elif type(step) is RoundTrip:
                driver.reply = await round_trip(connection, step.commands)
            else:
                assert type(step) is Transaction
                await connection.send_packed_command(step.parts, check_health=False)
                await _skip(connection, step.queued)
                driver.reply = [await _read(connection) for _ in range(step.replies)]
    except NativeAppendConflictError:  # nothing written; the connection is in a clean state
        return None
    return driver.result  # type: ignore[no-any-return]


@asynccontextmanager
async def pooled(client: redis.asyncio.Redis) -> AsyncIterator[Any]:
    """A connection of ``client``'s pool for the caller's own commands, released afterwards;
    disconnected first if anything escapes (a cancellation too: never handed back in an
    unknown state)."""
    pool = client.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        yield connection
    except BaseException:
        await connection.disconnect(nowait=True)
        raise
    finally:
        await pool.release(connection)


async def round_trip(
    connection: Any, commands: list[tuple[Any, ...]], asking: bool = False
) -> list[Any]:
    """Send ``commands`` at once and read their replies, error replies as values (``asking``:
    each after ``ASKING``, see :func:`~readergroup.storage.aio_cluster.asking_each`)."""
    sent = asking_each(commands) if asking else commands
    await connection.send_packed_command([pack(c) for c in sent], check_health=False)
    replies = [await _read(connection) for _ in sent]
    return replies[1::2] if asking else replies


async def _read(connection: Any) -> Any:
    """One reply; an error reply is returned, not raised (the rest must still be read)."""
    try:
        return await connection.read_response(disconnect_on_error=False)
    except redis.ResponseError as exc:
        return exc


async def _skip(connection: Any, count: int) -> None:
    """Read and drop ``count`` replies (the ``QUEUED`` ones of a native append), straight
    from the hiredis reader where there is one (as
    :func:`readergroup.storage.native_append._skip` does), within the socket timeout."""
    parser: Any = getattr(connection, "_parser", None)
    reader = getattr(parser, "_reader", None)
    if type(parser) is not ASYNC_HIREDIS_PARSER or reader is None:
        for _ in range(count):
            await _read(connection)
        return
    gets = reader.gets
    push = getattr(parser, "_hiredis_PushNotificationType", None) or ()  # RESP3 pushes
    try:
        async with asyncio.timeout(connection.socket_timeout):
            while count:
                reply = gets()
                if reply is NOT_ENOUGH_DATA:
                    await parser.read_from_socket()
                elif isinstance(reply, redis.ConnectionError):  # as redis-py raises it
                    raise reply
                elif isinstance(reply, push):  # not a reply: handled as redis-py does
                    await parser.handle_push_response(reply)
                else:
                    count -= 1
    except TimeoutError as exc:
        raise redis.TimeoutError("Timeout reading from the server") from exc
    except OSError as exc:  # as redis-py's read_response words it
        raise redis.ConnectionError(f"error while reading from the server: {exc.args}") from exc
