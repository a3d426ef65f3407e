"""A pooled connection the server closed (a restart, a failover behind a stable address) is
replaced before a command is sent on it, by the asyncio clients as by the threaded ones: the
first command after the server came back succeeds (found running the threaded reader's HA
suite on the asyncio reader: its first ``commit()`` after a failover raised
``RedisUnavailableError: Connection closed by server`` where the threaded reader's landed)."""

from __future__ import annotations

import asyncio
from typing import Any

from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.connection import RedisConnection
from statesync.aio_redis_backend import AsyncRedisLogBackend
from statesync.redis_backend import RedisLogBackend


def test_the_threaded_clients_replace_a_connection_the_server_closed(private_redis: Any) -> None:
    connection = RedisConnection.from_url(private_redis.url)
    backend = RedisLogBackend.from_url(private_redis.url)
    clients = [connection.client, backend.client, backend.blocking_client]
    try:
        for client in clients:
            client.ping()  # a connection in each pool
        private_redis.restart()
        for client in clients:
            assert client.ping()  # the first command after the restart
    finally:
        connection.close()
        backend.close()


def test_the_asyncio_clients_replace_a_connection_the_server_closed(private_redis: Any) -> None:
    async def run() -> None:
        connection = AsyncConnection.from_url(private_redis.url)
        backend = AsyncRedisLogBackend.from_url(private_redis.url)
        clients = [connection.client, backend.client, backend.blocking_client]
        try:
            for client in clients:
                await client.ping()
            await asyncio.to_thread(private_redis.restart)
            for client in clients:
                assert await client.ping()
        finally:
            await connection.close()
            await backend.close()

    asyncio.run(run())
