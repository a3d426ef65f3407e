"""Checkpoints, resets, bounded reads, queries, lag and retention, on both connections (in
memory and a real Redis; the reader-process test on Redis only)."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from readergroup import (
    CheckpointError,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    TruncatedDataError,
    UTF8StringSerializer,
)
from readergroup.core.group_state import CreateCheckpoint
from readergroup.storage.connection_api import Connection
from tests.support.async_reader_adapter import (
    flavoured,
    flavoured_factory,
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.connections import new_scope
from tests.support.waiting import wait_until
from tests.test_reader_group_processes import Cluster

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.05}


@pytest.fixture
def scope(connection: Connection) -> str:
    return new_scope(connection)


@pytest.fixture
def factory(
    connection: Connection, scope: str, reader_flavour: str, request: pytest.FixtureRequest
) -> Iterator[EventStreamClientFactory]:
    """Threaded readers, or asyncio ones (a flavoured test's ``reader_flavour``)."""
    yield from flavoured_factory(connection, scope, reader_flavour, request)


@pytest.fixture
def stream(connection: Connection, scope: str) -> str:
    with StreamManager(connection) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))
    return f"{scope}/s"


def write(
    factory: EventStreamClientFactory, count: int, prefix: str = "e", stream: str = "s"
) -> None:
    with factory.create_event_writer(stream, UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"{prefix}{i}", routing_key=f"k{i % 16}")


def group(
    connection: Connection, scope: str, name: str = "g", stream: str = "s", **config: Any
) -> Any:
    with ReaderGroupManager(scope, connection) as rgm:
        rgm.create_reader_group(name, ReaderGroupConfig(streams=[f"{scope}/{stream}"], **config))
        return rgm.get_reader_group(name)


class Reading:
    """A reader in a thread, recording what each read call returned and when it started."""

    def __init__(self, factory: EventStreamClientFactory, reader_id: str, name: str = "g") -> None:
        self.reader = factory.create_reader(reader_id, name, UTF8StringSerializer())
        self.records: list[tuple[float, Any]] = []
        self.checkpoints: list[str] = []
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.01)
                continue
            started = time.monotonic()
            for event in self.reader.read_batch(50, timeout=0.1):
                if event.is_checkpoint:
                    self.checkpoints.append(event.checkpoint_name)
                else:
                    self.records.append((started, event))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.reader.close()


