"""The asyncio Redis connection of readergroup: :class:`AsyncConnection`, on ``redis.asyncio``.

Built from the same URL and :class:`~readergroup.core.config.ClientConfig` as the threaded
:class:`~readergroup.storage.connection.RedisConnection` (:func:`~readergroup.storage.
connection.url_options`): ACL user and password (in the URL or ``redis_options``), TLS
(``rediss://`` and the ``ssl_*`` options), ``unix://``, ``socket_timeout``, the key prefix and
``acks``. redis-py's own retries are off (the writer retries with the same sequence number,
which the scripts deduplicate); every new socket is checked like the threaded client's: a
server older than Redis 7.0, or one whose ``maxmemory-policy`` may evict keys, is refused.

``redis+sentinel://`` URLs name the primary the Sentinels say, followed through a failover as
the threaded client follows it: asked by each new connection and at most every second, the
command and blocking-read pools leaving the old primary together, in use connections too
(:func:`_sentinel_client`, :meth:`AsyncConnection.primary_switches`).

``ClientConfig(cluster=True)``: the URL's hosts are a Redis Cluster's seeds
(:func:`~readergroup.storage.aio_cluster.cluster_clients`: a command client, a blocking-read
client, and plain clients of each node, :attr:`AsyncConnection.nodes`, for the commands sent
per node; every new socket checked as above).

No password comes out: the connection's ``repr`` names the redacted URL only, and errors are
translated (:mod:`readergroup.storage.translate`) from redis-py's, which never carry it.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
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
from statesync.redis_backend import (
    SENTINEL_CHECK_INTERVAL,
    SENTINEL_RECHECK_INTERVAL,
    warn_of_switch,
)
from statesync.redis_wire import BLOCKING_SOCKET_TIMEOUT

logger = logging.getLogger(__name__)


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
        blocking_twin: Callable[[], redis.asyncio.Redis] | None = None,
        cluster_blocking: RedisCluster | None = None,
    ) -> None:
        """``sentinels``: the clients of the Sentinels ``client`` asks (closed with it);
        ``blocking_twin``: what :meth:`blocking_client` calls (a Sentinel connection's);
        ``cluster_blocking``: a cluster's client of blocking reads (closed with it)."""
        self._blocking_twin = blocking_twin
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
        blocking_twin: Callable[[], redis.asyncio.Redis] | None = None
        client: AsyncClient
        try:
            if config.cluster:
                client, blocking = cluster_clients(first, seeds, config, options)
                return cls(client, config, url, cluster_blocking=blocking)
            if sentinel:
                client, blocking_twin, sentinels = _sentinel_client(url, config, options)
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
        return cls(client, config, url, sentinels=sentinels, blocking_twin=blocking_twin)

    def blocking_client(self) -> redis.asyncio.Redis | None:
        """A new client for blocking reads (``XREAD BLOCK``) whose pool follows a Sentinel
        failover together with :attr:`client`'s (its owner closes it), or ``None`` when any
        twin of ``client`` will do (not a Sentinel URL)."""
        return None if self._blocking_twin is None else self._blocking_twin()

    def primary_switches(self) -> int:
        """A number that changes whenever this connection's pools learn that the Sentinels name
        a new primary (as :meth:`RedisConnection.primary_switches
        <readergroup.storage.connection.RedisConnection.primary_switches>`: a reader holding
        positions on the old primary checks them); on a cluster, the switches its node clients
        learnt (:attr:`~statesync.aio_redis_backend.AsyncNodeClients.switches`); else 0."""
        if self.nodes.cluster:
            return self.nodes.switches + self.blocking_nodes.switches
        siblings = getattr(getattr(self.client, "connection_pool", None), "siblings", None)
        return siblings.count if isinstance(siblings, _SiblingPools) else 0

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
) -> tuple[redis.asyncio.Redis, Callable[[], redis.asyncio.Redis], list[redis.asyncio.Redis]]:
    """The client of the primary a ``redis+sentinel://`` URL names, a maker of its
    blocking-read twins, and the Sentinels' clients (as
    :func:`statesync.redis_backend.sentinel_clients` builds the threaded pair: the URL's
    credentials win over ``redis_options``; ``sentinel_options`` go to the Sentinels). Their
    pools follow the Sentinels together (:func:`_following_pool_class`); a connection to a
    primary demoted since is also dropped at its first ``READONLY`` reply (redis-py's), so the
    writer's retry reaches the new primary."""
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
    pool_class = _following_pool_class()

    def client(socket_timeout: float) -> redis.asyncio.Redis:
        made: redis.asyncio.Redis = sentinel.master_for(
            target.service,
            socket_timeout=socket_timeout,
            db=target.db,
            retry=Retry(NoBackoff(), 0),
            connection_pool_class=pool_class,
            **checked_pool_options(),
        )
        return made

    return (
        client(config.socket_timeout),
        functools.partial(client, BLOCKING_SOCKET_TIMEOUT),
        sentinel.sentinels,
    )


