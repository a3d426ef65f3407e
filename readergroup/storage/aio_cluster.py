"""The asyncio API on a Redis Cluster: its clients (:func:`cluster_clients`, a
``redis.asyncio.cluster.RedisCluster`` that reads the keys of ``XREAD`` and read-only scripts
from their arguments, as the threaded :class:`~readergroup.storage.cluster_client.
ClusterClient` does) and :func:`by_node`, which runs commands on many keys grouped by the node
holding each key, one round trip per node, the nodes at once.

Redirections and failovers, as the threaded cluster client meets them: a ``MOVED`` reply (the
slot's primary changed: a failover, a resharding done) refreshes the slot table and re-sends
only the commands it refused (they did not run); an ``ASK`` (a slot being migrated, the key
already moved) re-sends them to the node it names, each after ``ASKING``; at most
:data:`REDIRECTS` times: a slot that still moves raises
:class:`~readergroup.core.errors.RedisFailoverError` naming the key (retriable). A node that
does not answer refreshes the slot table too (the next attempt goes to the promoted replica)
and raises :class:`~readergroup.core.errors.RedisUnavailableError` (retriable) naming the node
and a key. Cancelled, each node's connection that
was interrupted mid-reply is closed (``redis.asyncio`` disconnects on any exception while it
sends or reads, and :func:`~readergroup.storage.aio_append.pooled` on any escaping one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import AskError, MovedError

from readergroup.core.config import ClientConfig
from readergroup.storage.cluster_client import command_keys
from readergroup.storage.multi_read import BLOCKING_READ_SOCKET_TIMEOUT
from statesync.aio_redis_backend import MAX_CONNECTIONS, AsyncNodeClients, checked_pool_options
from statesync.redis_backend import slot_moved

REDIRECTS = 3
"""Times the commands a ``MOVED``/``ASK`` refused are re-sent (after a slot-table refresh, or
to the node the ``ASK`` named)."""


class _KeysParsedHere:
    """Stands in for an asyncio cluster client's ``commands_parser``: the keys of the
    commands whose keys move read from their arguments
    (:func:`~readergroup.storage.cluster_client.command_keys`: no ``COMMAND GETKEYS`` question
    to the default node before every ``XREAD`` or ``EVALSHA_RO``, so a dead default node
    never stops them); any other command asks the client's own parser."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)

    async def get_keys(self, *args: Any) -> Any:
        keys = command_keys(args)
        return keys if keys is not None else await self._parser.get_keys(*args)


class AsyncClusterClient(RedisCluster):
    """``redis.asyncio.cluster.RedisCluster`` reading the keys of ``XREAD`` and read-only
    scripts from their arguments (see :class:`_KeysParsedHere`), and taking a
    ``redis_connect_func`` as the plain client does (redis-py's cluster client has no such
    option: it is set on the options every node's connections are made with)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        connect = kwargs.pop("redis_connect_func", None)
        super().__init__(*args, **kwargs)
        self.commands_parser = _KeysParsedHere(self.commands_parser)  # type: ignore[assignment]
        if connect is not None:  # (the nodes learnt later copy the cluster's options)
            self.connection_kwargs["redis_connect_func"] = connect
            for node in self.nodes_manager.startup_nodes.values():
                node.connection_kwargs["redis_connect_func"] = connect


def cluster_clients(
    first: str, seeds: Sequence[tuple[str, int]], config: ClientConfig, options: dict[str, Any]
) -> tuple[AsyncClusterClient, AsyncClusterClient]:
    """The command client and the blocking-read client (socket timeout
    :data:`~readergroup.storage.multi_read.BLOCKING_READ_SOCKET_TIMEOUT`) of the cluster the URL's
    seeds name (``first``: the URL of its first host), as the threaded connection makes
    them: every seed is a startup node, redis-py's retries are those of its cluster client
    (redirections and refreshes), each node's pool unbounded."""
    nodes = [ClusterNode(host, port) for host, port in seeds]
    made = tuple(
        AsyncClusterClient.from_url(
            first,
            startup_nodes=nodes,
            socket_timeout=timeout,
            max_connections=MAX_CONNECTIONS,
            **options,
            **checked_pool_options(),
        )
        for timeout in (config.socket_timeout, BLOCKING_READ_SOCKET_TIMEOUT)
    )
    return made[0], made[1]  # type: ignore[return-value]


