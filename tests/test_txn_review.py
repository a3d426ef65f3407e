"""Transactions (issue 31), second review: races and holes against the guarantees of
:mod:`readergroup.core.transactions`, each on a real Redis (both servers)."""

from __future__ import annotations

import contextlib
import inspect
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
from readergroup.core.errors import (
    RedisUnavailableError,
    TransactionClosedError,
    TransactionPositionsError,
)
from readergroup.core.transactions import PlanEntry, TxnStatus
from tests.support.async_txn_adapter import (
    FLAVOURS,
    another_txn_factory,
    flavoured_txn_factory,
    unwrapped,
)
from tests.test_transactions import (
    STREAM,
    Crash,
    by_key,
    new_writer,
    stream,
    txn_writer,
    visible,
    wait_for,
    write_keys,
)

__all__ = ["stream", "txn_writer"]  # fixtures shared with test_transactions


@pytest.fixture(params=FLAVOURS)
def txn_factory(request: pytest.FixtureRequest) -> Iterator[Any]:
    """What creates the transactional writers and the readers bound to them: each test runs
    with the threaded ones and with asyncio ones (behind a blocking adapter). A hook the
    asyncio writer runs in its loop never calls back into that loop: a patched store method
    is the store's own kind (:func:`reply_lost`), another completer is another factory's."""
    yield from flavoured_txn_factory(request)


def die_after_entry(entry: PlanEntry) -> None:
    """A completer's ``after_entry`` hook: the committing process dies there."""
    raise Crash


def outage(*args: Any, **kwargs: Any) -> Any:
    """Redis not answering a call (it never reached the server)."""
    raise RedisUnavailableError("connection refused")


def reply_lost(method: Any) -> Any:
    """``method`` (a store's own: blocking, or the asyncio store's coroutine function, awaited
    in its writer's loop) runs, then its reply is lost on the way back."""

    def lost() -> RedisUnavailableError:
        return RedisUnavailableError("connection reset (reply lost)")

    if inspect.iscoroutinefunction(method):

        async def lost_after_awaiting(*args: Any, **kwargs: Any) -> Any:
            await method(*args, **kwargs)
            raise lost()

        return lost_after_awaiting

    def lost_after_calling(*args: Any, **kwargs: Any) -> Any:
        method(*args, **kwargs)
        raise lost()

    return lost_after_calling


def create_streams(manager: StreamManager, scope: str, segments: int, *names: str) -> None:
    for name in names:
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        manager.create_stream(scope, name, config)


def write_input(factory: EventStreamClientFactory, tag: str, count: int, keys: int) -> list[bytes]:
    """``count`` events ``<tag><i>`` to stream ``in``, routing key ``k<i % keys>``."""
    plain = factory.create_event_writer("in", BytesSerializer())
    events = [f"{tag}{i}".encode() for i in range(count)]
    for i, event in enumerate(events):
        plain.write_event(event, routing_key=f"k{i % keys}")
    plain.flush()
    return events


def manual_group(factory: EventStreamClientFactory, scope: str) -> ReaderGroupManager:
    """Group ``g`` reading ``in``, in manual commit mode (a pipeline's)."""
    groups = ReaderGroupManager(scope, factory.connection)
    groups.create_reader_group("g", manual_config(scope))
    return groups


def manual_config(scope: str) -> ReaderGroupConfig:
    return ReaderGroupConfig(streams=[f"{scope}/in"], commit_mode="manual")


def pipe_writer(txn_factory: Any) -> TransactionalEventStreamWriter[bytes]:
    config = TransactionalWriterConfig(transactional_id="pipe")
    return txn_factory.create_transactional_writer("out", BytesSerializer(), config)


def events_of(reader: Any, count: int, timeout: float) -> list[Any]:
    """The events one read call hands out."""
    return [e for e in reader.read_batch(count, timeout=timeout) if e.is_event]


