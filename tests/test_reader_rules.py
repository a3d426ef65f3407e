"""The reader's own rules (issue 28), on both connections (in memory and a real Redis):

* no event of a segment is handed out once the reader decided or learned that it releases or
  loses that segment: graceful rebalances deliver every event once and in key order;
* a pending checkpoint is handed out at the first read call after the reader's state shows it,
  before any further buffered event, and the state shows it within ``group_refresh_time``;
* a reader removed from the group raises ``ReaderNotInGroupError`` at its first read after its
  state shows the removal, and hands out nothing more;
* ``on_segments_released`` runs before the segments are given up (a commit in it lands) and
  ``on_segments_acquired`` returns before any event of those segments is handed out; both run
  on the reading thread, inside a read call.

Ported from Pravega's ``ReaderGroupStateManagerTest`` (``testReleaseWhenReadersAdded``,
``testSegmentsAssigned``, ``testReaderOffline``), ``CheckpointTest``
(``testMoreReadersThanSegments``) and ``initiateCheckpointFailure``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ReaderNotInGroupError,
    ReaderReplacedError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.errors import CheckpointError
from readergroup.storage.connection_api import Connection
from tests.support.async_reader_adapter import (
    flavoured,
    flavoured_factory,
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.connections import new_scope
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 6.0, "group_refresh_time": 0.1}
"""Quick heartbeats and refreshes; a session long enough that a loaded machine (8 test workers
on 2 cores) does not time a live reader out: no test here is about session expiry."""
SLOW_HEARTBEAT = {"heartbeat_interval": 20.0, "session_timeout": 60.0, "group_refresh_time": 0.1}
"""Heartbeats too rare to notice anything within a test: only the group state can."""


@pytest.fixture
def scope(connection: Connection) -> str:
    return new_scope(connection)


@pytest.fixture
def factory(
    connection: Connection, scope: str, reader_flavour: str, request: pytest.FixtureRequest
) -> Iterator[EventStreamClientFactory]:
    """Threaded readers, or asyncio ones (a flavoured test's ``reader_flavour``)."""
    yield from flavoured_factory(connection, scope, reader_flavour, request)


def make_stream(connection: Connection, scope: str, segments: int) -> None:
    with StreamManager(connection) as sm:
        sm.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )


def make_group(connection: Connection, scope: str, **config: Any) -> Any:
    rgm = ReaderGroupManager(scope, connection)
    rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/orders"], **config))
    return rgm.get_reader_group("g")


def prepare(
    connection: Connection,
    scope: str,
    factory: EventStreamClientFactory,
    segments: int,
    events: int,
    **config: Any,
) -> Any:
    """A stream of ``segments`` with ``events`` written, and a group ``g`` reading it."""
    make_stream(connection, scope, segments)
    write(factory, events)
    return make_group(connection, scope, **config)


def write(factory: EventStreamClientFactory, count: int, keys: int = 16) -> None:
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"k{i % keys}:{i // keys}", routing_key=f"k{i % keys}")


