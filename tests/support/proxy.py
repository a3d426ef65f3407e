"""A real TCP proxy between a client and Redis that can lose replies on demand.

Used to produce the failure that matters for idempotence: the server executes a command,
then the connection dies before the reply reaches the client; and a network partition
(``blackhole``): every byte either way vanishes, connections stay open, clients time out.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class ReplyDroppingProxy:
    """Forwards ``127.0.0.1:<port>`` to a Redis. ``drop_next_reply()`` arms a one-shot fault:
    the next bytes the server sends back are discarded and that connection is closed."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self._blackholed = threading.Event()
        self.dropped = 0
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_next_reply(self) -> None:
        self._armed.set()

    def blackhole(self, on: bool = True) -> None:
        """While on, bytes in both directions are silently discarded (a partition)."""
        if on:
            self._blackholed.set()
        else:
            self._blackholed.clear()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:  # the server is down (restarting): refuse this client, go on
                client.close()
                continue
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, is_reply: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if self._blackholed.is_set():
                    continue
                if is_reply and self._armed.is_set():
                    self._armed.clear()
                    self.dropped += 1
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> ReplyDroppingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
