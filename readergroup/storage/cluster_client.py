"""A Redis Cluster client that needs no particular node once connected: :class:`ClusterClient`.

redis-py's ``RedisCluster`` finds the keys of a command whose keys move (``XREAD``,
``XREADGROUP``, ``EVALSHA_RO``, ``EVAL_RO``, ``FCALL``) by asking its *default node*
(``COMMAND GETKEYS``) before every such command, and never replaces that node when the
question fails: the refresh of its slot table runs only on errors of the command itself. The
default node is the primary of slot 0, usually the seed of a one-seed URL, so once that node
died every ``XREAD`` and read-only script failed for good with ``Error 111 connecting to
<seed>``, however long ago the cluster had failed over (issue 35: readers stuck for 45 s and
more while the writer carried on). Here:

* the keys of those commands are read from the arguments (no question to any node, and one
  round trip less per blocking read);
* any other question about keys that fails to reach the default node refreshes the slot table
  from every node the client knows (not the seed alone) and asks another primary.

>>> command_keys(("XREAD", b"COUNT", "10", b"BLOCK", "5", b"STREAMS", "a", "b", "0-0", "$"))
['a', 'b']
>>> command_keys(("XREADGROUP", b"GROUP", "g", "c", b"NOACK", b"STREAMS", "k", ">"))
['k']
>>> command_keys(("EVALSHA_RO", "abc", 2, "k1", "k2", "arg"))
['k1', 'k2']
>>> command_keys(("HGET", "k", "f")) is None
True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

logger = logging.getLogger(__name__)

_OPTION_ARGUMENTS = {
    "XREAD": {"COUNT": 1, "BLOCK": 1, "MAXCOUNT": 1, "MAXSIZE": 1},
    "XREADGROUP": {
        "GROUP": 2,
        "COUNT": 1,
        "BLOCK": 1,
        "NOACK": 0,
        "CLAIM": 1,
        "MAXCOUNT": 1,
        "MAXSIZE": 1,
    },
}
"""Options before ``STREAMS`` of the stream reads, with the number of arguments each takes."""

_NUMKEYS_COMMANDS = frozenset({"EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"})
"""Commands of the form ``<command> <script or function> <numkeys> <key>... <arg>...``."""


def _word(value: Any) -> str:
    return (value.decode("latin-1") if isinstance(value, bytes) else str(value)).upper()


def command_keys(args: Sequence[Any]) -> list[Any] | None:
    """The keys of a command whose keys move, read from its arguments; ``None`` when the
    command is not one of those (or its form is not understood: ask the server)."""
    if not args:
        return None
    command = _word(args[0])
    options = _OPTION_ARGUMENTS.get(command)
    if options is not None:
        at = 1
        while at < len(args) and _word(args[at]) in options:
            at += 1 + options[_word(args[at])]
        if at >= len(args) or _word(args[at]) != "STREAMS":
            return None
        streams = list(args[at + 1 :])
        if not streams or len(streams) % 2:
            return None
        return streams[: len(streams) // 2]
    if command in _NUMKEYS_COMMANDS and len(args) >= 3:
        try:
            count = int(args[2])
        except (TypeError, ValueError):
            return None
        keys = list(args[3 : 3 + count])
        return keys if count > 0 and len(keys) == count else None
    return None


class _KeysParsedHere:
    """Stands in for a cluster client's ``commands_parser`` (shared with its pipelines):
    :func:`command_keys` first; otherwise the client's parser, asking another primary when the
    default node cannot be reached."""

    def __init__(self, parser: Any, client: RedisCluster) -> None:
        self._parser = parser
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)

    def get_keys(self, redis_conn: Any, *args: Any) -> Any:
        keys = command_keys(args)
        if keys is not None:
            return keys
        try:
            return self._parser.get_keys(redis_conn, *args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            node = replace_unreachable_default_node(self._client, exc)
            return self._parser.get_keys(node.redis_connection, *args)


def replace_unreachable_default_node(client: Any, exc: Exception) -> Any:
    """The default node of ``client`` could not be reached (``exc``): refresh the slot table
    from every node the client knows and make a reachable primary the default; return it.
    Raises ``exc`` if no other node answers."""
    dead = client.get_default_node()
    logger.warning(
        "cluster node %s (the client's default node) unreachable, asking another: %s",
        dead.name,
        exc,
    )
    try:
        client.nodes_manager.initialize(last_failed_node_name=dead.name)
    except redis.RedisError as refresh_failed:
        logger.warning("cluster slot table refresh failed: %s", refresh_failed)
    if client.get_default_node().name == dead.name:
        client.replace_default_node()
    node = client.get_default_node()
    if node.name == dead.name or node.redis_connection is None:
        raise exc
    return node


class ClusterClient(RedisCluster):
    """``redis.cluster.RedisCluster`` that depends on no particular node once connected (see
    the module doc). Built like it (``ClusterClient.from_url(url, startup_nodes=...)``); every
    node it learns is kept as a seed of later slot-table refreshes (redis-py's
    ``dynamic_startup_nodes``, on by default)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands_parser = _KeysParsedHere(self.commands_parser, self)  # type: ignore[assignment]
