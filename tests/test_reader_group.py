"""Reader groups within one process (threads where needed), on both connections: in memory
and on a real Redis."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    InvalidConfigError,
    ReaderAlreadyOnlineError,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.storage.connection_api import Connection
from readergroup.testing.memory_connection import MemoryConnection
from statesync import ManualClock
from tests.support.async_managers import FLAVOURS, make_managers
from tests.support.connections import new_scope, scoped_factory
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.1}


@pytest.fixture(params=FLAVOURS)
def each_group_manager(
    request: pytest.FixtureRequest, connection: Connection, scope: str
) -> Iterator[Any]:
    """The scope's threaded ReaderGroupManager, or the asyncio one behind a blocking adapter
    (the same procedures: the same results and errors), on the test's backend."""
    closers: list[Callable[[], None]] = []
    url = None if isinstance(connection, MemoryConnection) else request.getfixturevalue("redis_url")
    try:
        yield make_managers(request.param, connection, scope, url, closers)[1]
    finally:
        while closers:
            closers.pop()()


@pytest.fixture
def scope(connection: Connection) -> str:
    return new_scope(connection)


@pytest.fixture
def factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    yield from scoped_factory(connection, scope)


@pytest.fixture
def stream4(connection: Connection, scope: str) -> str:
    with StreamManager(connection) as sm:
        sm.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
        )
    return f"{scope}/orders"


def write(factory: EventStreamClientFactory, count: int, prefix: str = "e", keys: int = 16) -> None:
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"{prefix}{i}", routing_key=f"k{i % keys}")


def drain(reader: Any, quiet: float = 0.5, *, expect: int = 0, deadline: float = 20.0) -> list[Any]:
    """Events read until a read of ``quiet`` seconds returns none, once at least ``expect``
    came (a reader that just joined may take longer than ``quiet`` to acquire its segments on
    a loaded machine: those first empty reads do not end the drain, until ``deadline``)."""
    got = []
    began = time.monotonic()
    while True:
        event = reader.read_next_event(timeout=quiet)
        if event.event is None:
            if len(got) >= expect or time.monotonic() - began > deadline:
                return got
            continue
        got.append(event)


def make_group(connection: Connection, scope: str, name: str = "billing", **config: Any) -> None:
    with ReaderGroupManager(scope, connection) as rgm:
        rgm.create_reader_group(name, ReaderGroupConfig(streams=[f"{scope}/orders"], **config))


def test_the_documented_usage(connection: Connection, scope: str, stream4: str) -> None:
    with EventStreamClientFactory(scope, connection) as factory:
        factory.create_event_writer("orders", UTF8StringSerializer()).write_event(
            "hi", routing_key="customer-7"
        ).result(5)
    with ReaderGroupManager(scope, connection) as rgm:
        rgm.create_reader_group("billing", ReaderGroupConfig(streams=[f"{scope}/orders"]))
        assert rgm.list_reader_groups() == ["billing"]
    with EventStreamClientFactory(scope, connection) as factory:
        reader = factory.create_reader("r1", "billing", UTF8StringSerializer(), ReaderConfig())
        ev = reader.read_next_event(timeout=2.0)
        assert (ev.event, ev.routing_key) == ("hi", "customer-7")
        assert ev.position == (stream4, ev.segment, ev.offset + 1)
        assert ev.fencing_token is not None and not ev.is_checkpoint and ev.checkpoint_name is None
        assert reader.read_next_event(timeout=0.2).event is None
        reader.close()


def test_two_readers_split_the_stream_and_read_everything_once(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 400)
    make_group(connection, scope, **FAST)
    a = factory.create_reader("a", "billing", UTF8StringSerializer())
    b = factory.create_reader("b", "billing", UTF8StringSerializer())
    got: dict[str, list[Any]] = defaultdict(list)
    deadline = time.monotonic() + 30
    while sum(len(v) for v in got.values()) < 400 and time.monotonic() < deadline:
        for name, reader in (("a", a), ("b", b)):
            got[name] += reader.read_batch(100, timeout=0.05)
    assert len(a.owned_segments()) == len(b.owned_segments()) == 2
    everything = sorted(e.event for v in got.values() for e in v)
    assert everything == sorted(f"e{i}" for i in range(400))  # each exactly once
    a.close()
    b.close()


