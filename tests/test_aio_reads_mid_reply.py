"""The asyncio reads' ``XREAD`` on a real server behind a proxy that cuts the server's replies
into small TCP writes and can stop mid-reply: whole replies from many TCP reads, error replies
as the same typed errors on a connection kept, and a read cancelled, timed out or cut off
mid-reply closing its pooled connection (no half-read reply left for the next command)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio import ConnectionPool

from readergroup import RedisUnavailableError, WrongKeyTypeError
from readergroup.core.errors import ReaderGroupError
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.keys import KeyLayout


class ChunkingProxy:
    """Forwards TCP to ``upstream``; the server's bytes go to the client ``chunk`` bytes per
    write, a loop turn apart. :meth:`hold_after` stops them after so many more bytes."""

    def __init__(self, host: str, port: int, chunk: int) -> None:
        self.upstream = (host, port)
        self.chunk = chunk
        self.budget: int | None = None
        self.writes = 0
        self.holding = asyncio.Event()
        self.clients: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def hold_after(self, count: int) -> None:
        self.budget = count
        self.holding.clear()

    def close_clients(self) -> None:
        for writer in self.clients:
            writer.close()

    async def stop(self) -> None:
        self.close_clients()
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.append(writer)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        pump = asyncio.ensure_future(self._up(reader, up_writer))
        try:
            while data := await up_reader.read(1 << 16):
                for at in range(0, len(data), self.chunk):
                    piece = data[at : at + self.chunk]
                    if self.budget is not None:
                        if self.budget <= 0:
                            self.holding.set()
                            await asyncio.Event().wait()  # (held until closed)
                        piece = piece[: self.budget]
                        self.budget -= len(piece)
                    writer.write(piece)
                    self.writes += 1
                    await writer.drain()
                    await asyncio.sleep(0)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            pump.cancel()
            up_writer.close()
            writer.close()

    @staticmethod
    async def _up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()


@contextlib.asynccontextmanager
async def proxied(redis_url: str, chunk: int) -> AsyncIterator[tuple[ChunkingProxy, str]]:
    options = ConnectionPool.from_url(redis_url).connection_kwargs
    proxy = ChunkingProxy(options["host"], options["port"], chunk)
    port = await proxy.start()
    try:
        yield proxy, f"redis://127.0.0.1:{port}/{options.get('db', 0)}"
    finally:
        await proxy.stop()


def one_connection_client(url: str, **options: Any) -> redis.asyncio.Redis:
    pool = ConnectionPool.from_url(url, max_connections=1, socket_timeout=15, **options)
    return redis.asyncio.Redis(connection_pool=pool)


@contextlib.asynccontextmanager
async def a_reply_held_back(
    redis_url: str, key: str, timeout: float = 15
) -> AsyncIterator[tuple[ChunkingProxy, redis.asyncio.Redis, AsyncSegmentReads, Any]]:
    """Reads of ``key`` (300 events) through a proxy on one pooled connection, already
    connected and checked (yielded: the proxy, the client, its reads, that connection); the
    proxy is set
    to stop after 5000 more bytes of the server's."""
    _fill(redis_url, key, 300)
    async with proxied(redis_url, chunk=1024) as (proxy, url):
        pool = ConnectionPool.from_url(url, max_connections=1, socket_timeout=timeout)
        client = redis.asyncio.Redis(connection_pool=pool)
        reads = AsyncSegmentReads(client, KeyLayout(""))
        await reads.xread({key: "299-0"}, 10)
        (connection,) = pool._available_connections
        proxy.hold_after(5000)
        try:
            yield proxy, client, reads, connection
        finally:
            await client.aclose()


def _fill(url: str, key: str, events: int) -> None:
    with redis.Redis.from_url(url) as client:
        pipe = client.pipeline(transaction=False)
        for n in range(events):
            pipe.xadd(key, {"e": b"x" * 200}, id=f"{n + 1}-0")
        pipe.execute()


def test_a_reply_split_across_many_tcp_reads_is_read_whole(redis_url: str, scope: str) -> None:
    key = f"{scope}:big"
    _fill(redis_url, key, 500)
    got: dict[str, Any] = {}

    async def main() -> None:
        async with proxied(redis_url, chunk=512) as (proxy, url):
            client = one_connection_client(url)
            reads = AsyncSegmentReads(client, KeyLayout(""))
            got["first"] = await reads.xread({key: "0"}, 1000)
            got["again"] = await reads.xread({key: "250-0"}, 1000)
            (connection,) = client.connection_pool._available_connections  # type: ignore[attr-defined]
            got["connected"] = connection.is_connected
            got["get"] = await client.get(f"{scope}:nothing")
            got["writes"] = proxy.writes
            await client.aclose()

    asyncio.run(main())
    entries = got["first"][key]
    assert [entry[0] for entry in entries] == [f"{n + 1}-0".encode() for n in range(500)]
    assert entries[0][1] == [b"e", b"x" * 200]
    assert len(got["again"][key]) == 250
    assert got["connected"] is True and got["get"] is None
    assert got["writes"] > 100  # (~100 KB in 512-byte writes)


