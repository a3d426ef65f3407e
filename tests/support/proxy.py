"""A real TCP proxy between a client and Redis that can lose replies on demand.

Used to produce the failure that matters for idempotence: the server executes a command,
then the connection dies before the reply reaches the client; and a network partition
(``blackhole``): every byte either way vanishes, connections stay open, clients time out.
With ``reply_delay`` (seconds, 0 included) it is a slow link instead: every reply reaches the
client that much later than Redis sent it, through a sender thread (replies stay in order;
requests are not delayed).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from types import TracebackType


class ReplyDroppingProxy:
    """Forwards ``127.0.0.1:<port>`` to a Redis. ``drop_next_reply()`` arms a one-shot fault:
    the next bytes the server sends back are discarded and that connection is closed."""

    def __init__(
        self, target_host: str, target_port: int, *, reply_delay: float | None = None
    ) -> None:
        self.reply_delay = reply_delay
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

    def retarget(self, host: str, port: int) -> None:
        """Send new connections to ``host:port`` and close the open ones: what clients see of a
        failover behind a stable address (a virtual IP, a Sentinel-aware proxy)."""
        self._target = (host, port)
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

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
            reply_sink = client if self.reply_delay is None else self._delayed(client)
            threading.Thread(
                target=self._pump, args=(upstream, reply_sink, True), daemon=True
            ).start()

    def _delayed(self, client: socket.socket) -> _DelayedSink:
        sink = _DelayedSink(client, self.reply_delay or 0.0)
        threading.Thread(target=sink.run, daemon=True).start()
        return sink

    def _pump(
        self, source: socket.socket, sink: socket.socket | _DelayedSink, is_reply: bool
    ) -> None:
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


class _DelayedSink:
    """Sends what it is given to ``client`` ``delay`` seconds later, in order."""

    def __init__(self, client: socket.socket, delay: float) -> None:
        self._client = client
        self._delay = delay
        self._queue: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def sendall(self, data: bytes) -> None:
        self._queue.put((time.monotonic() + self._delay, data))

    def shutdown(self, how: int) -> None:
        self._queue.put((0.0, b""))  # closes the client after what is queued

    def close(self) -> None:
        return None

    def run(self) -> None:
        try:
            while True:
                due, data = self._queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)  # a slow link: each reply waits its own delay, in order
                self._client.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                self._client.shutdown(socket.SHUT_RDWR)
            self._client.close()
