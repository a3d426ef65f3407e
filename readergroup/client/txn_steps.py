"""The decisions of a transactional writer and its transactions, written once as call steps
(:mod:`readergroup.core.calls`): :class:`TxnWriterCore` (an instance of a transactional id:
its epoch, beginning, taking over, the sweep, completing what an earlier instance decided)
and :class:`TxnCore` (one transaction: buffering, staging, the lease, the commit decision and
its completion, consumed positions, abort, status).

The threaded :class:`~readergroup.client.transactions.TransactionalEventStreamWriter` drives
them blocking; the asyncio :class:`~readergroup.aio.transactions.
AsyncTransactionalEventStreamWriter` awaits them. Their I/O is calls on the writer's store
(:class:`~readergroup.storage.txn_store.TxnStore` or :class:`~readergroup.storage.aio_txn_store.
AsyncTxnStore`), its stream metadata cache, its connection (``server_time_ms``) and appends
(through :class:`~readergroup.client.txn_completion.TxnCompleter`), a bound reader, and the
transaction's lock (a ``threading.Lock`` or an ``asyncio.Lock``: acquired by a call, so an
asyncio task waits for it without blocking the loop; released in ``finally``). States, keys
and guarantees: :mod:`readergroup.core.transactions`.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from readergroup.client.serializers import Serializer
from readergroup.client.txn_completion import TxnCompleter, position, sweep_steps
from readergroup.client.txn_positions import (
    ClaimSteps,
    PositionsClaim,
    Reader,
    committed,
    mirror_positions_steps,
    positions_claim,
    rewind_steps,
)
from readergroup.core.calls import Steps, call_on
from readergroup.core.errors import (
    EventTooLargeError,
    InvalidConfigError,
    ReaderGroupError,
    SerializationError,
    StreamSealedError,
    TransactionClosedError,
    TransactionError,
    TransactionNotFoundError,
    WriterClosedError,
)
from readergroup.core.group_state import SegKey
from readergroup.core.headers import Headers, encode_headers
from readergroup.core.transactions import CommitPlan, TxnRecord, TxnStatus
from readergroup.storage import segment_status
from readergroup.storage.staging_store import StagedEvent
from readergroup.storage.txn_store import Decision
from statesync.clock import Clock

# the threaded writer's logger name, kept: operators configure and grep it
logger = logging.getLogger("readergroup.client.transactions")

T = TypeVar("T")


def locked(lock: Any) -> Steps[None]:
    """Acquire ``lock`` (a call: awaited for an ``asyncio.Lock``); the caller releases it in
    a ``finally`` right after (never by a call, so a cancellation cannot skip it)."""
    yield call_on(lock, "acquire")


class TxnWriterCore(Generic[T]):
    """One instance of a transactional id on ``scope/stream``: the state and decisions both
    writers share (see the module docstring). No I/O outside its steps."""

    def __init__(
        self,
        connection: Any,
        metadata: Any,
        store: Any,
        scope: str,
        stream: str,
        serializer: Serializer[T],
        config: Any,
        *,
        clock: Clock,
        rng: random.Random | None,
        wall_clock_ms: Callable[[], int],
        completer_type: type[TxnCompleter] = TxnCompleter,
    ) -> None:
        """``connection``: ``server_time_ms`` and ``segments`` (appends), blocking or awaited,
        as are ``metadata`` and ``store``; ``config``: a
        :class:`~readergroup.client.transactions.TransactionalWriterConfig`;
        ``completer_type``: the completer's class (the asyncio one awaits ``complete``)."""
        self._connection = connection
        self._metadata = metadata
        self._wall_ms = wall_clock_ms
        self.scope = scope
        self.stream = stream
        self._serializer = serializer
        self.config = config
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 (spreading keyless events)
        self._max_event_size = 0
        self.store = store
        self.completer = completer_type(
            connection.segments,
            metadata,
            store,
            retention_ms=config.retention_ms,
            rng=self._rng,
            clock=clock.monotonic,
        )
        self.transactional_id: str = config.transactional_id
        self.epoch = 0
        self.holder = ""
        self._closed = False
        self._claimers: dict[int, ClaimSteps] = {}  # id() of a bound reader -> its listener
        self._last_sweep = float("-inf")
        # decided transactions of this id whose completion failed: completed before the next
        # decision, so that per key a later transaction's events come after theirs
        self._decided_lock = threading.Lock()
        self._decided: dict[str, TxnRecord] = {}

    def start_steps(self, epoch: int | None) -> Steps[None]:
        """Become the instance of ``epoch`` (``None``: a new one, fencing every older one),
        sweep, and complete what an earlier instance of the id decided."""
        # StreamNotFoundError now, not at the first commit; the limit is refreshed by begin()
        state = yield call_on(self._metadata, "get", self.scope, self.stream)
        self._max_event_size = state.config.max_event_size
        if epoch is None:
            epoch = yield call_on(self.store, "next_epoch", self.transactional_id)
        assert epoch is not None
        self.epoch = epoch
        self.holder = f"{self.epoch}:{self.transactional_id}"
        logger.info(
            "transactional writer %r of %s/%s: epoch %d (older instances fenced)",
            self.transactional_id,
            self.scope,
            self.stream,
            self.epoch,
        )
        yield from self.sweep_steps()
        yield from self._adopt_decided()

    def begin_steps(self) -> Steps[str]:
        """Begin a transaction; returns its id."""
        self._check_open()
        if self._clock.monotonic() - self._last_sweep >= self.config.sweep_every:
            yield from self.sweep_steps()
        txn_id = uuid.uuid4().hex
        state = yield call_on(self._metadata, "get", self.scope, self.stream)
        self._max_event_size = state.config.max_event_size
        config = self.config
        yield call_on(
            self.store,
            "begin",
            txn_id,
            self.transactional_id,
            self.epoch,
            config.lease_ms,
            config.retention_ms,
        )
        return txn_id

    def adopt_steps(self, txn_id: str) -> Steps[None]:
        """Take ``txn_id`` over (its ``status`` then completes it if committing)."""
        self._check_open()
        yield call_on(self.store, "adopt", txn_id, self.transactional_id, self.epoch)

    def positions_claim(
        self, reader: Reader, positions: Mapping[SegKey, int] | None
    ) -> PositionsClaim:
        """The claim a commit of ``reader``'s ``positions`` makes (see ``bind_reader``)."""
        return positions_claim(self, reader, positions)

    def _adopt_decided(self) -> Steps[None]:
        """Complete the committing transactions of this transactional id that an earlier
        instance decided (its process died mid-commit), as a new Kafka producer finishes its
        id's pending transaction: before this instance commits anything after them."""
        unfinished = yield call_on(self.store, "unfinished")
        records = yield call_on(self.store, "records", [txn_id for txn_id, _ in unfinished])
        for record in records:
            if (
                record.status is TxnStatus.COMMITTING
                and record.transactional_id == self.transactional_id
            ):
                with self._decided_lock:
                    self._decided[record.txn_id] = record
        yield from self.complete_decided_steps()

    def complete_decided_steps(self) -> Steps[None]:
        """Complete the decided transactions of this id not completed yet (raises what
        completing one raises: the next commit then fails, deciding nothing)."""
        with self._decided_lock:
            records = list(self._decided.values())
        for remembered in records:
            record = yield call_on(self.store, "record", remembered.txn_id)
            if record is not None and record.status is TxnStatus.COMMITTING:
                logger.info(
                    "%s: completing it before the next commit of %r",
                    self.store.subject(record.txn_id),
                    self.transactional_id,
                )
                yield from self.completer.complete_steps(record)
            with self._decided_lock:  # completed, by this or another client
                self._decided.pop(remembered.txn_id, None)

    def sweep_steps(self) -> Steps[int]:
        """Abort this stream's transactions past their lease and complete committing ones
        whose committer vanished; returns how many were finished."""
        self._last_sweep = self._clock.monotonic()
        now = yield call_on(self._connection, "server_time_ms")
        finished: int = yield from sweep_steps(
            self.store, self.completer, now, self.config.retention_ms
        )
        return finished

    def _check_open(self) -> None:
        if self._closed:
            raise WriterClosedError(
                f"transactional writer {self.transactional_id!r} of {self.scope}/{self.stream} "
                "is closed"
            )

    def _serialize(self, event: T, routing_key: str | None, headers: Headers | None) -> StagedEvent:
        payload = self._serializer.serialize(event)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise SerializationError(
                f"serializer {type(self._serializer).__name__} returned "
                f"{type(payload).__name__}, not bytes (routing key {routing_key!r})"
            )
        packed = (
            encode_headers(headers, f"the event with routing key {routing_key!r}")
            if headers
            else b""
        )
        data = bytes(payload)
        limit = self._max_event_size
        if len(data) + len(packed) > limit:
            raise EventTooLargeError(
                f"event of {len(data) + len(packed)} bytes exceeds max_event_size {limit} of "
                f"{self.scope}/{self.stream} (routing key {routing_key!r})"
            )
        return routing_key, data, self._wall_ms(), packed


