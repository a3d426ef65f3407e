"""Transactions (issue 31): the transactional writer's rules on a real Redis (both servers:
``READERGROUP_TEST_SERVER=valkey|redis``). States and guarantees:
:mod:`readergroup.core.transactions`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.client.transactions import (
    TransactionalEventStreamWriter,
    TransactionalWriterConfig,
)
from readergroup.core.errors import (
    InvalidConfigError,
    TransactionClosedError,
    TransactionExpiredError,
    TransactionFencedError,
    TransactionNotFoundError,
)
from readergroup.core.transactions import PlanEntry, TxnStatus
from tests.support.async_txn_adapter import FLAVOURS, flavoured_txn_factory

STREAM = "out"


@pytest.fixture
def stream(manager: StreamManager, scope: str) -> str:
    manager.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))
    return STREAM


@pytest.fixture(params=FLAVOURS)
def txn_factory(request: pytest.FixtureRequest) -> Iterator[Any]:
    """What creates the transactional writers: each test that uses it runs on the threaded
    writer and on the asyncio one (behind a blocking adapter)."""
    yield from flavoured_txn_factory(request)


@pytest.fixture
def txn_writer(txn_factory: Any, stream: str) -> Iterator[TransactionalEventStreamWriter[bytes]]:
    yield txn_factory.create_transactional_writer(
        stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="t1")
    )


def visible(factory: EventStreamClientFactory, stream: str = STREAM) -> list[tuple[str, bytes]]:
    """Every event a batch client reads, as (routing key, payload), planned order."""
    client = factory.create_batch_client()
    return [(e.routing_key or "", e.payload) for e in client.read_events(stream)]


def by_key(events: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for key, payload in events:
        out.setdefault(key, []).append(payload)
    return out


def write_keys(txn: Any, keys: int, per_key: int, tag: str = "") -> list[tuple[str, bytes]]:
    written = []
    for i in range(per_key):
        for k in range(keys):
            payload = f"{tag}{k}:{i}".encode()
            txn.write_event(payload, routing_key=f"k{k}")
            written.append((f"k{k}", payload))
    return written


def new_writer(
    txn_factory: Any, transactional_id: str, **config: Any
) -> TransactionalEventStreamWriter[bytes]:
    """A transactional writer of ``out`` (bytes events), of the test's flavour."""
    settings = TransactionalWriterConfig(transactional_id=transactional_id, **config)
    return txn_factory.create_transactional_writer(STREAM, BytesSerializer(), settings)


def wait_past_lease(
    factory: EventStreamClientFactory, writer: TransactionalEventStreamWriter[Any], txn_id: str
) -> None:
    """Until the server's clock is past the transaction's lease deadline."""
    record = writer.store.record(txn_id)
    assert record is not None
    wait_for(lambda: factory.connection.server_time_ms() > record.deadline_ms)


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_commit_makes_every_event_visible_on_every_segment_in_key_order(
    factory: EventStreamClientFactory, txn_writer: TransactionalEventStreamWriter[bytes]
) -> None:
    txn = txn_writer.begin()
    assert txn.status() is TxnStatus.OPEN
    written = write_keys(txn, keys=16, per_key=5)
    txn.flush()
    assert visible(factory) == []  # staged: no read path sees it
    txn.commit()
    assert txn.status() is TxnStatus.COMMITTED
    seen = visible(factory)
    assert sorted(seen) == sorted(written)
    assert by_key(seen) == by_key(written)
    segments = {e.segment for e in factory.create_batch_client().read_events(STREAM)}
    assert len(segments) == 4


def test_open_and_aborted_transactions_are_invisible_to_readers_and_lag(
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    scope: str,
) -> None:
    from readergroup import ReaderGroupConfig, ReaderGroupManager

    aborted = txn_writer.begin()
    write_keys(aborted, keys=4, per_key=3, tag="a")
    aborted.flush()
    aborted.abort()
    assert aborted.status() is TxnStatus.ABORTED
    pending = txn_writer.begin()
    write_keys(pending, keys=4, per_key=3, tag="p")
    pending.flush()
    committed = txn_writer.begin()
    written = write_keys(committed, keys=4, per_key=3, tag="c")
    committed.commit()
    assert sorted(visible(factory)) == sorted(written)  # the batch client
    tails = sum(r.end for r in factory.create_batch_client().get_segments(STREAM))
    assert tails == len(written)  # lag figures come from the tails: committed events only
    ReaderGroupManager(scope, factory.connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{scope}/{STREAM}"])
    )
    got: list[tuple[str, bytes]] = []
    with factory.create_reader("r", "g", BytesSerializer()) as reader:
        while True:  # a reader group reads every committed event, and nothing else
            event = reader.read_next_event(timeout=0.5)
            if not event.is_event:
                break
            got.append((event.routing_key or "", bytes(event.event or b"")))
    assert sorted(got) == sorted(written)