def test_per_key_order_within_a_reader(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 300, keys=5)
    make_group(connection, scope)
    with factory.create_reader("solo", "billing", UTF8StringSerializer()) as reader:
        events = drain(reader)
    by_key: dict[str, list[int]] = defaultdict(list)
    for event in events:
        by_key[event.routing_key].append(int(event.event[1:]))
    assert all(seq == sorted(seq) for seq in by_key.values()) and len(events) == 300


def test_without_takeover_a_second_live_reader_with_the_same_id_is_refused(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope, **FAST)
    first = factory.create_reader("same", "billing", UTF8StringSerializer())
    with pytest.raises(ReaderAlreadyOnlineError, match=r"already online.*takeover=True"):
        factory.create_reader(
            "same", "billing", UTF8StringSerializer(), ReaderConfig(takeover=False)
        )
    first.close()
    again = factory.create_reader("same", "billing", UTF8StringSerializer())  # static membership
    assert again.generation > first.generation
    again.close()


def test_auto_commit_resumes_after_the_last_processed_event(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 100)
    make_group(connection, scope, auto_commit_interval=1.0)
    clock = ManualClock(100.0)
    reader = factory.create_reader("r", "billing", UTF8StringSerializer(), clock=clock)
    first = [reader.read_next_event(timeout=2) for _ in range(30)]
    clock.advance(1.5)  # the auto-commit interval passes
    first.append(reader.read_next_event(timeout=2))  # moving on marks the 30th as processed
    group = ReaderGroupManager(scope, connection).get_reader_group("billing")
    wait_until(  # the maintenance thread commits it
        lambda: sum(group.refresh().positions().values()) == 30, 10, "the auto commit"
    )
    reader._stop.set()  # simulate a crash after the commit: no graceful leave
    group.reader_offline("r")
    positions = group.refresh().unassigned
    assert sum(positions.values()) == 30  # exactly what was processed: commit-on-get
    again = factory.create_reader("r2", "billing", UTF8StringSerializer())
    rest = drain(again)
    seen = {e.event for e in first} | {e.event for e in rest}
    assert seen == {f"e{i}" for i in range(100)}  # nothing lost (some may repeat)
    again.close()


def test_manual_commit_and_release_at_the_committed_position(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 40, keys=1)  # one key: one segment holds everything
    make_group(connection, scope, commit_mode="manual")
    reader = factory.create_reader("m", "billing", UTF8StringSerializer())
    events = [reader.read_next_event(timeout=2) for _ in range(10)]
    reader.commit()
    for _ in range(5):
        reader.read_next_event(timeout=2)  # read but never committed
    reader.close()
    group = ReaderGroupManager(scope, connection).get_reader_group("billing")
    segment = (f"{scope}/orders", events[0].segment)
    assert group.refresh().unassigned[segment] == 10  # manual mode releases at the commit


def test_reader_offline_fences_the_reader(
    connection: Connection,
    scope: str,
    stream4: str,
    factory: EventStreamClientFactory,
    each_group_manager: Any,
) -> None:
    write(factory, 20)
    make_group(connection, scope, **FAST)
    reader = factory.create_reader("victim", "billing", UTF8StringSerializer())
    reader.read_next_event(timeout=2)
    group = each_group_manager.get_reader_group("billing")
    assert group.reader_offline("victim") is True
    assert group.get_online_readers() == []
    with pytest.raises(ReaderNotInGroupError):
        for _ in range(50):
            reader.read_next_event(timeout=0.1)
    with pytest.raises(ReaderNotInGroupError):
        reader._member.commit({next(iter(group.refresh().unassigned)): (1, 5)})  # server side
    reader.close()


