"""Failover-safe offsets (issue 18) on a real primary/replica pair: a replica promoted before
it had the last appends must not make offsets that readers already passed name new events."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from readergroup import (
    BytesSerializer,
    ClientConfig,
    CommitRefusedError,
    DataLostError,
    EventStreamClientFactory,
    EventWriterConfig,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
)
from readergroup.client.fetcher import PARK_MIN_BLOCK
from readergroup.core.epochs import committed_divergence, diverged_at
from readergroup.core.errors import SegmentNotOwnedError
from readergroup.core.group_state import (
    AcquireSegments,
    AddReader,
    CommitPositions,
    GroupState,
    ReleaseSegments,
    RemoveReader,
    RewindPositions,
    check_invariants,
    new_group,
    state_from_wire,
    state_to_wire,
)
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import BASE_SCHEMA, SegmentPartition, read_partition
from readergroup.testing.embedded_redis import (
    LocalRedisServer,
    LocalSentinelGroup,
    local_redis_server,
    local_sentinel_group,
)
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.proxy import ReplyDroppingProxy
from tests.support.waiting import wait_until
from tests.test_hostile_reads import collect


@dataclass(frozen=True)
class Cutover:
    """The clients' stable address in front of a :func:`pair` (``front``, retargeted to the
    replica by a failover) and a client of the replica (``follower``)."""

    front: ReplyDroppingProxy
    follower: redis.Redis


@pytest.fixture
def cutover(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
) -> Iterator[Cutover]:
    front = ReplyDroppingProxy("127.0.0.1", pair[0].port)
    follower = redis.Redis(port=pair[1].port)
    try:
        yield Cutover(front, follower)
    finally:
        follower.close()
        front.close()


@pytest.fixture
def pair() -> Iterator[tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy]]:
    """A primary and a replica whose replication link runs through a proxy (to partition it)."""
    with local_redis_server() as primary, local_redis_server() as replica:
        link = ReplyDroppingProxy("127.0.0.1", primary.port)
        follower = redis.Redis(port=replica.port)
        follower.replicaof("127.0.0.1", link.port)
        wait_until(
            lambda: follower.info("replication").get("master_link_status") == "up",
            30,
            "the replica to sync",
        )
        follower.close()
        try:
            yield primary, replica, link
        finally:
            link.close()


def test_a_lossy_failover_never_reuses_offsets_a_writer_saw(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
) -> None:
    """A writer that keeps nothing to put back (``replay_window=0``) records the range the
    failover lost and appends after it."""
    primary, replica, link = pair
    front, follower = cutover.front, cutover.follower  # the clients' stable address
    with StreamManager.from_url(front.url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
    with EventStreamClientFactory.from_url("ha", front.url) as factory:
        events_key = factory.connection.keys.segment("ha", "s", 0).events
        config = EventWriterConfig(delivery_timeout=60, linger=0.02, replay_window=0)
        writer = factory.create_event_writer("s", BytesSerializer(), config)
        replicated_then_cut_off(writer, follower, events_key, link)
        primary_only(writer)
        position = 150  # a reader read everything acknowledged so far
        primary.kill()  # the primary dies; the replica, 50 events behind, takes over
        follower.replicaof("no", "one")
        front.retarget("127.0.0.1", replica.port)
        after = [writer.write_event(b"c%d" % i, "k") for i in range(200)]
        writer.flush()  # a bulk round: the native path finds the tail went back
        after += [writer.write_event(b"c%d" % i, "k") for i in range(200, 230)]
        writer.flush()
        writer.close()
        offsets = [f.result().offset for f in after]
        # no acknowledged offset names two events: the lost ones are never reused
        assert offsets == list(range(150, 380))
        batch = factory.create_batch_client()
        read = [e.payload for events in batch.read_segment("s", 0, position) for e in events]
        assert read == [b"c%d" % i for i in range(230)]  # the reader skips nothing
        # from the head: the lost range is a typed error after the events before it
        strict_batches = batch.read_segment("s", 0, 0, batch_size=64)
        assert sum(len(events) for events in itertools.islice(strict_batches, 2)) == 100
        with pytest.raises(DataLostError, match=r"offsets 100\.\.149 were lost"):
            next(strict_batches)
        skipping = batch.read_segment("s", 0, 0, fail_on_data_loss=False)
        assert [e.offset for events in skipping for e in events] == [
            *range(100),
            *range(150, 380),
        ]
        assert follower.hget(factory.connection.keys.segment("ha", "s", 0).meta, "lost") == (
            b"100-150,"
        )
    # reading across the lost range is a typed error, or skips it when asked to
    options = {"redis_url": front.url, "scope": "ha", "stream": "s"}
    strict = read_partition(SourceOptions.parse(options), BASE_SCHEMA, SegmentPartition(0, 0, 380))
    assert next(strict).num_rows == 100
    with pytest.raises(DataLostError, match=r"offsets 100\.\.149 were lost"):
        next(strict)
    lenient = SourceOptions.parse({**options, "fail_on_data_loss": "false"})
    rows = sum(
        b.num_rows for b in read_partition(lenient, BASE_SCHEMA, SegmentPartition(0, 0, 380))
    )
    assert rows == 330
    # a reader group from the head: every event that exists, the loss reported once
    results = read_from_the_head(front.url, "g", 331)
    assert_one_loss_then(
        results, [b"a%d" % i for i in range(100)] + [b"c%d" % i for i in range(230)]
    )


def reached(count: int) -> Callable[[list[Any]], bool]:
    """Whether ``count`` results (events and errors) were collected."""
    return lambda got: len(got) >= count


def replicated_then_cut_off(
    writer: Any,
    replica: redis.Redis,
    events_key: str,
    link: ReplyDroppingProxy,
    read: Callable[[], Any] = lambda: None,
) -> Any:
    """Write ``a0..a99`` and wait until the replica has them (``read()`` runs once they are
    acknowledged, e.g. a reader collecting them; its result is returned); then cut the
    replica's link (``link``): what is written next reaches the primary only."""
    for i in range(100):
        writer.write_event(b"a%d" % i, "k")
    writer.flush()
    result = read()
    wait_until(lambda: replica.xlen(events_key) == 100, 30, "the replica to sync")
    link.blackhole()
    return result


