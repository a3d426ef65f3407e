"""The asyncio Redis connection of readergroup: :class:`AsyncConnection`, on ``redis.asyncio``.

Built from the same URL and :class:`~readergroup.core.config.ClientConfig` as the threaded
:class:`~readergroup.storage.connection.RedisConnection` (:func:`~readergroup.storage.
connection.url_options`): ACL user and password (in the URL or ``redis_options``), TLS
(``rediss://`` and the ``ssl_*`` options), ``unix://``, ``socket_timeout``, the key prefix and
``acks``. redis-py's own retries are off (the writer retries with the same sequence number,
which the scripts deduplicate); every new socket is checked like the threaded client's: a
server older than Redis 7.0, or one whose ``maxmemory-policy`` may evict keys, is refused.

``redis+sentinel://`` URLs name the primary the Sentinels say (asked on each new connection;
see :func:`_sentinel_client`). ``ClientConfig(cluster=True)``: the URL's hosts are a Redis
Cluster's seeds (:func:`~readergroup.storage.aio_cluster.cluster_clients`: a command client, a
blocking-read client, and plain clients of each node, :attr:`AsyncConnection.nodes`, for the
commands sent per node; every new socket checked as above).

No password comes out: the connection's ``repr`` names the redacted URL only, and errors are
translated (:mod:`readergroup.storage.translate`) from redis-py's, which never carry it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.retry import Retry

from readergroup.core.config import ClientConfig
from readergroup.core.errors import InvalidConfigError
from readergroup.core.steps import StepDriver
from readergroup.storage.aio_append import AsyncSegmentAppends
from readergroup.storage.aio_cluster import cluster_clients
from readergroup.storage.connection import (
    DISCONNECT,
    READ,
    server_check,
    too_old_for_hello,
    unusable_url,
    url_options,
)
from readergroup.storage.keys import KeyLayout
from readergroup.storage.translate import translate_errors
from statesync.aio_redis_backend import AsyncClient, AsyncNodeClients, checked_pool_options
from statesync.endpoints import parse_sentinel_url
from statesync.errors import EndpointURLError
from statesync.redaction import redact_url
from statesync.redis_backend import SENTINEL_CHECK_INTERVAL


class AsyncConnection:
    """One ``redis.asyncio`` client (and its pool) shared by everything an
    :class:`~readergroup.aio.factory.AsyncEventStreamClientFactory` creates. Use it from one
    event loop (the one that created it)."""

    def __init__(
        self,
        client: AsyncClient,
        config: ClientConfig,
        url: str,
        *,
        sentinels: Sequence[redis.asyncio.Redis] = (),
        cluster_blocking: RedisCluster | None = None,
    ) -> None:
        """``sentinels``: the clients of the Sentinels ``client`` asks (closed with it).
        ``cluster_blocking``: a cluster's client of blocking reads (closed with it)."""
        self.config = config
        self.client = client
        self.cluster_blocking = cluster_blocking
        """A cluster's client of ``XREAD BLOCK``, shared by the managers and readers (``None``
        off a cluster: the managers make one)."""
        self.nodes = AsyncNodeClients(client)
        """Plain clients of each node of a cluster (``client`` itself off a cluster)."""
        self.blocking_nodes = AsyncNodeClients(cluster_blocking or client)
        """The same for blocking reads (on a cluster: clients of each node whose sockets
        outlast a block)."""
        self._sentinels = tuple(sentinels)
        self.keys = KeyLayout(config.key_prefix)
        self._where = redact_url(url)
        self.segments = AsyncSegmentAppends(client, self.keys, config.durability, self.nodes)
        """The segment appends (``await segments.append(batches)``)."""

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> AsyncConnection:
        """A connection to ``url`` (nothing is sent until the first command)."""
        config = config or ClientConfig()
        options, sentinel, first, seeds = url_options(url, config)
        if len(seeds) > 1 and not config.cluster:
            raise InvalidConfigError(
                f"{len(seeds)} hosts in the URL: several seeds need ClientConfig(cluster=True)"
            )
        eviction = not config.allow_key_eviction

        async def connect_checking_server(connection: Any) -> None:
            await _set_up(connection)
            await _check_server(connection, eviction=eviction)

        options["redis_connect_func"] = connect_checking_server
        sentinels: list[redis.asyncio.Redis] = []
        client: AsyncClient
        try:
            if config.cluster:
                client, blocking = cluster_clients(first, seeds, config, options)
                return cls(client, config, url, cluster_blocking=blocking)
            if sentinel:
                client, sentinels = _sentinel_client(url, config, options)
            else:
                client = redis.asyncio.Redis.from_url(
                    url,
                    socket_timeout=config.socket_timeout,
                    retry=Retry(NoBackoff(), 0),
                    **options,
                    **checked_pool_options(),
                )
        except ValueError as exc:  # redis-py's URL parsing: a bad scheme, port or option
            raise unusable_url(url, config, exc) from exc
        return cls(client, config, url, sentinels=sentinels)

    def __repr__(self) -> str:
        return f"AsyncConnection({self._where!r}, key_prefix={self.config.key_prefix!r})"

    async def server_time_ms(self) -> int:
        with translate_errors("TIME"):
            seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def close(self) -> None:
        for nodes in (self.nodes, self.blocking_nodes):
            await nodes.close()
        if self.cluster_blocking is not None:
            await self.cluster_blocking.aclose()
        await self.client.aclose()
        for sentinel in self._sentinels:
            await sentinel.aclose()


