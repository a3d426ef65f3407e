"""``AsyncSegmentReads`` answers exactly as the threaded segment store does (the same commands
and pure parsing), on every server kind of the matrix, for every question the fetch core asks
of a segment's log; and it leaves the ``redis.asyncio`` client it is given as it was."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from readergroup import StreamManager, WrongKeyTypeError
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.fetchers import async_client


def test_every_log_question_has_the_threaded_stores_answer(each_server: LocalRedisServer) -> None:
    url = each_server.url
    connection = RedisConnection.from_url(url)
    scope = "aio-reads"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
    events = [(f"k{n}", f"e{n}".encode(), n) for n in range(20)]
    connection.segments.append([AppendBatch.of(scope, "s", 0, "w", 1, events, 1 << 20)])
    connection.segments.truncate(scope, "s", 0, 4)
    meta = connection.keys.segment(scope, "s", 0).meta
    connection.client.hset(meta, mapping={"epochs": "7:6,9:12,", "lost": "30-32,40-41,"})
    sync = connection.segments
    questions: list[tuple[str, tuple[Any, ...]]] = [
        ("epochs", (scope, "s", 0)),
        ("epoch_histories", (scope, "s", [0, 1, 5])),
        ("segment_states", (scope, "s", [0, 1])),
        ("lost_in_failover", (scope, "s", 0, 30, 32)),
        ("lost_in_failover", (scope, "s", 0, 30, 41)),
        ("read_raw", (scope, "s", 0, 5, 9, 3)),
        ("read_raw", (scope, "s", 0, 10, -1, 100)),
    ]
    expected = [getattr(sync, method)(*args) for method, args in questions]

    async def ask() -> list[Any]:
        client = async_client(url)
        callbacks = dict(client.response_callbacks)
        reads = AsyncSegmentReads(client, connection.keys)
        answers = [await getattr(reads, method)(*args) for method, args in questions]
        assert client.response_callbacks == callbacks  # the client is left as it was
        await client.aclose()
        return answers

    try:
        assert asyncio.run(ask()) == expected
        assert expected[3] is True and expected[4] is False  # (the questions mean something)
    finally:
        connection.close()


def test_keys_of_the_wrong_type_are_named(redis_url: str, scope: str) -> None:
    connection = RedisConnection.from_url(redis_url)
    wrong = f"{scope}:not-a-stream"
    connection.client.set(wrong, "x")
    connection.client.xadd(f"{scope}:a-stream", {"f": "v"}, id="1-0")

    async def read() -> None:
        client = async_client(redis_url)
        try:
            reads = AsyncSegmentReads(client, connection.keys)
            await reads.read_keys({f"{scope}:a-stream": "0-0", wrong: "0-0"}, 0.01, 10)
        finally:
            await client.aclose()

    try:
        with pytest.raises(WrongKeyTypeError) as raised:
            asyncio.run(read())
        assert raised.value.keys == [wrong]
    finally:
        connection.close()