class _SiblingPools:
    """The Sentinel pools of one connection (its commands', its blocking-read twins'): a
    switch one of them learns is followed by the others at once, not at their own next
    question (a blocked read on the old primary would otherwise wait there up to its block),
    as :class:`statesync.redis_backend._SiblingPools` does for the threaded pair. ``count``:
    the switches learned (:meth:`AsyncConnection.primary_switches`)."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self.count = 0

    def add(self, pool: Any) -> None:
        self._pools.add(pool)

    async def learned(self, learner: Any, address: Any) -> None:
        for pool in list(self._pools):
            if pool is not learner:
                await pool.follow_sibling(address)
        self.count += 1


def _following_pool_class() -> type[SentinelConnectionPool]:
    """A pool class for one connection's clients: its pools share one :class:`_SiblingPools`."""
    siblings = _SiblingPools()

    class FollowingPool(SentinelConnectionPool):
        """A Sentinel pool that asks the Sentinels where the primary is when a connection is
        taken, at most every :data:`~statesync.redis_backend.SENTINEL_CHECK_INTERVAL` seconds,
        as the threaded client's pool does: after a failover the old primary stays writable
        until the Sentinels demote it, and what a client writes there meanwhile is lost. On a
        switch (learned by its own question, a new connection's, or a sibling pool's) every
        connection to the old primary is left, in use ones too (:func:`_leave`)."""

        siblings: _SiblingPools

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
            self.siblings = siblings
            self._asked = -math.inf
            self._interval = SENTINEL_CHECK_INTERVAL
            self._unanswered = False
            self._followed: Any = None  # the primary last switched to (told once)
            siblings.add(self)

        async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            now = time.monotonic()
            if self.master_address is not None and now - self._asked >= self._interval:
                self._asked, self._interval = now, SENTINEL_CHECK_INTERVAL
                await self._ask()
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]

        def follow_now(self) -> None:
            """Ask the Sentinels when the next connection is taken (unless asked within
            :data:`~statesync.redis_backend.SENTINEL_RECHECK_INTERVAL`): what
            :func:`~statesync.redis_backend.recheck_primary` calls on a sign that the primary
            was demoted (a ``WAIT`` shortfall, a failover reply), so the retry asks first."""
            self._interval = SENTINEL_RECHECK_INTERVAL

        async def _ask(self) -> None:
            try:
                await self.get_master_address()
            except redis.RedisError as exc:  # keep the primary we have, ask again later
                if not self._unanswered:
                    logger.warning(
                        "Sentinels of %r did not answer where the primary is; staying on %s",
                        self.service_name,
                        self.master_address,
                        exc_info=exc,
                    )
                self._unanswered = True
                return
            self._unanswered = False

        async def get_master_address(self) -> Any:
            """The Sentinels' answer (also asked by each new connection): a new primary is
            followed here and by the sibling pools."""
            before = self.master_address
            after = await super().get_master_address()  # type: ignore[no-untyped-call]
            if before is not None and after not in (before, self._followed):
                self._followed = after  # (connections asking at once: one switch)
                await self._switched(before, after, "")
                await siblings.learned(self, after)
            return after

        async def follow_sibling(self, address: Any) -> None:
            """Another pool of this connection learned that the Sentinels name ``address``."""
            before = self.master_address
            if before is None or before == address:
                return
            self.master_address = self._followed = address
            await self._switched(before, address, ", another pool of this client learned")

        async def _switched(self, before: Any, after: Any, learned: str) -> None:
            warn_of_switch(self.service_name, before, after, learned)
            await self.disconnect(inuse_connections=False)  # (the idle ones: redis-py's way)
            _leave(self, before)

    return FollowingPool


def _leave(pool: Any, old: Any) -> None:
    """Leave the old primary ``old``: abort the socket of every connection of ``pool`` in use
    there (the idle ones are closed already). A command or a blocked read awaiting a reply
    there gets a connection error at once (its own task then closes the connection; nothing
    is closed under it), and the connection reconnects, to the new primary, when next used."""
    for connection in list(pool._in_use_connections):
        writer = getattr(connection, "_writer", None)
        if writer is not None and (connection.host, connection.port) == tuple(old):
            writer.transport.abort()


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
