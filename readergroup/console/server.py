"""Run the console's application with uvicorn on a socket bound before it starts (so the URL,
with the port the system chose for port 0, is known and printed first)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until the server accepts them
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


STARTUP_POLLS = 1500
"""Polls 20 ms apart (30 s) for the server to start."""


class ConsoleServer:
    """The console served on ``host:port`` (0: any free port) until :meth:`stop`."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = bind(host, port)
        self.url = url_of(self._socket)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,  # live-update streams stay open until told to go
        )
        self._server = uvicorn.Server(config)
        self._stopping: threading.Event | None = getattr(app.state, "stopping", None)
        self._thread: threading.Thread | None = None

    def serve(self, on_ready: Callable[[str], None] = lambda url: None) -> None:
        """Serve in this thread until stopped (Ctrl-C stops it)."""
        on_ready(self.url)
        self._server.run(sockets=[self._socket])

    def start(self) -> ConsoleServer:
        """Serve in a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(target=self.serve, name="console", daemon=True)
        self._thread.start()
        for _ in range(STARTUP_POLLS):
            if self._server.started:
                return self
            if not self._thread.is_alive():
                break
            threading.Event().wait(0.02)
        self.stop()
        raise RuntimeError(f"the console's server on {self.url} did not start")

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()  # live streams end within a push interval
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._socket.close()

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
