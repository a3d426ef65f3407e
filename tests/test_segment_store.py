"""The segment data plane, run unchanged on both backends: the Redis ``SegmentStore`` (its Lua
scripts) and the in-memory ``MemorySegmentStore`` (the same contract, for simulations and
fast tests). The Redis run is the one CI trusts; the memory run proves the twin keeps the same
contract, the way ``tests/test_synchronizer.py`` does for statesync's two backends."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup.core.errors import (
    EventTooLargeError,
    InvalidStreamCutError,
    SegmentNotFoundError,
    TruncatedDataError,
)
from readergroup.storage import segment_status
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import REFUSED, AppendBatch
from readergroup.storage.segment_store import SegmentStorage
from readergroup.testing.memory_segments import MemorySegmentStore

STREAM = "s"


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[SegmentStorage]:
    if request.param == "memory":
        ticks = itertools.count(1_700_000_000_000)
        yield MemorySegmentStore(lambda: next(ticks))
        return
    connection = RedisConnection.from_url(request.getfixturevalue("redis_url"))
    try:
        yield connection.segments
    finally:
        connection.close()


@pytest.fixture
def scope() -> str:
    """A scope name no other test uses (the store needs no catalog)."""
    return f"s{uuid.uuid4().hex[:10]}"


def batch(scope: str, segment: int, sequence: int, *payloads: bytes, key: str | None = "k") -> Any:
    events = [(key, payload, 1000 + i) for i, payload in enumerate(payloads)]
    return AppendBatch.of(scope, STREAM, segment, "w1", sequence, events, 1024)


def test_appends_land_at_consecutive_offsets_and_read_back(
    store: SegmentStorage, scope: str
) -> None:
    store.create_segments(scope, STREAM, [0], 1)
    first, second = store.append([batch(scope, 0, 1, b"a", b"bc"), batch(scope, 0, 2, b"d")])
    assert (first.status, first.first_offset, second.first_offset) == (0, 0, 2)
    state, events = store.read_range(scope, STREAM, 0, 0, -1, 10)
    assert (state.head, state.tail, state.bytes, state.sealed) == (0, 3, 4, False)
    assert [(e.offset, e.payload, e.byte_offset, e.routing_key) for e in events] == [
        (0, b"a", 0, "k"),
        (1, b"bc", 1, "k"),
        (2, b"d", 3, "k"),
    ]
    assert [e.writer_ms for e in events] == [1000, 1001, 1000]
    assert events[0].server_ms <= events[2].server_ms
    _, middle = store.read_range(scope, STREAM, 0, 1, 2, 10)
    assert [e.payload for e in middle] == [b"bc"]
    raw = store.read_raw(scope, STREAM, 0, 1, -1, 1)
    assert [e.offset for e in store.read_range(scope, STREAM, 0, 1, -1, 1)[1]] == [1]
    assert len(raw) == 1 and raw[0][0].startswith(b"2-")  # "<offset + 1>-<epoch>"


def test_events_without_a_routing_key(store: SegmentStorage, scope: str) -> None:
    store.create_segments(scope, STREAM, [0], 1)
    store.append([batch(scope, 0, 1, b"x", key=None)])
    (event,) = store.read_range(scope, STREAM, 0, 0, -1, 10)[1]
    assert (event.routing_key, event.payload) == (None, b"x")


def test_a_retried_batch_lands_once(store: SegmentStorage, scope: str) -> None:
    store.create_segments(scope, STREAM, [0], 1)
    store.append([batch(scope, 0, 1, b"a")])
    (again,) = store.append([batch(scope, 0, 1, b"a")])
    assert again.status == segment_status.DUPLICATE
    assert store.segment_states(scope, STREAM, [0])[0].tail == 1


def test_refused_batches_write_nothing_and_name_their_segment(
    store: SegmentStorage, scope: str
) -> None:
    store.create_segments(scope, STREAM, [0], 1)
    too_large, missing, fine = store.append(
        [batch(scope, 0, 1, b"a", b"x" * 2000), batch(scope, 9, 1, b"a"), batch(scope, 0, 2, b"b")]
    )
    assert too_large.status == missing.status == REFUSED
    assert isinstance(too_large.error, EventTooLargeError) and "2000" in str(too_large.error)
    assert isinstance(missing.error, SegmentNotFoundError) and f"{scope}/s/9" in str(missing.error)
    assert fine.first_offset == 0  # nothing of the refused batch before it was written
    with pytest.raises(SegmentNotFoundError):
        store.read_range(scope, STREAM, 9, 0, -1, 10)
    with pytest.raises(SegmentNotFoundError):
        store.seal(scope, STREAM, 9)
    assert store.segment_states(scope, STREAM, [9])[9].exists is False


def test_a_sealed_segment_refuses_appends_and_reports_its_tail(
    store: SegmentStorage, scope: str
) -> None:
    store.create_segments(scope, STREAM, [0], 1)
    store.append([batch(scope, 0, 1, b"a", b"b")])
    assert store.seal(scope, STREAM, 0) == 2
    assert store.seal(scope, STREAM, 0) == 2  # idempotent
    (refused,) = store.append([batch(scope, 0, 2, b"c")])
    assert (refused.status, refused.tail) == (segment_status.SEALED, 2)
    assert store.segment_states(scope, STREAM, [0])[0].sealed


def test_a_successor_opens_only_once_and_never_after_a_real_seal(
    store: SegmentStorage, scope: str
) -> None:
    store.create_closed_segments(scope, STREAM, [1, 2], 1)
    (closed,) = store.append([batch(scope, 1, 1, b"a")])
    assert closed.status == segment_status.SEALED
    assert store.open_segment(scope, STREAM, 1) is True
    assert store.open_segment(scope, STREAM, 1) is False
    assert store.append([batch(scope, 1, 2, b"a")])[0].status == segment_status.OK
    store.seal(scope, STREAM, 2)
    assert store.open_segment(scope, STREAM, 2) is False
    assert store.append([batch(scope, 2, 1, b"a")])[0].status == segment_status.SEALED


def test_truncation_moves_the_head_and_reads_below_it_are_refused(
    store: SegmentStorage, scope: str
) -> None:
    store.create_segments(scope, STREAM, [0], 1)
    store.append([batch(scope, 0, 1, b"a", b"b", b"c")])
    assert store.truncate(scope, STREAM, 0, 2) == 2
    assert store.truncate(scope, STREAM, 0, 1) == 0  # never backwards
    with pytest.raises(TruncatedDataError):
        store.read_range(scope, STREAM, 0, 0, -1, 10)
    assert [e.payload for e in store.read_range(scope, STREAM, 0, 2, -1, 10)[1]] == [b"c"]
    with pytest.raises(InvalidStreamCutError, match="past the tail 3"):
        store.truncate(scope, STREAM, 0, 4)
    assert store.offset_at_time(scope, STREAM, 0, 0) == (2, 3)  # at least the head
    assert store.offset_at_time(scope, STREAM, 0, 2**62) == (3, 3)  # every event is older
    store.delete_segments(scope, STREAM, [0])
    assert store.segment_states(scope, STREAM, [0])[0].exists is False


def test_lag_probe_reports_byte_offsets_at_positions(store: SegmentStorage, scope: str) -> None:
    store.create_segments(scope, STREAM, [0, 1], 1)
    store.append([batch(scope, 0, 1, b"ab", b"cde")])
    probe = store.lag_probe(scope, STREAM, {0: 1, 1: 0})
    assert probe[0][:3] == (2, 5, 2) and probe[0][3] > 0
    assert probe[1] == (0, 0, 0, -1)


def test_a_blocking_read_returns_what_is_there_or_waits_for_an_append(
    store: SegmentStorage, scope: str
) -> None:
    store.create_segments(scope, STREAM, [0, 1], 1)
    assert store.read_blocking(scope, STREAM, {0: 0, 1: 0}, 0.05, 10) == {}
    store.append([batch(scope, 1, 1, b"a")])
    found = store.read_blocking(scope, STREAM, {0: 0, 1: 0}, 5, 10)
    assert list(found) == [1] and found[1][0].payload == b"a"
    writer = threading.Thread(target=lambda: store.append([batch(scope, 0, 2, b"b")]))
    writer.start()
    woken = store.read_blocking(scope, STREAM, {0: 0, 1: 1}, 5, 10)
    writer.join()
    assert [e.payload for e in woken[0]] == [b"b"]


def test_a_large_round_lands_like_a_small_one(store: SegmentStorage, scope: str) -> None:
    """On Redis a round of 64 events or more is sent as native XADDs instead of the script."""
    store.create_segments(scope, STREAM, [0], 1)
    payloads = [b"%d" % i for i in range(70)]
    (reply,) = store.append([batch(scope, 0, 1, *payloads)])
    assert (reply.status, reply.first_offset) == (segment_status.OK, 0)
    events = store.read_range(scope, STREAM, 0, 0, -1, 100)[1]
    assert [e.payload for e in events] == payloads
    assert [e.byte_offset for e in events[:12]] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12]
    (again,) = store.append([batch(scope, 0, 1, *payloads)])
    assert again.status == segment_status.DUPLICATE