class Processed:
    """What every reader's application processed, in one global order (under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[tuple[str, int, str]] = []  # (key, index within key, reader)

    def add(self, event: str, reader: str) -> None:
        key, index = event.split(":")
        with self.lock:
            self.order.append((key, int(index), reader))

    def violations(self) -> list[str]:
        """Every event processed twice, and every key whose events were processed out of
        order (an event processed after a later one of its key)."""
        found: list[str] = []
        seen: set[tuple[str, int]] = set()
        last: dict[str, tuple[int, str]] = {}
        for key, index, reader in self.order:
            if (key, index) in seen:
                found.append(f"{key}:{index} processed twice (again by {reader})")
            seen.add((key, index))
            before = last.get(key)
            if before is not None and index != before[0] + 1:
                found.append(f"{key}:{index} by {reader} after {key}:{before[0]} by {before[1]}")
            last[key] = (index, reader)
        return found


def _graceful_rebalance_run(
    connection: Connection, scope: str, factory: EventStreamClientFactory, seed: int
) -> Processed:
    """Six segments; readers join one by one and one closes (no crash, no timeout) while a
    writer writes; each application processes each batch with a random delay."""
    rng = random.Random(seed)
    make_stream(connection, scope, 6)
    make_group(connection, scope, **FAST)
    keys, per_key = 24, 40
    total = keys * per_key
    processed = Processed()
    stop_all = threading.Event()
    errors: list[BaseException] = []

    def consume(name: str, leave: threading.Event) -> None:
        reader = factory.create_reader(name, "g", UTF8StringSerializer())
        try:
            while not leave.is_set() and not stop_all.is_set():
                for event in reader.read_batch(rng.choice((1, 7, 50)), timeout=0.05):
                    if event.event is not None:
                        processed.add(event.event, name)
                time.sleep(rng.choice((0.0, 0.001, 0.01)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            reader.close()

    leaves = {name: threading.Event() for name in ("a", "b", "c")}
    threads = {n: threading.Thread(target=consume, args=(n, leaves[n])) for n in leaves}

    def produce() -> None:
        with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
            for i in range(per_key):
                for k in range(keys):
                    writer.write_event(f"k{k}:{i}", routing_key=f"k{k}")
                writer.flush()
                time.sleep(0.01)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        for name in ("a", "b", "c"):
            threads[name].start()
            time.sleep(rng.uniform(0.1, 0.3))
        leaves["b"].set()  # a graceful leave
        threads["b"].join(20)
        writer.join(60)
        wait_until(lambda: len({(k, i) for k, i, _ in processed.order}) >= total, 60, "all read")
    finally:
        stop_all.set()
        for thread in threads.values():
            if thread.is_alive():
                thread.join(20)
        writer.join(10)
    assert not errors, errors
    return processed


@pytest.mark.parametrize("seed", range(3))
@flavoured()
def test_a_graceful_rebalance_delivers_every_event_once_and_in_key_order(
    connection: Connection, scope: str, factory: EventStreamClientFactory, seed: int
) -> None:
    processed = _graceful_rebalance_run(connection, scope, factory, seed)
    assert processed.violations() == []


@pytest.mark.long
@pytest.mark.parametrize("seed", range(3, 20))
@flavoured()
def test_graceful_rebalances_of_twenty_seeds_deliver_every_event_once_and_in_key_order(
    connection: Connection, scope: str, factory: EventStreamClientFactory, seed: int
) -> None:
    processed = _graceful_rebalance_run(connection, scope, factory, seed)
    assert processed.violations() == []


@flavoured("sync", "async")
def test_a_checkpoint_is_handed_out_before_the_read_ahead_backlog(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """A reader processing 1 ms per event with a large backlog: the checkpoint comes within
    ``group_refresh_time`` of its initiation (about 100 events here), not after the backlog."""
    group = prepare(connection, scope, factory, 1, 6000, **SLOW_HEARTBEAT)
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    handed: list[str] = []
    initiated = threading.Event()
    after_initiation = [0]
    result: list[Any] = []

    def checkpoint() -> None:
        initiated.set()
        result.append(group.initiate_checkpoint("cp", timeout=20))

    try:
        while len(handed) < 50:
            event = reader.read_next_event(timeout=1)
            handed.append(event.event)
        initiator = threading.Thread(target=checkpoint)
        initiator.start()
        wait_until(initiated.is_set)
        while True:
            event = reader.read_next_event(timeout=1)
            if event.is_checkpoint:
                break
            assert event.event is not None, "the backlog ran dry before the checkpoint"
            after_initiation[0] += 1
            time.sleep(0.001)
        reader.read_next_event(timeout=1)  # moves past it: acknowledged
        initiator.join(30)
        assert result and result[0].name == "cp"
        # 0.1 s of 1 ms events is ~100; the backlog is 5,950
        assert after_initiation[0] < 1500, after_initiation[0]
    finally:
        reader.close()


@flavoured()
def test_checkpoints_complete_with_more_readers_than_segments(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Pravega's CheckpointTest.testMoreReadersThanSegments: 2 readers, 1 segment, events
    written throughout; each of 3 checkpoints completes."""
    group = prepare(connection, scope, factory, 1, 3000, **SLOW_HEARTBEAT)
    stop = threading.Event()
    seen: dict[str, list[str]] = defaultdict(list)
    errors: list[BaseException] = []

    def consume(name: str) -> None:
        try:
            with factory.create_reader(name, "g", UTF8StringSerializer()) as reader:
                while not stop.is_set():
                    event = reader.read_next_event(timeout=0.05)
                    if event.is_checkpoint:
                        seen[name].append(event.checkpoint_name or "")
                    elif event.event is not None:
                        time.sleep(0.001)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(n,)) for n in ("one", "two")]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(group.get_online_readers()) == 2)
        for i in range(3):
            result = group.initiate_checkpoint(f"cp{i}", timeout=10)
            assert result.name == f"cp{i}"
            assert len(result.positions) == 1
    except CheckpointError as exc:
        pytest.fail(f"a checkpoint failed: {exc}")
    finally:
        stop.set()
        for thread in threads:
            thread.join(20)
    assert not errors, errors
    assert seen["one"] == seen["two"] == ["cp0", "cp1", "cp2"]