def commit_output(
    writer: TransactionalEventStreamWriter[bytes], reader: Any, events: list[Any]
) -> None:
    """A transaction of ``events``' payloads, committed with ``reader``'s positions."""
    txn = writer.begin()
    for event in events:
        txn.write_event(bytes(event.event or b""), routing_key=event.routing_key)
    txn.commit(reader=reader)


def test_a_commit_whose_decision_failed_keeps_its_buffered_events_for_the_retry(
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """commit() stages the buffered tail in its decision; when that call fails before the
    script ran (Redis unreachable), the transaction is still OPEN (status() says so) and a
    retried commit must still carry the tail, not decide without it."""
    txn = txn_writer.begin()
    txn.write_event(b"staged", routing_key="k")
    txn.flush()
    txn.write_event(b"buffered", routing_key="k")

    with monkeypatch.context() as patch:
        patch.setattr(txn_writer.store, "stage", outage)
        with pytest.raises(RedisUnavailableError):
            txn.commit()
    assert txn.status() is TxnStatus.OPEN  # what the docstring tells the caller to check
    txn.commit()
    assert by_key(visible(factory))["k"] == [b"staged", b"buffered"]


def test_a_commit_whose_decision_reply_was_lost_is_found_committing_not_recommitted(
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other side of the case above: the decision ran, its reply was lost. A retried
    commit must not decide twice; status() completes it, every event once."""
    txn = txn_writer.begin()
    txn.write_event(b"staged", routing_key="k")
    txn.flush()
    txn.write_event(b"buffered", routing_key="k")

    with monkeypatch.context() as patch:
        patch.setattr(txn_writer.store, "stage", reply_lost(unwrapped(txn_writer.store).stage))
        with pytest.raises(RedisUnavailableError):
            txn.commit()
    with pytest.raises(TransactionClosedError):
        txn.commit()
    assert txn.status() is TxnStatus.COMMITTED
    assert by_key(visible(factory))["k"] == [b"staged", b"buffered"]


def test_a_committer_that_lost_the_replan_race_to_another_completer_reports_success(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    txn_writer: TransactionalEventStreamWriter[bytes],
    manager: StreamManager,
    scope: str,
    redis_url: str,
) -> None:
    """Two completers of one COMMITTING transaction (the committer, and e.g. a reader's claim
    or the sweep); the stream splits between the decision and the appends. The other
    completer re-plans and finishes first; the committer, holding the first plan, finds its
    entries' segments sealed, tries to re-plan, and must learn the transaction is COMMITTED:
    commit() returns, it does not raise TransactionClosedError as if nothing had landed. The
    other completer is another process's (a factory of its own: an asyncio one runs on a loop
    of its own, which the hook, run in the committer's loop, waits for)."""
    txn = txn_writer.begin()
    written = write_keys(txn, keys=16, per_key=2)
    elsewhere = another_txn_factory(txn_factory, scope, redis_url)
    other = new_writer(elsewhere, "other")
    calls: list[PlanEntry] = []

    def another_completer_wins(entry: PlanEntry) -> None:
        calls.append(entry)
        if len(calls) > 1:
            return
        for r in manager.stream_state(scope, STREAM).active_segments:
            if r.segment_id != entry.segment:
                mid = (r.low + r.high) / 2
                manager.scale_stream(scope, STREAM, [r.segment_id], [(r.low, mid), (mid, r.high)])
        record = other.store.record(txn.id)
        assert record is not None and record.status is TxnStatus.COMMITTING
        other.completer.complete(record)  # re-plans (version 2) and finishes

    txn_writer.completer.after_entry = another_completer_wins
    with elsewhere:
        txn.commit()  # the committer, late with plan version 1
    final = txn_writer.store.record(txn.id)
    assert final is not None and final.status is TxnStatus.COMMITTED and final.plan_version == 2
    assert txn.status() is TxnStatus.COMMITTED
    seen = visible(factory)
    assert sorted(seen) == sorted(written)
    assert by_key(seen) == by_key(written)


def test_a_reader_group_deleted_and_created_again_can_commit_its_positions(
    txn_factory: Any, factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    """The consumed positions live in the output stream's keys, keyed by the group's name;
    a group deleted and created again under that name starts its fencing tokens at 1 again.
    The tokens the old group left there must not refuse every commit of the new one (nor
    move its readers to the old group's positions)."""
    create_streams(manager, scope, 2, "in", "out")
    write_input(factory, "e", 20, keys=5)
    groups = manual_group(factory, scope)
    writer = pipe_writer(txn_factory)

    def one_pass(reader_id: str) -> int:
        reader = txn_factory.create_reader(reader_id, "g", BytesSerializer())
        writer.bind_reader(reader)
        batch = events_of(reader, 20, timeout=2)
        commit_output(writer, reader, batch)
        reader.close()
        return len(batch)

    one_pass("r1")  # tokens 1, 2
    assert one_pass("r2") == 0  # tokens 3, 4, now in the consumed positions
    assert groups.delete_reader_group("g")
    groups.create_reader_group("g", manual_config(scope))  # tokens from 1 again
    assert one_pass("r3") == 20  # from the start, as a new group


def test_the_sweep_drops_an_abandoned_transaction_whose_record_expired(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    """An open transaction left by every client outlives its record's Redis TTL (lease +
    retention): the record and staging list expire, but the index of unfinished
    transactions still names it. The next sweep must drop it, not fail on it (as 'no such
    transaction') on every sweep forever."""
    writer = new_writer(txn_factory, "gone", lease=0.05, retention=1.0, sweep_every=3600)
    txn = writer.begin()
    txn.write_event(b"x", routing_key="k")
    txn.flush()
    wait_for(lambda: writer.store.record(txn.id) is None)
    assert [t for t, _ in writer.store.unfinished()] == [txn.id]
    writer.sweep()
    assert writer.store.unfinished() == []
    assert visible(factory) == []


def test_an_input_segment_read_to_its_end_before_the_commit_loses_no_output(
    txn_factory: Any, factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    """Consume-transform-produce across a split of the input: the reader is handed the
    sealed segment's last events and reads on before committing their output with its
    positions. The segment must not be completed in the group by that (nobody would ever
    read it again, and the commit, seeing it given up, is refused): every input event has
    its output exactly once."""
    create_streams(manager, scope, 1, "in", "out")
    first = write_input(factory, "a", 10, keys=10)
    manual_group(factory, scope)
    writer = pipe_writer(txn_factory)
    reader = txn_factory.create_reader("r", "g", BytesSerializer())
    writer.bind_reader(reader)
    handed = events_of(reader, 10, timeout=2)
    assert len(handed) == 10
    manager.scale_stream(scope, "in", [0], [(0.0, 0.5), (0.5, 1.0)])
    second = write_input(factory, "b", 10, keys=10)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # reading on before committing
        handed += events_of(reader, 10, timeout=0.1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if handed:
            with contextlib.suppress(TransactionPositionsError):  # refused: it comes again
                commit_output(writer, reader, handed)
            handed = []
        out = [e.payload for e in factory.create_batch_client().read_events("out")]
        if len(out) >= 20:
            break
        handed += events_of(reader, 10, timeout=0.2)
    reader.close()
    assert sorted(out) == sorted(first + second)


def test_a_manual_commit_reader_completes_a_sealed_segment_only_once_its_end_is_committed(
    txn_factory: Any, factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    """commit_mode='manual' commits only on reader.commit(): a reader that was handed a
    sealed segment's last events and read again, then died before committing, must not
    have completed the segment in the group (its successors' readers would start and the
    uncommitted events would never come again)."""
    create_streams(manager, scope, 1, "in")
    written = write_input(factory, "a", 10, keys=10)
    manager.scale_stream(scope, "in", [0], [(0.0, 0.5), (0.5, 1.0)])
    manual_group(factory, scope)
    first = txn_factory.create_reader("r1", "g", BytesSerializer())
    assert len(events_of(first, 10, timeout=2)) == 10
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # reading on: the segment is read to its end
        assert not events_of(first, 10, timeout=0.1)
    first.close()  # never committed
    second = txn_factory.create_reader("r2", "g", BytesSerializer())
    again: list[Any] = []
    deadline = time.monotonic() + 5.0
    while len(again) < 10 and time.monotonic() < deadline:
        again += events_of(second, 10, timeout=0.2)
    second.close()
    assert sorted(bytes(e.event or b"") for e in again) == sorted(written)


def test_a_completed_input_segment_does_not_fail_the_next_commit(
    txn_factory: Any, factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    """A reader that committed an input segment's end (its output landed) and then
    completed it (read past a split) gave nothing up that another reader could read: its
    next commit, of the successors' output, must not be refused as if it had lost it."""
    create_streams(manager, scope, 1, "in", "out")
    write_input(factory, "a", 10, keys=10)
    manager.scale_stream(scope, "in", [0], [(0.0, 0.5), (0.5, 1.0)])
    write_input(factory, "b", 10, keys=10)
    manual_group(factory, scope)
    writer = pipe_writer(txn_factory)
    reader = txn_factory.create_reader("r", "g", BytesSerializer())
    writer.bind_reader(reader)
    done = 0
    deadline = time.monotonic() + 10
    while done < 20 and time.monotonic() < deadline:
        batch = events_of(reader, 20, timeout=0.2)
        if batch:
            commit_output(writer, reader, batch)  # never refused: the reader lost nothing
            done += len(batch)
    reader.close()
    assert done == 20


def test_a_completer_paused_past_the_retention_appends_nothing_again(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str, scope: str, redis_url: str
) -> None:
    """The writer-table fields that make a replayed plan entry a no-op are forgotten by the
    sweep of any writer of the stream ``retention`` (its own, as short as 1 s) after the
    transaction finished. A completer that paused between two entries while another
    completed the transaction and swept must re-read the record before appending more (it
    waited 30 s whatever the retention). The other writer is another process's (as in the
    test above)."""
    writer = new_writer(txn_factory, "slow", sweep_every=3600)  # retention: a day
    elsewhere = another_txn_factory(txn_factory, scope, redis_url)
    other = new_writer(elsewhere, "fast", retention=1.0, sweep_every=3600)
    txn = writer.begin()
    written = write_keys(txn, keys=16, per_key=2)
    calls: list[PlanEntry] = []

    def paused(entry: PlanEntry) -> None:
        calls.append(entry)
        if len(calls) > 1:
            return
        record = other.store.record(txn.id)
        assert record is not None and record.status is TxnStatus.COMMITTING
        other.completer.complete(record)
        done = other.store.record(txn.id)
        assert done is not None and done.status is TxnStatus.COMMITTED
        wait_for(lambda: factory.connection.server_time_ms() > done.finished_ms + 1000)
        other.sweep()  # forgets the entries' writer-table fields

    writer.completer.after_entry = paused
    try:
        with elsewhere:
            txn.commit()
    finally:
        seen = visible(factory)
        assert len(seen) == len(written) and sorted(seen) == sorted(written)  # each event once


def _one_segment_writer(
    factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> TransactionalEventStreamWriter[bytes]:
    create_streams(manager, scope, 1, "one")
    return factory.create_transactional_writer(
        "one", BytesSerializer(), TransactionalWriterConfig(transactional_id="big")
    )


def _spy_appends(
    writer: TransactionalEventStreamWriter[bytes],
    monkeypatch: pytest.MonkeyPatch,
    after: Any = None,
) -> list[int]:
    """Record the event count of every append the completion sends (the real appends run)."""
    segments = writer._connection.segments
    real = segments.append
    counts: list[int] = []

    def append(batches: Any) -> Any:
        replies = real(batches)
        counts.extend(b.count for b in batches)
        if after is not None:
            after(len(counts))
        return replies

    monkeypatch.setattr(segments, "append", append)
    return counts


def test_a_large_transaction_completes_in_bounded_appends(
    factory: EventStreamClientFactory,
    manager: StreamManager,
    scope: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan entry was appended in one script call (one MULTI off a cluster): a
    transaction of 300,000 events to one segment blocked Redis ~0.5 s (worst PING 477 ms,
    110 ms for the plain writer's same events). Each append carries at most 1000 events,
    as the plain writer's (max_batch_events)."""
    writer = _one_segment_writer(factory, manager, scope)
    txn = writer.begin()
    for i in range(2500):
        txn.write_event(b"%d" % i, routing_key=f"k{i % 3}")
    counts = _spy_appends(writer, monkeypatch)
    txn.commit()
    assert counts and max(counts) <= 1000 and sum(counts) == 2500
    seen = [(e.routing_key, e.payload) for e in factory.create_batch_client().read_events("one")]
    assert [p for _, p in seen] == [b"%d" % i for i in range(2500)]


def test_a_split_in_the_middle_of_an_entry_reroutes_only_what_was_not_taken(
    factory: EventStreamClientFactory,
    manager: StreamManager,
    scope: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The segment is split after the first part of its entry landed: that part stays, the
    rest goes to the successors, every event once, in per-key order."""
    writer = _one_segment_writer(factory, manager, scope)
    txn = writer.begin()
    written = []
    for i in range(2500):
        txn.write_event(b"%d" % i, routing_key=f"k{i % 7}")
        written.append((f"k{i % 7}", b"%d" % i))

    def split_once(appends: int) -> None:
        if appends == 1:
            manager.scale_stream(scope, "one", [0], [(0.0, 0.5), (0.5, 1.0)])

    _spy_appends(writer, monkeypatch, split_once)
    txn.commit()
    record = writer.store.record(txn.id)
    assert record is not None and record.plan is not None and record.plan_version == 2
    kept = [e for e in record.plan.entries if e.segment == 0]
    assert [len(e.indexes) for e in kept] == [1000]  # the chunk taken before the split
    seen = [
        (e.routing_key or "", e.payload) for e in factory.create_batch_client().read_events("one")
    ]
    assert sorted(seen) == sorted(written)
    assert by_key(seen) == by_key(written)


def _decided_not_landed(
    writer: TransactionalEventStreamWriter[bytes], tag: str
) -> list[tuple[str, bytes]]:
    """A transaction of ``writer`` decided, of which only its first segment's share landed
    (its completion failed after that): a Redis outage or crash mid-commit."""
    txn = writer.begin()
    written = write_keys(txn, keys=16, per_key=1, tag=tag)

    writer.completer.after_entry = die_after_entry
    with pytest.raises(Crash):
        txn.commit()
    writer.completer.after_entry = None
    record = writer.store.record(txn.id)
    assert record is not None and record.status is TxnStatus.COMMITTING
    return written


def test_a_writers_next_transaction_lands_after_its_decided_one_of_the_same_keys(
    factory: EventStreamClientFactory, txn_writer: TransactionalEventStreamWriter[bytes]
) -> None:
    """T1 is decided (committed) but its completion failed part-way; the application goes
    on with T2 over the same keys. Per key, T2's events must come after T1's (T1 was
    committed before T2's commit): the writer completes T1 before T2."""
    first = _decided_not_landed(txn_writer, "a")
    txn = txn_writer.begin()
    second = write_keys(txn, keys=16, per_key=1, tag="b")
    txn.commit()
    assert by_key(visible(factory)) == by_key(first + second)


def test_a_restarted_writer_completes_its_previous_instances_decided_transactions_first(
    txn_factory: Any, factory: EventStreamClientFactory, stream: str
) -> None:
    """The committing process died after T1's decision; the process restarts at once (the
    completion grace of the sweep not passed) and commits T2 over the same keys: T2's
    events must come after T1's, as a new Kafka producer first finishes its
    transactional id's pending transaction."""
    old = new_writer(txn_factory, "svc", completion_grace=60)
    first = _decided_not_landed(old, "a")
    new = new_writer(txn_factory, "svc", completion_grace=60)
    txn = new.begin()
    second = write_keys(txn, keys=16, per_key=1, tag="b")
    txn.commit()
    assert by_key(visible(factory)) == by_key(first + second)


def test_a_rewound_reader_completes_the_decided_transaction_it_resumes_after(
    txn_factory: Any,
    factory: EventStreamClientFactory,
    manager: StreamManager,
    scope: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit refused for a claim that had failed rewinds the reader to where decided
    transactions left its segments; a transaction named there that is still committing
    (its committer died mid-commit) must be completed first, as an acquisition's claim
    does: else the reader's next output of the same keys lands before it."""
    create_streams(manager, scope, 1, "in")
    create_streams(manager, scope, 4, "out")
    write_input(factory, "a", 16, keys=16)
    manual_group(factory, scope)
    reader = txn_factory.create_reader("r", "g", BytesSerializer())
    first = died_mid_commit(txn_factory, reader)
    live = pipe_writer(txn_factory)

    with monkeypatch.context() as patch, pytest.raises(RedisUnavailableError):
        patch.setattr(live.store, "claim", outage)
        live.bind_reader(reader)  # its claim failed: the next commit is refused
    second = write_input(factory, "b", 16, keys=16)
    handed = events_of(reader, 16, timeout=2)
    with pytest.raises(TransactionPositionsError):
        commit_output(live, reader, handed)
    commit_output(live, reader, events_of(reader, 16, timeout=2))
    out = [
        (e.routing_key or "", e.payload) for e in factory.create_batch_client().read_events("out")
    ]
    keys = [f"k{i}" for i in range(16)]
    assert by_key(out) == {
        k: [a, b] for k, a, b in zip(keys, sorted_by_key(first), second, strict=True)
    }


def died_mid_commit(txn_factory: Any, reader: Any) -> list[Any]:
    """``reader``'s next 16 events, their output decided with its positions by a writer
    bound to it that dies after one segment's share landed (no group positions either)."""
    dead = txn_factory.create_transactional_writer(
        "out", BytesSerializer(), TransactionalWriterConfig(transactional_id="dead")
    )
    dead.bind_reader(reader)
    events = events_of(reader, 16, timeout=2)
    assert len(events) == 16
    dead.completer.after_entry = die_after_entry
    with pytest.raises(Crash):
        commit_output(dead, reader, events)
    return events


def sorted_by_key(events: list[Any]) -> list[bytes]:
    """Payloads of ``events`` in the order of their keys k0, k1, ..."""
    return [bytes(e.event or b"") for e in sorted(events, key=lambda e: int(e.routing_key[1:]))]


def test_a_sealed_input_segment_whose_last_commit_died_before_the_group_positions_completes(
    txn_factory: Any, factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    """The transaction covering a sealed input segment's end was decided, and its process
    died before committing the group's positions (best effort after the commit). The
    segment's next claim finds the decided positions at its end: the group's must follow,
    else manual mode never completes the segment and its successors are never read."""
    create_streams(manager, scope, 1, "in")
    create_streams(manager, scope, 4, "out")
    write_input(factory, "a", 16, keys=16)
    manager.scale_stream(scope, "in", [0], [(0.0, 0.5), (0.5, 1.0)])
    second = write_input(factory, "b", 16, keys=16)
    manual_group(factory, scope)
    reader = txn_factory.create_reader("r", "g", BytesSerializer())
    died_mid_commit(txn_factory, reader)  # the group's positions never followed
    live = pipe_writer(txn_factory)
    live.bind_reader(reader)  # as the segment's next owner would: claims, completes
    handed: list[Any] = []
    deadline = time.monotonic() + 5
    while len(handed) < 16 and time.monotonic() < deadline:
        handed += events_of(reader, 16, timeout=0.2)
    reader.close()
    assert sorted(bytes(e.event or b"") for e in handed) == sorted(second)
