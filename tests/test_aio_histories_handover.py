"""The asyncio reader's ``commit()`` reads its segments' histories (``epoch_histories``: an
``HMGET`` pipeline) on the connections of its blocking reads. A read parked there
(``XREAD BLOCK``) and given up must not leave its reply due on a connection the pipeline then
gets (the pipeline would wait out the 15 s socket timeout, or take the read's reply for its
own): the pool here has one connection, so the pipeline gets the very one the parked read used.
On a real Redis (both servers: ``READERGROUP_TEST_SERVER=valkey|redis``). A guard for a
``Timeout reading`` seen once in CI (issue 29), not reproduced."""

from __future__ import annotations

import asyncio

from redis.asyncio import ConnectionPool, Redis

from readergroup import StreamManager
from readergroup.core.config import ClientConfig
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.keys import KeyLayout


def test_a_parked_read_given_up_leaves_no_reply_due_for_the_histories_pipeline(
    manager: StreamManager, scope: str, redis_url: str
) -> None:
    manager.create_stream(scope, "s")
    keys = KeyLayout(ClientConfig().key_prefix)
    events = keys.segment(scope, "s", 0).events

    async def blocked(client: Redis) -> int:
        return int((await client.info("clients"))["blocked_clients"])

    async def main() -> None:
        pool = ConnectionPool.from_url(redis_url, max_connections=1, socket_timeout=3)
        client = Redis(connection_pool=pool)
        watcher = Redis.from_url(redis_url)
        reads = AsyncSegmentReads(client, keys, client)
        try:
            before = await blocked(watcher)
            parked = reads.start({events: "$"}, 10, 5.0)  # XREAD BLOCK 5000
            while await blocked(watcher) == before:
                await asyncio.sleep(0.01)
            parked.cancel()
            await asyncio.wait((parked.task,))
            assert not pool._in_use_connections
            (connection,) = pool._available_connections
            assert not connection.is_connected  # closed, not handed back with a reply due
            histories = await reads.epoch_histories(scope, "s", [0, 1])
            assert list(histories) == [0] and histories[0][0] == 0  # its own replies
            assert connection.is_connected  # (the same connection, a new socket)
        finally:
            await client.aclose()
            await pool.disconnect()
            await watcher.aclose()

    asyncio.run(main())
