"""The ``redis.asyncio`` implementation of :class:`~statesync.aio_backend.AsyncLogBackend`.

The same keys, Lua scripts, arguments and reply parsing as the blocking
:class:`~statesync.redis_backend.RedisLogBackend` (:mod:`statesync.redis_wire`), and its
error translation (:func:`~statesync.redis_backend.translate_redis_errors`): a threaded and
an asyncio synchronizer of one log interoperate, each seeing the other's entries, conflicts
and writer sequences. redis-py's own command retries are off, as there: a re-sent append
carries the same writer sequence one level up.

Endpoints: ``redis://``, ``rediss://`` (TLS), ``unix://``, ACL user and password (in the URL
or as options), and ``redis+sentinel://`` (``redis.asyncio``'s Sentinel client: each new
connection asks the Sentinels where the primary is). A Redis Cluster: pass a
``redis.asyncio.cluster.RedisCluster`` and a second one for blocking reads (socket timeout
above 5 s), as to the threaded backend; acknowledged appends (``acks``) then run on a plain
client of the node holding the log, so the append and its ``WAIT`` share a connection.

Cancellation: ``redis.asyncio`` closes a connection whose command was cancelled before its
reply was read, so a cancelled call never leaves a reply for the next one to misread; the
command itself either ran whole on the server or not at all (one script each).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import (
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
)

from statesync import redis_wire as wire
from statesync import status
from statesync.backend import AppendOutcome, CompactOutcome, ReadResult
from statesync.durability import Acks
from statesync.endpoints import is_sentinel_url, parse_sentinel_url, sentinel_setup
from statesync.errors import BackendUnsupportedError
from statesync.redis_backend import (
    check_acknowledged,
    primaries_of,
    slot_moved,
    translate_redis_errors,
)
from statesync.redis_wire import BLOCKING_SOCKET_TIMEOUT, RedisBackendBase, ScriptCall
from statesync.scripts import SCRIPT_NAMES, script_source

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 2**31 - 1
"""Connections a pool this backend makes may open: as many as tasks have commands (or waits)
in flight, as the threaded backend's pools allow as many as threads do. ``redis.asyncio``'s
default (100) made the 101st of a loop's concurrent calls fail at once (``Too many
connections``); a client given to the constructor keeps its own pool's limit."""


def checked_pool_options() -> dict[str, Any]:
    """Options that keep a ``redis.asyncio`` pool checking a pooled connection before it hands
    it out (and replacing it when the server closed it, as after a restart or a failover
    behind a stable address): redis-py 8 skips that check while maintenance notifications are
    ``"auto"``, their default, so the first command on such a connection failed
    (``Connection closed by server``) where the threaded client's succeeded. Those
    notifications need RESP3, which these clients do not speak: they are turned off. Nothing
    for a redis-py without them (its pools always check)."""
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py before maintenance notifications
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


AsyncClient = aioredis.Redis | RedisCluster
"""A ``redis.asyncio`` client: one server's (or the primary a Sentinel names), or a cluster's."""