NodeRun = Callable[[redis.asyncio.Redis, list[int], bool], Awaitable[list[Any]]]
"""Sends the commands of some items (their indices) to one node's client and returns one
reply per item, in order, error replies as values; with ``asking`` (the node an ``ASK``
named), each command preceded by ``ASKING`` (see :func:`asking_each`)."""


async def by_node(nodes: AsyncNodeClients, keys: Sequence[str], run: NodeRun) -> list[Any]:
    """One reply per item, the ``i``-th item's commands on the node holding ``keys[i]``:
    ``run`` once per node with the indices of that node's items, the nodes at once (see the
    module doc for redirections and nodes that do not answer). Off a cluster, one ``run`` of
    every item on the one client."""
    replies: list[Any] = [None] * len(keys)
    pending: dict[int, tuple[str, int] | None] = dict.fromkeys(range(len(keys)))
    """Items still to send: ``None``, to the slot's primary; else to the node an ``ASK`` named."""
    for _ in range(REDIRECTS + 1):
        await nodes.ready()
        groups: dict[tuple[int, bool], tuple[redis.asyncio.Redis, list[int]]] = {}
        for index, asked in pending.items():
            client = nodes.for_key(keys[index]) if asked is None else nodes.for_address(*asked)
            groups.setdefault((id(client), asked is not None), (client, []))[1].append(index)
        sends = [
            _on_node(nodes, run, client, items, asking, keys)
            for (_, asking), (client, items) in groups.items()
        ]
        try:  # (one node: awaited in this task, no task of its own)
            results = [await sends[0]] if len(sends) == 1 else await asyncio.gather(*sends)
        except (redis.ConnectionError, redis.TimeoutError):
            await nodes.refresh()
            raise
        pending = {}
        for (_, items), result in zip(groups.values(), results, strict=True):
            for index, reply in zip(items, result, strict=True):
                replies[index] = reply
                if isinstance(reply, MovedError):  # (a subclass of AskError)
                    pending[index] = None
                elif isinstance(reply, AskError):
                    pending[index] = (reply.host, reply.port)
        if not pending:
            return replies
        if None in pending.values():
            await nodes.moved([keys[index] for index, asked in pending.items() if asked is None])
    refused = next(iter(pending))
    error = slot_moved(keys[refused], replies[refused])
    assert error is not None
    raise error from replies[refused]


def asking_each(commands: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``commands``, each preceded by ``ASKING`` (the node an ``ASK`` named then runs it,
    though the slot is still migrating to it); their replies are every second one.

    >>> asking_each([("GET", "a"), ("GET", "b")])
    [('ASKING',), ('GET', 'a'), ('ASKING',), ('GET', 'b')]
    """
    return [part for command in commands for part in (("ASKING",), command)]


def redirected(reply: Any) -> bool:
    """Whether ``reply`` is a ``MOVED``/``ASK`` (the command did not run there)."""
    return isinstance(reply, (MovedError, AskError))


async def _on_node(
    nodes: AsyncNodeClients,
    run: NodeRun,
    client: redis.asyncio.Redis,
    items: list[int],
    asking: bool,
    keys: Sequence[str],
) -> list[Any]:
    """``run`` on one node; on a cluster, a node that does not answer is named, with the
    first key it was asked about."""
    try:
        return await run(client, items, asking)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if not nodes.cluster:
            raise
        where = client.connection_pool.connection_kwargs
        node = f"{where.get('host')}:{where.get('port')}"
        raise type(exc)(f"cluster node {node} (holding {keys[items[0]]!r}): {exc}") from exc


async def pipelined_by_node(
    nodes: AsyncNodeClients,
    keys: Sequence[str],
    queue: Callable[[Any, int], Awaitable[None]],
) -> list[Any]:
    """:func:`by_node` of items each queued by ``await queue(pipeline, index)`` (exactly one
    command, or one script run: a plain pipeline loads a script a node lacks) in one
    pipeline per node; error replies as values."""

    async def run(client: redis.asyncio.Redis, items: list[int], asking: bool) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for index in items:
            if asking:
                pipe.execute_command("ASKING")
            await queue(pipe, index)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies[1::2] if asking else replies

    return await by_node(nodes, keys, run)