def test_error_replies_are_the_same_typed_errors_and_keep_the_connection(
    redis_url: str, scope: str
) -> None:
    wrong, stream = f"{scope}:a-string", f"{scope}:a-stream"
    plain = redis.Redis.from_url(redis_url)
    plain.set(wrong, "x")
    plain.xadd(stream, {"n": "1"}, id="1-0")
    seen: dict[str, Any] = {}

    async def main() -> None:
        client = one_connection_client(redis_url)
        reads = AsyncSegmentReads(client, KeyLayout(""))
        with pytest.raises(WrongKeyTypeError) as wrong_type:
            await reads.read_keys({stream: "0", wrong: "0"}, 0.01, 10)
        seen["wrong"] = wrong_type.value
        with pytest.raises(ReaderGroupError) as bad_id:
            await reads.xread({stream: "not-an-id"}, 10)
        seen["bad id"] = bad_id.value
        (connection,) = client.connection_pool._available_connections  # type: ignore[attr-defined]
        seen["connection"] = connection
        seen["read"] = await reads.xread({stream: "0"}, 10)
        seen["same"] = client.connection_pool._available_connections == [connection]  # type: ignore[attr-defined]
        seen["connected"] = connection.is_connected
        await client.aclose()

    asyncio.run(main())
    assert wrong in str(seen["wrong"]) and stream not in str(seen["wrong"])
    assert "Invalid stream ID" in str(seen["bad id"])
    assert list(seen["read"]) == [stream]
    assert seen["same"] and seen["connected"]  # (an error reply is a whole reply)


def test_a_read_cancelled_mid_reply_closes_its_pooled_connection(
    redis_url: str, scope: str
) -> None:
    key = f"{scope}:big"
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with a_reply_held_back(redis_url, key) as (proxy, client, reads, connection):
            read = asyncio.ensure_future(reads.xread({key: "0"}, 1000))
            await asyncio.wait_for(proxy.holding.wait(), 10)
            read.cancel()
            await asyncio.wait((read,))
            seen["cancelled"] = read.cancelled()
            seen["connected"] = connection.is_connected
            seen["in use"] = len(client.connection_pool._in_use_connections)  # type: ignore[attr-defined]
            proxy.budget = None
            seen["get"] = await client.get(f"{scope}:nothing")
            seen["read"] = await reads.xread({key: "0"}, 1000)

    asyncio.run(main())
    assert seen["cancelled"]
    assert seen["connected"] is False and seen["in use"] == 0
    assert seen["get"] is None  # not the rest of the cancelled reply
    assert len(seen["read"][key]) == 300


def test_a_connection_the_server_closes_mid_reply_is_redis_unavailable(
    redis_url: str, scope: str
) -> None:
    key = f"{scope}:big"
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with a_reply_held_back(redis_url, key) as (proxy, _client, reads, connection):
            read = asyncio.ensure_future(reads.read_keys({key: "0"}, 0.01, 1000))
            await asyncio.wait_for(proxy.holding.wait(), 10)
            proxy.close_clients()
            with pytest.raises(RedisUnavailableError) as lost:
                await read
            seen["lost"] = lost.value
            seen["connected"] = connection.is_connected
            proxy.budget = None
            seen["read"] = await reads.xread({key: "0"}, 1000)  # (a new connection)

    asyncio.run(main())
    assert "closed" in str(seen["lost"]).lower()
    assert seen["connected"] is False
    assert len(seen["read"][key]) == 300


def test_a_blocking_read_parked_on_the_server_is_woken_by_an_event(
    redis_url: str, scope: str
) -> None:
    key = f"{scope}:parked"
    plain = redis.Redis.from_url(redis_url)
    plain.xadd(key, {"n": "0"}, id="1-0")

    async def main() -> dict[str, Any]:
        client = one_connection_client(redis_url)
        reads = AsyncSegmentReads(client, KeyLayout(""))
        pending = reads.start({key: "1-0"}, 10, block=5.0)
        deadline = asyncio.get_running_loop().time() + 10
        while int(plain.info("clients")["blocked_clients"]) < 1:  # (parked on the server)
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        plain.xadd(key, {"n": "1"}, id="2-0")
        answer = await pending.result(10)
        await client.aclose()
        assert answer is not None
        return answer

    answer = asyncio.run(main())
    assert [entry[0] for entry in answer[key]] == [b"2-0"]


def test_a_unix_socket_connection_is_served(tmp_path: Any) -> None:
    from readergroup.testing.embedded_redis import local_redis_server

    path = tmp_path / "redis.sock"
    with local_redis_server(extra_args=["--unixsocket", str(path)]) as server:
        _fill(server.url, "k", 50)

        async def main() -> dict[str, Any]:
            client = one_connection_client(f"unix://{path}")
            answer = await AsyncSegmentReads(client, KeyLayout("")).xread({"k": "0"}, 100)
            await client.aclose()
            return answer

        answer = asyncio.run(main())
    assert len(answer["k"]) == 50


def test_a_reply_later_than_the_socket_timeout_closes_the_connection(
    redis_url: str, scope: str
) -> None:
    key = f"{scope}:big"
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with a_reply_held_back(redis_url, key, timeout=0.5) as (
            proxy,
            _client,
            reads,
            connection,
        ):
            with pytest.raises(RedisUnavailableError) as late:
                await reads.xread({key: "0"}, 1000)
            seen["late"] = late.value
            seen["connected"] = connection.is_connected
            proxy.budget = None
            seen["read"] = await reads.xread({key: "0"}, 1000)

    asyncio.run(main())
    assert "Timeout reading" in str(seen["late"])
    assert seen["connected"] is False
    assert len(seen["read"][key]) == 300