class AsyncNodeClients:
    """Plain ``redis.asyncio`` clients of the servers behind ``client``: for a
    ``RedisCluster``, one per node (made when first needed, from the cluster's connection
    options, so each new socket is set up and checked as the cluster's are), for a plain
    client that client itself. A pipeline on :meth:`for_key`'s client runs on the server
    holding the key, on one connection (a script and its ``WAIT``; several slots of one node
    in one round trip), past the cluster's redirections: a ``MOVED``/``ASK`` reply comes
    back as a value, and the caller :meth:`refresh` es the slot table before retrying."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self._made: dict[str, aioredis.Redis] = {}
        self.switches = 0
        """Primary switches learnt here (as the threaded cluster client counts them, see
        :func:`statesync.redis_backend.primary_switches`): a refresh that changed the set of
        primaries, or a ``MOVED`` that changed a slot's primary (:meth:`moved`)."""

    def for_key(self, key: str) -> aioredis.Redis:
        """The client of the server holding ``key`` (the primary of its slot)."""
        client = self.client
        if isinstance(client, aioredis.Redis):
            return client
        node = client.get_node_from_key(key)
        if node is None:  # (translated: an outage, retried)
            raise SlotNotCoveredError(f"no node serves the slot of {key!r}")
        return self._at(node, node.host, int(node.port))

    def for_address(self, host: str, port: int) -> aioredis.Redis:
        """The client of the cluster node at ``host:port`` (one an ``ASK`` reply named; one
        not in the slot table yet is reached with another node's options)."""
        client = self.client
        if isinstance(client, aioredis.Redis):
            return client
        node = client.get_node(host=host, port=port) or client.get_default_node()
        return self._at(node, host, port)

    def _at(self, node: ClusterNode, host: str, port: int) -> aioredis.Redis:
        """The client made for ``host:port`` with ``node``'s connection options."""
        name = f"{host}:{port}"
        made = self._made.get(name)
        if made is None:
            pool = aioredis.ConnectionPool(
                connection_class=node.connection_class,
                max_connections=MAX_CONNECTIONS,
                **{**node.connection_kwargs, "host": host, "port": port, **checked_pool_options()},
            )
            made = self._made[name] = aioredis.Redis(connection_pool=pool)
        return made

    async def ready(self) -> None:
        """Learn a cluster's slot table if its client has not yet (it connects lazily, or
        dropped its table after a ``CLUSTERDOWN``); at once when it has."""
        client = self.client
        if isinstance(client, RedisCluster):
            await client.initialize()

    async def refresh(self) -> None:
        """Refresh a cluster's slot table (after a redirection or a node that did not
        answer), so the next :meth:`for_key` names the slot's current primary; a refresh that
        fails is logged and left to the cluster client's next command. Nothing off a
        cluster."""
        client = self.client
        if not isinstance(client, RedisCluster):
            return
        before = primaries_of(client.nodes_manager)
        try:
            await client.nodes_manager.initialize()
        except (RedisError, RedisClusterException) as exc:
            logger.warning("cluster slot table refresh failed: %s", exc)
        if primaries_of(client.nodes_manager) != before:
            self.switches += 1

    async def moved(self, keys: Sequence[str]) -> None:
        """:meth:`refresh` after ``MOVED`` replies for ``keys``: a switch when one of their
        slots has another primary now (a failover, or a slot resharded away)."""
        before = [self.for_key(key) for key in keys]
        switches = self.switches
        await self.refresh()
        if self.switches == switches and [self.for_key(key) for key in keys] != before:
            self.switches += 1

    async def close(self) -> None:
        """Close the clients made here (not ``client``: its owner closes it)."""
        made, self._made = list(self._made.values()), {}
        for client in made:
            await client.aclose()
            await client.connection_pool.disconnect()