def test_closed_transactions_refuse_writes_commits_and_aborts(
    txn_writer: TransactionalEventStreamWriter[bytes],
) -> None:
    done = txn_writer.begin()
    done.write_event(b"x", routing_key="k")
    done.commit()
    actions: list[Any] = [lambda: done.write_event(b"y"), done.commit, done.abort, done.flush]
    for action in actions:
        with pytest.raises(TransactionClosedError) as info:
            action()
        assert info.value.txn_id == done.id
    gone = txn_writer.begin()
    gone.abort()
    with pytest.raises(TransactionClosedError):
        gone.commit()
    other = txn_writer.get_txn(gone.id)  # a second handle: the record says ABORTED
    with pytest.raises(TransactionClosedError) as info:
        other.commit()
    assert info.value.status == "ABORTED"
    with pytest.raises(TransactionNotFoundError):
        txn_writer.get_txn("no-such-transaction")


def test_config_is_validated() -> None:
    with pytest.raises(InvalidConfigError):
        TransactionalWriterConfig(transactional_id="")
    with pytest.raises(InvalidConfigError):
        TransactionalWriterConfig(transactional_id="t", lease=0)
    with pytest.raises(TypeError):
        TransactionalWriterConfig("t")  # type: ignore[call-arg]


def test_a_lease_running_out_aborts_the_transaction_with_no_writer_alive(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    writer = new_writer(txn_factory, "lease", lease=0.2, sweep_every=0)
    txn = writer.begin()
    txn.write_event(b"never", routing_key="k")
    txn.flush()
    writer.close()  # every writer gone
    staged = factory.connection.client.exists  # type: ignore[attr-defined]
    wait_past_lease(factory, writer, txn.id)  # no client at all: the scripts already refuse it
    # ... and any client's sweep aborts it, staged data gone
    other = new_writer(txn_factory, "other")
    after = other.store.record(txn.id)
    assert after is not None and after.status is TxnStatus.ABORTED
    assert not staged(writer.store.staged_key(txn.id))
    with pytest.raises(TransactionClosedError):
        other.get_txn(txn.id).commit()
    assert visible(factory) == []


def test_a_commit_after_the_lease_ran_out_fails_expired_and_lands_nothing(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    writer = new_writer(txn_factory, "late", lease=0.1, sweep_every=3600)
    txn = writer.begin()
    wait_past_lease(factory, writer, txn.id)
    assert txn.status() is TxnStatus.ABORTED
    with pytest.raises(TransactionExpiredError):  # (the write stages: renewal is due)
        txn.write_event(b"late", routing_key="k")
        txn.commit()
    assert visible(factory) == []


def test_writing_renews_the_lease(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    config = TransactionalWriterConfig(transactional_id="renew", lease=0.3, stage_events=1)
    writer = txn_factory.create_transactional_writer(stream, BytesSerializer(), config)
    txn = writer.begin()
    first = writer.store.record(txn.id)
    assert first is not None
    wait_for(lambda: factory.connection.server_time_ms() > first.created_ms + 150)
    txn.write_event(b"1", routing_key="k")  # staged at once: renews
    renewed = writer.store.record(txn.id)
    assert renewed is not None and renewed.deadline_ms > first.deadline_ms


def test_get_txn_resumes_a_transaction_whose_writer_died(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str, redis_url: str, scope: str
) -> None:
    with EventStreamClientFactory.from_url(scope, redis_url) as dying:
        writer = dying.create_transactional_writer(
            stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="a")
        )
        txn = writer.begin()
        first = write_keys(txn, keys=3, per_key=2, tag="1")
        txn.flush()
        txn_id = txn.id
    rescuer = txn_factory.create_transactional_writer(
        stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="b")
    )
    resumed = rescuer.get_txn(txn_id)
    assert resumed.status() is TxnStatus.OPEN
    more = write_keys(resumed, keys=3, per_key=2, tag="2")
    resumed.commit()
    assert by_key(visible(factory)) == by_key(first + more)


def test_resuming_a_transaction_fences_the_instance_that_held_it(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    holder = txn_factory.create_transactional_writer(
        stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="holder")
    )
    taker = txn_factory.create_transactional_writer(
        stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="taker")
    )
    txn = holder.begin()
    txn.write_event(b"1", routing_key="k")
    txn.flush()
    taken = taker.get_txn(txn.id)
    with pytest.raises(TransactionFencedError):
        txn.write_event(b"zombie", routing_key="k")
        txn.commit()
    with pytest.raises(TransactionFencedError):
        txn.abort()
    taken.write_event(b"2", routing_key="k")
    taken.commit()
    assert visible(factory) == [("k", b"1"), ("k", b"2")]


