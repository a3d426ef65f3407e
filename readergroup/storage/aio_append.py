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

from readergroup.storage.keys import KeyLayout
from readergroup.storage.raw_connection import known_server, pack, remember_server
from readergroup.storage.script_append import append_steps
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_records import AppendBatch, AppendReply
from readergroup.storage.segment_store import append_replies
from readergroup.storage.translate import translate_errors
from statesync import Acks


def script_sha(source: str) -> str:
    """The name Redis gives a script (``EVALSHA``): the SHA-1 of its source."""
    return hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 (not a secret's hash)


_APPEND = script_source("append_events")
_APPEND_SHA = script_sha(_APPEND)


class AsyncSegmentAppends:
    """Appends to segments of every stream under one key prefix, awaited."""

    def __init__(self, client: redis.asyncio.Redis, keys: KeyLayout, acks: Acks) -> None:
        self._client = client
        self._keys = keys
        self._acks = acks

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
