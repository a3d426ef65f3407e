"""Supported servers: Redis 7.0 or later and Valkey are accepted; an older server is refused on
connect with a typed error naming its version and the oldest supported (issue 34 item 4)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from readergroup import ClientConfig, StreamManager, UnsupportedServerError
from readergroup.cli import main
from readergroup.core.config import check_server_version, server_version
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.resp_server import OldRedis

# HELLO's replies (no arguments, RESP2 then RESP3), as these servers sent them
REDIS_6_2 = [b"server", b"redis", b"version", b"6.2.14", b"proto", 2, b"id", 4, b"mode"]
REDIS_7_0 = [b"server", b"redis", b"version", b"7.0.15", b"proto", 2, b"id", 4, b"mode"]
VALKEY_8 = {b"server": b"valkey", b"version": b"8.1.8", b"proto": 3, b"mode": b"standalone"}


def test_versions_from_hello_replies() -> None:
    assert server_version(REDIS_6_2) == ("redis", "6.2.14")
    assert server_version(REDIS_7_0) == ("redis", "7.0.15")
    assert server_version(VALKEY_8) == ("valkey", "8.1.8")
    check_server_version(*server_version(REDIS_7_0))
    check_server_version(*server_version(VALKEY_8))
    check_server_version("redis", "10.0.0")
    for server, version in (("redis", "6.2.14"), ("redis", "6.0.0"), ("redis", "5.0.7")):
        with pytest.raises(UnsupportedServerError, match=rf"{version}.*Redis 7\.0 or later"):
            check_server_version(server, version)
    with pytest.raises(UnsupportedServerError, match="unknown version ''"):
        check_server_version(*server_version([b"server", b"redis"]))


@pytest.mark.parametrize("protocol", [2, 3])
def test_every_server_of_the_matrix_is_accepted(
    each_server: LocalRedisServer, protocol: int
) -> None:
    config = ClientConfig(redis_options={"protocol": protocol})
    with StreamManager.from_url(each_server.url, config) as sm:
        sm.create_scope("v")
        assert "v" in sm.list_scopes()


@pytest.mark.parametrize("allow_key_eviction", [False, True])
@pytest.mark.parametrize("protocol", [2, 3])  # 2: redis-py sends no HELLO; the check does
def test_redis_6_2_is_refused_on_connect(allow_key_eviction: bool, protocol: int) -> None:
    with OldRedis("6.2.14") as old:
        config = ClientConfig(
            allow_key_eviction=allow_key_eviction, redis_options={"protocol": protocol}
        )
        with (
            pytest.raises(UnsupportedServerError, match=r"redis 6\.2\.14.*Redis 7\.0 or later"),
            StreamManager.from_url(old.url, config) as sm,
        ):
            sm.list_scopes()
        assert old.seen[:1] == ["HELLO"]  # nothing else was sent before the refusal
        assert "EVALSHA" not in old.seen and "EVALSHA_RO" not in old.seen


def test_a_server_without_hello_is_refused_on_connect() -> None:
    with (
        OldRedis("5.0.7", hello=False) as old,
        pytest.raises(UnsupportedServerError, match=r"older than Redis 6\.2"),
        StreamManager.from_url(old.url) as sm,
    ):
        sm.create_scope("x")


def test_the_cli_names_the_version_in_one_line() -> None:
    with OldRedis("6.2.14") as old:
        done = CliRunner().invoke(main, ["scope", "list", "--redis-url", old.url])
    assert done.exit_code == 1
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "UnsupportedServerError" in lines[0] and "6.2.14" in lines[0]
