"""What an idle reader group costs Redis (issue 15): commands per reader per heartbeat interval,
from ``INFO commandstats`` deltas on a server of the test's own (commands run inside scripts
counted), with the default ratio of read timeout to heartbeat interval."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from readergroup import EventStreamClientFactory, StreamManager, UTF8StringSerializer
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.waiting import wait_until
from tests.test_protocol_races import make_group, make_stream

HEARTBEAT = 0.6
"""The defaults scaled down five times: heartbeat 3 s -> 0.6 s, reads (``group_refresh_time``,
the default read timeout) 0.5 s -> 0.1 s, session 10 s -> 2 s."""
BUDGET_PER_SECOND = 3
"""The issue's goal: at most 3 commands per idle reader per second, at the defaults."""
BUDGET = BUDGET_PER_SECOND * 3.0
"""... so at most 9 per heartbeat interval (3 s by default)."""


def _calls(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


class IdleReaders:
    """Reader threads, each with its own factory, reading in a loop with the default timeout."""

    def __init__(self, url: str, scope: str, count: int) -> None:
        self._stop = threading.Event()
        self.failures: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(url, scope, f"r{i}"), daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, url: str, scope: str, reader_id: str) -> None:
        try:
            with (
                EventStreamClientFactory.from_url(scope, url) as factory,
                factory.create_reader(reader_id, "g", UTF8StringSerializer()) as reader,
            ):
                while not self._stop.is_set():
                    reader.read_next_event()
        except BaseException as exc:  # reported by the test
            with self._lock:
                self.failures.append(exc)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


@pytest.fixture
def idle_group(private_redis: LocalRedisServer) -> Iterator[tuple[Any, int]]:
    url, scope, readers = private_redis.url, "idle", 3
    with StreamManager.from_url(url) as manager:
        manager.create_scope(scope)
    make_stream(url, scope, 8)
    group = make_group(
        url,
        scope,
        heartbeat_interval=HEARTBEAT,
        session_timeout=2.0,
        group_refresh_time=HEARTBEAT / 6,
    )
    idle = IdleReaders(url, scope, readers)
    try:

        def balanced() -> bool:
            sizes = [len(s) for s in group.get_segment_distribution().assigned.values()]
            return len(sizes) == readers and sum(sizes) == 8 and max(sizes) - min(sizes) <= 1

        wait_until(balanced, timeout=60, what="the idle group balanced")
        yield idle, readers
    finally:
        idle.stop()
        assert not idle.failures, idle.failures


def test_an_idle_reader_sends_at_most_three_commands_per_second_at_the_defaults(
    private_redis: LocalRedisServer, idle_group: tuple[IdleReaders, int]
) -> None:
    idle, readers = idle_group
    intervals = 8
    with redis.Redis.from_url(private_redis.url) as client:
        threading.Event().wait(2 * HEARTBEAT)  # settle: the last moves' wake-ups acted on
        before = _calls(client)
        began = time.monotonic()
        threading.Event().wait(intervals * HEARTBEAT)  # the measured window, not a wait on a state
        elapsed = time.monotonic() - began
        after = _calls(client)
    delta = {k: v - before.get(k, 0) for k, v in after.items()}
    delta["info"] = delta.get("info", 0) - 1  # our own
    per_interval = sum(delta.values()) / readers / (elapsed / HEARTBEAT)
    breakdown = {
        k: round(v / readers / (elapsed / HEARTBEAT), 2) for k, v in sorted(delta.items()) if v
    }
    assert not idle.failures, idle.failures
    assert per_interval <= BUDGET, (per_interval, breakdown)
