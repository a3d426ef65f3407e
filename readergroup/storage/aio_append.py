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


def script_sha(source: str) -> str:
    """The name Redis gives a script (``EVALSHA``): the SHA-1 of its source."""
    return hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 (not a secret's hash)


_APPEND = script_source("append_events")
_APPEND_SHA = script_sha(_APPEND)


class AsyncSegmentAppends:
    """Appends to segments of every stream under one key prefix, awaited; and what completing
    an interrupted scale needs (segment states, seals, opening successors)."""

    def __init__(self, client: redis.asyncio.Redis, keys: KeyLayout, acks: Acks) -> None:
        self._client = client
        self._keys = keys
        self._acks = acks
        self._scripts = {
            name: client.register_script(script_source(name))
            for name in ("seal_segment", "open_segment")
        }

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        """Head, tail, bytes and sealed flag of each segment, in one round trip."""
        with translate_errors("segment state"):
            pipe = self._client.pipeline(transaction=False)
            for segment in segments:
                pipe.hmget(self._keys.segment(scope, stream, segment).meta, *META_FIELDS)
            replies = await pipe.execute()
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
        self, script: str, scope: str, stream: str, segments: Sequence[int]
    ) -> list[Any]:
        """``script`` (on each segment's meta key) for each of ``segments`` in one pipeline;
        the first refusal raises, naming its segment."""
        runner = self._scripts[script]
        with translate_errors(script):
            pipe = self._client.pipeline(transaction=False)
            for segment in segments:
                await runner(keys=[self._keys.segment(scope, stream, segment).meta], client=pipe)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
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
        with translate_errors("append"):
            async with _pooled(self._client) as connection:
                native = await _natively(connection, self._keys, batches, wait)
                if native is not None:
                    appended, acknowledged = native
                    replies = native_replies(batches, appended)
                else:
                    server = known_server(connection) or ""
                    steps = append_steps(self._keys, _APPEND_SHA, _APPEND, batches, wait, server)
                    driver = StepDriver(steps)
                    while (step := driver.next()) is not None:
                        driver.reply = await _round_trip(connection, step)
                    replies, acknowledged, learnt = driver.result
                    remember_server(connection, learnt)
        waits = [] if wait is None else [acknowledged]
        return append_replies(self._acks, batches, replies, waits, self._client)


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
                driver.reply = await _round_trip(connection, step.commands)
            else:
                assert type(step) is Transaction
                await connection.send_packed_command(step.parts, check_health=False)
                await _skip(connection, step.queued)
                driver.reply = [await _read(connection) for _ in range(step.replies)]
    except NativeAppendConflictError:  # nothing written; the connection is in a clean state
        return None
    return driver.result  # type: ignore[no-any-return]


@asynccontextmanager
async def _pooled(client: redis.asyncio.Redis) -> AsyncIterator[Any]:
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


async def _round_trip(connection: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` at once and read their replies, error replies as values."""
    await connection.send_packed_command([pack(c) for c in commands], check_health=False)
    return [await _read(connection) for _ in commands]


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