@flavoured("sync", "async")
def test_a_reader_declared_offline_raises_at_its_next_read_and_hands_out_nothing_more(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Pravega's testReaderOffline: heartbeats are too rare to notice here; the group state,
    refreshed every ``group_refresh_time``, does."""
    group = prepare(connection, scope, factory, 2, 4000, **SLOW_HEARTBEAT)
    reader = factory.create_reader("victim", "g", UTF8StringSerializer())
    try:
        for _ in range(20):
            assert reader.read_next_event(timeout=1).event is not None
        assert group.reader_offline("victim") is True
        handed_after = 0
        deadline = time.monotonic() + 10
        with pytest.raises(ReaderNotInGroupError):
            while time.monotonic() < deadline:
                if reader.read_next_event(timeout=0.05).event is not None:
                    handed_after += 1
                time.sleep(0.001)
        with pytest.raises(ReaderNotInGroupError):  # and stays removed
            reader.read_next_event(timeout=0.05)
        assert handed_after < 1500, handed_after
    finally:
        reader.close()


@flavoured("sync", "async")
def test_a_reader_that_failed_a_checkpoint_and_was_declared_offline_raises(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Pravega's initiateCheckpointFailure: a checkpoint times out (the reader does not read),
    the reader is declared offline; its next reads raise."""
    group = prepare(connection, scope, factory, 2, 200, **SLOW_HEARTBEAT)
    reader = factory.create_reader("sleepy", "g", UTF8StringSerializer())
    try:
        assert reader.read_next_event(timeout=1).event is not None
        with pytest.raises(CheckpointError):
            group.initiate_checkpoint("never", timeout=0.5)
        assert group.reader_offline("sleepy") is True
        deadline = time.monotonic() + 10
        with pytest.raises(ReaderNotInGroupError):
            while time.monotonic() < deadline:
                reader.read_next_event(timeout=0.05)
    finally:
        reader.close()


@flavoured()
def test_a_commit_in_on_segments_released_lands_before_the_segments_move(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Manual commits: the application commits what it processed when told its segments go;
    the next owner starts exactly there (nothing processed twice)."""
    prepare(connection, scope, factory, 4, 800, commit_mode="manual", **FAST)
    processed = Processed()
    threads_seen: set[str] = set()
    failures: list[BaseException] = []
    a = factory.create_reader("a", "g", UTF8StringSerializer())

    class CommitOnRelease:
        def on_segments_acquired(self, reader_id: str, segments: Any) -> None:
            threads_seen.add(threading.current_thread().name)

        def on_segments_released(self, reader_id: str, segments: Any) -> None:
            threads_seen.add(threading.current_thread().name)
            try:
                a.commit()  # everything returned has been processed
            except BaseException as exc:
                failures.append(exc)
                raise

    a.add_rebalance_listener(CommitOnRelease())
    b = None
    try:
        for _ in range(30):
            for event in a.read_batch(5, timeout=1):
                processed.add(event.event, "a")
        b = factory.create_reader("b", "g", UTF8StringSerializer())
        total = 800
        deadline = time.monotonic() + 30
        while len(processed.order) < total and time.monotonic() < deadline:
            for event in a.read_batch(5, timeout=0.02):
                processed.add(event.event, "a")
            for event in b.read_batch(5, timeout=0.02):
                processed.add(event.event, "b")
            if b.owned_segments():
                b.commit()
        assert not failures, failures

        def balanced() -> bool:
            for name, reader in (("a", a), ("b", b)):
                for event in reader.read_batch(5, timeout=0.02):
                    processed.add(event.event, name)
            return len(b.owned_segments()) == 2

        wait_until(balanced, 30, "b owns its share")
        assert threads_seen == {threading.current_thread().name}  # the reading thread
        assert processed.violations() == []
    finally:
        a.close()
        if b is not None:
            b.close()


@flavoured("sync", "async")
def test_on_segments_acquired_returns_before_any_event_of_them_is_handed_out(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    prepare(connection, scope, factory, 4, 400, **FAST)
    ready: set[Any] = set()
    early: list[Any] = []

    class SlowAcquire:
        def on_segments_acquired(self, reader_id: str, segments: Any) -> None:
            time.sleep(0.3)  # say, loading positions from the application's database
            ready.update(segments)

        def on_segments_released(self, reader_id: str, segments: Any) -> None:
            ready.difference_update(segments)

    with factory.create_reader("a", "g", UTF8StringSerializer()) as reader:
        reader.add_rebalance_listener(SlowAcquire())
        got = 0
        deadline = time.monotonic() + 20
        while got < 400 and time.monotonic() < deadline:
            for event in reader.read_batch(10, timeout=0.05):
                got += 1
                if (event.stream, event.segment) not in ready:
                    early.append((event.segment, event.offset))
        assert got == 400
    assert early == []


# -- static membership (issue 30 item 1) ---------------------------------------------------------
def _owned_by_both(a: Any, b: Any, seen: list[tuple[Any, int]] | None = None) -> bool:
    for reader in (a, b):
        got = reader.read_batch(50, timeout=0.02)
        if seen is not None:
            seen.extend((e.segment, e.offset) for e in got)
    return len(a.owned_segments()) == len(b.owned_segments()) == 2


@flavoured()
def test_a_worker_restarted_under_its_id_gets_its_segments_back_and_nobody_else_moves(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Kafka's static membership: a supervisor restarts a crashed worker within the session;
    the new incarnation joins at once (no ReaderAlreadyOnlineError), takes exactly the old
    one's segments at their committed positions, and the other reader's segments never move."""
    prepare(connection, scope, factory, 4, 400, commit_mode="manual", **SLOW_HEARTBEAT)
    a = factory.create_reader("a", "g", UTF8StringSerializer())
    b = factory.create_reader("b", "g", UTF8StringSerializer())
    wait_until(lambda: _owned_by_both(a, b), 30, "balanced")
    a.commit()
    b_before = b.owned_segments()
    a_segments = set(a.owned_segments())
    committed = {k: v for k, v in a._member.state.assigned.items() if k in a_segments}
    # the worker hangs (a zombie: it still runs, say behind a partition) and is restarted
    restarted = factory.create_reader("a", "g", UTF8StringSerializer())
    assert restarted.generation > a.generation
    state = restarted._member.refresh()
    assert set(state.owned_by("a")) == a_segments
    assert {k: v.position for k, v in state.owned_by("a").items()} == {
        k: v.position for k, v in committed.items()
    }
    assert {k: v.token for k, v in state.owned_by("b").items()} == b_before  # nobody else moved
    # the old incarnation, if it still runs, is told it was replaced: final, no rejoin
    with pytest.raises(ReaderReplacedError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            a.read_next_event(timeout=0.05)
    with pytest.raises(ReaderReplacedError):
        a.rejoin()
    got = restarted.read_batch(50, timeout=2)
    assert got and {(e.stream, e.segment) for e in got} <= a_segments
    for reader in (a, restarted, b):
        reader.close()


@flavoured()
def test_a_static_leave_keeps_the_segments_for_a_restart_and_a_rolling_restart_moves_nothing(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    prepare(connection, scope, factory, 4, 400, **SLOW_HEARTBEAT)
    readers = {n: factory.create_reader(n, "g", UTF8StringSerializer()) for n in ("a", "b")}
    seen: list[tuple[Any, int]] = []
    wait_until(lambda: _owned_by_both(readers["a"], readers["b"], seen), 30, "balanced")
    assignment = {n: set(r.owned_segments()) for n, r in readers.items()}
    for name in ("a", "b", "a", "b"):  # a rolling restart, twice
        for reader in readers.values():
            seen.extend((e.segment, e.offset) for e in reader.read_batch(20, timeout=0.1))
        readers[name].close(leave=False)
        state = readers[name]._member.refresh()
        assert set(state.owned_by(name)) == assignment[name]  # still its own
        readers[name] = factory.create_reader(name, "g", UTF8StringSerializer())
        assert set(readers[name]._member.refresh().owned_by(name)) == assignment[name]
    deadline = time.monotonic() + 30
    while len(seen) < 400 and time.monotonic() < deadline:
        for name, reader in readers.items():
            got = reader.read_batch(50, timeout=0.05)
            assert {e.segment for e in got} <= {s for _, s in assignment[name]}
            seen.extend((e.segment, e.offset) for e in got)
    twice = sorted({x for x in seen if seen.count(x) > 1})
    assert twice == [], (len(twice), twice[:5], twice[-5:])  # auto commits at each close
    assert len(seen) == 400
    for reader in readers.values():
        reader.close()


# -- consumer controls (issue 30 item 3) ---------------------------------------------------------
@flavoured("sync", "async")
def test_seek_in_on_segments_acquired_resumes_from_the_applications_own_positions(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    prepare(connection, scope, factory, 2, 200, commit_mode="manual", **FAST)
    kept = {}  # the application's own store: segment -> next offset
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        probe = reader.read_batch(1, timeout=2)
        segments = sorted(reader.assignment())
        assert len(segments) == 2 and probe
    kept = {segments[0]: 30, segments[1]: 70}
    seen_in_listener: dict[Any, int] = {}

    class ResumeFromStore:
        def on_segments_acquired(self, reader_id: str, acquired: Any) -> None:
            for key in acquired:
                reader.seek(key, kept[key])
                seen_in_listener[key] = reader.position(key)

        def on_segments_released(self, reader_id: str, released: Any) -> None:
            return None

    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    reader.add_rebalance_listener(ResumeFromStore())
    try:
        first: dict[Any, int] = {}
        deadline = time.monotonic() + 20
        while len(first) < 2 and time.monotonic() < deadline:
            for event in reader.read_batch(10, timeout=0.1):
                first.setdefault((event.stream, event.segment), event.offset)
        assert first == kept == seen_in_listener
        assert reader.assignment() == set(kept)
        committed = reader.committed()
        assert set(committed) == set(kept)
        with pytest.raises(ValueError):
            reader.seek(segments[0], -1)
    finally:
        reader.close()


@flavoured("sync", "async")
def test_paused_segments_stay_owned_and_deliver_nothing_until_resumed(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    prepare(connection, scope, factory, 2, 200, **FAST)
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        wait_until(lambda: reader.read_batch(1, timeout=0.05) is not None and reader.assignment())
        paused, other = sorted(reader.assignment())
        reader.pause([paused])
        assert reader.paused() == {paused}
        got = []
        for _ in range(30):
            got += reader.read_batch(50, timeout=0.05)
        assert got and all((e.stream, e.segment) == other for e in got)
        assert paused in reader.assignment()  # still owned
        reader.resume([paused])
        assert reader.paused() == set()
        got = []
        deadline = time.monotonic() + 10
        while not any((e.stream, e.segment) == paused for e in got):
            assert time.monotonic() < deadline
            got += reader.read_batch(50, timeout=0.05)


# -- end of a sealed stream (issue 30 item 5) ----------------------------------------------------
@flavoured("sync", "async")
def test_a_group_that_read_a_sealed_stream_to_its_end_reports_end_of_data(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Without an end cut: once every segment is sealed and read (a split included), the
    reader and the group say so (Pravega: the read is completed)."""
    group = prepare(connection, scope, factory, 2, 100, **FAST)
    with StreamManager(connection) as sm:
        sm.scale_stream(scope, "orders", [0], [(0.0, 0.25), (0.25, 0.5)])
    write(factory, 100)
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < 200 and time.monotonic() < deadline:
            got += reader.read_batch(100, timeout=0.1)
        assert len(got) == 200
        assert not reader.is_end_of_data() and not group.is_end_of_data()  # not sealed yet
        with StreamManager(connection) as sm:
            sm.seal_stream(scope, "orders")
        wait_until(
            lambda: reader.read_batch(10, timeout=0.05) == [] and reader.is_end_of_data(),
            20,
            "end of data",
        )
        assert group.is_end_of_data()


@flavoured()
def test_a_segment_is_given_away_while_the_application_holds_an_event_of_another(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """``read_next_event`` hands out one event per call, in turn over the segments: the
    application then holds one event of the last segment only; every other segment can go at
    once, though the application does not read again (a slow handler)."""
    prepare(connection, scope, factory, 2, 400, **FAST)
    a = factory.create_reader("a", "g", UTF8StringSerializer())
    b = None
    try:
        wait_until(lambda: a.read_next_event(0.05).is_event and len(a.owned_segments()) == 2)
        last = [a.read_next_event(timeout=1) for _ in range(40)][-2:]
        assert last[0].segment != last[1].segment  # in turn: both segments handed out lately
        b = factory.create_reader("b", "g", UTF8StringSerializer())
        got: list[Any] = []
        wait_until(
            lambda: got.extend(b.read_batch(10, timeout=0.05)) or len(b.owned_segments()) == 1,
            30,
            "b gets the segment a's application holds nothing of",
        )
        assert set(b.owned_segments()) == {(last[0].stream, last[0].segment)}
    finally:
        a.close()
        if b is not None:
            b.close()


@flavoured()
def test_a_commit_in_on_segments_released_lands_when_the_reader_closes(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    """Kafka's onPartitionsRevoked on close(): the listener commits what was processed."""
    prepare(connection, scope, factory, 2, 100, commit_mode="manual", **FAST)
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    failures: list[BaseException] = []

    class CommitOnRelease:
        def on_segments_acquired(self, reader_id: str, segments: Any) -> None:
            return None

        def on_segments_released(self, reader_id: str, segments: Any) -> None:
            try:
                reader.commit()
            except BaseException as exc:
                failures.append(exc)

    reader.add_rebalance_listener(CommitOnRelease())
    got = []
    while len(got) < 30:
        got += reader.read_batch(10, timeout=1)
    reader.close()
    assert failures == []
    with factory.create_reader("next", "g", UTF8StringSerializer()) as after:
        rest = []
        deadline = time.monotonic() + 20
        while len(got) + len(rest) < 100 and time.monotonic() < deadline:
            rest += after.read_batch(50, timeout=0.1)
    assert sorted(e.event for e in got + rest) == sorted({e.event for e in got + rest})
    assert len(got) + len(rest) == 100  # the next reader starts where the listener committed