def _sentinel_client(
    url: str, config: ClientConfig, options: dict[str, Any]
) -> tuple[redis.asyncio.Redis, list[redis.asyncio.Redis]]:
    """The client of the primary a ``redis+sentinel://`` URL names, and the Sentinels' (as
    :func:`statesync.redis_backend.sentinel_clients` builds the threaded one: the URL's
    credentials win over ``redis_options``; ``sentinel_options`` go to the Sentinels). Each
    new connection asks the Sentinels where the primary is; one to a primary demoted since
    is dropped at its first ``READONLY`` reply (redis-py's), so the writer's retry reaches
    the new primary."""
    try:
        target = parse_sentinel_url(url)
    except EndpointURLError as exc:
        raise InvalidConfigError(str(exc)) from exc
    auth = {"username": target.username, "password": target.password}
    options = {**options, **{name: value for name, value in auth.items() if value is not None}}
    if target.tls:
        options = {"ssl": True, **options}
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        target.sentinels,
        sentinel_kwargs={
            "socket_timeout": min(config.socket_timeout, 5.0),
            **dict(config.sentinel_options),
        },
        **options,
    )
    primary: redis.asyncio.Redis = sentinel.master_for(
        target.service,
        socket_timeout=config.socket_timeout,
        db=target.db,
        retry=Retry(NoBackoff(), 0),
        connection_pool_class=_FollowingPool,
        **checked_pool_options(),
    )
    return primary, sentinel.sentinels


class _FollowingPool(SentinelConnectionPool):
    """A Sentinel pool that asks the Sentinels where the primary is when a connection is
    taken, at most every :data:`~statesync.redis_backend.SENTINEL_CHECK_INTERVAL` seconds, as
    the threaded client's pool does: after a failover the old primary stays writable until
    the Sentinels demote it, and what a client writes there meanwhile is lost; on a switch
    the idle connections are closed and the busy ones dropped when handed back."""

    _asked = -math.inf

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self._asked >= SENTINEL_CHECK_INTERVAL:
            self._asked = now
            with contextlib.suppress(MasterNotFoundError):  # (connecting raises it)
                await self.get_master_address()  # type: ignore[no-untyped-call]
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


async def _set_up(connection: Any) -> None:
    """redis-py's own set-up of a socket, a server without ``HELLO`` refused as too old."""
    try:
        await connection.on_connect()
    except redis.exceptions.NoPermissionError:
        raise
    except redis.ResponseError as exc:
        if "hello" not in str(exc).lower():
            raise
        await connection.disconnect()
        raise too_old_for_hello(exc) from exc


async def _check_server(connection: Any, *, eviction: bool) -> None:
    """The threaded client's check of a new socket
    (:func:`~readergroup.storage.connection.server_check`), awaited."""
    driver = StepDriver(server_check(None, eviction=eviction))
    while (step := driver.next()) is not None:
        try:
            if step is READ:
                driver.reply = await connection.read_response()
            elif step is DISCONNECT:
                await connection.disconnect()
            else:
                await connection.send_command(*step)
        except redis.RedisError as exc:
            driver.error = exc