def primary_only(writer: Any) -> None:
    """Write ``b0..b49`` (on the primary only, its replica cut off): offsets 100..149."""
    acked = [writer.write_event(b"b%d" % i, "k") for i in range(50)]
    writer.flush()
    assert [f.result().offset for f in acked] == list(range(100, 150))


def read_from_the_head(url: str, group: str, count: int) -> list[Any]:
    """What one reader of a new reader group ``group`` of ``ha/s`` collects from the head, up
    to ``count`` results (events and errors)."""
    with ReaderGroupManager.from_url("ha", url) as rgm:
        rgm.create_reader_group(group, ReaderGroupConfig(streams=["ha/s"]))
    with (
        EventStreamClientFactory.from_url("ha", url) as factory,
        factory.create_reader("r", group, BytesSerializer()) as reader,
    ):
        return collect(reader, reached(count))


def stream_and_group(url: str, **config: Any) -> None:
    """The stream ``ha/s`` (one segment) and the reader group ``g`` reading it."""
    with StreamManager.from_url(url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
    with ReaderGroupManager.from_url("ha", url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=["ha/s"], **config))


def group_positions(url: str) -> dict[Any, int]:
    with ReaderGroupManager.from_url("ha", url) as rgm:
        return rgm.get_reader_group("g").refresh().positions()


def assert_one_loss_then(results: list[Any], values: list[bytes]) -> None:
    """``results`` (events and errors, as collected) are ``values`` and one report of offsets
    100..149 lost."""
    errors = [r for r in results if not isinstance(r, bytes)]
    assert [r for r in results if isinstance(r, bytes)] == values
    assert len(errors) == 1 and isinstance(errors[0], DataLostError), errors
    assert "offsets 100..149 were lost" in str(errors[0])


