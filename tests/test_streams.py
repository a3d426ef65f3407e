"""Streams on a real Redis: scopes, writers, routing, scaling, cuts, truncation, limits."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from readergroup import (
    BytesSerializer,
    ClientConfig,
    EventStreamClientFactory,
    EventTooLargeError,
    EventWriterConfig,
    InvalidKeyRangesError,
    InvalidNameError,
    InvalidStreamCutError,
    JsonSerializer,
    ScaleConflictError,
    ScalingPolicy,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SerializationError,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    TruncatedDataError,
    UTF8StringSerializer,
    WriteFailedError,
)
from readergroup.admin.autoscale import AutoScaler
from readergroup.core.routing import key_position
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from tests.support.async_managers import FLAVOURS, make_managers
from tests.support.proxy import ReplyDroppingProxy
from tests.support.waiting import wait_until

FOUR = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))


@pytest.fixture(params=FLAVOURS)
def each_manager(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Any]:
    """The threaded StreamManager, or the asyncio one behind a blocking adapter (the same
    procedures: the same results and errors), on the suite's Redis."""
    closers: list[Callable[[], None]] = []
    connection = RedisConnection.from_url(redis_url)
    try:
        yield make_managers(request.param, connection, "unused", redis_url, closers)[0]
    finally:
        while closers:
            closers.pop()()
        connection.close()


def test_the_documented_usage(redis_url: str, scope: str) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_scope(scope)
        sm.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
        )
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("orders", UTF8StringSerializer())
        pointer = writer.write_event("hello", routing_key="customer-7").result(timeout=5)
        writer.flush()
        writer.close()
        events = list(factory.create_batch_client().read_events("orders"))
    assert [(e.payload, e.routing_key) for e in events] == [(b"hello", "customer-7")]
    assert (
        (events[0].segment, events[0].offset)
        == (pointer.segment, pointer.offset)
        == (events[0].segment, 0)
    )


def test_scopes_and_streams_lifecycle(each_manager: Any, redis_url: str) -> None:
    scope = f"lc{time.monotonic_ns()}"
    assert each_manager.create_scope(scope) is True
    assert each_manager.create_scope(scope) is False
    assert scope in each_manager.list_scopes()
    assert each_manager.create_stream(scope, "a", FOUR) is True
    assert each_manager.create_stream(scope, "a") is False
    assert each_manager.list_streams(scope) == ["a"]
    with pytest.raises(ScopeNotEmptyError):
        each_manager.delete_scope(scope)
    with pytest.raises(StreamNotSealedError):
        each_manager.delete_stream(scope, "a")
    assert each_manager.seal_stream(scope, "a") is True
    assert each_manager.seal_stream(scope, "a") is False
    assert each_manager.delete_stream(scope, "a") is True
    assert each_manager.delete_stream(scope, "a") is False
    assert each_manager.delete_scope(scope) is True
    assert scope not in each_manager.list_scopes()
    leftovers = redis.Redis.from_url(redis_url).keys(f"rg:{{{scope}/*")
    assert leftovers == []


def test_bad_names_and_missing_things_are_specific_errors(each_manager: Any, scope: str) -> None:
    with pytest.raises(InvalidNameError):
        each_manager.create_scope("bad/scope")
    with pytest.raises(InvalidNameError):
        each_manager.create_stream(scope, "bad name")
    with pytest.raises(ScopeNotFoundError):
        each_manager.create_stream("no-such-scope-x", "s")
    with pytest.raises(StreamNotFoundError):
        each_manager.get_stream_info(scope, "missing")
    assert each_manager.list_streams(scope) == []  # nothing was created by the failures


def test_stream_info_reports_segments_cuts_and_sizes(
    each_manager: Any, redis_url: str, scope: str
) -> None:
    each_manager.create_stream(scope, "s", FOUR)
    with (
        EventStreamClientFactory.from_url(scope, redis_url) as factory,
        factory.create_event_writer("s", BytesSerializer()) as writer,
    ):
        for i in range(100):
            writer.write_event(b"x" * 10, routing_key=f"k{i}")
    info = each_manager.get_stream_info(scope, "s")
    assert info.epoch == 0 and not info.sealed
    assert [(s.low, s.high) for s in info.active_segments] == [
        (0.0, 0.25),
        (0.25, 0.5),
        (0.5, 0.75),
        (0.75, 1.0),
    ]
    assert sum(s.tail for s in info.active_segments) == 100 == info.events
    assert sum(s.bytes for s in info.active_segments) == 1000
    assert info.head_cut.positions == {s.segment_id: 0 for s in info.active_segments}
    assert info.tail_cut.positions == {s.segment_id: s.tail for s in info.active_segments}


