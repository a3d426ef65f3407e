"""Failover-safe offsets (issue 18) on a real primary/replica pair: a replica promoted before
it had the last appends must not make offsets that readers already passed name new events."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from readergroup import (
    BytesSerializer,
    DataLostError,
    EventStreamClientFactory,
    EventWriterConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
)
from readergroup.core.epochs import diverged_at
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import BASE_SCHEMA, SegmentPartition, read_partition
from readergroup.testing.embedded_redis import LocalRedisServer, local_redis_server
from tests.support.proxy import ReplyDroppingProxy
from tests.support.waiting import wait_until
from tests.test_hostile_reads import collect


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
) -> None:
    primary, replica, link = pair
    front = ReplyDroppingProxy("127.0.0.1", primary.port)  # the clients' stable address
    follower = redis.Redis(port=replica.port)
    try:
        with StreamManager.from_url(front.url) as sm:
            sm.create_scope("ha")
            sm.create_stream("ha", "s")
        with EventStreamClientFactory.from_url("ha", front.url) as factory:
            events_key = factory.connection.keys.segment("ha", "s", 0).events
            config = EventWriterConfig(delivery_timeout=60, linger=0.02)
            writer = factory.create_event_writer("s", BytesSerializer(), config)
            for i in range(100):
                writer.write_event(b"a%d" % i, "k")
            writer.flush()
            wait_until(lambda: follower.xlen(events_key) == 100, 30, "the replica to have 100")
            link.blackhole()  # the replica falls behind
            acked = [writer.write_event(b"b%d" % i, "k") for i in range(50)]
            writer.flush()
            assert [f.result().offset for f in acked] == list(range(100, 150))
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
        strict = read_partition(
            SourceOptions.parse(options), BASE_SCHEMA, SegmentPartition(0, 0, 380)
        )
        assert next(strict).num_rows == 100
        with pytest.raises(DataLostError, match=r"offsets 100\.\.149 were lost"):
            next(strict)
        lenient = SourceOptions.parse({**options, "fail_on_data_loss": "false"})
        rows = sum(
            b.num_rows for b in read_partition(lenient, BASE_SCHEMA, SegmentPartition(0, 0, 380))
        )
        assert rows == 330
        # a reader group from the head: every event that exists, the loss reported once
        with ReaderGroupManager.from_url("ha", front.url) as rgm:
            rgm.create_reader_group("g", ReaderGroupConfig(streams=["ha/s"]))
        with (
            EventStreamClientFactory.from_url("ha", front.url) as factory,
            factory.create_reader("r", "g", BytesSerializer()) as reader,
        ):
            results = collect(reader, lambda got: len(got) >= 331)
        values = [r for r in results if isinstance(r, bytes)]
        errors = [r for r in results if not isinstance(r, bytes)]
        assert values == [b"a%d" % i for i in range(100)] + [b"c%d" % i for i in range(230)]
        assert len(errors) == 1 and isinstance(errors[0], DataLostError)
        assert "offsets 100..149 were lost" in str(errors[0])
    finally:
        follower.close()
        front.close()


def stream_and_group(url: str) -> None:
    """The stream ``ha/s`` (one segment) and the reader group ``g`` reading it."""
    with StreamManager.from_url(url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
    with ReaderGroupManager.from_url("ha", url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=["ha/s"]))


def test_a_fresh_writer_after_a_lossy_failover_skips_nothing_a_live_reader_passed(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
) -> None:
    """A writer that never saw the lost tail (a new process after the failover) appends at the
    offsets the promoted replica has free; a reader that had read past them finds the log
    diverged (another epoch there), reports what it had read and is gone, and reads the new
    events: none acknowledged and present is skipped."""
    primary, replica, link = pair
    front = ReplyDroppingProxy("127.0.0.1", primary.port)
    follower = redis.Redis(port=replica.port)
    try:
        stream_and_group(front.url)
        config = EventWriterConfig(delivery_timeout=60, linger=0.02)
        with (
            EventStreamClientFactory.from_url("ha", front.url) as factory,
            factory.create_reader("r", "g", BytesSerializer()) as reader,
        ):
            events_key = factory.connection.keys.segment("ha", "s", 0).events
            with factory.create_event_writer("s", BytesSerializer(), config) as writer:
                for i in range(100):
                    writer.write_event(b"a%d" % i, "k")
                writer.flush()
                before = collect(reader, lambda got: len(got) >= 100)
                wait_until(lambda: follower.xlen(events_key) == 100, 30, "the replica to sync")
                link.blackhole()  # the replica falls behind
                acked = [writer.write_event(b"b%d" % i, "k") for i in range(50)]
                writer.flush()
                assert [f.result().offset for f in acked] == list(range(100, 150))
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
        values = [r for r in results if isinstance(r, bytes)]
        errors = [r for r in results if not isinstance(r, bytes)]
        assert values == [b"c%d" % i for i in range(80)]  # every acknowledged event present
        assert len(errors) == 1 and isinstance(errors[0], DataLostError), errors
        assert "offsets 100..149 were lost" in str(errors[0])
    finally:
        follower.close()
        front.close()


def test_divergence_is_where_the_log_left_what_a_reader_read() -> None:
    history = [(0, 0), (5, 100), (9, 180)]
    assert diverged_at([(5, 120)], history, 170) is None  # still the log's epoch 5
    assert diverged_at([(5, 120)], history, 200) == 180  # epoch 5 ends at 180 in the log
    assert diverged_at([(7, 150)], history, 170) == 150  # an epoch the log never had
    assert diverged_at([(0, 10), (7, 150)], history, 170) == 100  # epoch 0 ended at 100
    assert diverged_at([(5, 110), (9, 180)], history, 400) is None  # a failover losing nothing


def test_a_position_committed_past_the_tail_reports_the_loss_and_skips_no_new_event(
    pair: tuple[LocalRedisServer, LocalRedisServer, ReplyDroppingProxy],
) -> None:
    """A reader commits a position on the promoted replica that its log does not reach (the
    offsets below it were lost); the next owner of the segment reports those offsets lost and
    reads from the tail, so the events a fresh writer appends there next are not skipped."""
    primary, replica, link = pair
    front = ReplyDroppingProxy("127.0.0.1", primary.port)
    follower = redis.Redis(port=replica.port)
    try:
        stream_and_group(front.url)
        config = EventWriterConfig(delivery_timeout=60, linger=0.02)
        with EventStreamClientFactory.from_url("ha", front.url) as factory:
            events_key = factory.connection.keys.segment("ha", "s", 0).events
            with factory.create_reader("r1", "g", BytesSerializer()) as first:
                with factory.create_event_writer("s", BytesSerializer(), config) as writer:
                    for i in range(100):
                        writer.write_event(b"a%d" % i, "k")
                    writer.flush()
                    collect(first, lambda got: len(got) >= 100)
                    wait_until(lambda: follower.xlen(events_key) == 100, 30, "the replica")
                    link.blackhole()  # the replica falls behind
                    for i in range(50):
                        writer.write_event(b"b%d" % i, "k")
                    writer.flush()
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
        values = [r for r in results if isinstance(r, bytes)]
        errors = [r for r in results if not isinstance(r, bytes)]
        assert values == [b"c%d" % i for i in range(30)]
        assert len(errors) == 1 and isinstance(errors[0], DataLostError), errors
        assert "offsets 100..149 were lost" in str(errors[0])
    finally:
        follower.close()
        front.close()