class AsyncRedisLogBackend(RedisBackendBase[AsyncClient]):
    """Synchronizer logs in one Redis (or Valkey) server, for the tasks of one event loop.

    Blocking waits (``XREAD BLOCK``) use a client of their own whose sockets outlast a block,
    so a wait never makes an append or a read time out.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        key_prefix: str = "statesync",
        blocking_client: AsyncClient | None = None,
        acks: Acks | None = None,
        nodes: AsyncNodeClients | None = None,
    ) -> None:
        """``client``: a ``redis.asyncio.Redis``, or a ``RedisCluster`` with a second one as
        ``blocking_client`` (socket timeout above 5 s; required: a cluster client's options
        cannot be copied). ``acks``: when an append counts as acknowledged
        (:mod:`statesync.durability`). ``nodes``: the :class:`AsyncNodeClients` of ``client``
        to share (its owner closes it; by default the backend makes and closes its own)."""
        if isinstance(client, RedisCluster) and blocking_client is None:
            raise BackendUnsupportedError(
                "AsyncRedisLogBackend on a Redis Cluster needs blocking_client: a second "
                "RedisCluster whose socket timeout is above 5 s, for blocking reads"
            )
        self._own_nodes = nodes is None
        self.nodes = AsyncNodeClients(client) if nodes is None else nodes
        super().__init__(client, key_prefix=key_prefix, blocking_client=blocking_client, acks=acks)
        self._scripts: dict[str, AsyncScript] = {
            script: client.register_script(script_source(script)) for script in SCRIPT_NAMES
        }
        self._no_evalsha_ro = False

    def _blocking_twin(self, client: AsyncClient) -> AsyncClient:
        assert isinstance(client, aioredis.Redis)  # a cluster's is given (see __init__)
        pool = client.connection_pool
        kwargs = wire.blocking_options(pool.connection_kwargs, _no_retry())
        return aioredis.Redis(
            connection_pool=aioredis.ConnectionPool(
                connection_class=pool.connection_class,
                max_connections=MAX_CONNECTIONS,
                **{**kwargs, **checked_pool_options()},
            )
        )

    @classmethod
    def _connect(
        cls, url: str, socket_timeout: float, redis_kwargs: dict[str, Any]
    ) -> tuple[aioredis.Redis, aioredis.Redis | None]:
        """``redis.asyncio`` clients: lazily connected, so made anywhere, used in one loop."""
        redis_kwargs = {"max_connections": MAX_CONNECTIONS, "retry": _no_retry(), **redis_kwargs}
        if not is_sentinel_url(url):
            options = {**wire.client_options(socket_timeout), **checked_pool_options()}
            return aioredis.Redis.from_url(url, **options, **redis_kwargs), None
        from redis.asyncio.sentinel import Sentinel

        target = parse_sentinel_url(url)
        primary = dict(redis_kwargs)
        sentinels = primary.pop("sentinel_options", None)
        options, sentinel_kwargs = sentinel_setup(
            target, primary, socket_timeout=socket_timeout, sentinel_options=sentinels
        )
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            target.sentinels, sentinel_kwargs=sentinel_kwargs, **options
        )
        client, blocking = (
            sentinel.master_for(
                target.service, socket_timeout=timeout, db=target.db, **checked_pool_options()
            )
            for timeout in (socket_timeout, BLOCKING_SOCKET_TIMEOUT)
        )
        return client, blocking

    async def _run(self, name: str, call: ScriptCall) -> Any:
        with translate_redis_errors(call.script, name):
            return await self._scripts[call.script](keys=call.keys, args=call.args)

    async def _run_read_only(self, name: str, call: ScriptCall) -> Any:
        """``EVALSHA_RO`` (so a read-only ACL user may read), ``EVALSHA`` before Redis 7: as
        :func:`statesync.redis_backend.run_read_only`."""
        script = self._scripts[call.script]
        with translate_redis_errors(call.script, name):
            if not self._no_evalsha_ro:
                try:
                    return await self._evalsha_ro(script, call)
                except ResponseError as exc:
                    if "unknown command" not in str(exc).lower():
                        raise
                    self._no_evalsha_ro = True
            return await script(keys=call.keys, args=call.args)

    async def _evalsha_ro(self, script: AsyncScript, call: ScriptCall) -> Any:
        args = (script.sha, len(call.keys), *call.keys, *call.args)
        try:
            return await self._client.evalsha_ro(*args)
        except NoScriptError:
            await self._client.script_load(script.script)
            return await self._client.evalsha_ro(*args)

    # -- AsyncLogBackend --------------------------------------------------------------------
    async def initialize(self, name: str, snapshot: bytes, incarnation: str) -> bool:
        call = wire.initialize_call(self.keys(name), snapshot, incarnation)
        return wire.initialized(name, await self._run(name, call))

    async def append(self, name: str, payload: bytes, **options: Any) -> AppendOutcome:
        call = wire.append_call(self.keys(name), payload, **options)
        wait = self._acks.wait_command()
        if wait is None:
            return wire.append_outcome(name, await self._run(name, call))
        with translate_redis_errors("append", name):
            await self.nodes.ready()
            pipe = self.nodes.for_key(call.keys[0]).pipeline(transaction=False)
            await self._scripts["append"](keys=call.keys, args=call.args, client=pipe)
            pipe.execute_command(*wait)
            reply, acknowledged = await pipe.execute(raise_on_error=False)
            moved = slot_moved(call.keys[0], reply)
            if moved is not None:
                await self.nodes.refresh()
                raise moved from reply
            if isinstance(reply, Exception):
                raise reply
        if int(reply[0]) in (status.OK, status.DUPLICATE):
            check_acknowledged(self._acks, acknowledged, f"synchronizer {name!r}", self._client)
        return wire.append_outcome(name, reply)

    async def wake(self, name: str, revision: int, followers: Collection[str] | None) -> bool:
        call = wire.wake_call(self.keys(name), revision, followers)
        return call is not None and wire.woke(name, await self._run(name, call))

    async def read(self, name: str, after_revision: int, limit: int, **limits: Any) -> ReadResult:
        call = wire.read_call(self.keys(name), after_revision, limit, **limits)
        return wire.read_result(name, await self._run_read_only(name, call))

    async def wait(self, name: str, after_revision: int, timeout: float, **which: Any) -> bool:
        streams = wire.wait_streams(self.keys(name), after_revision, **which)
        for block in wire.block_chunks(timeout):
            with translate_redis_errors("wait", name):
                reply = await self._blocking.xread(streams, count=1, block=block)
            if reply:
                return True
        return False

    async def compact(
        self, name: str, revision: int, snapshot: bytes, **anchors: Any
    ) -> CompactOutcome:
        call = wire.compact_call(self.keys(name), revision, snapshot, **anchors)
        return wire.compact_outcome(name, await self._run(name, call))

    async def delete(self, name: str) -> bool:
        k = self.keys(name)

        async def delete_all(pipe: Any) -> None:  # re-run if a wake-up named a follower
            followers = [wire.text(f) for f in await pipe.zrange(k.wakers, 0, -1)]
            pipe.multi()
            pipe.delete(*k.all, *map(k.follower_wake, followers))

        with translate_redis_errors("delete", name):
            client: Any = self._client  # (a cluster's transaction is typed for coroutines)
            replies: Any = await client.transaction(delete_all, k.wakers)
        return wire.deleted(replies)

    async def server_time_ms(self) -> int:
        with translate_redis_errors("time", "-"):
            return wire.time_ms(await self._client.time())

    async def close(self) -> None:
        if self._own_nodes:
            await self.nodes.close()
        for client in [self._blocking, self._client]:
            await client.aclose()
