"""Commands sent over one redis-py connection taken from a pool, bypassing the client's command
layer (the appends of :mod:`readergroup.storage.native_append` and
:mod:`readergroup.storage.script_append`): packing, reading replies as values, and which server
the connection's socket reaches.

Which server: a socket reaches one server process for its whole life. A failover, a restart or
a Sentinel switch means a new socket (redis-py reconnects with a new one), so the server's
``run_id`` learnt on a socket holds until the socket changes. It is remembered on the redis-py
connection next to the socket it was learnt on (:func:`known_server`), so the appends, which
begin a new segment epoch whenever the server appending changed (``epoch.lua``), ask the server
for it (``INFO server``) once per connection, not once per append."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

_SERVER_ATTRIBUTE = "_readergroup_server"  # (socket, run_id) remembered on a redis-py connection


@contextmanager
def pooled_connection(client: redis.Redis) -> Iterator[Any]:
    """A connection of ``client``'s pool for the caller's own commands, released afterwards;
    disconnected first if an exception escapes (never handed back in an unknown state)."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        yield connection
    except BaseException:
        connection.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(connection)


def known_server(connection: Any) -> str | None:
    """The ``run_id`` of the server this connection's socket reaches, if learnt before on that
    socket (see the module's docstring)."""
    remembered = getattr(connection, _SERVER_ATTRIBUTE, None)
    sock = socket_of(connection)
    if remembered is None or sock is None or remembered[0] is not sock:
        return None
    server: str = remembered[1]
    return server


def remember_server(connection: Any, server: str | None) -> None:
    """Remember ``server`` as the ``run_id`` the connection's current socket reaches."""
    sock = socket_of(connection)
    if server and sock is not None:
        setattr(connection, _SERVER_ATTRIBUTE, (sock, server))


def socket_of(connection: Any) -> Any:
    """What stands for the connection's socket: redis-py's socket, or the stream writer of a
    ``redis.asyncio`` connection (``None``: not connected)."""
    sock = getattr(connection, "_sock", None)
    return sock if sock is not None else getattr(connection, "_writer", None)


def run_id(reply: Any) -> str | None:
    """The ``run_id`` of an ``INFO server`` reply (``None`` if it has none)."""
    found = re.search(r"run_id:(\w+)", text(reply))
    return found.group(1) if found else None


def text(value: Any) -> str:
    """A reply's bytes (or anything) as text; ``""`` for ``None``."""
    return value.decode() if isinstance(value, bytes) else str(value or "")


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in the Redis protocol (RESP); arguments that are not bytes as their
    ``str``, UTF-8."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def round_trip(connection: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` at once and read their replies, error replies as values."""
    connection.send_packed_command([pack(c) for c in commands], check_health=False)
    return [read(connection) for _ in commands]


def read(connection: Any) -> Any:
    """One reply; an error reply is returned, not raised (the rest must still be read)."""
    try:
        return connection.read_response(disconnect_on_error=False)
    except redis.ResponseError as exc:
        return exc