@flavoured_on_redis("sync", "async", long=("async",))  # 5-10 s (make test: the refused commit)
def test_a_fresh_writer_after_a_lossy_failover_skips_nothing_a_live_reader_passed(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
    open_factory: Any,
) -> None:
    """A writer that never saw the lost tail (a new process after the failover) appends at the
    offsets the promoted replica has free; a reader that had read past them finds the log
    diverged (another epoch there), reports what it had read and is gone, and reads the new
    events: none acknowledged and present is skipped."""
    primary, replica, link = pair
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url)
    config = EventWriterConfig(delivery_timeout=60, linger=0.02)
    with (
        open_factory("ha", front.url) as factory,
        factory.create_reader("r", "g", BytesSerializer()) as reader,
    ):
        events_key = factory.connection.keys.segment("ha", "s", 0).events
        with factory.create_event_writer("s", BytesSerializer(), config) as writer:
            before = replicated_then_cut_off(
                writer, follower, events_key, link, lambda: collect(reader, reached(100))
            )
            primary_only(writer)
            before += collect(reader, lambda got: len(got) >= 50)  # read past 150
        primary.kill()  # the replica, 50 events behind, takes over
        follower.replicaof("no", "one")
        front.retarget("127.0.0.1", replica.port)
        with EventStreamClientFactory.from_url("ha", front.url) as fresh:
            with fresh.create_event_writer("s", BytesSerializer(), config) as writer:
                after = [writer.write_event(b"c%d" % i, "k") for i in range(80)]
                writer.flush()
            assert [f.result().offset for f in after] == list(range(100, 180))
        results = collect(reader, lambda got: len(got) >= 81)
    assert before == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(50)]
    assert_one_loss_then(
        results, [b"c%d" % i for i in range(80)]
    )  # every acknowledged event present


def test_divergence_is_where_the_log_left_what_a_reader_read() -> None:
    history = [(0, 0), (5, 100), (9, 180)]
    assert diverged_at([(5, 120)], history, 170) is None  # still the log's epoch 5
    assert diverged_at([(5, 120)], history, 200) == 180  # epoch 5 ends at 180 in the log
    assert diverged_at([(7, 150)], history, 170) == 150  # an epoch the log never had
    assert diverged_at([(0, 10), (7, 150)], history, 170) == 100  # epoch 0 ended at 100
    assert diverged_at([(5, 110), (9, 180)], history, 400) is None  # a failover losing nothing


def test_a_position_committed_past_the_tail_reports_the_loss_and_skips_no_new_event(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
) -> None:
    """A reader commits a position on the promoted replica that its log does not reach (the
    offsets below it were lost); the next owner of the segment reports those offsets lost and
    reads from the tail, so the events a fresh writer appends there next are not skipped."""
    primary, replica, link = pair
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url)
    config = EventWriterConfig(delivery_timeout=60, linger=0.02)
    with EventStreamClientFactory.from_url("ha", front.url) as factory:
        events_key = factory.connection.keys.segment("ha", "s", 0).events
        with factory.create_reader("r1", "g", BytesSerializer()) as first:
            with factory.create_event_writer("s", BytesSerializer(), config) as writer:
                replicated_then_cut_off(
                    writer, follower, events_key, link, lambda: collect(first, reached(100))
                )
                primary_only(writer)
                collect(first, lambda got: len(got) >= 50)  # read up to 150
            primary.kill()  # the replica, 50 events behind, takes over
            follower.replicaof("no", "one")
            front.retarget("127.0.0.1", replica.port)
            # leaving gives the segment back at 150 on the promoted replica: past its tail
        with ReaderGroupManager.from_url("ha", front.url) as rgm:
            positions = rgm.get_reader_group("g").refresh().positions()
        assert positions[("ha/s", 0)] == 150
        with factory.create_reader("r2", "g", BytesSerializer()) as second:
            results = collect(second, lambda got: len(got) >= 1)  # acquired past the tail
            with EventStreamClientFactory.from_url("ha", front.url) as fresh:
                with fresh.create_event_writer("s", BytesSerializer(), config) as writer:
                    after = [writer.write_event(b"c%d" % i, "k") for i in range(30)]
                    writer.flush()
                assert [f.result().offset for f in after] == list(range(100, 130))
            results += collect(second, lambda got: len(got) >= 30)
    assert_one_loss_then(results, [b"c%d" % i for i in range(30)])