class TxnCore(Generic[T]):
    """One transaction's state and decisions (see the module docstring). ``lock``: the
    driver's lock (``threading.Lock`` or ``asyncio.Lock``), held while its state changes."""

    def __init__(
        self,
        writer: TxnWriterCore[T],
        txn_id: str,
        events: list[StagedEvent] | None,
        lock: Any,
    ) -> None:
        self._writer = writer
        self.id = txn_id
        # every event of this transaction in order (None: resumed, read from Redis at commit)
        self._events = events
        self._pending: list[StagedEvent] = []
        self._lock = lock
        self._renewed = writer._clock.monotonic()
        self._ended: TxnStatus | None = None  # set by this object's commit or abort
        self._broken: ReaderGroupError | None = None  # a stage whose outcome is unknown
        self._consumed: tuple[Reader, dict[SegKey, int] | None] | None = None
        # what this object's decision committed of a reader (done once the commit completes)
        self._decided_claim: tuple[Reader, PositionsClaim] | None = None

    def __repr__(self) -> str:
        return f"Transaction({self.id!r} of {self._writer.scope}/{self._writer.stream})"

    def buffer(self, staged: StagedEvent) -> bool:
        """``write_event``'s decision, under the lock (held by the driver: no I/O here, so an
        event costs no call): add the (serialized) event; whether the buffer is due to be
        staged now (:meth:`stage_steps`: more than ``stage_events`` events, or a third of the
        lease since the last renewal)."""
        self._check_writable()
        self._pending.append(staged)
        due: bool = len(self._pending) > self._writer.config.stage_events or (
            self._writer._clock.monotonic() - self._renewed > self._writer.config.lease / 3
        )
        return due

    def flush_steps(self) -> Steps[None]:
        yield from locked(self._lock)
        try:
            self._check_writable()
            yield from self.stage_steps()
        finally:
            self._lock.release()

    def send_positions_steps(
        self, reader: Reader, positions: Mapping[SegKey, int] | None
    ) -> Steps[None]:
        chosen = dict(positions) if positions is not None else None
        yield from locked(self._lock)
        try:
            self._check_writable()
            self._consumed = (reader, chosen)
        finally:
            self._lock.release()

    def commit_steps(
        self, positions: Mapping[SegKey, int] | None, reader: Reader | None
    ) -> Steps[None]:
        """See :meth:`Transaction.commit <readergroup.client.transactions.Transaction.commit>`."""
        if self._ended is TxnStatus.COMMITTING:
            yield from self._complete_own_decision()
            return
        if reader is not None:
            yield from self.send_positions_steps(reader, positions)
        elif positions is not None:
            raise InvalidConfigError("commit(positions=...) needs the reader they are of")
        consumed = self._consumed
        if consumed is None:
            yield from self._commit(None, None)
            return
        writer, reader = self._writer, consumed[0]
        try:
            claim = writer.positions_claim(*consumed)
        except TransactionError:
            yield from self.abort_steps()
            yield from rewind_steps(writer, reader)  # this transaction's input comes again
            raise
        try:
            yield from self._commit(claim, reader)
        except TransactionError:
            yield from rewind_steps(writer, reader)
            raise
        yield from self._positions_committed()

    def _positions_committed(self) -> Steps[None]:
        """The decision with a reader's positions completed: the reader counts drops afresh
        and its group's positions follow."""
        if self._decided_claim is not None:
            reader, claim = self._decided_claim
            self._decided_claim = None
            committed(self._writer, reader)
            yield from mirror_positions_steps(reader, claim.positions)

    def _complete_own_decision(self) -> Steps[None]:
        """A commit again after this object's decision landed and its completion did not
        finish (an outage, a cancelled task): complete it now."""
        writer = self._writer
        logger.info("%s: completing the commit decided before", writer.store.subject(self.id))
        status = yield from self.status_steps()  # (completes it)
        if status is not TxnStatus.COMMITTED:
            raise TransactionClosedError(
                f"{writer.store.subject(self.id)} is {status.value}",
                txn_id=self.id,
                status=status.value,
            )
        self._ended = TxnStatus.COMMITTED
        with writer._decided_lock:
            writer._decided.pop(self.id, None)
        yield from self._positions_committed()

    def _commit(self, claim: PositionsClaim | None, reader: Reader | None) -> Steps[None]:
        writer = self._writer
        yield from writer.complete_decided_steps()  # per key, this one's events come after theirs
        consumed: tuple[str, str, tuple[tuple[str, int, int], ...], int] = (
            ("", "", (), 0)
            if claim is None
            else (claim.text, claim.group_sync, claim.claims, claim.generation)
        )
        yield from locked(self._lock)
        try:
            self._check_writable()
            events = yield from self._all_events()
            state = yield call_on(writer._metadata, "get", writer.scope, writer.stream)
            if state.sealed:
                raise StreamSealedError(f"stream {writer.scope}/{writer.stream} is sealed")
            ranges = state.range_map()
            plan = CommitPlan.route([ranges.segment_at(position(e, writer._rng)) for e in events])
            decision = Decision(len(events), plan, writer.config.grace_ms, *consumed)
            # the buffered tail stays buffered until the decision took it: after a failure
            # (Redis unreachable, a lost reply) a retried commit carries it again; if the
            # decision did run, the retry finds the transaction COMMITTING and decides nothing
            code, total, decided = yield call_on(
                writer.store,
                "stage",
                self.id,
                writer.holder,
                self._pending,
                writer.config.retention_ms,
                decision,
            )
            if code == segment_status.CONFLICT:
                raise TransactionError(
                    f"{writer.store.subject(self.id)}: {total} events staged, this client "
                    f"wrote {len(events)} (a stage retried after a lost reply?); not committed",
                    txn_id=self.id,
                    status=TxnStatus.OPEN.value,
                )
            self._events, self._pending = events, []
            self._ended = TxnStatus.COMMITTING
            if claim is not None:
                self._decided_claim = (reader, claim)
        finally:
            self._lock.release()
        record = TxnRecord(
            txn_id=self.id,
            status=TxnStatus.COMMITTING,
            transactional_id=writer.transactional_id,
            epoch=writer.epoch,
            created_ms=0,
            deadline_ms=0,
            lease_ms=writer.config.lease_ms,
            events=len(events),
            size=sum(len(e[1]) for e in events),
            plan=plan,
            plan_version=1,
            positions=consumed[0],
            decided_ms=decided,
        )
        try:
            yield from writer.completer.complete_steps(record, events)
        except BaseException:
            with writer._decided_lock:  # completed before the writer's next commit
                writer._decided[self.id] = record
            raise
        self._ended = TxnStatus.COMMITTED

    def abort_steps(self) -> Steps[None]:
        writer = self._writer
        yield from locked(self._lock)
        try:
            self._broken = None  # (aborting is what a failed stage leaves to do)
            self._check_writable()
            self._pending = []
            finished = yield call_on(
                writer.store, "finish", self.id, "abort", writer.config.retention_ms, writer.holder
            )
            self._ended = TxnStatus.ABORTED
            if not finished:
                raise TransactionClosedError(
                    f"{writer.store.subject(self.id)} was aborted already",
                    txn_id=self.id,
                    status=TxnStatus.ABORTED.value,
                )
        finally:
            self._lock.release()

    def status_steps(self) -> Steps[TxnStatus]:
        writer = self._writer
        record = yield call_on(writer.store, "record", self.id)
        if record is None:
            raise TransactionNotFoundError(
                f"{writer.store.subject(self.id)} does not exist", txn_id=self.id
            )
        if record.status is TxnStatus.COMMITTING:
            yield from writer.completer.complete_steps(record)
            return TxnStatus.COMMITTED
        now = yield call_on(writer._connection, "server_time_ms")
        status: TxnStatus = record.effective_status(now)
        return status

    def exit_steps(self, failed: bool) -> Steps[None]:
        """The end of a ``with``/``async with`` block around the transaction: commit it if the
        block finished and it is still open here, abort it if the block raised (unless this
        object committed or aborted it already)."""
        if self._ended is not None:
            return
        if failed:
            try:
                yield from self.abort_steps()
            except ReaderGroupError as exc:  # the block's own error is the one raised
                logger.warning(
                    "%s: abort after the block failed did not go through (its lease ends it): %s",
                    self._writer.store.subject(self.id),
                    exc,
                    exc_info=exc,
                )
        else:
            yield from self.commit_steps(None, None)

    # -- internals (under _lock) -------------------------------------------------------------
    def _check_writable(self) -> None:
        self._writer._check_open()
        if self._ended is not None:
            raise TransactionClosedError(
                f"{self._writer.store.subject(self.id)} is {self._ended.value}",
                txn_id=self.id,
                status=self._ended.value,
            )
        if self._broken is not None:
            raise TransactionError(
                f"{self._writer.store.subject(self.id)}: staging events failed ({self._broken}); "
                "whether they are staged is unknown, so it cannot be committed: abort it",
                txn_id=self.id,
                status=TxnStatus.OPEN.value,
            ) from self._broken

    def stage_steps(self) -> Steps[None]:
        """Stage the buffered events (the driver holds the lock)."""
        writer = self._writer
        pending, self._pending = self._pending, []
        try:
            yield call_on(
                writer.store, "stage", self.id, writer.holder, pending, writer.config.retention_ms
            )
        except TransactionError:
            raise  # closed, fenced, expired: the transaction says so itself
        except ReaderGroupError as exc:
            self._broken = exc  # (a lost reply: the events may be staged or not)
            raise
        except BaseException as exc:  # cancelled while staging: the same doubt
            self._broken = ReaderGroupError(f"staging interrupted ({exc!r})")
            raise
        self._renewed = writer._clock.monotonic()
        if self._events is not None:
            self._events.extend(pending)

    def _all_events(self) -> Steps[list[StagedEvent]]:
        """Every event of the transaction in order: staged, then still buffered."""
        if self._events is None:
            self._events = yield call_on(self._writer.store, "staged", self.id)
        assert self._events is not None
        return [*self._events, *self._pending]