def test_routing_keys_land_in_their_key_range(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s", FOUR)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(400):
                writer.write_event(f"e{i}", routing_key=f"key-{i % 40}")
            for i in range(400):
                writer.write_event(f"free{i}")  # no key: spread
        events = list(factory.create_batch_client().read_events("s"))
    ranges = {
        s.segment_id: (s.low, s.high) for s in manager.get_stream_info(scope, "s").active_segments
    }
    segments_of_key: dict[str, set[int]] = defaultdict(set)
    keyless = defaultdict(int)
    for event in events:
        low, high = ranges[event.segment]
        if event.routing_key is None:
            keyless[event.segment] += 1
        else:
            assert low <= key_position(event.routing_key) < high
            segments_of_key[event.routing_key].add(event.segment)
    assert all(len(s) == 1 for s in segments_of_key.values())
    assert len(keyless) == 4 and min(keyless.values()) > 50  # 400 keyless events spread over 4


def test_per_key_order_across_a_split_then_a_merge_with_concurrent_writers(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    writers, keys, per_key = 3, 12, 150
    progress = [0] * writers
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            with EventStreamClientFactory.from_url(scope, redis_url) as factory:
                writer = factory.create_event_writer("s", JsonSerializer())
                for seq in range(per_key):
                    for key in range(keys):
                        writer.write_event(
                            {"w": index, "k": key, "n": seq}, routing_key=f"key{key}"
                        )
                    progress[index] = seq
                    if seq % 10 == 0:
                        writer.flush()
                writer.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    wait_until(lambda: min(progress) >= 30)
    first, second = [s.segment_id for s in manager.get_stream_info(scope, "s").active_segments]
    split = manager.scale_stream(scope, "s", [first], [(0.0, 0.25), (0.25, 0.5)])
    wait_until(lambda: min(progress) >= 90)
    merged = manager.scale_stream(scope, "s", [split[1], second], [(0.25, 1.0)])
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        events = list(factory.create_batch_client().read_events("s"))
    decoded = [JsonSerializer().deserialize(e.payload) for e in events]
    seen: dict[tuple[int, int], list[int]] = defaultdict(list)
    for item in decoded:
        seen[(item["w"], item["k"])].append(item["n"])
    assert len(seen) == writers * keys
    for sequence in seen.values():
        assert sequence == list(range(per_key))  # in write order, nothing lost, no duplicate
    info = manager.get_stream_info(scope, "s")
    assert info.epoch == 2
    assert {s.segment_id for s in info.active_segments} == {split[0], merged[0]}
    landed = {e.segment for e in events}
    assert {first, second, *split, *merged} <= landed  # every generation took writes


def test_a_writer_with_stale_metadata_is_rerouted_to_successors(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        first = writer.write_event("before", routing_key="k").result(5)
        successors = manager.scale_stream(scope, "s", [first.segment], [(0.0, 0.5), (0.5, 1.0)])
        after = writer.write_event("after", routing_key="k").result(5)  # cache still says seg 0
        writer.close()
    assert first.segment == 0 and after.segment in successors
    state = manager.get_stream_info(scope, "s")
    assert all(not s.sealed for s in state.active_segments)
    assert manager.segment_states(scope, "s", [0])[0].sealed


def test_time_cuts_split_events_by_server_time(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s", FOUR)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(50):
                writer.write_event(f"old{i}", routing_key=str(i))
        boundary = manager.connection.server_time_ms() + 1
        wait_until(lambda: manager.connection.server_time_ms() > boundary)
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(30):
                writer.write_event(f"new{i}", routing_key=str(i))
        cut = manager.cut_at_time(scope, "s", boundary)
        newer = list(factory.create_batch_client().read_events("s", start=cut))
        older = list(factory.create_batch_client().read_events("s", end=cut))
    assert sorted(e.payload for e in newer) == sorted(f"new{i}".encode() for i in range(30))
    assert len(older) == 50 and all(e.payload.startswith(b"old") for e in older)


def test_truncation_deletes_data_before_the_cut_and_moves_the_head(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(10):
                writer.write_event(f"a{i}", routing_key="k")
        succ = manager.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(20):
                writer.write_event(f"b{i}", routing_key=f"k{i}")
        tails = manager.segment_states(scope, "s", succ)
        cut = StreamCut(scope, "s", {succ[0]: 1, succ[1]: 1})
        manager.truncate_stream(scope, "s", cut)
        info = manager.get_stream_info(scope, "s")
        assert info.head_cut == cut
        remaining = list(factory.create_batch_client().read_events("s"))
        assert len(remaining) == sum(t.tail for t in tails.values()) - 2
        batch = factory.create_batch_client()
        with pytest.raises(TruncatedDataError, match="below the head 1"):
            list(batch.read_segment("s", succ[0], 0))
        client = redis.Redis.from_url(redis_url)
        assert client.exists(manager.connection.keys.segment(scope, "s", 0)[1]) == 0
        with pytest.raises(InvalidStreamCutError, match="behind"):
            manager.truncate_stream(scope, "s", StreamCut(scope, "s", {succ[0]: 0, succ[1]: 1}))


def test_bad_cuts_are_refused(each_manager: Any, scope: str) -> None:
    each_manager.create_stream(scope, "s", FOUR)
    with pytest.raises(InvalidStreamCutError, match="cover"):
        each_manager.truncate_stream(scope, "s", StreamCut(scope, "s", {0: 0, 1: 0}))
    with pytest.raises(InvalidStreamCutError, match="past the tails"):
        each_manager.truncate_stream(scope, "s", StreamCut(scope, "s", {0: 5, 1: 0, 2: 0, 3: 0}))
    with pytest.raises(InvalidStreamCutError, match="not"):
        each_manager.truncate_stream(scope, "s", StreamCut(scope, "other", {0: 0}))


def test_empty_and_maximum_size_events(manager: StreamManager, redis_url: str, scope: str) -> None:
    limit = 64 * 1024
    manager.create_stream(scope, "s", StreamConfiguration(max_event_size=limit))
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", BytesSerializer())
        writer.write_event(b"", routing_key="k").result(5)
        writer.write_event(b"m" * limit, routing_key="k").result(5)
        with pytest.raises(EventTooLargeError, match="exceeds max_event_size"):
            writer.write_event(b"m" * (limit + 1), routing_key="k")
        with pytest.raises(SerializationError):
            writer.write_event("not bytes", routing_key="k")  # type: ignore[arg-type]
        writer.close()
        events = list(factory.create_batch_client().read_events("s"))
    assert [len(e.payload) for e in events] == [0, limit]  # the refused ones changed nothing


def test_a_script_refuses_oversized_events_too(manager: StreamManager, scope: str) -> None:
    manager.create_stream(scope, "s")
    [reply] = manager.connection.segments.append(
        [AppendBatch.of(scope, "s", 0, "w", 1, [(None, b"x" * 11, 0)], 10)]
    )
    assert isinstance(reply.error, EventTooLargeError)  # the batch is refused, named
    assert manager.segment_states(scope, "s", [0])[0].tail == 0


def test_bad_key_ranges_change_nothing(each_manager: Any, scope: str) -> None:
    each_manager.create_stream(scope, "s", FOUR)
    for sealed, ranges in (([0], [(0.0, 0.1), (0.2, 0.25)]), ([0, 1], [(0.0, 0.4)]), ([0], [])):
        with pytest.raises(InvalidKeyRangesError):
            each_manager.scale_stream(scope, "s", sealed, ranges)
    with pytest.raises(ScaleConflictError):
        each_manager.scale_stream(scope, "s", [77], [(0.0, 0.25)])
    info = each_manager.get_stream_info(scope, "s")
    assert info.epoch == 0 and len(info.active_segments) == 4 and info.total_segments == 4


def test_writing_to_a_sealed_stream_fails_clearly(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("one").result(5)
        manager.seal_stream(scope, "s")
        future = writer.write_event("two")
        with pytest.raises(StreamSealedError):
            future.result(10)
        with pytest.raises(StreamSealedError):
            writer.flush()
        writer.close()


def test_a_lost_reply_does_not_duplicate_events(
    redis_handle: Any, manager: StreamManager, scope: str
) -> None:
    manager.create_stream(scope, "s")
    target = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs
    with (
        ReplyDroppingProxy(target["host"], target["port"]) as proxy,
        EventStreamClientFactory.from_url(scope, proxy.url) as factory,
    ):
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("warm-up", routing_key="k").result(5)
        proxy.drop_next_reply()
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(100)]
        writer.flush()
        assert proxy.dropped == 1
        assert all(f.done() and f.exception() is None for f in futures)
        writer.close()
    with EventStreamClientFactory.from_url(scope, redis_handle.url) as factory:
        payloads = [e.payload for e in factory.create_batch_client().read_events("s")]
    assert payloads == [b"warm-up"] + [f"e{i}".encode() for i in range(100)]


def test_redis_down_fails_futures_after_the_delivery_timeout(private_redis: Any) -> None:
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("x")
        sm.create_stream("x", "s")
    config = EventWriterConfig(delivery_timeout=0.5, max_block=0.2, max_in_flight_bytes=1024 * 1024)
    with EventStreamClientFactory.from_url("x", private_redis.url) as factory:
        writer = factory.create_event_writer("s", BytesSerializer(), config)
        acknowledged = writer.write_event(b"kept", routing_key="k").result(5)
        private_redis.stop()
        doomed = writer.write_event(b"lost", routing_key="k")
        with pytest.raises(WriteFailedError) as caught:
            doomed.result(30)
        assert caught.value.retriable
        with pytest.raises(WriteFailedError):
            writer.flush()
        private_redis.start()
        writer.write_event(b"again", routing_key="k").result(30)
        writer.close()
        payloads = [e.payload for e in factory.create_batch_client().read_events("s")]
    assert acknowledged.offset == 0 and payloads[0] == b"kept" and payloads[-1] == b"again"


def test_blocking_reads_across_segments_wake_on_a_write(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    manager.create_stream(scope, "s", FOUR)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        batch = factory.create_batch_client()
        got: list[Any] = []
        thread = threading.Thread(
            target=lambda: got.append(batch.read_blocking("s", {0: 0, 1: 0, 2: 0, 3: 0}, 5.0))
        )
        thread.start()
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            writer.write_event("ping", routing_key="k").result(5)
        thread.join(10)
    assert len(got) == 1 and [e.payload for events in got[0].values() for e in events] == [b"ping"]


def test_autoscaler_splits_a_hot_segment_then_merges_quiet_ones(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    policy = ScalingPolicy.by_event_rate(target_rate=100, scale_factor=2, min_segments=1)
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=policy))
    now = [0]
    scaler = AutoScaler(manager, scope, "s", now_ms=lambda: now[0])
    assert scaler.run_once() is None  # first call only samples
    with (
        EventStreamClientFactory.from_url(scope, redis_url) as factory,
        factory.create_event_writer("s", BytesSerializer()) as writer,
    ):
        for i in range(500):
            writer.write_event(b"x", routing_key=str(i))
    now[0] += 1000  # 500 events in one second: five times the target
    split = scaler.run_once()
    assert split is not None and split.kind == "split"
    assert len(manager.get_stream_info(scope, "s").active_segments) == 2
    scaler.run_once()
    now[0] += 1000
    merge = scaler.run_once()  # nothing written: both halves are quiet
    assert merge is not None and merge.kind == "merge"
    assert len(manager.get_stream_info(scope, "s").active_segments) == 1


def test_successors_take_no_event_before_their_predecessors_are_sealed(
    manager: StreamManager, redis_url: str, scope: str
) -> None:
    """A scale that dies after its metadata update leaves the predecessor open and the
    successors closed: a writer with cached metadata still appends to the predecessor, and a
    writer routing to a successor finishes the scale itself (seal, then open) before its events
    land, so per key server times never go back and time cuts stay exact."""
    manager.create_stream(scope, "s")
    stale = EventStreamClientFactory.from_url(scope, redis_url, ClientConfig(metadata_ttl=3600))
    with stale, stale.create_event_writer("s", UTF8StringSerializer()) as old_writer:
        old_writer.write_event("before", routing_key="k").result(10)
        with StreamManager.from_url(redis_url) as crashing:
            crashing.connection.segments.seal_segments = lambda *_: 1 / 0  # type: ignore[method-assign]
            with pytest.raises(ZeroDivisionError):
                crashing.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
        successors = [s for s in manager.stream_state(scope, "s").segments if s != 0]
        assert all(st.sealed for st in manager.segment_states(scope, "s", successors).values())
        assert old_writer.write_event("late", routing_key="k").result(10).segment == 0
        with EventStreamClientFactory.from_url(scope, redis_url) as fresh:
            with fresh.create_event_writer("s", UTF8StringSerializer()) as new_writer:
                landed = new_writer.write_event("after", routing_key="k").result(30)
            assert landed.segment in successors
            events = list(fresh.create_batch_client().read_events("s"))
            at = events[2].server_ms
            cut = manager.cut_at_time(scope, "s", at)
            newer = list(fresh.create_batch_client().read_events("s", start=cut))
    assert manager.segment_states(scope, "s", [0])[0].sealed
    assert [e.payload for e in events] == [b"before", b"late", b"after"]
    assert events[1].server_ms <= events[2].server_ms
    assert newer == [e for e in events if e.server_ms >= at]


def _segments_read(manager: StreamManager) -> list[int]:
    """Every segment whose state ``manager`` reads from now on (the real reads still run)."""
    read: list[int] = []
    real = manager.connection.segments.segment_states

    def recording(scope: str, stream: str, segments: Any) -> Any:
        read.extend(segments)
        return real(scope, stream, segments)

    manager.connection.segments.segment_states = recording  # type: ignore[method-assign]
    return read


def test_completing_scales_reads_only_what_the_newest_epoch_changed(
    manager: StreamManager, scope: str
) -> None:
    """Repairing an interrupted scale costs O(the newest change), not O(history): a stream
    scaled many times has every earlier seal done (each scale completes the seals of the state
    it plans from), so only the newest scale's segments are read."""
    manager.create_stream(scope, "s")
    active = [0]
    for _ in range(6):  # split the one segment, merge the halves back, three times
        if len(active) == 1:
            active = manager.scale_stream(scope, "s", active, [(0.0, 0.5), (0.5, 1.0)])
        else:
            active = manager.scale_stream(scope, "s", active, [(0.0, 1.0)])
    state = manager.stream_state(scope, "s")
    newest = set(active) | set(state.segments[active[0]].predecessors)
    read = _segments_read(manager)
    manager.complete_scales(scope, "s")
    assert set(read) == newest  # was every one of the 12 sealed segments
    del read[:]
    manager.scale_stream(scope, "s", active, [(0.0, 0.5), (0.5, 1.0)])
    assert set(read) == newest


def test_a_seal_interrupted_after_an_interrupted_scale_is_completed(
    manager: StreamManager, redis_url: str, scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A scale and then a stream seal both die before sealing in Redis: completing the scales
    seals the scale's predecessor and the successors the seal marked sealed, with a warning
    naming the scale as the cause."""
    manager.create_stream(scope, "s")
    with StreamManager.from_url(redis_url) as crashing:
        crashing.connection.segments.seal_segments = lambda *_: 1 / 0  # type: ignore[method-assign]
        with pytest.raises(ZeroDivisionError):
            crashing.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
        with pytest.raises(ZeroDivisionError):
            crashing.seal_stream(scope, "s")
    every = sorted(manager.stream_state(scope, "s").segments)
    assert len(every) == 3
    assert not any(s.sealed for s in manager.segment_states(scope, "s", [0]).values())
    caplog.set_level(logging.WARNING, logger="readergroup.admin.stream_manager")
    manager.complete_scales(scope, "s")
    assert all(s.sealed for s in manager.segment_states(scope, "s", every).values())
    assert f"sealing 1 segment ({scope}/s/0) left unsealed by a scale" in caplog.text