def test_a_committed_position_keeps_the_epoch_it_was_read_under() -> None:
    """Pure: positions carry the epoch of the event before them; it follows its position
    (up, or given where it was; a position moved up without one drops it), survives the
    compact form, and a rewind moves a position back only for its owner, only back."""
    seg, other = ("sc/s", 0), ("sc/s", 1)
    state = new_group("sc", "g", ReaderGroupConfig(streams=["sc/s"]), {seg: 0, other: 0}, 0)
    state = AddReader("a", 0).apply_to(state)
    state = AcquireSegments("a", 1, (seg, other), 0).apply_to(state)
    token = state.assigned[seg].token
    state = CommitPositions("a", 1, ((seg, token, 150),), ((seg, 7),)).apply_to(state)
    assert state.epochs == {seg: 7}
    state = CommitPositions("a", 1, ((seg, token, 120),), ((seg, 9),)).apply_to(state)
    assert (state.assigned[seg].position, state.epochs[seg]) == (150, 7)  # not moved: kept
    with pytest.raises(SegmentNotOwnedError):
        RewindPositions("a", 1, ((seg, token + 5, 100, 5),)).apply_to(state)
    assert RewindPositions("a", 1, ((seg, token, 160, 5),)).apply_to(state) == state
    rewound = RewindPositions("a", 1, ((seg, token, 100, 5),)).apply_to(state)
    assert (rewound.assigned[seg].position, rewound.epochs[seg]) == (100, 5)
    check_invariants(rewound)
    back = state_from_wire(state_to_wire(rewound))
    assert back.epochs == {seg: 5} and back.assigned == rewound.assigned
    form_1 = state_to_wire(rewound)[:18]  # written before positions had epochs
    form_1[0] = 1
    assert state_from_wire(form_1).epochs == {}
    released = ReleaseSegments("a", 1, ((seg, token, 130),), ((seg, 11),)).apply_to(rewound)
    assert (released.unassigned[seg], released.epochs[seg]) == (130, 11)
    older_client = CommitPositions("a", 1, ((seg, token, 140),)).apply_to(rewound)
    assert seg not in older_client.epochs  # moved up without an epoch: not known any more
    left = RemoveReader("a", 1, ((seg, 90),), 0, ((seg, 3),)).apply_to(rewound)
    assert (left.unassigned[seg], left.epochs[seg]) == (100, 5)  # given below: kept
    check_invariants(left)
    assert isinstance(left, GroupState)


def test_a_committed_epoch_the_log_ended_earlier_is_where_it_diverged() -> None:
    history = [(0, 0), (5, 100), (9, 180)]
    assert committed_divergence(5, history, 300, 170) is None
    assert committed_divergence(5, history, 300, 200) == 180
    assert committed_divergence(7, history, 300, 200) == 180  # not in the log: KIP-320
    assert committed_divergence(9, history, 190, 200) == 190  # past the tail
    assert diverged_at([(9, 185)], history, 200, tail=190) == 190


def lossy_failover(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    front: ReplyDroppingProxy,
    follower: redis.Redis,
    readers: list[Any],
) -> None:
    """100 events replicated, 50 more only on the primary and read by ``readers`` (up to
    150), then the primary dies and the replica, 50 events behind, takes over."""
    primary, _, link = pair
    config = EventWriterConfig(delivery_timeout=60, linger=0.02)
    with EventStreamClientFactory.from_url("ha", front.url) as factory:
        events_key = factory.connection.keys.segment("ha", "s", 0).events
        with factory.create_event_writer("s", BytesSerializer(), config) as writer:
            replicated_then_cut_off(
                writer,
                follower,
                events_key,
                link,
                lambda: [collect(reader, reached(100)) for reader in readers],
            )
            primary_only(writer)
            for reader in readers:
                collect(reader, lambda got: len(got) >= 50)
    primary.kill()
    follower.replicaof("no", "one")
    front.retarget("127.0.0.1", pair[1].port)