def test_fencing_tokens_grow_with_each_new_owner(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope, **FAST)
    one = factory.create_reader("one", "billing", UTF8StringSerializer())
    one.read_next_event(timeout=0.3)
    before = one.owned_segments()
    one.close()
    two = factory.create_reader("two", "billing", UTF8StringSerializer())
    two.read_next_event(timeout=0.3)
    after = two.owned_segments()
    assert set(before) == set(after)
    assert all(after[s] > before[s] for s in after)
    two.close()


def test_max_poll_interval_gives_segments_back(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope, max_poll_interval=0.5, **FAST)
    slow = factory.create_reader("slow", "billing", UTF8StringSerializer())
    slow.read_next_event(timeout=0.2)
    group = ReaderGroupManager(scope, connection).get_reader_group("billing")
    wait_until(lambda: group.get_online_readers() == [])  # the application stopped calling
    assert len(group.refresh().unassigned) == 4
    with pytest.raises(ReaderNotInGroupError, match="max_poll_interval"):
        slow.read_next_event(timeout=0.1)
    slow.close()
    back = factory.create_reader("slow", "billing", UTF8StringSerializer())
    back.close()


def test_rebalance_listeners_hear_about_moves(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope, **FAST)
    heard: list[tuple[str, str, int]] = []

    class Listener:
        def on_segments_acquired(self, reader_id: str, segments: Any) -> None:
            heard.append(("acquired", reader_id, len(segments)))

        def on_segments_released(self, reader_id: str, segments: Any) -> None:
            heard.append(("released", reader_id, len(segments)))

    a = factory.create_reader("a", "billing", UTF8StringSerializer())
    a.add_rebalance_listener(Listener())
    a.read_next_event(timeout=0.2)
    b = factory.create_reader("b", "billing", UTF8StringSerializer())
    wait_until(
        lambda: (a.read_next_event(0.05), b.read_next_event(0.05)) and len(b.owned_segments()) == 2
    )
    assert ("acquired", "a", 4) in heard and ("released", "a", 2) in heard
    a.close()
    b.close()


def test_a_joining_reader_receives_its_share_promptly(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope)  # default timing
    stop = threading.Event()
    a = factory.create_reader("a", "billing", UTF8StringSerializer())

    def keep_reading() -> None:
        while not stop.is_set():
            a.read_next_event(timeout=0.5)

    thread = threading.Thread(target=keep_reading)
    thread.start()
    wait_until(lambda: len(a.owned_segments()) == 4)
    b = factory.create_reader("b", "billing", UTF8StringSerializer())
    joined = time.monotonic()
    while len(b.owned_segments()) < 2:
        b.read_next_event(timeout=0.1)
        assert time.monotonic() - joined < 10, "share not received"
    stop.set()
    thread.join(10)
    a.close()
    b.close()


