"""The reader/writer suite, run unchanged on both connections: in memory
(:class:`~readergroup.testing.memory_connection.MemoryConnection`) and on the suite's real
Redis (the run CI trusts). Small event counts, short sessions."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    EventWriterConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.storage.connection_api import Connection
from statesync.system_clock import SYSTEM_CLOCK
from tests.support.connections import new_scope, scoped_factory
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.1}
SEGMENTS = 4


@pytest.fixture
def scope(connection: Connection) -> str:
    """A fresh scope with a stream ``orders`` of four segments."""
    name = new_scope(connection)
    StreamManager(connection).create_stream(
        name, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS))
    )
    return name


@pytest.fixture
def factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    yield from scoped_factory(connection, scope)


def write(factory: EventStreamClientFactory, count: int, prefix: str = "e", keys: int = 8) -> None:
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"{prefix}{i}", routing_key=f"k{i % keys}")


def make_group(connection: Connection, scope: str, **config: Any) -> ReaderGroupManager:
    groups = ReaderGroupManager(scope, connection)
    groups.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/orders"], **config))
    return groups


def drain(reader: Any, quiet: float = 0.5) -> list[Any]:
    got = []
    while True:
        event = reader.read_next_event(timeout=quiet)
        if event.event is None:
            return got
        got.append(event)


def in_write_order(events: list[Any]) -> None:
    by_key: dict[str, list[int]] = defaultdict(list)
    for event in events:
        by_key[event.routing_key].append(int(event.event.lstrip("abcde")))
    for key, numbers in by_key.items():
        assert numbers == sorted(numbers), f"{key} read out of write order: {numbers}"


def test_events_are_read_once_each_and_in_write_order_per_key(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 60)
    make_group(connection, scope, **FAST)
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        events = drain(reader)
    assert sorted(e.event for e in events) == sorted(f"e{i}" for i in range(60))
    in_write_order(events)


def test_two_readers_own_segments_exclusively_and_rebalance_when_one_leaves(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 40)
    make_group(connection, scope, **FAST)
    a = factory.create_reader("a", "g", UTF8StringSerializer())
    b = factory.create_reader("b", "g", UTF8StringSerializer())
    got: list[Any] = []

    def balanced() -> bool:
        for reader in (a, b):
            got.extend(reader.read_batch(50, timeout=0.05))
        return len(a.owned_segments()) == len(b.owned_segments()) == SEGMENTS // 2

    wait_until(balanced, what="two readers with two segments each")
    assert not set(a.owned_segments()) & set(b.owned_segments())
    a.close()
    wait_until(
        lambda: got.extend(b.read_batch(50, timeout=0.05)) or len(b.owned_segments()) == SEGMENTS,
        what="the reader left takes every segment",
    )
    write(factory, 40, prefix="b")
    wait_until(
        lambda: got.extend(b.read_batch(50, timeout=0.05)) or len(got) >= 80,
        what="every event read",
    )
    assert sorted(e.event for e in got) == sorted(f"{p}{i}" for p in "eb" for i in range(40))
    b.close()


def test_commit_on_get_a_new_reader_resumes_after_what_a_closed_one_returned(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 40)
    make_group(connection, scope, **FAST)
    first = factory.create_reader("r1", "g", UTF8StringSerializer())
    returned = [first.read_next_event(timeout=5).event for _ in range(15)]
    assert None not in returned
    first.close()
    with factory.create_reader("r2", "g", UTF8StringSerializer()) as again:
        rest = [e.event for e in drain(again)]
    assert sorted(returned + rest) == sorted(f"e{i}" for i in range(40))  # each exactly once


def test_a_checkpoint_covers_every_segment_and_reaches_every_reader(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 40)
    groups = make_group(connection, scope, **FAST)
    readers = [factory.create_reader(name, "g", UTF8StringSerializer()) for name in ("a", "b")]
    seen: dict[str, list[str]] = defaultdict(list)
    stop = threading.Event()

    def read(reader: Any, name: str) -> None:
        while not stop.is_set():
            for event in reader.read_batch(50, timeout=0.1):
                if event.is_checkpoint:
                    seen[name].append(event.checkpoint_name)

    threads = [
        threading.Thread(target=read, args=(r, n)) for r, n in zip(readers, "ab", strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        checkpoint = groups.get_reader_group("g").initiate_checkpoint("cp", timeout=30.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for reader in readers:
            reader.close()
    assert seen == {"a": ["cp"], "b": ["cp"]}
    assert len(checkpoint.positions) == SEGMENTS


def test_a_split_is_read_in_write_order_across_predecessor_and_successors(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope, **FAST)
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        write(factory, 30, prefix="a")
        StreamManager(connection).scale_stream(scope, "orders", [0], [(0.0, 0.125), (0.125, 0.25)])
        write(factory, 30, prefix="b")
        events = drain(reader, quiet=1.5)
    assert sorted(e.event for e in events) == sorted(f"{p}{i}" for p in "ab" for i in range(30))
    by_key: dict[str, list[str]] = defaultdict(list)
    for event in events:
        by_key[event.routing_key].append(event.event)
    for key, seq in by_key.items():
        generations = [s[0] for s in seq]
        assert generations == sorted(generations), f"{key} read out of write order: {seq}"


class HeldLinger:
    """The real clock, except that a sleep (the writer's linger) first waits for ``release``:
    every event written meanwhile is queued for the sender's next backlog."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        self.released.wait(60)
        SYSTEM_CLOCK.sleep(seconds)


def test_a_long_backlog_drains_completely_and_in_write_order(
    factory: EventStreamClientFactory,
) -> None:
    """3,000 events taken by the sender as one backlog, sent 160 a round (16 batches of 10):
    every one lands, each segment's in write order at dense offsets. (The backlog is consumed
    through an index, not sliced again every round; time is not asserted.)"""
    clock = HeldLinger()
    config = EventWriterConfig(max_batch_events=10, linger=0.001)
    writer = factory.create_event_writer("orders", UTF8StringSerializer(), config, clock=clock)
    futures = [writer.write_event(f"e{i}", routing_key=f"k{i % 8}") for i in range(3000)]
    clock.released.set()
    try:
        writer.flush(timeout=60)  # an event never taken from the backlog: TimeoutError
    finally:
        writer.close(timeout=1)
    by_segment: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for i, future in enumerate(futures):
        pointer = future.result(0)
        by_segment[pointer.segment].append((pointer.offset, f"e{i}"))
    assert sum(map(len, by_segment.values())) == 3000 and len(by_segment) > 1
    for landed in by_segment.values():
        assert [offset for offset, _ in landed] == list(range(len(landed)))
    stored = {
        (e.segment, e.offset): e.payload
        for e in factory.create_batch_client().read_events("orders")
    }
    assert stored == {
        (segment, offset): name.encode()
        for segment, landed in by_segment.items()
        for offset, name in landed
    }