def test_a_new_instance_of_a_transactional_id_fences_the_old_ones_commit(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    config = TransactionalWriterConfig(transactional_id="same")
    old = txn_factory.create_transactional_writer(stream, BytesSerializer(), config)
    txn = old.begin()
    write_keys(txn, keys=4, per_key=2)
    txn.flush()
    new = txn_factory.create_transactional_writer(stream, BytesSerializer(), config)
    assert new.epoch == old.epoch + 1
    with pytest.raises(TransactionFencedError) as info:
        txn.commit()
    assert info.value.txn_id == txn.id
    with pytest.raises(TransactionFencedError):
        old.begin()
    assert visible(factory) == []
    fresh = new.begin()
    fresh.write_event(b"ok", routing_key="k")
    fresh.commit()
    assert visible(factory) == [("k", b"ok")]


class Crash(BaseException):
    """Stands for the committing process dying between two segments."""


def test_a_commit_interrupted_between_segments_is_completed_by_whoever_finds_it(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    writer = txn_factory.create_transactional_writer(
        stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="crash")
    )
    txn = writer.begin()
    written = write_keys(txn, keys=16, per_key=4)
    landed: list[PlanEntry] = []

    def die(entry: PlanEntry) -> None:
        landed.append(entry)
        raise Crash

    writer.completer.after_entry = die
    with pytest.raises(Crash):
        txn.commit()
    partial = visible(factory)
    assert 0 < len(partial) < len(written)  # one segment's share landed
    record = writer.store.record(txn.id)
    assert record is not None and record.status is TxnStatus.COMMITTING
    other = txn_factory.create_transactional_writer(
        stream, BytesSerializer(), TransactionalWriterConfig(transactional_id="finisher")
    )
    assert other.get_txn(txn.id).status() is TxnStatus.COMMITTED
    seen = visible(factory)
    assert sorted(seen) == sorted(written)  # every event, once
    assert by_key(seen) == by_key(written)
    other.completer.complete(record)  # a late completer replays nothing
    assert sorted(visible(factory)) == sorted(written)


def test_events_of_a_key_come_after_everything_committed_before(
    factory: EventStreamClientFactory, txn_writer: TransactionalEventStreamWriter[bytes]
) -> None:
    plain = factory.create_event_writer(STREAM, BytesSerializer())
    plain.write_event(b"before", routing_key="k").result(timeout=5)
    txn = txn_writer.begin()
    txn.write_event(b"t1", routing_key="k")
    plain.write_event(b"during", routing_key="k").result(timeout=5)  # committed first
    txn.write_event(b"t2", routing_key="k")
    txn.commit()
    plain.write_event(b"after", routing_key="k").result(timeout=5)
    assert by_key(visible(factory))["k"] == [b"before", b"during", b"t1", b"t2", b"after"]


def test_a_transaction_spanning_a_split_and_a_merge_commits_every_event_in_order(
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    manager: StreamManager,
    scope: str,
) -> None:
    txn = txn_writer.begin()
    first = write_keys(txn, keys=20, per_key=3, tag="a")
    txn.flush()
    state = manager.stream_state(scope, STREAM)
    ranges = sorted((r.low, r.high, r.segment_id) for r in state.active_segments)
    low, high, segment = ranges[0]
    manager.scale_stream(
        scope, STREAM, [segment], [(low, (low + high) / 2), ((low + high) / 2, high)]
    )
    (l1, _, s1), (_, h2, s2) = ranges[1], ranges[2]
    manager.scale_stream(scope, STREAM, [s1, s2], [(l1, h2)])
    second = write_keys(txn, keys=20, per_key=3, tag="b")
    txn.commit()
    seen = visible(factory)
    assert sorted(seen) == sorted(first + second)
    assert by_key(seen) == by_key(first + second)


def test_a_scale_between_the_decision_and_the_appends_reroutes_what_was_not_taken(
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    manager: StreamManager,
    scope: str,
) -> None:
    txn = txn_writer.begin()
    written = write_keys(txn, keys=20, per_key=3)
    calls: list[PlanEntry] = []

    def split_the_rest(entry: PlanEntry) -> None:
        calls.append(entry)
        if len(calls) == 1:  # after the first segment took its share: scale the others
            state = manager.stream_state(scope, STREAM)
            for r in state.active_segments:
                if r.segment_id != entry.segment:
                    mid = (r.low + r.high) / 2
                    manager.scale_stream(
                        scope, STREAM, [r.segment_id], [(r.low, mid), (mid, r.high)]
                    )

    txn_writer.completer.after_entry = split_the_rest
    txn.commit()
    seen = visible(factory)
    assert sorted(seen) == sorted(written)
    assert by_key(seen) == by_key(written)
    record = txn_writer.store.record(txn.id)
    assert record is not None and record.plan_version > 1  # re-routed


COMMIT_AND_DIE = """
import os, signal, sys
from readergroup import BytesSerializer, EventStreamClientFactory
from readergroup.client.transactions import TransactionalWriterConfig

url, scope = sys.argv[1], sys.argv[2]
factory = EventStreamClientFactory.from_url(scope, url)
writer = factory.create_transactional_writer(
    "out",
    BytesSerializer(),
    TransactionalWriterConfig(transactional_id="doomed", completion_grace=0.2),
)
txn = writer.begin()
for i in range(4):
    for k in range(16):
        txn.write_event(f"{k}:{i}".encode(), routing_key=f"k{k}")
print(txn.id, flush=True)
writer.completer.after_entry = lambda entry: os.kill(os.getpid(), signal.SIGKILL)
txn.commit()
"""


def test_a_committer_killed_between_segments_is_completed_by_the_sweep(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str, redis_url: str, scope: str
) -> None:
    import signal
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", COMMIT_AND_DIE, redis_url, scope],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    txn_id = done.stdout.strip()
    partial = visible(factory)
    assert 0 < len(partial) < 64
    survivor = txn_factory.create_transactional_writer(
        stream,
        BytesSerializer(),
        TransactionalWriterConfig(transactional_id="survivor"),
    )
    record = survivor.store.record(txn_id)
    assert record is not None and record.status is TxnStatus.COMMITTING
    # a committing transaction whose committer is gone: the sweep (run by any writer's begin,
    # `readergroup txn list`) completes it once the committer's completion grace passed
    wait_for(lambda: survivor.sweep() > 0 or visible(factory) != partial)
    seen = visible(factory)
    assert len(seen) == 64 and len(set(seen)) == 64
    assert by_key(seen) == {f"k{k}": [f"{k}:{i}".encode() for i in range(4)] for k in range(16)}
    final = survivor.store.record(txn_id)
    assert final is not None and final.status is TxnStatus.COMMITTED


def test_the_segments_writer_table_forgets_committed_transactions_after_the_retention(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    writer = new_writer(txn_factory, "short", retention=1.0, sweep_every=0)
    txn = writer.begin()
    write_keys(txn, keys=8, per_key=2)
    txn.commit()
    client = factory.connection.client  # type: ignore[attr-defined]
    layout = factory.connection.keys
    tables = [layout.segment(factory.scope, stream, s).writers for s in range(4)]

    def fields() -> list[bytes]:
        return [f for table in tables for f in client.hkeys(table) if txn.id.encode() in f]

    assert len(fields()) == 4  # one per segment: what makes a replay of its share a no-op
    record = writer.store.record(txn.id)
    assert record is not None
    wait_for(lambda: factory.connection.server_time_ms() > record.finished_ms + 1000)
    writer.sweep()
    assert fields() == []
    assert client.zcard(writer.store.landed_key) == 0


def test_a_stage_that_failed_leaves_the_transaction_to_abort_never_to_commit(
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from readergroup.core.errors import RedisUnavailableError, TransactionError

    txn = txn_writer.begin()
    txn.write_event(b"kept", routing_key="k")
    txn.flush()
    txn.write_event(b"lost?", routing_key="k")

    def outage(*args: Any, **kwargs: Any) -> Any:
        raise RedisUnavailableError("connection lost while staging (reply unknown)")

    with monkeypatch.context() as patch:
        patch.setattr(txn_writer.store, "stage", outage)
        with pytest.raises(RedisUnavailableError):
            txn.flush()
    with pytest.raises(TransactionError, match="abort it"):
        txn.commit()  # it may hold "lost?" or not: committing could drop an event silently
    txn.abort()
    assert txn.status() is TxnStatus.ABORTED
    assert visible(factory) == []


def test_a_commit_whose_completion_failed_is_completed_by_committing_again(
    factory: EventStreamClientFactory, txn_writer: TransactionalEventStreamWriter[bytes]
) -> None:
    """The decision landed, then completing it failed after one segment took its share (an
    outage): the transaction is COMMITTING; ``commit()`` again completes it (every event once,
    in key order) instead of reporting it closed."""
    from readergroup.core.errors import RedisUnavailableError

    txn = txn_writer.begin()
    written = write_keys(txn, keys=16, per_key=3)

    def outage(entry: PlanEntry) -> None:
        raise RedisUnavailableError("connection lost between two segments")

    txn_writer.completer.after_entry = outage
    with pytest.raises(RedisUnavailableError):
        txn.commit()
    txn_writer.completer.after_entry = None
    record = txn_writer.store.record(txn.id)
    assert record is not None and record.status is TxnStatus.COMMITTING
    txn.commit()
    seen = visible(factory)
    assert sorted(seen) == sorted(written) and by_key(seen) == by_key(written)
    assert txn.status() is TxnStatus.COMMITTED
    with pytest.raises(TransactionClosedError):
        txn.commit()  # committed: a third commit is refused as before