@flavoured_on_redis("sync", "async", long=("async",))  # 5-10 s (make test: the refused commit)
def test_a_writer_puts_back_what_a_lossy_failover_lost_and_readers_see_the_same_log(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
    open_factory: Any,
) -> None:
    """The writer's last 50 acknowledged events (``acks=leader``) are only on the primary
    when it dies, and a reader has read them. At its next append the writer finds the tail
    went back and appends the 50 again where they were, unchanged (entry ids and fields):
    nothing acknowledged is lost and no loss is recorded; the reader reports nothing and reads
    on with the new events; a reader from the head reads all 160 once. (Before: offsets
    100..149 recorded lost, reported to both readers, the 50 events gone.)"""
    primary, replica, link = pair
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url)
    config = EventWriterConfig(delivery_timeout=60, linger=0.02)
    with (
        open_factory("ha", front.url) as factory,
        factory.create_reader("r1", "g", BytesSerializer()) as reader,
        factory.create_event_writer("s", BytesSerializer(), config) as writer,
    ):
        keys = factory.connection.keys.segment("ha", "s", 0)
        replicated_then_cut_off(
            writer, follower, keys.events, link, lambda: collect(reader, reached(100))
        )
        primary_only(writer)
        assert collect(reader, lambda got: len(got) >= 50) == [b"b%d" % i for i in range(50)]
        with redis.Redis(port=primary.port) as old:
            lost_entries = old.xrange(keys.events, "101-0", "+")
        primary.kill()  # the replica, 50 events behind, takes over
        follower.replicaof("no", "one")
        front.retarget("127.0.0.1", replica.port)
        after = [writer.write_event(b"c%d" % i, "k") for i in range(10)]
        writer.flush()
        assert [f.result().offset for f in after] == list(range(150, 160))
        results = collect(reader, lambda got: len(got) >= 10)
        assert results == [b"c%d" % i for i in range(10)]  # no loss reported, none twice
        assert follower.xrange(keys.events, "101-0", "151-0")[:50] == lost_entries
        assert follower.hget(keys.meta, "lost") is None
    everything = read_from_the_head(front.url, "g2", 160)
    assert everything == [
        *(b"a%d" % i for i in range(100)),
        *(b"b%d" % i for i in range(50)),
        *(b"c%d" % i for i in range(10)),
    ]


def test_a_put_back_stops_at_another_writers_events_and_the_rest_is_recorded_lost(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
) -> None:
    """Two writers' events were in the range a failover lost: 100..119 of the first, 120..129
    of the second, 130..149 of the first. The first writer appends next: it puts back
    100..119 (its own, chaining from the stored tail) and stops where the second writer's
    were; 120..149 are recorded lost and its new event goes after them. A reader from the head
    reads 0..119, one report of 120..149, then the new events."""
    primary, replica, link = pair
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url)
    config = EventWriterConfig(delivery_timeout=60, linger=0.02)
    with (
        EventStreamClientFactory.from_url("ha", front.url) as factory,
        factory.create_event_writer("s", BytesSerializer(), config) as first,
        factory.create_event_writer("s", BytesSerializer(), config) as second,
    ):
        keys = factory.connection.keys.segment("ha", "s", 0)
        replicated_then_cut_off(first, follower, keys.events, link)
        for writer, prefix, count in ((first, b"b", 20), (second, b"x", 10), (first, b"c", 20)):
            for i in range(count):
                writer.write_event(prefix + b"%d" % i, "k")
            writer.flush()
        primary.kill()
        follower.replicaof("no", "one")
        front.retarget("127.0.0.1", replica.port)
        assert first.write_event(b"d0", "k").result(60).offset == 150
        assert second.write_event(b"y0", "k").result(60).offset == 151
        assert follower.hget(keys.meta, "lost") == b"120-150,"
    with (
        EventStreamClientFactory.from_url("ha", front.url) as factory,
        factory.create_reader("r", "g", BytesSerializer()) as reader,
    ):
        results = collect(reader, lambda got: len(got) >= 123)
    errors = [r for r in results if not isinstance(r, bytes)]
    assert [r for r in results if isinstance(r, bytes)] == [
        *(b"a%d" % i for i in range(100)),
        *(b"b%d" % i for i in range(20)),
        b"d0",
        b"y0",
    ]
    assert len(errors) == 1 and "offsets 120..149 were lost" in str(errors[0]), errors


def fresh_writes(url: str, prefix: bytes, count: int) -> list[int]:
    """A writer that never saw the lost tail appends ``count`` events; their offsets."""
    config = EventWriterConfig(delivery_timeout=60, linger=0.02)
    with (
        EventStreamClientFactory.from_url("ha", url) as fresh,
        fresh.create_event_writer("s", BytesSerializer(), config) as writer,
    ):
        futures = [writer.write_event(prefix + b"%d" % i, "k") for i in range(count)]
        writer.flush()
        return [f.result().offset for f in futures]


