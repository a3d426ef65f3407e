"""Simulate a lossy failover of a synchronizer's log: keep a copy, later roll back to it.

A replica promoted before it received the latest writes serves the log as it was when it
last caught up. ``remember`` takes that copy; calling the returned function puts it back,
exactly what clients see after such a failover. Works on both backends of the suite.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from statesync.backend import LogBackend
from statesync.memory_backend import MemoryLogBackend
from statesync.redis_backend import RedisLogBackend


def remember(backend: LogBackend, name: str) -> Callable[[], None]:
    """Copy the log ``name`` now; the returned function rolls the backend back to the copy."""
    if isinstance(backend, MemoryLogBackend):
        with backend._changed:
            saved = copy.deepcopy(backend._logs[name])

        def restore_memory() -> None:
            with backend._changed:
                backend._logs[name] = copy.deepcopy(saved)

        return restore_memory
    assert isinstance(backend, RedisLogBackend)
    client = backend.client
    keys = backend.keys(name).all
    dumps = {key: client.dump(key) for key in keys}

    def restore_redis() -> None:  # atomic, as a promoted replica serves its whole state
        pipe = client.pipeline(transaction=True)
        pipe.delete(*keys)
        for key, blob in dumps.items():
            if blob is not None:
                pipe.restore(key, 0, blob)
        pipe.execute()

    return restore_redis
