"""The embedded-default helper: choice order, a real private server, clear failures; the server
kinds of the test matrix (``READERGROUP_TEST_SERVER``, the ``each_server`` fixture)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from readergroup.core.errors import EmbeddedRedisError
from readergroup.testing.embedded_redis import (
    SERVER_KIND_VARIABLE,
    LocalRedisServer,
    RedisServer,
    binary_version,
    find_server_binary,
    local_redis_server,
    matrix_server_binary,
    redis_server,
)


def test_redis_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://example.invalid:1/0")
    with redis_server() as server:
        assert (server.url, server.kind) == ("redis://example.invalid:1/0", "env")


def test_without_url_or_engine_a_private_binary_runs_and_is_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("READERGROUP_NO_CONTAINERS", "1")
    with redis_server() as server:
        assert server.kind == "binary" and server.local is not None
        directory = server.local.directory
        client = redis.Redis.from_url(server.url)
        assert client.ping() is True
        assert client.config_get("appendonly")["appendonly"] == "no"
        client.close()
    assert not directory.exists()


def test_persistent_servers_keep_data_across_a_restart() -> None:
    with local_redis_server(persistent=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.close()
        server.restart()
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        client.close()


def test_a_server_whose_port_another_server_holds_does_not_claim_to_have_started() -> None:
    """Parallel test workers pick free ports independently: a port found free may be bound by
    another worker's server before this one binds it. That server answers ``PING`` on the
    port, so a start that only pinged took it for its own (which had exited), and the test
    used a server another test then stopped or killed (the cluster seed test failed in CI
    with every node connection refused during its warm-up)."""
    binary = find_server_binary()
    assert binary is not None
    with local_redis_server() as holder:
        late = LocalRedisServer(binary)
        late.port = holder.port  # (as if the port had been taken between check and bind)
        try:
            with pytest.raises(EmbeddedRedisError, match="did not start"):
                late.start()
        finally:
            late.close()
        client = redis.Redis.from_url(holder.url)
        assert client.ping()  # the server holding the port is untouched
        client.close()


def test_a_binary_is_found_on_this_machine() -> None:
    assert find_server_binary() is not None


def test_a_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("READERGROUP_REDIS_SERVER", "/nonexistent/redis-server")
    with (
        pytest.raises(EmbeddedRedisError, match="/nonexistent/redis-server"),
        local_redis_server(),
    ):
        pass


def product_of(url: str) -> str:
    """``valkey`` or ``redis``: what the server at ``url`` says it is."""
    with redis.Redis.from_url(url) as client:
        info = client.info("server")
    return "valkey" if "valkey_version" in info or info.get("server_name") == "valkey" else "redis"


def test_the_suite_runs_on_the_server_kind_it_names(
    redis_handle: RedisServer, server_kind: str
) -> None:
    """The matrix is real: READERGROUP_TEST_SERVER=redis runs Redis, =valkey Valkey (unless
    REDIS_URL names the one server of the run)."""
    if os.environ.get("REDIS_URL"):
        assert redis_handle.kind == "env"
    else:
        assert product_of(redis_handle.url) == server_kind


def test_each_server_gives_every_kind_whatever_the_environment(
    each_server: LocalRedisServer, request: pytest.FixtureRequest
) -> None:
    kind = request.node.callspec.params["each_server"]
    assert product_of(each_server.url) == kind
    assert binary_version(each_server.binary).lower().startswith(kind)


def test_an_unknown_server_kind_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SERVER_KIND_VARIABLE, "keydb")
    with pytest.raises(EmbeddedRedisError, match=r"'keydb'.*valkey, redis"), local_redis_server():
        pass


def test_a_missing_kind_is_an_error_naming_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server anywhere: no fallback to Valkey
    monkeypatch.delenv("READERGROUP_REDIS7_SERVER", raising=False)
    with pytest.raises(EmbeddedRedisError, match="apt-get install redis-server"):
        matrix_server_binary("redis")
    monkeypatch.setenv(SERVER_KIND_VARIABLE, "redis")
    monkeypatch.delenv("READERGROUP_REDIS_SERVER", raising=False)
    with pytest.raises(EmbeddedRedisError, match="no Redis server binary"), local_redis_server():
        pass


def test_a_binary_of_another_kind_under_the_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``redis-server`` that is Valkey (a distribution's compatibility link) is not Redis."""
    (tmp_path / "redis-server").symlink_to(matrix_server_binary("valkey"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("READERGROUP_REDIS7_SERVER", raising=False)
    with pytest.raises(EmbeddedRedisError, match="Valkey server v="):
        matrix_server_binary("redis")
