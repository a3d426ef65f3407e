"""Eviction and vanished keys (issue 13, item 9), on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from readergroup import (
    ClientConfig,
    DataLostError,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamLostError,
    StreamManager,
    UnsafeServerConfigError,
)
from readergroup.core.names import (
    SCOPES_SYNC_NAME,
    catalog_sync_name,
    group_sync_name,
    stream_sync_name,
)
from statesync.names import KeyLayout


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_a_policy_that_evicts_any_key_is_refused_unless_allowed(
    private_redis: Any, policy: str
) -> None:
    raw = redis.Redis.from_url(private_redis.url)
    raw.config_set("maxmemory", "3mb")
    raw.config_set("maxmemory-policy", policy)
    with (
        pytest.raises(UnsafeServerConfigError, match=policy),
        StreamManager.from_url(private_redis.url) as sm,
    ):
        sm.create_scope("x")
    assert raw.dbsize() == 0  # refused before anything was written
    with StreamManager.from_url(private_redis.url, ClientConfig(allow_key_eviction=True)) as sm:
        assert sm.create_scope("x") and sm.list_scopes() == ["x"]


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-ttl"])
def test_policies_that_spare_keys_without_a_ttl_are_accepted(
    private_redis: Any, policy: str
) -> None:
    redis.Redis.from_url(private_redis.url).config_set("maxmemory-policy", policy)
    with StreamManager.from_url(private_redis.url) as sm:
        assert sm.create_scope("x") and sm.list_scopes() == ["x"]


def test_a_server_restarted_with_an_evicting_policy_is_refused_on_reconnect(
    private_redis: Any,
) -> None:
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("x")
        redis.Redis.from_url(private_redis.url).config_set("maxmemory-policy", "allkeys-lru")
        private_redis.restart()  # the policy set by CONFIG SET is lost: back to noeviction
        assert sm.list_scopes() == ["x"]
        redis.Redis.from_url(private_redis.url).config_set("maxmemory-policy", "allkeys-lru")
        sm.connection.client.connection_pool.disconnect()  # the next command reconnects
        with pytest.raises(UnsafeServerConfigError):
            sm.list_scopes()


def set_up(url: str) -> tuple[bool, bool, bool]:
    """The application's idempotent set-up: scope, stream and reader group."""
    with StreamManager.from_url(url) as sm, ReaderGroupManager.from_url("x", url) as rgm:
        return (
            sm.create_scope("x"),
            sm.create_stream("x", "s"),
            rgm.create_reader_group("g", ReaderGroupConfig(streams=["x/s"])),
        )


def evict(url: str, sync_name: str) -> None:
    """What an eviction does to one synchronizer: its keys are gone."""
    assert redis.Redis.from_url(url).delete(*KeyLayout("rg", sync_name).all) >= 1


def test_a_vanished_catalog_is_reported_lost_not_recreated_empty(private_redis: Any) -> None:
    set_up(private_redis.url)
    evict(private_redis.url, catalog_sync_name("x"))
    evict(private_redis.url, SCOPES_SYNC_NAME)
    with StreamManager.from_url(private_redis.url) as sm:
        with pytest.raises(DataLostError, match="list of scopes"):
            sm.list_scopes()  # it used to answer [] and re-create an empty list
        with pytest.raises(DataLostError, match="catalog of scope 'x'") as lost:
            sm.list_streams("x")
        assert "HDEL rg:{catalog:x}:created catalog:x " in str(lost.value)  # the real key
        with pytest.raises(DataLostError):
            sm.create_scope("x")  # it used to re-create the scope's catalog empty
        with pytest.raises(DataLostError):
            sm.create_stream("x", "s")


def test_a_vanished_stream_or_group_is_reported_lost_not_recreated(private_redis: Any) -> None:
    url = private_redis.url
    set_up(url)
    evict(url, group_sync_name("x", "g"))
    with ReaderGroupManager.from_url("x", url) as rgm:
        with pytest.raises(DataLostError, match="x/g"):
            rgm.create_reader_group("g", ReaderGroupConfig(streams=["x/s"]))
        assert rgm.delete_reader_group("g")  # the way out: delete on purpose, then create
    evict(url, stream_sync_name("x", "s"))
    with StreamManager.from_url(url) as sm:
        with pytest.raises(StreamLostError, match="x/s"):
            sm.create_stream("x", "s")  # it used to re-create empty metadata silently
        with pytest.raises(StreamLostError):
            sm.stream_state("x", "s")
        assert sm.delete_stream("x", "s")
    assert set_up(url) == (False, True, True)


def test_the_idempotent_set_up_works_again_on_a_wiped_server(private_redis: Any) -> None:
    url = private_redis.url
    assert set_up(url) == (True, True, True)
    with StreamManager.from_url(url) as long_lived:
        assert long_lived.list_scopes() == ["x"]
        redis.Redis.from_url(url).flushall()  # the server lost everything, the record too
        assert set_up(url) == (True, True, True)
        assert long_lived.list_scopes() == ["x"]
        assert long_lived.create_stream("x", "t") is True
        assert long_lived.stream_state("x", "s").epoch == 0
