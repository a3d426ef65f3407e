"""A lean request/reply on a ``redis.asyncio`` connection: :func:`lean_request` sends one
command and reads its reply with a :class:`hiredis.Reader` fed straight from the connection's
transport (no ``StreamReader`` wake-up and partial parse per TCP read, no timeout context per
read), for the big replies of the read path (``XREAD``, ``XRANGE``).

redis-py still opens and checks every connection (server checks, auth); while one request runs,
the connection's transport is lent to a :class:`_ReplyProtocol` and given back to redis-py's
protocol when the reply is complete. A request that does not end with its whole reply read (a
cancellation, a timeout, the server closing the connection, bytes past the reply) closes the
connection, so no half-read reply is left on a pooled connection.

Only plain TCP and unix-socket connections (RESP2 or RESP3) reading with redis-py's ``hiredis``
parser, without a health-check interval and with nothing buffered, are served
(:func:`lean_capable`); the others (TLS, Sentinel-managed, the pure-Python parser, ``hiredis``
missing) take redis-py's own path.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio.connection as aio_connection
from redis._parsers import _AsyncHiredisParser
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError, InvalidResponse, TimeoutError

hiredis: Any
try:
    import hiredis
except ImportError:  # a dependency (redis[hiredis]), but an install may lack it
    hiredis = None

_LEAN_CONNECTION_TYPES = (aio_connection.Connection, aio_connection.UnixDomainSocketConnection)
_PENDING: Any = False  # hiredis.Reader.gets()'s "no complete reply yet"
_PROTOCOLS = (None, 2, 3, "2", "3")  # RESP2 and RESP3: hiredis reads both
_PUSH: Any = getattr(hiredis, "PushNotification", ())  # RESP3 out-of-band messages


def lean_capable(connection: Any) -> bool:
    """Whether :func:`lean_request` can serve ``connection`` (else: redis-py's own path). A
    redis-py whose connections lack what this looks at is not served."""
    if hiredis is None or type(connection) not in _LEAN_CONNECTION_TYPES:
        return False
    try:
        return _servable(connection)
    except AttributeError:  # another redis-py's internals
        return False


def _servable(connection: Any) -> bool:
    if connection.protocol not in _PROTOCOLS or connection.health_check_interval:
        return False
    if not connection.is_connected:
        return False
    reader, transport = connection._reader, connection._writer.transport
    if transport.get_extra_info("sslcontext") is not None or transport.is_closing():
        return False
    if reader is None or reader._buffer or reader.at_eof() or reader.exception() is not None:
        return False
    parser = connection._parser  # (hiredis's: a pure-Python parser asked for is kept)
    if not isinstance(parser, _AsyncHiredisParser) or parser._reader is None:
        return False
    return not parser._reader.has_data() and callable(connection._host_error)


class _ReplyProtocol(asyncio.Protocol):
    """Feeds what the transport reads into a ``hiredis.Reader``; resolves ``reply`` with the
    first complete reply. Flow control and the connection's loss are forwarded to the
    protocol it stands in for."""

    def __init__(self, owner: Any, reply: asyncio.Future[Any]) -> None:
        self._owner = owner
        self._reply = reply
        self._reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error
        )
        self.extra = False
        """Bytes came after the reply (the connection is not reusable)."""

    def data_received(self, data: bytes) -> None:
        if self._reply.done():
            self.extra = True
            return
        self._reader.feed(data)
        try:
            reply = self._reader.gets()
            while isinstance(reply, _PUSH):  # (none is asked for: skipped, as redis-py does)
                reply = self._reader.gets()
        except Exception as exc:  # a protocol error: the connection is unusable
            self._reply.set_exception(exc)
            return
        if reply is not _PENDING:
            if self._reader.has_data():
                self.extra = True
            self._reply.set_result(reply)

    def eof_received(self) -> bool | None:
        self._fail(ConnectionError("Connection closed by server."))
        result: bool | None = self._owner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError(f"Connection lost: {exc!r}" if exc else "Connection lost."))
        self._owner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._owner.pause_writing()

    def resume_writing(self) -> None:
        self._owner.resume_writing()

    def _fail(self, exc: Exception) -> None:
        if not self._reply.done():
            self._reply.set_exception(exc)


def _expire(reply: asyncio.Future[Any], where: str) -> None:
    if not reply.done():
        reply.set_exception(TimeoutError(f"Timeout reading from {where}"))


async def lean_request(connection: Any, *command: Any) -> Any:
    """``command``'s reply on ``connection`` (:func:`lean_capable`), as redis-py's
    ``send_command`` then ``read_response`` give it: a Redis error reply raised as redis-py's
    typed error, a lost connection as its ``ConnectionError``, the connection's
    ``socket_timeout`` as its ``TimeoutError``. Any other ending closes the connection."""
    transport = connection._writer.transport
    owner = transport.get_protocol()
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[Any] = loop.create_future()
    lender = _ReplyProtocol(owner, reply)
    timer = None
    transport.set_protocol(lender)
    done = False
    try:
        transport.writelines(connection.pack_command(*command))
        if connection.socket_timeout:
            timer = loop.call_later(
                connection.socket_timeout, _expire, reply, connection._host_error()
            )
        result = await reply
        done = not lender.extra
    finally:
        if timer is not None:
            timer.cancel()
        if transport.get_protocol() is lender:
            transport.set_protocol(owner)
        if not done:
            await connection.disconnect(nowait=True)
    if isinstance(result, Exception):  # an error reply
        raise result
    return result