@flavoured()
def test_the_documented_usage(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    write(factory, 40)
    g = group(connection, scope, **FAST)
    readers = [Reading(factory, "r1"), Reading(factory, "r2")]
    cp = g.initiate_checkpoint("cp-1", timeout=30.0)
    assert all(r.checkpoints == ["cp-1"] for r in readers)
    g.reset_reader_group(start=cp)
    cuts, lag = g.get_stream_cuts(), g.get_metrics()
    assert set(cuts) == {stream} and lag.total.events >= 0
    for r in readers:
        r.close()


@pytest.mark.parametrize("connection", ["redis"], indirect=True)  # reader processes need Redis
def test_a_checkpoint_across_three_reader_processes(
    connection: Connection, redis_url: str, scope: str, tmp_path: Path
) -> None:
    with StreamManager(connection) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(8)))
    with EventStreamClientFactory(scope, connection) as f:
        write(f, 3000)
    with ReaderGroupManager(scope, connection) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
    cluster = Cluster(redis_url, scope, tmp_path)
    try:
        for i in range(3):
            cluster.start(f"p{i}")
        wait_until(lambda: cluster.balanced(3, 8))
        result = cluster.group.initiate_checkpoint("cp-procs", timeout=30)
    finally:
        cluster.stop_all()
    assert len(result.positions) == 8
    handed_out: dict[int, int] = defaultdict(int)  # segment -> one past the last offset
    for path in tmp_path.glob("*.events"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        marks = [i for i, row in enumerate(rows) if row.get("cp") == "cp-procs"]
        assert len(marks) == 1, f"{path.name} saw the checkpoint {len(marks)} times"
        for row in rows[: marks[0]]:
            handed_out[row["g"]] = max(handed_out[row["g"]], row["o"] + 1)
    # the cut holds exactly the events the readers had handed out before their checkpoint
    assert {s: p for (_, s), p in result.positions.items()} == {s: handed_out[s] for s in range(8)}


@flavoured()
def test_a_stuck_reader_fails_the_checkpoint_with_its_name(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    g = group(connection, scope, **FAST)
    live = Reading(factory, "lively")
    stuck = Reading(factory, "stuck")
    stuck.paused.set()  # the application hangs: it never reads, so never acknowledges
    with pytest.raises(CheckpointError, match="'stuck'") as caught:
        g.initiate_checkpoint("cp-stuck", timeout=1.0, declare_offline=True)
    assert caught.value.pending_readers == ("stuck",)
    assert g.get_online_readers() == ["lively"]  # declared offline: the group moves on
    assert g.initiate_checkpoint("cp-after", timeout=10).positions  # and checkpoints again
    live.close()
    stuck.stop.set()
    stuck.thread.join(5)


def test_at_most_three_outstanding_checkpoints(
    connection: Connection, scope: str, stream: str
) -> None:
    g = group(connection, scope, **FAST)
    g.sync.update_state(lambda s: [AddReaderLike()])  # a reader that will never acknowledge
    for i in range(3):
        g.sync.update_state(lambda s, i=i: [CreateCheckpoint(f"c{i}", 0)])
    with pytest.raises(CheckpointError, match="outstanding"):
        g.initiate_checkpoint("c3", timeout=0.1)


def AddReaderLike() -> Any:
    from readergroup.core.group_state import AddReader

    return AddReader("ghost", 0)


@flavoured("sync", "async")
def test_silent_stream_cuts_need_no_checkpoint_event(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    write(factory, 100)
    g = group(connection, scope, **FAST)
    reading = Reading(factory, "r")
    wait_until(lambda: len(reading.records) == 100)
    cuts = g.generate_stream_cuts(timeout=10)
    assert reading.checkpoints == []
    assert sum(cuts[stream].positions.values()) >= 99  # everything handed out (minus the last)
    reading.close()


@flavoured()
def test_a_reset_while_reading_loses_nothing_and_never_goes_back(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    write(factory, 200, prefix="a")
    g = group(connection, scope, **FAST)
    readers = [Reading(factory, "r1"), Reading(factory, "r2")]
    wait_until(lambda: sum(len(r.records) for r in readers) >= 200)
    with StreamManager(connection) as sm:
        cut = sm.tail_cut(scope, "s")
    write(factory, 100, prefix="b")
    starts = g.reset_reader_group(start=cut)
    reset_done = time.monotonic()
    write(factory, 100, prefix="c")
    everything = lambda: {e.event for r in readers for _, e in r.records}  # noqa: E731
    wanted = {f"{p}{i}" for p in "bc" for i in range(100)}
    wait_until(lambda: wanted <= everything())  # nothing at or after the reset point is lost
    after = [e for r in readers for t, e in r.records if t > reset_done]
    assert after, "reads continued after the reset"
    for event in after:  # and no read that started after the reset went back before it
        assert event.offset >= starts[(stream, event.segment)], "read from before the reset point"
        assert not event.event.startswith("a")
    for r in readers:
        r.close()


@flavoured("sync", "async")
def test_reset_by_shift_and_to_a_checkpoint_name(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    write(factory, 80, prefix="x")
    g = group(connection, scope, **FAST)
    reading = Reading(factory, "r")
    wait_until(lambda: len(reading.records) == 80)
    g.initiate_checkpoint("here", timeout=10)
    shifted = g.reset_reader_group(shift_by=-5)  # 5 back, as Kafka's --shift-by -5
    assert all(p >= 0 for p in shifted.values())
    wait_until(
        lambda: len(reading.records) >= 80 + sum(min(5, p + 5) for p in shifted.values()) - 20
    )
    back = g.reset_reader_group(start="here")
    assert back == g.refresh().checkpoint("here").positions
    reading.close()


@flavoured("sync", "async")
def test_a_bounded_read_ends_exactly_at_the_cut(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    write(factory, 60, prefix="in")
    with StreamManager(connection) as sm:
        end = sm.tail_cut(scope, "s")
        sm.scale_stream(scope, "s", [0], [(0.0, 0.125), (0.125, 0.25)])
    write(factory, 40, prefix="out")
    g = group(connection, scope, end=end, **FAST)
    ended = threading.Event()
    watcher = g.watch(on_end_of_data=ended.set)
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        got = []
        deadline = time.monotonic() + 30
        while not reader.is_end_of_data():
            assert time.monotonic() < deadline
            got += [e.event for e in reader.read_batch(100, timeout=0.2)]
    assert sorted(got) == sorted(f"in{i}" for i in range(60))
    assert g.is_end_of_data()
    ended.wait(10)
    assert ended.is_set()
    watcher.stop()


@flavoured("sync", "async")
def test_lag_equals_written_minus_read(
    connection: Connection, scope: str, stream: str, factory: Any
) -> None:
    write(factory, 100)  # "e0".."e99": 2-3 bytes each
    g = group(connection, scope, commit_mode="manual", **FAST)
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        assert g.get_metrics().total.events == 100
        read = [reader.read_next_event(timeout=2) for _ in range(30)]
        reader.commit()
        metrics = g.get_metrics()
        assert metrics.total.events == 70
        unread_bytes = sum(len(f"e{i}") for i in range(100)) - sum(len(e.event) for e in read)
        assert metrics.total.bytes == unread_bytes
        assert metrics.readers["r"].events == 70
        assert metrics.total.ms >= 0
        while reader.read_next_event(timeout=0.5).event is not None:
            pass
        reader.commit()
        caught_up = g.get_metrics().total
        assert (caught_up.events, caught_up.bytes, caught_up.ms) == (0, 0, 0)


@flavoured("sync", "async")
def test_retention_never_truncates_what_an_active_group_needs(
    connection: Connection, scope: str, factory: Any
) -> None:
    with StreamManager(connection) as sm:
        sm.create_stream(
            scope, "r", StreamConfiguration(retention=RetentionPolicy(consumption_based=True))
        )
        retention = RetentionManager(sm)
        write(factory, 100, stream="r")
        g = group(connection, scope, name="slow", stream="r", commit_mode="manual", **FAST)
        assert retention.apply(scope, "r") is None  # the group has read nothing yet
        with factory.create_reader("x", "slow", UTF8StringSerializer()) as reader:
            for _ in range(40):
                reader.read_next_event(timeout=2)
            reader.commit()
        cut = retention.apply(scope, "r")
        assert cut is not None and cut.positions == {0: 40}
        assert sm.get_stream_info(scope, "r").head_cut == cut
        assert g.get_metrics().total.events == 60  # the group lost nothing it needed
        # an external subscriber (a Spark query, say) further behind holds truncation back
        retention.publish(scope, "r", "spark-query", StreamCut(scope, "r", {0: 40}))
        with factory.create_reader("x", "slow", UTF8StringSerializer()) as reader:
            while reader.read_next_event(timeout=0.3).event is not None:
                pass
            reader.commit()
        assert retention.apply(scope, "r") is None
        retention.unsubscribe(scope, "r", "spark-query")
        assert retention.apply(scope, "r") == StreamCut(scope, "r", {0: 100})
        # a subscribed group whose state cannot be read holds retention back (never guess)
        write(factory, 10, stream="r")
        broken = g.sync.backend.append(  # type: ignore[attr-defined]
            g.sync.name, b"\xc1", expected_revision=None, writer="rogue", sequence=1, max_bytes=99
        )
        assert broken.status == 0
        assert retention.apply(scope, "r") is None
        with pytest.raises(TruncatedDataError):
            list(factory.create_batch_client().read_segment("r", 0, 10))


def test_retention_by_age_without_subscribers(
    connection: Connection, scope: str, factory: Any
) -> None:
    with StreamManager(connection) as sm:
        policy = RetentionPolicy(consumption_based=False, max_age_ms=0)
        sm.create_stream(scope, "t", StreamConfiguration(retention=policy))
        write(factory, 20, stream="t")
        now = sm.connection.server_time_ms()
        wait_until(lambda: sm.connection.server_time_ms() > now)
        cut = RetentionManager(sm).apply(scope, "t")
        assert cut == StreamCut(scope, "t", {0: 20})


def test_retention_by_size_keeps_the_newest_bytes(
    connection: Connection, scope: str, factory: Any
) -> None:
    with StreamManager(connection) as sm:
        policy = RetentionPolicy(consumption_based=False, max_bytes=25)
        sm.create_stream(scope, "z", StreamConfiguration(retention=policy))
        for _ in range(5):
            with factory.create_event_writer("z", UTF8StringSerializer()) as writer:
                for _ in range(4):
                    writer.write_event("abcde", routing_key="k")  # 5 bytes each
            now = sm.connection.server_time_ms()
            wait_until(lambda now=now: sm.connection.server_time_ms() > now)
        RetentionManager(sm).apply(scope, "z")
        info = sm.get_stream_info(scope, "z")
        kept = sum((s.tail - s.head) * 5 for s in info.active_segments)
        assert kept == 20 and info.head_cut.positions[0] == 16  # the newest batch: 20 <= 25 bytes


@flavoured("sync", "async")
def test_retention_across_a_scale_keeps_what_a_group_still_needs(
    connection: Connection, scope: str, factory: Any
) -> None:
    with StreamManager(connection) as sm:
        sm.create_stream(scope, "x", StreamConfiguration(retention=RetentionPolicy()))
        write(factory, 40, stream="x")
        group(connection, scope, name="behind", stream="x", commit_mode="manual", **FAST)
        with factory.create_reader("b", "behind", UTF8StringSerializer()) as reader:
            for _ in range(10):
                reader.read_next_event(timeout=2)
            reader.commit()  # the group stands at offset 10 of segment 0
        successors = sm.scale_stream(scope, "x", [0], [(0.0, 0.5), (0.5, 1.0)])
        write(factory, 20, stream="x")
        retention = RetentionManager(sm)
        # an external subscriber that already reads the successors must not pull the cut past
        # the group, which is still in their predecessor
        retention.publish(
            scope, "x", "ahead", StreamCut(scope, "x", {successors[0]: 3, successors[1]: 2})
        )
        cut = retention.apply(scope, "x")
        assert cut == StreamCut(scope, "x", {0: 10})
        remaining = list(factory.create_batch_client().read_events("x"))
        assert len(remaining) == 30 + 20  # the group's unread 30, and every successor event
