"""Failover replies are retriable and retried within the deadlines (issue 18): a real server
answers NOREPLICAS, READONLY and UNBLOCKED while it is not a writable primary."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from readergroup import (
    EventStreamClientFactory,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.errors import RedisUnavailableError
from readergroup.storage.translate import translate_errors
from statesync import (
    BackendUnavailableError,
    ManualClock,
    RetryPolicy,
    StateSynchronizer,
    SyncConfig,
)
from statesync.redis_backend import RedisLogBackend
from tests.support.model import ALL_TYPES, Add
from tests.support.waiting import wait_until


class HealingClock(ManualClock):
    """A manual clock that ends the failover the first time a retry loop backs off."""

    def __init__(self, heal: Callable[[], None]) -> None:
        super().__init__()
        self._heal: Callable[[], None] | None = heal
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self._heal is not None:
            heal, self._heal = self._heal, None
            heal()
        super().sleep(seconds)


def no_replicas(client: redis.Redis) -> None:
    client.config_set("min-replicas-to-write", 1)


def writable(client: redis.Redis) -> None:
    client.config_set("min-replicas-to-write", 0)
    client.replicaof("NO", "ONE")


FAILOVERS = {
    "NOREPLICAS": no_replicas,
    "READONLY": lambda client: client.replicaof("127.0.0.1", 1),
}


@pytest.mark.parametrize("reply", sorted(FAILOVERS))
def test_a_failover_reply_is_retriable_and_retried_by_statesync(
    private_redis: object, reply: str, unique_name: str
) -> None:
    url = private_redis.url  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url)
    backend = RedisLogBackend.from_url(url)
    config = SyncConfig(retry=RetryPolicy(max_attempts=5, deadline=10.0))
    sync = StateSynchronizer(backend, unique_name, update_types=ALL_TYPES, config=config)
    sync.initialize({"total": 0})
    FAILOVERS[reply](admin)
    with pytest.raises(BackendUnavailableError, match=reply) as caught:
        backend.append(unique_name, b"x", expected_revision=0, writer="w", sequence=1, max_bytes=9)
    assert caught.value.retriable
    clock = HealingClock(lambda: writable(admin))
    healing = StateSynchronizer(
        backend, unique_name, update_types=ALL_TYPES, config=config, clock=clock
    )
    healing.update_state(lambda s: [Add(1)])
    assert healing.state["total"] == 1 and clock.sleeps >= 1
    assert healing.stats.backend_retries >= 1
    admin.close()
    backend.close()


def test_a_failover_reply_is_retriable_in_readergroup(private_redis: object) -> None:
    url = private_redis.url  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url)
    no_replicas(admin)
    with (
        pytest.raises(RedisUnavailableError, match="NOREPLICAS") as caught,
        translate_errors("append"),
    ):
        admin.eval("return redis.call('SET', KEYS[1], 'v')", 1, "k")
    assert caught.value.retriable
    writable(admin)
    admin.close()


def test_an_unblocked_wait_is_retriable(redis_url: str, unique_name: str) -> None:
    backend = RedisLogBackend.from_url(redis_url, client_name=unique_name)
    sync = StateSynchronizer(backend, unique_name, update_types=ALL_TYPES)
    sync.initialize({"total": 0})
    admin = redis.Redis.from_url(redis_url)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            sync.wait_for_updates(30)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()

    def blocked_ids() -> list[int]:
        return [
            c["id"]
            for c in admin.client_list()
            if c.get("cmd") == "xread" and c.get("name") == unique_name
        ]

    wait_until(blocked_ids, 10, "the wait to block")
    for client_id in blocked_ids():
        admin.client_unblock(client_id, error=True)
    waiter.join(10)
    assert len(errors) == 1 and isinstance(errors[0], BackendUnavailableError)
    assert errors[0].retriable and "UNBLOCKED" in str(errors[0])
    admin.close()
    backend.close()


def test_a_writer_retries_through_noreplicas_within_its_delivery_timeout(
    private_redis: object,
) -> None:
    url = private_redis.url  # type: ignore[attr-defined]
    admin = redis.Redis.from_url(url)
    with StreamManager.from_url(url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "orders", StreamConfiguration())
    with EventStreamClientFactory.from_url("ha", url) as factory:
        writer = factory.create_event_writer("orders", UTF8StringSerializer())
        writer.write_event("warm", routing_key="k").result(10)
        no_replicas(admin)
        future = writer.write_event("during the failover", routing_key="k")
        wait_until(lambda: noreplicas_replies(admin) > 0, 10, "a NOREPLICAS reply")
        writable(admin)
        future.result(10)  # acknowledged once the primary takes writes again
        writer.close()
    admin.close()


def noreplicas_replies(client: redis.Redis) -> int:
    stats = client.info("errorstats")
    return int(stats.get("errorstat_NOREPLICAS", {}).get("count", 0))