def test_reading_across_a_split_and_a_merge_completes_segments_without_checkpoints(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    make_group(connection, scope, **FAST)
    reader = factory.create_reader("r", "billing", UTF8StringSerializer())
    write(factory, 50, prefix="a")
    with StreamManager(connection) as sm:
        split = sm.scale_stream(scope, "orders", [0], [(0.0, 0.125), (0.125, 0.25)])
        write(factory, 50, prefix="b")
        sm.scale_stream(scope, "orders", [split[1], 1], [(0.125, 0.5)])
        write(factory, 50, prefix="c")
    events = drain(reader, quiet=1.5)
    by_key: dict[str, list[str]] = defaultdict(list)
    for event in events:
        by_key[event.routing_key].append(event.event)
    assert sorted(e.event for e in events) == sorted(f"{p}{i}" for p in "abc" for i in range(50))
    for key, seq in by_key.items():
        generations = [s[0] for s in seq]
        assert generations == sorted(generations), f"{key} read out of write order: {seq}"
    group = ReaderGroupManager(scope, connection).get_reader_group("billing")
    assert group.get_segment_distribution().completed == 3  # 0, split[1] and 1
    reader.close()


def test_start_positions_tail_time_and_cut(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 20, prefix="old")
    with StreamManager(connection) as sm:
        tail = sm.tail_cut(scope, "orders")
        now = sm.connection.server_time_ms()
    wait_until(lambda: StreamManager(connection).connection.server_time_ms() > now)
    write(factory, 10, prefix="new")
    for name, start in (("from-tail", tail), ("from-time", now + 1), ("from-cut", tail)):
        make_group(connection, scope, name=name, start=start)
        with factory.create_reader("r", name, UTF8StringSerializer()) as reader:
            got = drain(reader, expect=10)
            assert sorted(e.event for e in got) == sorted(f"new{i}" for i in range(10))
    make_group(connection, scope, name="at-tail", start="tail")
    with factory.create_reader("r", "at-tail", UTF8StringSerializer()) as reader:
        assert drain(reader, quiet=0.3) == []


def test_group_administration_errors(each_group_manager: Any, scope: str, stream4: str) -> None:
    rgm = each_group_manager
    with pytest.raises(ReaderGroupNotFoundError):
        rgm.get_reader_group("nope")
    with pytest.raises(InvalidConfigError):
        ReaderGroupConfig(streams=[stream4], session_timeout=1, heartbeat_interval=1)
    bad_cut = StreamCut(scope, "orders", {0: 0})
    with pytest.raises(Exception, match="cover"):
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[stream4], start=bad_cut))
    assert rgm.list_reader_groups() == []
    rgm.create_reader_group("g", ReaderGroupConfig(streams=[stream4]))
    assert rgm.create_reader_group("g", ReaderGroupConfig(streams=[stream4])) is False
    assert rgm.delete_reader_group("g") is True
    assert rgm.list_reader_groups() == []


def test_runner_processes_segments_in_parallel_and_each_in_order(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    write(factory, 400, keys=8)
    make_group(connection, scope, commit_mode="manual")
    reader = factory.create_reader("runner", "billing", UTF8StringSerializer())
    seen: dict[int, list[int]] = defaultdict(list)
    active: dict[int, int] = defaultdict(int)
    overlap: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()
    total = [0]

    def handler(event: Any) -> None:
        with lock:
            active[event.segment] += 1
            if active[event.segment] > 1:
                overlap.append(event.segment)
        time.sleep(0.0005)
        with lock:
            active[event.segment] -= 1
            seen[event.segment].append(event.offset)
            total[0] += 1
            if total[0] == 400:
                stop.set()

    stats = reader.run(handler, max_workers=4, stop=stop, handle_signals=False)
    assert stats.handled == 400 and not overlap
    assert all(offsets == sorted(offsets) for offsets in seen.values())
    committed = reader._member.refresh().positions()
    assert sum(committed.values()) == 400  # committed only after handling, and all of it
    reader.close()


def test_a_takeover_join_fences_the_live_incarnation_at_once(
    connection: Connection, scope: str, stream4: str, factory: EventStreamClientFactory
) -> None:
    """A retried task joins with takeover: the old generation is removed in the same conditional
    update (no session to wait out) and is fenced from then on."""
    write(factory, 40)
    make_group(connection, scope, session_timeout=60.0)
    old = factory.create_reader("task-0", "billing", UTF8StringSerializer())
    first = old.read_next_event(timeout=2)
    new = factory.create_reader(
        "task-0", "billing", UTF8StringSerializer(), ReaderConfig(takeover=True)
    )
    assert new.generation > old.generation
    with pytest.raises(ReaderNotInGroupError):
        old._member.commit({next(iter(old._member.state.assigned)): (1, 5)})
    rest = {e.event for e in drain(new)}  # from the committed positions: nothing lost
    assert rest | {first.event} == {f"e{i}" for i in range(40)}
    new.close()
    old.close()
