"""The key and entry id to block on for a synchronizer's next revision
(:meth:`statesync.redis_backend.RedisLogBackend.wake_on`): an ``XREAD BLOCK`` on them, among
other streams, returns as soon as the log has an entry after the given revision, and only
then."""

from __future__ import annotations

from typing import Any

from statesync import StateSynchronizer
from statesync.redis_backend import RedisLogBackend
from tests.support.model import ALL_TYPES, Add


def test_an_xread_on_wake_on_returns_only_for_a_newer_revision(
    redis_url: str, unique_name: str
) -> None:
    backend = RedisLogBackend.from_url(redis_url)
    try:
        sync: StateSynchronizer[Any] = StateSynchronizer(
            backend, unique_name, update_types=ALL_TYPES
        )
        sync.initialize({"total": 0})
        other: StateSynchronizer[Any] = StateSynchronizer(
            backend, unique_name, update_types=ALL_TYPES
        )
        other.fetch_updates()
        key, after = backend.wake_on(unique_name, sync.revision)
        assert not backend.blocking_client.xread({key: after}, count=1, block=10)
        other.update_state(lambda state: [Add(1)])
        woken = backend.blocking_client.xread({key: after}, count=1, block=10)
        assert woken, "an entry after the revision must wake the read"
        sync.fetch_updates()
        key, after = backend.wake_on(unique_name, sync.revision)
        assert not backend.blocking_client.xread({key: after}, count=1, block=10)
        assert backend.wake_on(unique_name, -1) == (key, "0-0")
    finally:
        backend.close()
