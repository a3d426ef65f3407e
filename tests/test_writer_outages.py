"""Writers in outages and against hostile keys (issue 13, items 5-7), on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    EventWriterConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.errors import ReaderGroupError
from readergroup.core.routing import key_position, segment_name

FOUR = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))


def test_stale_metadata_during_an_outage_is_retried_not_failed(private_redis: Any) -> None:
    """Item 5: with the metadata cache expired (ttl 0) when Redis stops, the refresh is retried
    within delivery_timeout like the append itself; the event lands once Redis is back."""
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("x")
        sm.create_stream("x", "s")
    expired = ClientConfig(metadata_ttl=0.0)
    config = EventWriterConfig(delivery_timeout=60.0)
    with EventStreamClientFactory.from_url("x", private_redis.url, expired) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer(), config)
        writer.write_event("before", routing_key="k").result(10)
        private_redis.stop()
        during = writer.write_event("during", routing_key="k")
        with pytest.raises(TimeoutError):  # still being retried: neither acked nor failed
            during.result(timeout=1.0)
        private_redis.start()
        pointer = during.result(timeout=30)
        writer.close()
        payloads = [e.payload for e in factory.create_batch_client().read_events("s")]
    assert payloads == [b"before", b"during"] and pointer.offset == 1


def test_a_hostile_segment_fails_only_its_own_events(redis_url: str, scope: str) -> None:
    """Item 6: one segment's meta key of the wrong type fails that segment's events only, with
    an error naming it; every other event of the round is acknowledged, and exactly the
    acknowledged events are in Redis."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", FOUR)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        ranges = factory.metadata.get(scope, "s").range_map()
        bad = ranges.segment_at(key_position("k0"))
        meta, _, _ = factory.connection.keys.segment(scope, "s", bad)
        raw = redis.Redis.from_url(redis_url)
        raw.delete(meta)
        raw.set(meta, "not a hash")  # hostile: the wrong type
        writer = factory.create_event_writer(
            "s", UTF8StringSerializer(), EventWriterConfig(linger=0.2)
        )
        futures = {f"k{i}": writer.write_event(f"e{i}", routing_key=f"k{i}") for i in range(40)}
        with pytest.raises(ReaderGroupError):
            writer.flush(timeout=30)
        failed = {key for key, f in futures.items() if f.exception() is not None}
        expected = {key for key in futures if ranges.segment_at(key_position(key)) == bad}
        assert failed == expected and 0 < len(failed) < 40
        for key in failed:
            error = futures[key].exception()
            assert isinstance(error, ReaderGroupError) and not error.retriable
            assert segment_name(scope, "s", bad) in str(error)
        raw.delete(meta)  # repair, so the healthy segments can be read back
        factory.connection.segments.create_segments(scope, "s", [bad], 0)
        writer.close()
        landed = {e.routing_key for e in factory.create_batch_client().read_events("s")}
    assert landed == set(futures) - failed


def test_a_writer_adopts_a_stream_recreated_after_redis_lost_its_data(
    private_redis: Any,
) -> None:
    """Item 7: Redis loses everything (FLUSHALL); the application re-runs its idempotent set-up.
    A write made in between is retried until the stream is back, and the writer reloads the
    re-created stream's metadata by itself (no "call resync()" failures)."""
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("x")
        sm.create_stream("x", "s", FOUR)
    expired = ClientConfig(metadata_ttl=0.0)
    with EventStreamClientFactory.from_url("x", private_redis.url, expired) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("before", routing_key="k").result(10)
        redis.Redis.from_url(private_redis.url).flushall()  # the server lost its data
        during = writer.write_event("during", routing_key="k")
        with pytest.raises(TimeoutError):  # retried while the stream does not exist
            during.result(timeout=0.5)
        with StreamManager.from_url(private_redis.url) as sm:  # the idempotent set-up again
            sm.create_scope("x")
            sm.create_stream("x", "s", FOUR)
        during.result(timeout=30)
        after = [writer.write_event(f"after{i}", routing_key=f"k{i}") for i in range(20)]
        writer.flush(timeout=30)
        assert all(f.exception() is None for f in after)
        writer.close()
        payloads = {e.payload for e in factory.create_batch_client().read_events("s")}
    assert payloads == {b"during", *(f"after{i}".encode() for i in range(20))}