def test_a_writer_past_a_position_committed_past_the_tail_before_any_reader_is_detected(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
) -> None:
    """Item 5: the group's position (150) is past the promoted replica's tail (100), and a
    fresh writer appends 80 events (offsets 100..179) before any reader acquires the
    segment: the tail is past the position again, but the position was read under an epoch
    that ends at 100 in the log, so the next owner reports 100..149 lost and delivers all
    80 new events (before: the first 50 were skipped, unreported)."""
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url)
    with EventStreamClientFactory.from_url("ha", front.url) as factory:
        with factory.create_reader("r1", "g", BytesSerializer()) as first:
            lossy_failover(pair, front, follower, [first])
        # r1 gave the segment back at 150 (read under the lost epoch)
        assert group_positions(front.url)[("ha/s", 0)] == 150
        assert fresh_writes(front.url, b"c", 80) == list(range(100, 180))
        with factory.create_reader("r2", "g", BytesSerializer()) as second:
            results = collect(second, lambda got: len(got) >= 81)
    assert_one_loss_then(results, [b"c%d" % i for i in range(80)])


@flavoured_on_redis("sync", "async", long=("async",))  # 5-10 s (make test: the refused commit)
def test_a_live_reader_notices_a_shrunken_tail_before_the_log_reaches_its_position(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
    open_factory: Any,
) -> None:
    """Item 4: the reader read up to 150; after the failover new events go to 100..129, and
    the log never reaches 150. The reader reports 100..149 lost and delivers the 30 new
    events (before: nothing until the log reached 150). Its group position, committed at
    150, moves back to the divergence and on from there (item 3): a reader taking over
    afterwards resumes after the new events, not at 150."""
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url, session_timeout=2.0, heartbeat_interval=0.5)
    with (
        open_factory("ha", front.url) as factory,
        factory.create_reader("r1", "g", BytesSerializer()) as reader,
    ):
        lossy_failover(pair, front, follower, [reader])
        assert fresh_writes(front.url, b"c", 30) == list(range(100, 130))
        results = collect(reader, lambda got: len(got) >= 31)
        assert_one_loss_then(results, [b"c%d" % i for i in range(30)])
        reader.commit()
        assert group_positions(front.url)[("ha/s", 0)] == 130
    assert fresh_writes(front.url, b"d", 5) == list(range(130, 135))
    with (
        open_factory("ha", front.url) as factory,
        factory.create_reader("r2", "g", BytesSerializer()) as second,
    ):
        after = collect(second, lambda got: len(got) >= 5)
    assert after == [b"d%d" % i for i in range(5)]


@flavoured_on_redis("sync", "async")
def test_a_commit_the_log_no_longer_holds_is_refused(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
    open_factory: Any,
) -> None:
    """Item 1: after the failover the reader commits (manually) the 150 events it read;
    the log holds 100: the commit is refused (typed, retriable; the group's position is not
    moved past the log), the next read reports 100..149 lost, and reading goes on at 100."""
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url, commit_mode="manual")
    with (
        open_factory("ha", front.url) as factory,
        factory.create_reader("r1", "g", BytesSerializer()) as reader,
    ):
        lossy_failover(pair, front, follower, [reader])
        with pytest.raises(CommitRefusedError, match=r"ha/s/0 at 150 \(its log diverged at 100"):
            reader.commit()
        assert group_positions(front.url)[("ha/s", 0)] <= 100
        assert fresh_writes(front.url, b"c", 3) == [100, 101, 102]
        results = collect(reader, lambda got: len(got) >= 4)
    assert isinstance(results[0], DataLostError), results
    assert "offsets 100..149 were lost" in str(results[0])
    assert results[1:] == [b"c0", b"c1", b"c2"]


