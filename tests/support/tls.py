"""Certificates made with the openssl CLI, and a real TLS endpoint in front of a Redis.

The bundled Valkey is built without TLS, so the tests put a TLS-terminating proxy (Python's
``ssl``, requiring a client certificate signed by the test CA) in front of the real server:
every byte the client sends crosses a real TLS session.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from pathlib import Path


def make_certificates(directory: Path) -> dict[str, str]:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    )
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
        )
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{name}.crt",
            "-extfile",
            "san.cnf",
        )
    return {
        n: str(directory / n)
        for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    }


class TlsProxy:
    """Accepts TLS (client certificate required) on 127.0.0.1 and forwards to a plain Redis."""

    def __init__(self, certs: dict[str, str], target: tuple[str, int]) -> None:
        self._target = target
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=certs["ca.crt"])
        self._context.load_cert_chain(certs["server.crt"], certs["server.key"])
        self._context.verify_mode = ssl.CERT_REQUIRED
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self._context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()  # a client without a valid certificate is refused here
            return
        upstream = socket.create_connection(self._target)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
