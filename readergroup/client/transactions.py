"""``TransactionalEventStreamWriter`` and ``Transaction``: all-or-nothing writes to a stream.

States, keys and guarantees: :mod:`readergroup.core.transactions`. Here:

* :class:`TransactionalEventStreamWriter` (``factory.create_transactional_writer``): one
  instance of a transactional id. Creating it bumps the id's epoch, fencing every older
  instance; ``begin()`` starts a :class:`Transaction`, ``get_txn(id)`` resumes one begun by
  any instance (also of another process that died), taking it over.
* :class:`Transaction`: ``write_event`` buffers; events are staged (never in a segment) by
  ``flush()``, by every ``stage_events`` events, and by ``commit()``, which stages the rest
  and records the decision in one script, then completes it.
* completion and the sweep (:mod:`readergroup.client.txn_completion`): a COMMITTING
  transaction is completed by whoever finds it; the sweep runs on ``begin`` now and then and
  in the ``readergroup txn`` commands, so no live writer is needed.

Consume-transform-produce (``commit(positions=..., reader=...)`` or ``send_positions``,
:mod:`readergroup.client.txn_positions`): the decision claims the consumed input segments
under the reader's fencing tokens; a reader that lost or gave up one fails the commit
(:class:`~readergroup.core.errors.TransactionPositionsError`), nothing lands, and the reader
is rewound so that input comes again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from readergroup.client.metadata_cache import StreamMetadataCache
from readergroup.client.reader import EventStreamReader
from readergroup.client.serializers import Serializer
from readergroup.client.txn_completion import TxnCompleter, position, sweep
from readergroup.client.txn_positions import (
    Claimer,
    PositionsClaim,
    bind_reader,
    committed,
    mirror_positions,
    positions_claim,
    rewind,
)
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
from readergroup.core.transactions import (
    CommitPlan,
    TxnRecord,
    TxnStatus,
    validate_transactional_id,
)
from readergroup.storage import segment_status
from readergroup.storage.connection import RedisConnection
from readergroup.storage.staging_store import StagedEvent
from readergroup.storage.txn_store import Decision
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class TransactionalWriterConfig:
    """Transactional writer settings.

    Attributes:
        transactional_id: names this writer across restarts (Kafka's ``transactional.id``):
            a new instance fences every older one of the same id. 1-200 characters.
        lease: seconds a transaction stays open without a write, flush or ``ping`` before the
            system aborts it (default 60.0; 0.05-86400).
        stage_events: events buffered before they are staged (default 1000; 1-100000); a
            transaction of at most this many is staged by its commit, in the same call.
        retention: seconds a finished transaction's record is kept for ``status``/``get_txn``
            (default 86400.0; >= 1).
        completion_grace: seconds a committing transaction is left to its committer before
            any client completes it (default 10.0; > 0).
        sweep_every: seconds between two sweeps by this writer's ``begin`` (default 5.0;
            >= 0, 0: every ``begin``).
    """

    transactional_id: str
    lease: float = 60.0
    stage_events: int = 1000
    retention: float = 86400.0
    completion_grace: float = 10.0
    sweep_every: float = 5.0

    def __post_init__(self) -> None:
        validate_transactional_id(self.transactional_id)
        if not 0.05 <= self.lease <= 86400:
            raise InvalidConfigError(f"lease must be 0.05..86400 seconds, got {self.lease}")
        if not 1 <= self.stage_events <= 100_000:
            raise InvalidConfigError(f"stage_events must be 1..100000, got {self.stage_events}")
        if not self.retention >= 1 or not self.completion_grace > 0 or not self.sweep_every >= 0:
            raise InvalidConfigError(
                "retention must be >= 1, completion_grace > 0 and sweep_every >= 0 seconds"
            )

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)

    @property
    def retention_ms(self) -> int:
        return int(self.retention * 1000)

    @property
    def grace_ms(self) -> int:
        return int(self.completion_grace * 1000)


class TransactionalEventStreamWriter(Generic[T]):
    """Writes events of type ``T`` to one stream in transactions. Create with
    :meth:`EventStreamClientFactory.create_transactional_writer`."""

    def __init__(
        self,
        connection: RedisConnection,
        metadata: StreamMetadataCache,
        scope: str,
        stream: str,
        serializer: Serializer[T],
        config: TransactionalWriterConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
        epoch: int | None = None,
    ) -> None:
        """``epoch``: act as the instance of that epoch instead of a new one (a Spark sink's
        driver committing what its tasks staged); ``None``: a new instance, fencing the
        older ones."""
        self._connection = connection
        self._metadata = metadata
        self._wall_ms = wall_clock_ms or _wall_clock_ms
        self.scope = scope
        self.stream = stream
        self._serializer = serializer
        self.config = config
        self._clock = clock or SYSTEM_CLOCK
        self._rng = rng or random.Random()  # noqa: S311 (spreading keyless events)
        # StreamNotFoundError now, not at the first commit; the limit is refreshed by begin()
        self._max_event_size = metadata.get(scope, stream).config.max_event_size
        self.store = connection.transactions(scope, stream)
        self.completer = TxnCompleter(
            connection,
            metadata,
            self.store,
            retention_ms=config.retention_ms,
            rng=self._rng,
            clock=self._clock.monotonic,
        )
        self.transactional_id = config.transactional_id
        self.epoch = self.store.next_epoch(self.transactional_id) if epoch is None else epoch
        self.holder = f"{self.epoch}:{self.transactional_id}"
        logger.info(
            "transactional writer %r of %s/%s: epoch %d (older instances fenced)",
            self.transactional_id,
            scope,
            stream,
            self.epoch,
        )
        self._closed = False
        self._claimers: dict[int, Claimer] = {}  # id() of a bound reader -> its listener
        self._last_sweep = float("-inf")
        # decided transactions of this id whose completion failed: completed before the next
        # decision, so that per key a later transaction's events come after theirs
        self._decided_lock = threading.Lock()
        self._decided: dict[str, TxnRecord] = {}
        self.sweep()
        self._adopt_decided()

    # -- public API -------------------------------------------------------------------------
    def begin(self) -> Transaction[T]:
        """Begin a transaction (OPEN for ``lease`` seconds, renewed by every write)."""
        self._check_open()
        if self._clock.monotonic() - self._last_sweep >= self.config.sweep_every:
            self.sweep()
        txn_id = uuid.uuid4().hex
        self._max_event_size = self._metadata.get(self.scope, self.stream).config.max_event_size
        config = self.config
        self.store.begin(
            txn_id, self.transactional_id, self.epoch, config.lease_ms, config.retention_ms
        )
        return Transaction(self, txn_id, [])

    def get_txn(self, txn_id: str) -> Transaction[T]:
        """The transaction ``txn_id``, begun by any writer of this stream, also one whose
        process died: an open one is taken over by this writer (the instance that held it is
        fenced from it), to commit or abort; a committing one is completed first."""
        self._check_open()
        self.store.adopt(txn_id, self.transactional_id, self.epoch)
        txn: Transaction[T] = Transaction(self, txn_id, None)
        txn.status()  # completes it if committing
        return txn

    def bind_reader(self, reader: EventStreamReader[Any]) -> None:
        """Make ``reader`` a consumer of this writer's consume-transform-produce pipeline:
        when it acquires a segment it claims it (a commit of the segment's previous owner not
        decided yet is then refused) and resumes after what transactions already decided
        consumed of it. Bind every reader of the pipeline's group, right after creating it."""
        bind_reader(self, reader)

    def positions_claim(
        self, reader: EventStreamReader[Any], positions: Mapping[SegKey, int] | None
    ) -> PositionsClaim:
        """The claim a commit of ``reader``'s ``positions`` makes (see :meth:`bind_reader`)."""
        return positions_claim(self, reader, positions)

    def _adopt_decided(self) -> None:
        """Complete the committing transactions of this transactional id that an earlier
        instance decided (its process died mid-commit), as a new Kafka producer finishes its
        id's pending transaction: before this instance commits anything after them."""
        ids = [txn_id for txn_id, _ in self.store.unfinished()]
        for record in self.store.records(ids):
            if (
                record.status is TxnStatus.COMMITTING
                and record.transactional_id == self.transactional_id
            ):
                with self._decided_lock:
                    self._decided[record.txn_id] = record
        self._complete_decided()

    def _complete_decided(self) -> None:
        """Complete the decided transactions of this id not completed yet (raises what
        completing one raises: the next commit then fails, deciding nothing)."""
        with self._decided_lock:
            records = list(self._decided.values())
        for remembered in records:
            record = self.store.record(remembered.txn_id)
            if record is not None and record.status is TxnStatus.COMMITTING:
                logger.info(
                    "%s: completing it before the next commit of %r",
                    self.store.subject(record.txn_id),
                    self.transactional_id,
                )
                self.completer.complete(record)
            with self._decided_lock:  # completed, by this or another client
                self._decided.pop(remembered.txn_id, None)

    def sweep(self) -> int:
        """Abort this stream's transactions past their lease and complete committing ones
        whose committer vanished; returns how many were finished."""
        self._last_sweep = self._clock.monotonic()
        return sweep(
            self.store, self.completer, self._connection.server_time_ms(), self.config.retention_ms
        )

    def close(self) -> None:
        """Close the writer. Open transactions are left to commit by ``get_txn`` elsewhere, or
        to expire."""
        self._closed = True

    def __enter__(self) -> TransactionalEventStreamWriter[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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


class Transaction(Generic[T]):
    """One transaction (Pravega's ``Transaction``). Thread-safe."""

    def __init__(
        self,
        writer: TransactionalEventStreamWriter[T],
        txn_id: str,
        events: list[StagedEvent] | None,
    ) -> None:
        self._writer = writer
        self.id = txn_id
        # every event of this transaction in order (None: resumed, read from Redis at commit)
        self._events = events
        self._pending: list[StagedEvent] = []
        self._lock = threading.Lock()
        self._renewed = writer._clock.monotonic()
        self._ended: TxnStatus | None = None  # set by this object's commit or abort
        self._broken: ReaderGroupError | None = None  # a stage whose outcome is unknown
        self._consumed: tuple[EventStreamReader[Any], dict[SegKey, int] | None] | None = None

    def __repr__(self) -> str:
        return f"Transaction({self.id!r} of {self._writer.scope}/{self._writer.stream})"

    def write_event(
        self, event: T, routing_key: str | None = None, *, headers: Headers | None = None
    ) -> None:
        """Add an event; per routing key, events keep this order when committed."""
        staged = self._writer._serialize(event, routing_key, headers)
        with self._lock:
            self._check_writable()
            self._pending.append(staged)
            due = len(self._pending) > self._writer.config.stage_events or (
                self._writer._clock.monotonic() - self._renewed > self._writer.config.lease / 3
            )
            if due:
                self._stage()

    def flush(self) -> None:
        """Stage every event written so far (renewing the lease)."""
        with self._lock:
            self._check_writable()
            self._stage()

    def ping(self) -> None:
        """Renew the lease (Pravega's ``pingTxn``); flushes too."""
        self.flush()

    def send_positions(
        self, reader: EventStreamReader[Any], positions: Mapping[SegKey, int] | None = None
    ) -> None:
        """Commit ``reader``'s positions with this transaction (Kafka's
        ``sendOffsetsToTransaction``): ``positions`` (segment -> position), by default the
        position of every owned segment (every event handed out). The reader must be bound
        to the writer (:meth:`TransactionalEventStreamWriter.bind_reader`)."""
        chosen = dict(positions) if positions is not None else None
        with self._lock:
            self._check_writable()
            self._consumed = (reader, chosen)

    def commit(
        self,
        positions: Mapping[SegKey, int] | None = None,
        *,
        reader: EventStreamReader[Any] | None = None,
    ) -> None:
        """Commit: every event becomes visible, all or nothing, in per-key write order after
        everything committed before. With ``reader`` (and optionally ``positions``), its
        positions are committed with the output, as :meth:`send_positions` does.

        Raises :class:`TransactionClosedError` (not open), ``TransactionExpiredError``,
        ``TransactionFencedError``, :class:`TransactionPositionsError` (the reader gave up or
        lost an input segment since its last commit, or another reader claimed one): nothing
        landed then, and a ``reader``'s owned segments are rewound to where committed
        transactions left them, so the events of this one are handed out again. After any
        other error (Redis unreachable) the outcome is unknown: ``status()`` tells it once
        Redis answers; recreate the reader to resume from what was committed."""
        if reader is not None:
            self.send_positions(reader, positions)
        elif positions is not None:
            raise InvalidConfigError("commit(positions=...) needs the reader they are of")
        consumed = self._consumed
        if consumed is None:
            self._commit(None)
            return
        reader = consumed[0]
        try:
            claim = self._writer.positions_claim(*consumed)
        except TransactionError:
            self.abort()
            rewind(self._writer, reader)  # this transaction's input is handed out again
            raise
        try:
            self._commit(claim)
        except TransactionError:
            rewind(self._writer, reader)
            raise
        committed(self._writer, reader)
        mirror_positions(reader, claim.positions)

    def _commit(self, claim: PositionsClaim | None) -> None:
        writer = self._writer
        writer._complete_decided()  # per key, this one's events come after theirs
        consumed: tuple[str, str, tuple[tuple[str, int, int], ...], int] = (
            ("", "", (), 0)
            if claim is None
            else (claim.text, claim.group_sync, claim.claims, claim.generation)
        )
        with self._lock:
            self._check_writable()
            events = self._all_events()
            state = writer._metadata.get(writer.scope, writer.stream)
            if state.sealed:
                raise StreamSealedError(f"stream {writer.scope}/{writer.stream} is sealed")
            ranges = state.range_map()
            plan = CommitPlan.route([ranges.segment_at(position(e, writer._rng)) for e in events])
            decision = Decision(len(events), plan, writer.config.grace_ms, *consumed)
            # the buffered tail stays buffered until the decision took it: after a failure
            # (Redis unreachable, a lost reply) a retried commit carries it again; if the
            # decision did run, the retry finds the transaction COMMITTING and decides nothing
            code, total, decided = writer.store.stage(
                self.id, writer.holder, self._pending, writer.config.retention_ms, decision
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
            writer.completer.complete(record, events)
        except BaseException:
            with writer._decided_lock:  # completed before the writer's next commit
                writer._decided[self.id] = record
            raise
        self._ended = TxnStatus.COMMITTED

    def abort(self) -> None:
        """Abort: nothing of it will ever be visible."""
        writer = self._writer
        with self._lock:
            self._broken = None  # (aborting is what a failed stage leaves to do)
            self._check_writable()
            self._pending = []
            if not writer.store.finish(self.id, "abort", writer.config.retention_ms, writer.holder):
                self._ended = TxnStatus.ABORTED
                raise TransactionClosedError(
                    f"{writer.store.subject(self.id)} was aborted already",
                    txn_id=self.id,
                    status=TxnStatus.ABORTED.value,
                )
            self._ended = TxnStatus.ABORTED

    def status(self) -> TxnStatus:
        """Where it is now; a committing transaction is completed first (whoever began it)."""
        writer = self._writer
        record = writer.store.record(self.id)
        if record is None:
            raise TransactionNotFoundError(
                f"{writer.store.subject(self.id)} does not exist", txn_id=self.id
            )
        if record.status is TxnStatus.COMMITTING:
            writer.completer.complete(record)
            return TxnStatus.COMMITTED
        return record.effective_status(writer._connection.server_time_ms())

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

    def _stage(self) -> None:
        writer = self._writer
        pending, self._pending = self._pending, []
        try:
            writer.store.stage(self.id, writer.holder, pending, writer.config.retention_ms)
        except TransactionError:
            raise  # closed, fenced, expired: the transaction says so itself
        except ReaderGroupError as exc:
            self._broken = exc  # (a lost reply: the events may be staged or not)
            raise
        self._renewed = writer._clock.monotonic()
        if self._events is not None:
            self._events.extend(pending)

    def _all_events(self) -> list[StagedEvent]:
        """Every event of the transaction in order: staged, then still buffered."""
        if self._events is None:
            self._events = self._writer.store.staged(self.id)
        return [*self._events, *self._pending]


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