@pytest.mark.long  # about 12 s: waits out a shrunk-log grace (make test-long; CI runs both)
def test_a_retry_appending_the_lost_tail_again_is_neither_reported_lost_nor_read_twice(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
) -> None:
    """A writer's last 50 events (acks=replicas=1) land on the primary only, unacknowledged,
    and the reader reads them (up to 150); the primary dies. The promoted replica's log is
    only shorter (100) when the reader commits 150: the commit is refused (typed, retriable)
    and nothing is reported yet. The writer's retry then appends the same 50 events at
    100..149 under the new epoch: the reader reports no loss, hands none of them out again
    and reads on; the commit goes through (before: 100..149 were reported lost at once and
    then handed out twice, out of order within one ownership)."""
    primary, replica, link = pair
    front = ReplyDroppingProxy("127.0.0.1", primary.port)  # the reader's stable address
    writer_front = ReplyDroppingProxy("127.0.0.1", primary.port)  # the writer's
    follower = redis.Redis(port=replica.port)
    key = ("ha/s", 0)
    try:
        stream_and_group(front.url, commit_mode="manual")
        acks = ClientConfig(acks="replicas=1", ack_timeout=0.5, socket_timeout=2.0)
        config = EventWriterConfig(delivery_timeout=20, linger=0.02)
        with (
            local_redis_server() as spare,
            EventStreamClientFactory.from_url("ha", front.url) as factory,
            factory.create_reader("r1", "g", BytesSerializer()) as reader,
            EventStreamClientFactory.from_url("ha", writer_front.url, acks) as writing,
        ):
            writer = writing.create_event_writer("s", BytesSerializer(), config)
            first = [writer.write_event(b"a%d" % i, "k") for i in range(100)]
            assert [f.result(30).offset for f in first] == list(range(100))
            before = collect(reader, lambda got: len(got) >= 100)
            link.blackhole()  # the replica falls behind: the next events are not acknowledged
            retried = [writer.write_event(b"b%d" % i, "k") for i in range(50)]
            before += collect(reader, lambda got: len(got) >= 50)  # read on the primary
            writer_front.blackhole()  # the writer's retries reach no one until the failover
            primary.kill()
            follower.replicaof("no", "one")
            front.retarget("127.0.0.1", replica.port)
            refused: list[CommitRefusedError] = []
            try:
                reader.commit()
            except CommitRefusedError as exc:
                refused.append(exc)
            refused_at = group_positions(front.url)[key]
            owned = reader._fetcher.owned[key]
            held = collect(reader, lambda got: bool(got) or owned.short_since is not None)
            # the writer's retry lands on the promoted replica (which has a replica again)
            redis.Redis(port=spare.port).replicaof("127.0.0.1", replica.port)
            writer_front.retarget("127.0.0.1", replica.port)
            writer_front.blackhole(False)
            for future in retried:
                future.result(30)  # acknowledged (a retry of a batch that landed: no offsets)
            events_key = factory.connection.keys.segment("ha", "s", 0).events
            assert follower.xlen(events_key) == 150  # the same 50 again, at 100..149
            after = [writer.write_event(b"c%d" % i, "k") for i in range(10)]
            for future in after:  # (offsets -1 when a retry after an ack timeout found them)
                future.result(30)
            assert follower.xlen(events_key) == 160  # c0..c9 at 150..159, each once
            results = held + collect(reader, lambda got: len(got) >= 10)
            reader.commit()
            committed = group_positions(front.url)[key]
            writer.close()
        assert before == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(50)]
        assert results == [b"c%d" % i for i in range(10)]  # no loss reported, nothing twice
        assert len(refused) == 1 and refused[0].retriable, refused
        assert refused[0].refused == {key: (150, 100)} and refused_at <= 100
        assert committed == 160
    finally:
        follower.close()
        front.close()
        writer_front.close()


def test_a_shorter_log_no_retry_fills_is_reported_lost_after_the_grace(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
    cutover: Cutover,
) -> None:
    """The log stays only shorter (no writer appends after the failover): once
    ``shrunk_log_grace`` has passed, the reader reports 100..149 lost, moves the group's
    position back to 100 and reads the events appended there later."""
    front, follower = cutover.front, cutover.follower
    stream_and_group(front.url, commit_mode="manual")
    with (
        EventStreamClientFactory.from_url("ha", front.url) as factory,
        factory.create_reader(
            "r1", "g", BytesSerializer(), ReaderConfig(shrunk_log_grace=0.5)
        ) as reader,
    ):
        lossy_failover(pair, front, follower, [reader])
        with pytest.raises(CommitRefusedError):
            reader.commit()  # (and the reading thread looks at the log at once)
        results = collect(reader, lambda got: len(got) >= 1)
        assert len(results) == 1 and isinstance(results[0], DataLostError), results
        assert "offsets 100..149 were lost" in str(results[0])
        assert fresh_writes(front.url, b"c", 3) == [100, 101, 102]
        results = collect(reader, lambda got: len(got) >= 3)
        reader.commit()
        assert results == [b"c0", b"c1", b"c2"]
        assert group_positions(front.url)[("ha/s", 0)] == 103


