"""Coalesced heartbeats of asyncio readers (issue 29), on a real Redis: the renewals that the
readers of one factory (one client) make in the same turn of the event loop reach the server as
one pipeline (counted by the server's ``total_reads_processed``: one read event for the whole
batch, not one per reader), each reader with its own reply; one reader's error reply fails that
reader alone; a reader cancelled before its batch is sent is left out of it and the others'
renewals go on; and a batch failing on a server outage fails each reader with the typed error
its own call would have raised, after which the batches work again (the script loaded anew).
Counts and replies, never times."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, cast

from redis.asyncio import Redis

from readergroup.core.errors import ReaderGroupError, RedisUnavailableError
from readergroup.core.membership import Renewal
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.aio_script_batches import batcher_of
from readergroup.storage.keys import KeyLayout
from readergroup.testing.embedded_redis import LocalRedisServer

READERS = 20
KEYS = KeyLayout("rgbeat")


def _stores(client: Redis, group: str = "g") -> list[AsyncHeartbeatStore]:
    """One store per reader, as each asyncio reader of a factory has its own."""
    return [AsyncHeartbeatStore(client, KEYS, group) for _ in range(READERS)]


def _renew(store: AsyncHeartbeatStore, n: int, **overrides: Any) -> Coroutine[Any, Any, Renewal]:
    args: dict[str, Any] = {"session_ms": 10_000, "judge_every_ms": 3_000, **overrides}
    return store.renew(f"r{n}", 1, **args)


async def _reads_processed(client: Redis) -> int:
    info = await client.info("stats")
    return int(info["total_reads_processed"])


def test_the_renewals_of_one_turn_reach_the_server_as_one_pipeline(redis_url: str) -> None:
    """20 readers renew at once: the server reads the batch in one go (before: 20 reads, each
    renewal sent alone), and each reader gets its own renewal (its own entry written)."""

    async def main() -> tuple[int, list[Renewal], dict[Any, Any]]:
        client = Redis.from_url(redis_url)
        stores = _stores(client)
        await client.delete(stores[0].key)
        await asyncio.gather(*(_renew(s, n) for n, s in enumerate(stores)))  # connections made
        before = await _reads_processed(client)
        renewals = await asyncio.gather(*(_renew(s, n) for n, s in enumerate(stores)))
        reads = await _reads_processed(client) - before - 1  # (less the INFO's own read)
        beats = await client.hgetall(stores[0].key)
        await client.aclose()
        return reads, renewals, beats

    reads, renewals, beats = asyncio.run(main())
    assert reads <= 2  # one pipeline (a read event, or two if the batch arrives split)
    assert all(r.before is not None and r.before[0] == 1 for r in renewals)
    assert {f"r{n}".encode() for n in range(READERS)} <= set(beats)


def test_one_readers_error_reply_fails_that_reader_only(redis_url: str) -> None:
    """Reader 7's renewal makes the script fail on the server (a session that is no number,
    judged now): it gets a typed error naming the heartbeat; its 19 neighbours in the same
    pipeline their renewals."""

    async def main() -> list[Renewal | BaseException]:
        client = Redis.from_url(redis_url)
        stores = _stores(client, "g-error")
        bad = {"session_ms": cast(int, "not-a-number"), "judge": True}
        calls = [_renew(s, n, **(bad if n == 7 else {})) for n, s in enumerate(stores)]
        batches = batcher_of(client).batches
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert batcher_of(client).batches == batches + 1
        await client.aclose()
        return outcomes

    outcomes = asyncio.run(main())
    error = outcomes.pop(7)
    assert isinstance(error, ReaderGroupError) and "heartbeat" in str(error)
    assert all(isinstance(o, Renewal) for o in outcomes)


def test_a_reader_cancelled_before_its_batch_is_sent_leaves_the_others_renewing(
    redis_url: str,
) -> None:
    """Reader 0's renewal is cancelled (its reader closed) after it joined the batch but before
    the batch went out: it is left out (no heartbeat written for it), the 19 others renew."""

    async def main() -> tuple[list[Renewal | BaseException], dict[Any, Any]]:
        client = Redis.from_url(redis_url)
        stores = _stores(client, "g-cancel")
        await client.delete(stores[0].key)
        tasks = [asyncio.create_task(_renew(s, n)) for n, s in enumerate(stores)]
        await asyncio.sleep(0)  # every task made its call: the batch is pending
        tasks[0].cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        beats = await client.hgetall(stores[0].key)
        await client.aclose()
        return outcomes, beats

    outcomes, beats = asyncio.run(main())
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert all(isinstance(o, Renewal) for o in outcomes[1:])
    assert b"r0" not in beats and b"r1" in beats and b"r19" in beats


def test_a_cancelled_reader_after_its_batch_was_sent_leaves_the_others_renewing(
    redis_url: str,
) -> None:
    """Cancelled once the pipeline is on its way: the others still get their renewals."""

    async def main() -> list[Renewal | BaseException]:
        client = Redis.from_url(redis_url)
        stores = _stores(client, "g-cancel-late")
        tasks = [asyncio.create_task(_renew(s, n)) for n, s in enumerate(stores)]
        for _ in range(3):  # the calls made, then the batch's task started
            await asyncio.sleep(0)
        tasks[5].cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()
        return outcomes

    outcomes = asyncio.run(main())
    assert isinstance(outcomes.pop(5), asyncio.CancelledError)
    assert all(isinstance(o, Renewal) for o in outcomes)


def test_a_batch_failing_on_an_outage_fails_each_reader_typed_then_works_again(
    private_redis: LocalRedisServer,
) -> None:
    """The server stops: each of the 20 renewals of the batch raises its own
    :class:`RedisUnavailableError` (never one exception object shared between readers); the
    server restarts (its scripts forgotten): the next batch loads the script again and every
    reader renews."""

    async def main() -> tuple[list[Renewal | BaseException], list[Renewal | BaseException]]:
        client = Redis.from_url(private_redis.url, socket_timeout=2)
        stores = _stores(client, "g-outage")
        await asyncio.gather(*(_renew(s, n) for n, s in enumerate(stores)))
        private_redis.stop()
        failed = await asyncio.gather(
            *(_renew(s, n) for n, s in enumerate(stores)), return_exceptions=True
        )
        private_redis.start()
        await client.script_flush()  # (a restarted server without its scripts)
        renewed = await asyncio.gather(
            *(_renew(s, n) for n, s in enumerate(stores)), return_exceptions=True
        )
        await client.aclose()
        return failed, renewed

    failed, renewed = asyncio.run(main())
    assert all(isinstance(f, RedisUnavailableError) for f in failed)
    assert len({id(f) for f in failed}) == READERS
    assert len({id(cast(BaseException, f).__cause__) for f in failed}) == READERS
    assert all(isinstance(r, Renewal) for r in renewed), renewed


def test_a_lone_renewal_loads_a_missing_script(redis_url: str) -> None:
    """A batch of one is a plain ``EVALSHA``; a server without the script gets it loaded and the
    renewal made."""

    async def main() -> Renewal:
        client = Redis.from_url(redis_url)
        store = AsyncHeartbeatStore(client, KEYS, "g-lone")
        await client.delete(store.key)
        await client.script_flush()
        renewal = await _renew(store, 0)
        await client.aclose()
        return renewal

    renewal = asyncio.run(main())
    assert renewal.before is None and renewal.beats is not None  # (first beat: it judges)
