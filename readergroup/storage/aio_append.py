"""Appends on ``redis.asyncio``: the threaded writer's script appends
(:mod:`readergroup.storage.script_append`: one ``EVALSHA`` of ``append_events.lua`` per batch,
every batch of a round and the acknowledgement wait in one round trip on one connection of
the pool, ``SCRIPT LOAD`` only on ``NOSCRIPT``, the server's ``run_id`` learnt once per
socket) driven with awaits. The same request building and reply parsing run for both
(:func:`~readergroup.storage.script_append.append_steps`,
:func:`~readergroup.storage.segment_store.append_replies`).

Rounds always go through the script here: the native ``XADD`` transaction of
:mod:`readergroup.storage.native_append` (less Redis CPU for large rounds) is not driven on
asyncio yet.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis
import redis.asyncio

from readergroup.core.routing import segment_name
from readergroup.storage import segment_status
from readergroup.storage.keys import KeyLayout
from readergroup.storage.raw_connection import known_server, pack, remember_server
from readergroup.storage.script_append import append_steps
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_records import (
    META_FIELDS,
    AppendBatch,
    AppendReply,
    SegmentState,
)
from readergroup.storage.segment_store import append_replies, segment_states_of
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
        """Send every batch in one round trip; one reply per batch, in order (see
        :meth:`readergroup.storage.segment_store.SegmentStore.append`: a batch the server
        refuses gets a reply carrying the error; a failed round trip, or an acknowledgement
        shortfall, raises)."""
        wait = self._acks.wait_command()
        with translate_errors("append"):
            async with _pooled(self._client) as connection:
                server = known_server(connection) or ""
                steps = append_steps(self._keys, _APPEND_SHA, _APPEND, batches, wait, server)
                replies: Any = None
                try:
                    while True:
                        replies = await _round_trip(connection, steps.send(replies))
                except StopIteration as finished:
                    replies, acknowledged, learnt = finished.value
                remember_server(connection, learnt)
        waits = [] if wait is None else [acknowledged]
        return append_replies(self._acks, batches, replies, waits, None)


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
    replies = []
    for _ in commands:
        try:
            replies.append(await connection.read_response(disconnect_on_error=False))
        except redis.ResponseError as exc:
            replies.append(exc)
    return replies
