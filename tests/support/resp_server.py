"""A tiny real TCP server speaking RESP2 that claims to be an old Redis: it answers ``HELLO``
(or refuses it, as Redis 5 does), ``INFO`` and ``PING``, and refuses everything else. For the
version check on connect where no binary of that version can be had."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


def _encode(reply: object) -> bytes:
    if isinstance(reply, dict):  # a RESP3 map
        return b"%%%d\r\n" % len(reply) + b"".join(
            _encode(name) + _encode(value) for name, value in reply.items()
        )
    if isinstance(reply, Exception):
        return b"-" + str(reply).encode() + b"\r\n"
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, str):
        data = reply.encode()
        return b"$%d\r\n%s\r\n" % (len(data), data)
    if isinstance(reply, list):
        return b"*%d\r\n" % len(reply) + b"".join(_encode(item) for item in reply)
    raise TypeError(reply)


def _commands(stream: socket.SocketIO) -> Iterator[list[bytes]]:
    """The commands a client sends (arrays of bulk strings), until it hangs up."""
    reader = stream
    while True:
        line = reader.readline()
        if not line:
            return
        count = int(line[1:].strip())
        words = []
        for _ in range(count):
            size = int(reader.readline()[1:].strip())
            words.append(reader.read(size + 2)[:-2])
        yield words


class OldRedis:
    """Answers as Redis ``version`` would (``hello=False``: no ``HELLO`` at all, Redis 5):
    ``HELLO 3`` switches the session to RESP3 (a map reply), as redis-py asks by default."""

    def __init__(self, version: str, *, hello: bool = True) -> None:
        self.version = version
        self.hello = hello
        self.seen: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(client,), daemon=True).start()

    def _session(self, client: socket.socket) -> None:
        resp3 = False
        with client, client.makefile("rb") as stream:
            for words in _commands(stream):  # type: ignore[arg-type]
                name = words[0].decode().upper()
                self.seen.append(name)
                if name == "HELLO" and self.hello and words[1:2] == [b"3"]:
                    resp3 = True
                client.sendall(_encode(self._answer(name, resp3)))

    def _answer(self, name: str, resp3: bool) -> object:
        if name == "HELLO" and self.hello:
            fields = {"server": "redis", "version": self.version, "proto": 3 if resp3 else 2}
            return fields if resp3 else [x for pair in fields.items() for x in pair]
        if name == "INFO":
            return f"# Server\r\nredis_version:{self.version}\r\nmaxmemory_policy:noeviction\r\n"
        if name == "PING":
            return "PONG"
        return Exception(f"ERR unknown command '{name}'")

    def __enter__(self) -> OldRedis:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
