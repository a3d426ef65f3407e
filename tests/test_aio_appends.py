"""The asyncio appends (storage/aio_append.py) on a real Redis: the threaded appends' steps,
awaited. Bulk rounds go natively with the script's entries, land once, are refused as the
script refuses them, and read their queued replies without a read per event; small rounds go
through the script; the segment operations completing a scale answer as the threaded ones."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
import redis
import redis.asyncio

from readergroup import ClientConfig, EventStreamClientFactory, EventTooLargeError, StreamManager
from readergroup.core.errors import AckTimeoutError, WrongKeyTypeError
from readergroup.storage import aio_append, segment_status
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.native_append import MIN_EVENTS
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_records import AppendBatch, AppendReply
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.test_ha_acks import replicated  # noqa: F401 (a fixture)
from tests.test_native_appends import batches, calls, events, stored


def append(url: str, sent: Sequence[AppendBatch]) -> list[AppendReply]:
    """``sent`` appended by an asyncio connection of its own (on a loop of its own)."""

    async def main() -> list[AppendReply]:
        connection = AsyncConnection.from_url(url)
        try:
            return await connection.segments.append(sent)
        finally:
            await connection.close()

    return asyncio.run(main())


def test_a_bulk_round_lands_natively_with_the_threaded_appends_entries(
    redis_url: str, scope: str
) -> None:
    data = events(300)
    client = redis.Redis.from_url(redis_url)
    with StreamManager.from_url(redis_url) as sm:
        for stream in ("threaded", "aio", "script"):
            sm.create_stream(scope, stream)
    client.script_load(script_source("append_events"))
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        factory.connection.segments.append(batches(scope, "threaded", "w", 1, data))
        exec_before, eval_before = calls(client, "exec"), calls(client, "evalsha")
        replies = append(redis_url, batches(scope, "aio", "w", 1, data))
        assert calls(client, "exec") == exec_before + 1
        assert calls(client, "evalsha") == eval_before  # no script ran
        assert [(r.status, r.first_offset) for r in replies] == [(0, 0), (0, 100), (0, 200)]
        for i in range(0, 300, 30):  # rounds too small for the native path: the script
            assert len(data[i : i + 30]) < MIN_EVENTS
            batch = AppendBatch.of(scope, "script", 0, "w", 1 + i, data[i : i + 30], 1 << 20)
            assert append(redis_url, [batch])[0].status == segment_status.OK
        assert calls(client, "evalsha") == eval_before + 10
        assert stored(factory, "aio") == stored(factory, "threaded") == stored(factory, "script")
        times = [e.server_ms for e in factory.create_batch_client().read_events("aio")]
        assert times == sorted(times) and replies[0].server_ms == times[0]
    client.close()


def test_a_resent_bulk_round_lands_once(redis_url: str, scope: str) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    sent = batches(scope, "s", "w", 1, events(200))
    assert [r.status for r in append(redis_url, sent)] == [0, 0]
    assert [r.status for r in append(redis_url, sent)] == [segment_status.DUPLICATE] * 2
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        assert len(stored(factory, "s")) == 200


def test_bulk_rounds_the_script_would_refuse_write_nothing(redis_url: str, scope: str) -> None:
    from readergroup import ScalingPolicy, StreamConfiguration

    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        sm.create_stream(scope, "sealed")
        sm.connection.segments.seal(scope, "sealed", 0)
        rogue = sm.connection.keys.segment(scope, "s", 1).events
    big = AppendBatch.of(scope, "s", 0, "w", 1, [*events(99), (None, b"x" * 50, 0)], 40)
    (reply,) = append(redis_url, [big])
    assert isinstance(reply.error, EventTooLargeError) and "event 100" in str(reply.error)
    sealed = append(redis_url, batches(scope, "sealed", "w", 1, events(100)))
    assert sealed[0].status == segment_status.SEALED
    client = redis.Redis.from_url(redis_url)
    client.set(rogue, "not a stream")
    ok, refused = append(
        redis_url,
        [
            AppendBatch.of(scope, "s", 0, "w", 2, events(100), 1 << 20),
            AppendBatch.of(scope, "s", 1, "w", 3, events(100), 1 << 20),
        ],
    )
    assert ok.status == segment_status.OK and refused.error is not None
    assert "WRONGTYPE" in str(refused.error) or isinstance(refused.error, WrongKeyTypeError)
    client.close()


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    original = redis.asyncio.connection.AbstractConnection.read_response

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "read_response", counted)
    return count


def test_a_bulk_round_reads_its_queued_replies_without_a_read_call_per_event(
    redis_url: str, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    reads = _counting_reads(monkeypatch)
    replies = append(redis_url, batches(scope, "s", "w", 1, events(1000)))
    monkeypatch.undo()
    assert [r.first_offset for r in replies] == list(range(0, 1000, 100))
    assert reads[0] < 100  # a read per queued XADD made it over 1,000


def test_without_the_hiredis_reader_bulk_rounds_land_the_same(
    redis_url: str, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = events(300)
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "direct")
        sm.create_stream(scope, "one_by_one")
    append(redis_url, batches(scope, "direct", "w", 1, data))
    monkeypatch.setattr(aio_append, "ASYNC_HIREDIS_PARSER", None)
    reads = _counting_reads(monkeypatch)
    replies = append(redis_url, batches(scope, "one_by_one", "w", 1, data))
    monkeypatch.undo()
    assert [r.status for r in replies] == [segment_status.OK] * 3
    assert reads[0] > len(data)  # this path was taken
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        assert stored(factory, "direct") == stored(factory, "one_by_one")


def test_segment_states_seals_and_opens_answer_as_the_threaded_store(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
        threaded = sm.connection.segments
        threaded.create_closed_segments(scope, "s", [7], 0)
        append(redis_url, batches(scope, "s", "w", 1, events(100)))

        async def main() -> tuple[Any, ...]:
            connection = AsyncConnection.from_url(redis_url)
            segments = connection.segments
            try:
                before = await segments.segment_states(scope, "s", [0, 7, 9])
                sealed = await segments.seal_segments(scope, "s", [0])
                opened = await segments.open_segments(scope, "s", [7])
                again = await segments.open_segments(scope, "s", [7])
                return before, sealed, opened, again
            finally:
                await connection.close()

        expected = threaded.segment_states(scope, "s", [0, 7, 9])
        before, sealed, opened, again = asyncio.run(main())
        assert before == expected and before[0].tail == 100
        assert before[7].sealed and not before[9].exists
        assert sealed == {0: 100} and opened == [7] and again == []
        after = threaded.segment_states(scope, "s", [0, 7])
        assert after[0].sealed and not after[7].sealed


@pytest.mark.long  # a replica to sync: about 5 s
def test_asyncio_appends_wait_for_replicas_natively_and_by_script(
    replicated: tuple[LocalRedisServer, LocalRedisServer],  # noqa: F811
) -> None:
    """acks=replicas=1: a bulk round (native) and a small one (script) are acknowledged once
    the replica has them."""
    primary, replica = replicated
    with StreamManager.from_url(primary.url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
        events_key = sm.connection.keys.segment("ha", "s", 0).events
    config = ClientConfig(acks="replicas=1")

    async def main() -> list[AppendReply]:
        connection = AsyncConnection.from_url(primary.url, config)
        try:
            bulk = await connection.segments.append(batches("ha", "s", "w", 1, events(200)))
            small = await connection.segments.append(batches("ha", "s", "w", 3, events(10)))
            return bulk + small
        finally:
            await connection.close()

    assert [r.status for r in asyncio.run(main())] == [0, 0, 0]
    follower = redis.Redis(port=replica.port)
    assert follower.xlen(events_key) == 210  # on the replica when acknowledged
    follower.close()


def test_asyncio_appends_without_enough_replicas_fail_retriably_and_land_once(
    private_redis: LocalRedisServer,
) -> None:
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
    config = ClientConfig(acks="replicas=1", ack_timeout=0.05)
    sent = batches("ha", "s", "w", 1, events(200))

    async def main() -> list[BaseException]:
        connection = AsyncConnection.from_url(private_redis.url, config)
        raised = []
        try:
            for _ in range(2):  # the first try lands unacknowledged; the retry is recognised
                try:
                    await connection.segments.append(sent)
                except AckTimeoutError as exc:
                    raised.append(exc)
        finally:
            await connection.close()
        return raised

    raised = asyncio.run(main())
    assert len(raised) == 2 and all(exc.retriable for exc in raised)
    with StreamManager.from_url(private_redis.url) as sm:
        assert sm.connection.segments.segment_states("ha", "s", [0])[0].tail == 200
