"""Consume-transform-produce (issue 31): a reader group's positions committed with a
transaction's output, all or nothing; a reader that lost an input segment commits nothing.
See :mod:`readergroup.client.txn_positions`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.client.transactions import (
    TransactionalEventStreamWriter,
    TransactionalWriterConfig,
)
from readergroup.client.txn_positions import group_of, reset_generation, segment_field
from readergroup.core.errors import InvalidConfigError, TransactionPositionsError
from readergroup.core.transactions import TxnStatus
from tests.support.async_txn_adapter import (
    FLAVOURS,
    another_txn_factory,
    claimer_of,
    flavoured_txn_factory,
)


@pytest.fixture
def streams(manager: StreamManager, scope: str) -> str:
    for name, segments in (("in", 2), ("out", 3)):
        manager.create_stream(
            scope, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    return scope


def setup_group(factory: EventStreamClientFactory, scope: str, **config: Any) -> None:
    ReaderGroupManager(scope, factory.connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{scope}/in"], commit_mode="manual", **config)
    )


def write_input(factory: EventStreamClientFactory, count: int) -> list[bytes]:
    writer = factory.create_event_writer("in", BytesSerializer())
    events = [f"e{i}".encode() for i in range(count)]
    for i, event in enumerate(events):
        writer.write_event(event, routing_key=f"k{i % 7}")
    writer.flush()
    return events


def drain(reader: Any, count: int) -> list[Any]:
    """``count`` events of ``reader`` (several read calls), within 10 s."""
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        got += [e for e in reader.read_batch(count - len(got), timeout=0.2) if e.is_event]
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


def output(factory: EventStreamClientFactory) -> list[bytes]:
    return [e.payload for e in factory.create_batch_client().read_events("out")]


@pytest.fixture(params=FLAVOURS)
def txn_factory(request: pytest.FixtureRequest) -> Iterator[Any]:
    """What creates the pipeline's transactional writer and its readers: each test runs with
    the threaded ones and with asyncio ones (behind a blocking adapter, in one event loop)."""
    yield from flavoured_txn_factory(request)


@pytest.fixture
def txn_writer(txn_factory: Any, streams: str) -> Iterator[TransactionalEventStreamWriter[bytes]]:
    yield txn_factory.create_transactional_writer(
        "out", BytesSerializer(), TransactionalWriterConfig(transactional_id="pipe")
    )


def test_positions_commit_with_the_output(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    streams: str,
    txn_writer: TransactionalEventStreamWriter[bytes],
) -> None:
    setup_group(factory, streams)
    events = write_input(factory, 40)
    reader = txn_factory.create_reader("r1", "g", BytesSerializer())
    txn_writer.bind_reader(reader)
    done = 0
    while done < len(events):
        txn = txn_writer.begin()
        batch = reader.read_batch(10, timeout=2)
        assert batch, f"only {done} of {len(events)} read"
        for event in batch:
            txn.write_event(b"out-" + bytes(event.event or b""), routing_key=event.routing_key)
        txn.commit(reader=reader)
        done += len(batch)
        assert txn.status() is TxnStatus.COMMITTED
    assert sorted(output(factory)) == sorted(b"out-" + e for e in events)
    committed = reader.committed()
    assert sum(committed.values()) == len(events)  # the group's positions moved too
    record = txn_writer.store.record(txn.id)
    assert record is not None and '"reader":"r1"' in record.positions
    reader.close()


def test_a_reader_that_lost_an_input_segment_commits_nothing(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    streams: str,
    txn_writer: TransactionalEventStreamWriter[bytes],
) -> None:
    setup_group(factory, streams)
    write_input(factory, 20)
    reader = txn_factory.create_reader("r1", "g", BytesSerializer())
    txn_writer.bind_reader(reader)
    batch = reader.read_batch(20, timeout=2)
    assert batch
    txn = txn_writer.begin()
    for event in batch:
        txn.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    owned = reader.owned_segments()
    segment, token = next(iter(owned.items()))
    # another reader acquired it meanwhile (a higher fencing token claimed it)
    generation = reset_generation(reader)
    txn_writer.store.claim(group_of(reader), generation, [(segment_field(segment), token + 1)])
    with pytest.raises(TransactionPositionsError) as info:
        txn.commit(reader=reader)
    assert info.value.txn_id == txn.id
    assert txn_writer.store.record(txn.id).status is TxnStatus.ABORTED  # type: ignore[union-attr]
    assert output(factory) == []
    with pytest.raises(TransactionPositionsError):  # positions of a segment it never owned
        other = txn_writer.begin()
        other.commit({("nowhere/x", 0): 3}, reader=reader)
    reader.close()


def test_a_group_in_auto_commit_mode_cannot_be_bound(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    streams: str,
    txn_writer: TransactionalEventStreamWriter[bytes],
) -> None:
    ReaderGroupManager(streams, factory.connection).create_reader_group(
        "auto", ReaderGroupConfig(streams=[f"{streams}/in"])
    )
    reader = txn_factory.create_reader("r", "auto", BytesSerializer())
    with pytest.raises(InvalidConfigError):
        txn_writer.bind_reader(reader)
    reader.close()


def test_a_new_owner_resumes_after_a_dead_owners_decided_transaction(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    streams: str,
    txn_writer: TransactionalEventStreamWriter[bytes],
    redis_url: str,
) -> None:
    """r1 decides a transaction with its positions and dies before completing it or
    committing the positions to the group; r2 takes the segments over: it completes the
    transaction and resumes after it, so nothing is produced twice."""
    setup_group(factory, streams, heartbeat_interval=0.2, session_timeout=1.0)
    events = write_input(factory, 30)
    r1 = txn_factory.create_reader("r1", "g", BytesSerializer())
    txn_writer.bind_reader(r1)
    batch = r1.read_batch(30, timeout=2)
    assert len(batch) == 30
    txn = txn_writer.begin()
    for event in batch:
        txn.write_event(b"out-" + bytes(event.event or b""), routing_key=event.routing_key)

    class Crash(BaseException):
        pass

    def die(_: object) -> None:
        raise Crash

    txn_writer.completer.after_entry = die
    with pytest.raises(Crash):
        txn.commit(reader=r1)
    txn_writer.completer.after_entry = None
    r1._stop.set()  # the process is gone: no heartbeats, no group commit
    with another_txn_factory(txn_factory, streams, redis_url) as other:
        rescuer = other.create_transactional_writer(
            "out", BytesSerializer(), TransactionalWriterConfig(transactional_id="pipe")
        )
        r2 = other.create_reader("r2", "g", BytesSerializer())
        rescuer.bind_reader(r2)
        deadline = time.monotonic() + 20
        again: list[Any] = []
        while time.monotonic() < deadline and len(r2.owned_segments()) < 2:
            again += r2.read_batch(10, timeout=0.2)
        assert len(r2.owned_segments()) == 2
        again += r2.read_batch(10, timeout=0.3)
        assert again == []  # resumed after the decided transaction
        assert sorted(output(factory)) == sorted(b"out-" + e for e in events)
        r2.close()


def test_a_segment_given_up_before_the_commit_fails_it_and_its_input_comes_again(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    streams: str,
    txn_writer: TransactionalEventStreamWriter[bytes],
) -> None:
    """r1 read events of both segments; a second reader joins and r1 gives one up (in its
    next read call) before committing: the commit cannot carry that segment's position, so
    it fails, nothing lands, and r1 gets the events of the segment it kept again."""
    setup_group(factory, streams, heartbeat_interval=0.2, session_timeout=1.0)
    events = write_input(factory, 30)
    r1 = txn_factory.create_reader("r1", "g", BytesSerializer())
    txn_writer.bind_reader(r1)
    first = r1.read_batch(30, timeout=2)
    assert len(first) == 30 and len(r1.owned_segments()) == 2
    txn = txn_writer.begin()
    for event in first:
        txn.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    r2 = txn_factory.create_reader("r2", "g", BytesSerializer())
    txn_writer.bind_reader(r2)
    theirs: list[Any] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (
        len(r1.owned_segments()) == 1 and len(r2.owned_segments()) == 1
    ):
        assert not [e for e in r1.read_batch(10, timeout=0.1) if e.is_event]
        theirs += [e for e in r2.read_batch(10, timeout=0.05) if e.is_event]
    (kept,) = r1.owned_segments()
    with pytest.raises(TransactionPositionsError):
        txn.commit(reader=r1)
    assert output(factory) == []
    assert txn.status() is TxnStatus.ABORTED
    expected = sorted(bytes(e.event or b"") for e in first if (e.stream, e.segment) == kept)
    again = drain(r1, len(expected))
    assert {(e.stream, e.segment) for e in again} == {kept}
    assert sorted(bytes(e.event or b"") for e in again) == expected
    retry = txn_writer.begin()
    for event in again:
        retry.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    retry.commit(reader=r1)
    theirs += drain(r2, len(events) - len(expected) - len(theirs))
    other = txn_writer.begin()
    for event in theirs:
        other.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    other.commit(reader=r2)
    assert sorted(output(factory)) == sorted(events)
    r1.close()
    r2.close()


def test_a_claim_that_failed_fails_the_next_commit_which_resumes_the_reader_right(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    streams: str,
    txn_writer: TransactionalEventStreamWriter[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader acquires segments while Redis cannot answer the claim: it was not told where
    decided transactions left them. Its next commit fails (nothing lands) and moves it there,
    so nothing decided before is produced twice."""
    from readergroup.core.errors import RedisUnavailableError

    setup_group(factory, streams)
    events = write_input(factory, 20)
    reader = txn_factory.create_reader("r1", "g", BytesSerializer())
    txn_writer.bind_reader(reader)
    first = drain(reader, 20)
    txn = txn_writer.begin()
    for event in first:
        txn.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    txn.commit(reader=reader)  # all 20 consumed, decided
    owned = reader.owned_segments()
    for segment in owned:  # as a reader that acquired them anew from the group's positions
        reader.seek(segment, 0)
    claimer = claimer_of(txn_writer, reader)

    def outage(*args: Any, **kwargs: Any) -> Any:
        raise RedisUnavailableError("no answer while claiming")

    with monkeypatch.context() as patch, pytest.raises(RedisUnavailableError):
        patch.setattr(txn_writer.store, "claim", outage)
        claimer.on_segments_acquired("r1", list(owned))
    again = drain(reader, 20)  # handed out again: the claim did not move the reader
    doomed = txn_writer.begin()
    for event in again:
        doomed.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    with pytest.raises(TransactionPositionsError):
        doomed.commit(reader=reader)
    assert [e for e in reader.read_batch(20, timeout=0.3) if e.is_event] == []  # moved past
    assert sorted(output(factory)) == sorted(events)  # each once
    reader.close()
