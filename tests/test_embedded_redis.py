"""The embedded-default helper: choice order, a real private server, clear failures."""

from __future__ import annotations

import pytest
import redis

from readergroup.core.errors import EmbeddedRedisError
from readergroup.testing.embedded_redis import (
    find_server_binary,
    local_redis_server,
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


def test_a_binary_is_found_on_this_machine() -> None:
    assert find_server_binary() is not None


def test_a_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("READERGROUP_REDIS_SERVER", "/nonexistent/redis-server")
    with (
        pytest.raises(EmbeddedRedisError, match="/nonexistent/redis-server"),
        local_redis_server(),
    ):
        pass