def collect_unparked(reader: Any, until: Any, timeout: float = 30.0) -> list[Any]:
    """As :func:`collect`, with reads too short to park an ``XREAD`` (below
    ``PARK_MIN_BLOCK``): none stays in flight on a connection between two reads."""
    results: list[Any] = []

    def step() -> bool:
        try:
            results.extend(e.event for e in reader.read_batch(100, timeout=PARK_MIN_BLOCK * 0.8))
        except DataLostError as exc:
            results.append(exc)
        return bool(until(results))

    wait_until(step, timeout, "reading")
    return results


def named_by_all(sentinels: LocalSentinelGroup) -> set[int]:
    """The ports of the primaries the Sentinels name (one once they all know of a switch)."""
    named = set()
    for port in sentinels.sentinel_ports:
        with redis.Redis(port=port, decode_responses=True) as sentinel:
            named.add(int(sentinel.sentinel_get_master_addr_by_name(sentinels.service)[1]))
    return named


@pytest.mark.long  # about 15 s: a Sentinel group and a forced failover (make test-long)
@pytest.mark.redis
@flavoured_on_redis("sync", "async")
def test_a_reader_that_lost_no_connection_notices_a_lossy_sentinel_failover(
    caplog: pytest.LogCaptureFixture, open_factory: Any
) -> None:
    """Item 4, when the failover breaks no connection of the reader: it read up to 150 and
    had no read in flight when the Sentinels promoted a replica 50 events behind, so its pool
    only closed idle connections and its next read went to the new primary without an error
    (no outage to end). A fresh writer then appends 100..129 there, below the reader's position.
    The reader reports 100..149 lost and delivers the new events within its session (before:
    only at the idle check, 3 session timeouts = 90 s here, or when the log reached 150)."""
    links: list[ReplyDroppingProxy] = []

    def relay(port: int) -> int:
        links.append(ReplyDroppingProxy("127.0.0.1", port))
        return links[-1].port

    caplog.set_level(logging.INFO, logger="readergroup.client.fetcher")
    try:
        with local_sentinel_group(replicas=1, relay=relay) as sentinels:
            url = sentinels.url
            stream_and_group(
                url, session_timeout=30.0, heartbeat_interval=0.5, commit_mode="manual"
            )  # (no commit: the group log loses nothing, which a reader would notice too)
            config = EventWriterConfig(delivery_timeout=60, linger=0.02)
            with (
                contextlib.ExitStack() as stack,
                open_factory("ha", url) as factory,
                factory.create_reader("r1", "g", BytesSerializer()) as reader,
            ):
                events_key = factory.connection.keys.segment("ha", "s", 0).events
                replica = stack.enter_context(redis.Redis(port=sentinels.replicas[0].port))
                with factory.create_event_writer("s", BytesSerializer(), config) as writer:
                    replicated_then_cut_off(
                        writer,
                        replica,
                        events_key,
                        links[0],
                        lambda: collect_unparked(reader, reached(100)),
                    )
                    primary_only(writer)
                collect_unparked(reader, lambda got: len(got) >= 50)
                promoted = sentinels.failover()  # nothing of the reader's is in flight
                wait_until(lambda: named_by_all(sentinels) == {promoted}, 30, "the Sentinels")
                assert fresh_writes(url, b"c", 30) == list(range(100, 130))
                results = collect_unparked(reader, lambda got: len(got) >= 31)
            assert_one_loss_then(results, [b"c%d" % i for i in range(30)])
        fetcher_said = [r.getMessage() for r in caplog.records if r.name.endswith("fetcher")]
        assert any("learned of a primary switch" in said for said in fetcher_said)
        assert not any("Redis unreachable" in said for said in fetcher_said), fetcher_said
    finally:
        for link in links:
            link.close()
