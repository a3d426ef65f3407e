"""Nothing left behind (issue 34 item 8): deleting a stream or a scope deletes every key of it
(its transactions too, issue 31),
so a name created again starts clean; and a published cut that does not fit its stream is a
warning naming it, never a crash of retention."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
import redis

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.client.transactions import TransactionalWriterConfig
from readergroup.storage.connection import RedisConnection
from readergroup.testing.embedded_redis import LocalRedisServer, local_redis_server

SCOPES, STREAMS = 5, 4
FAST = {"heartbeat_interval": 0.2, "session_timeout": 2.0, "group_refresh_time": 0.05}
CONFIG = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), retention=RetentionPolicy())


@pytest.fixture
def server() -> Iterator[LocalRedisServer]:
    with local_redis_server() as local:
        yield local


def write(factory: EventStreamClientFactory, stream: str, count: int, tag: str) -> None:
    with factory.create_event_writer(stream, UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"{tag}{i}", routing_key=f"k{i}")
        writer.flush()


def split(sm: StreamManager, scope: str, stream: str) -> None:
    """Split the stream's last active segment in two."""
    segment = sm.get_stream_info(scope, stream).active_segments[-1]
    middle = (segment.low + segment.high) / 2
    sm.scale_stream(
        scope, stream, [segment.segment_id], [(segment.low, middle), (middle, segment.high)]
    )


def stage_and_commit(url: str, scope: str, stream: str) -> None:
    """What the Spark sink does: stage events, commit the job once, drop the staging list."""
    connection = RedisConnection.from_url(url)
    try:
        key = connection.staging.staging_key(scope, stream, "job1", 0, "p1")
        connection.staging.stage(key, [("k", b"v", 1)], 60)
        connection.staging.commit_staged(scope, stream, "job1", [(0, key)])
        connection.staging.discard([key])
    finally:
        connection.close()


def use_transactions(factory: EventStreamClientFactory, stream: str) -> None:
    """A committed, an aborted and an open transaction (issue 31)."""
    writer = factory.create_transactional_writer(
        stream, UTF8StringSerializer(), TransactionalWriterConfig(transactional_id="t")
    )
    for end in ("commit", "abort", "leave open"):
        txn = writer.begin()
        txn.write_event(end, routing_key="k")
        txn.flush()
        if end != "leave open":
            getattr(txn, end)()


def use_scope(url: str, scope: str) -> None:
    """Streams (one split, one written by a Spark sink's job), events, a group read by a
    reader, a checkpoint, subscribers."""
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        streams = [f"t{j}" for j in range(STREAMS)]
        for stream in streams:
            sm.create_stream(scope, stream, CONFIG)
        with EventStreamClientFactory.from_url(scope, url) as factory:
            for stream in streams:
                write(factory, stream, 6, "a")
            stage_and_commit(url, scope, streams[1])
            use_transactions(factory, streams[2])
            split(sm, scope, streams[0])
            write(factory, streams[0], 6, "b")
            with ReaderGroupManager.from_url(scope, url) as rgm:
                names = [f"{scope}/{s}" for s in streams]
                rgm.create_reader_group("g", ReaderGroupConfig(streams=names, **FAST))
                with factory.create_reader("r1", "g", UTF8StringSerializer()) as reader:
                    reader.read_batch(100, timeout=0.3)
                    reader.commit()
                assert rgm.get_reader_group("g").initiate_checkpoint("cp", timeout=5).positions
                retention = RetentionManager(sm)
                for stream in streams:
                    retention.publish(scope, stream, "ext", sm.tail_cut(scope, stream))
                    retention.apply(scope, stream)


def delete_scope(url: str, scope: str) -> None:
    with StreamManager.from_url(url) as sm, ReaderGroupManager.from_url(scope, url) as rgm:
        for group in rgm.list_reader_groups():
            rgm.delete_reader_group(group)
        for stream in sm.list_streams(scope):
            sm.seal_stream(scope, stream)
            sm.delete_stream(scope, stream)
        sm.delete_scope(scope)


def test_deleting_scopes_and_streams_leaves_no_key_and_names_start_clean(
    server: LocalRedisServer,
) -> None:
    url = server.url
    tag = uuid.uuid4().hex[:6]
    scopes = [f"h{tag}{i}" for i in range(SCOPES)]
    for scope in scopes:
        use_scope(url, scope)
    for scope in scopes:
        delete_scope(url, scope)
    root = redis.Redis.from_url(url)
    left = sorted(k.decode() for k in root.scan_iter(count=1000) if tag.encode() in k)
    assert left == [], left
    # the same names again: nothing of the old streams shows through
    scope = scopes[0]
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "t0", CONFIG)
        with EventStreamClientFactory.from_url(scope, url) as factory:
            write(factory, "t0", 30, "new")
        retention = RetentionManager(sm)
        assert retention.subscriber_cuts(scope, "t0") == {}  # no old cut truncates it
        with ReaderGroupManager.from_url(scope, url) as rgm:
            rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/t0"], **FAST))
            assert list(retention.subscriber_cuts(scope, "t0")) == [f"group:{scope}/g"]
            assert retention.apply(scope, "t0") is None  # the new group needs everything
        assert sm.get_stream_info(scope, "t0").active_segments[0].segment_id == 0
        assert sm.head_cut(scope, "t0").positions == {0: 0}
    root.close()


def test_a_published_cut_that_does_not_fit_the_stream_is_a_warning_not_a_crash(
    server: LocalRedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = server.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("x")
        sm.create_stream("x", "t", CONFIG)
        with EventStreamClientFactory.from_url("x", url) as factory:
            write(factory, "t", 10, "e")
        stale = StreamCut("x", "t", {4294967297: 3, 4294967298: 5})  # of a split stream
        retention = RetentionManager(sm)
        retention.publish("x", "t", "old", stale)
        with caplog.at_level(logging.WARNING):
            assert retention.apply("x", "t") is None  # held back: nothing deleted
        assert sm.head_cut("x", "t").positions == {0: 0}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("old" in m and "x/t" in m for m in warned), warned
