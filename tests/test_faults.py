"""Lost replies and server restarts: retriable errors, and never an update applied twice."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from readergroup.testing.embedded_redis import LocalRedisServer
from statesync import BackendUnavailableError, RetryPolicy, StateSynchronizer, SyncConfig
from statesync.redis_backend import RedisLogBackend
from tests.support.model import ALL_TYPES, Add
from tests.support.proxy import ReplyDroppingProxy


def test_a_lost_reply_is_retried_without_applying_twice(
    redis_handle: Any, unique_name: str
) -> None:
    target = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs
    with ReplyDroppingProxy(target["host"], target["port"]) as proxy:
        sync = StateSynchronizer.from_url(proxy.url, unique_name, update_types=ALL_TYPES)
        sync.initialize({"total": 0})
        sync.update_state(lambda s: [Add(0)])  # loads the append script: no NOSCRIPT reply below
        for _ in range(5):
            proxy.drop_next_reply()  # the server runs the append; its reply never arrives
            sync.update_state(lambda s: [Add(1)])
        assert proxy.dropped == 5
        assert sync.stats.duplicates == 5 and sync.stats.appends == 1
        sync.close()
    with StateSynchronizer.from_url(redis_handle.url, unique_name, update_types=ALL_TYPES) as check:
        check.fetch_updates()
        assert check.state == {"total": 5} and check.revision == 6


def test_a_lost_reply_to_an_unconditional_append_lands_once(
    redis_handle: Any, unique_name: str
) -> None:
    target = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs
    with ReplyDroppingProxy(target["host"], target["port"]) as proxy:
        sync = StateSynchronizer.from_url(proxy.url, unique_name, update_types=ALL_TYPES)
        sync.initialize({"total": 0})
        proxy.drop_next_reply()
        assert sync.update_state_unconditionally([Add(7)]) == 1
        sync.close()
    with StateSynchronizer.from_url(redis_handle.url, unique_name, update_types=ALL_TYPES) as check:
        check.fetch_updates()
        assert check.state == {"total": 7}


def test_a_retry_of_a_landed_sequence_is_refused_by_the_script(
    redis_url: str, unique_name: str
) -> None:
    backend = RedisLogBackend.from_url(redis_url)
    StateSynchronizer(backend, unique_name, update_types=ALL_TYPES).initialize({"total": 0})
    first = backend.append(
        unique_name, b"x", expected_revision=0, writer="w", sequence=1, max_bytes=100
    )
    again = backend.append(
        unique_name, b"x", expected_revision=0, writer="w", sequence=1, max_bytes=100
    )
    assert (first.status, first.revision) == (0, 1)
    assert (again.status, again.revision) == (6, 1)  # DUPLICATE, naming where it landed
    backend.close()


def test_redis_down_is_a_retriable_error_and_recovery_is_exact(
    private_redis: LocalRedisServer, unique_name: str
) -> None:
    fast = SyncConfig(retry=RetryPolicy(max_attempts=5, deadline=1.0), socket_timeout=2.0)
    sync = StateSynchronizer.from_url(
        private_redis.url, unique_name, update_types=ALL_TYPES, config=fast
    )
    sync.initialize({"total": 0})
    sync.update_state(lambda s: [Add(1)])
    private_redis.stop()
    with pytest.raises(BackendUnavailableError) as caught:
        sync.update_state(lambda s: [Add(1)])
    assert caught.value.retriable and isinstance(caught.value.__cause__, redis.ConnectionError)
    with pytest.raises(BackendUnavailableError):
        sync.fetch_updates()
    private_redis.start()  # same port, AOF replayed
    sync.fetch_updates()
    assert sync.state == {"total": 1}  # the failed update never landed
    sync.update_state(lambda s: [Add(1)])
    assert sync.state == {"total": 2} and sync.revision == 2
    sync.close()


def test_updates_across_a_server_crash_land_exactly_once(
    private_redis: LocalRedisServer, unique_name: str
) -> None:
    """Writers keep updating while the server is SIGKILLed and restarted under them."""
    patient = SyncConfig(retry=RetryPolicy(max_attempts=10_000, deadline=60.0, max_delay=0.05))
    with StateSynchronizer.from_url(private_redis.url, unique_name, update_types=ALL_TYPES) as s:
        s.initialize({"total": 0})
    acknowledged = [0] * 4
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            with StateSynchronizer.from_url(
                private_redis.url, unique_name, update_types=ALL_TYPES, config=patient
            ) as sync:
                for _ in range(100):
                    sync.update_state(lambda s: [Add(1)])
                    acknowledged[index] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while sum(acknowledged) < 100 and time.monotonic() < deadline:
        time.sleep(0.001)  # poll with a deadline until the writers are well under way
    assert 100 <= sum(acknowledged) < 400, "the crash should land while writers are busy"
    private_redis.kill()  # a crash; every acknowledged append was fsynced (appendfsync always)
    private_redis.start()
    for thread in threads:
        thread.join(90)
    assert not errors, errors
    with StateSynchronizer.from_url(private_redis.url, unique_name, update_types=ALL_TYPES) as c:
        c.fetch_updates()
        assert c.state == {"total": sum(acknowledged)} == {"total": 400}
