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

The decisions are :mod:`readergroup.client.txn_steps`' (shared with the asyncio writer,
:mod:`readergroup.aio.transactions`); the classes here drive them blocking.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from readergroup.client.metadata_cache import StreamMetadataCache
from readergroup.client.reader import EventStreamReader
from readergroup.client.serializers import Serializer
from readergroup.client.txn_positions import PositionsClaim, bind_reader
from readergroup.client.txn_steps import TxnCore, TxnWriterCore
from readergroup.core.calls import drive
from readergroup.core.errors import InvalidConfigError
from readergroup.core.group_state import SegKey
from readergroup.core.headers import Headers
from readergroup.core.transactions import TxnStatus, validate_transactional_id
from readergroup.storage.connection import RedisConnection
from readergroup.storage.staging_store import StagedEvent
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK

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


class TransactionalEventStreamWriter(TxnWriterCore[T]):
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
        super().__init__(
            connection,
            metadata,
            connection.transactions(scope, stream),
            scope,
            stream,
            serializer,
            config,
            clock=clock or SYSTEM_CLOCK,
            rng=rng,
            wall_clock_ms=wall_clock_ms or wall_clock_ms_now,
        )
        drive(self.start_steps(epoch))

    # -- public API -------------------------------------------------------------------------
    def begin(self) -> Transaction[T]:
        """Begin a transaction (OPEN for ``lease`` seconds, renewed by every write). Also a
        context manager: ``with writer.begin() as txn:`` commits it when the block ends,
        aborts it when the block raises."""
        return Transaction(self, drive(self.begin_steps()), [])

    def get_txn(self, txn_id: str) -> Transaction[T]:
        """The transaction ``txn_id``, begun by any writer of this stream, also one whose
        process died: an open one is taken over by this writer (the instance that held it is
        fenced from it), to commit or abort; a committing one is completed first."""
        drive(self.adopt_steps(txn_id))
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
        return super().positions_claim(reader, positions)

    def sweep(self) -> int:
        """Abort this stream's transactions past their lease and complete committing ones
        whose committer vanished; returns how many were finished."""
        return drive(self.sweep_steps())

    def close(self) -> None:
        """Close the writer (its factory's close does it too): it and its transactions refuse
        every later call (``WriterClosedError``). Open transactions stay open in Redis, neither
        committed nor aborted, as a Kafka producer's: another writer of the stream can take one
        over with ``get_txn`` and commit it, or it is aborted when its lease ends. Events
        written to one and not flushed yet are not staged (``flush()`` before handing one
        over)."""
        self._closed = True

    def __enter__(self) -> TransactionalEventStreamWriter[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transaction(TxnCore[T]):
    """One transaction (Pravega's ``Transaction``). Thread-safe."""

    def __init__(
        self,
        writer: TransactionalEventStreamWriter[T],
        txn_id: str,
        events: list[StagedEvent] | None,
    ) -> None:
        super().__init__(writer, txn_id, events, threading.Lock())

    def write_event(
        self, event: T, routing_key: str | None = None, *, headers: Headers | None = None
    ) -> None:
        """Add an event; per routing key, events keep this order when committed."""
        staged = self._writer._serialize(event, routing_key, headers)
        with self._lock:
            if self.buffer(staged):
                drive(self.stage_steps())

    def flush(self) -> None:
        """Stage every event written so far (renewing the lease)."""
        drive(self.flush_steps())

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
        drive(self.send_positions_steps(reader, positions))

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
        Redis answers; recreate the reader to resume from what was committed. A commit
        whose decision landed and whose completion failed (an outage after the decision) is
        completed by calling ``commit()`` again (or by ``status()``)."""
        drive(self.commit_steps(positions, reader))

    def abort(self) -> None:
        """Abort: nothing of it will ever be visible."""
        drive(self.abort_steps())

    def status(self) -> TxnStatus:
        """Where it is now; a committing transaction is completed first (whoever began it)."""
        return drive(self.status_steps())

    def __enter__(self) -> Transaction[T]:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        drive(self.exit_steps(failed=kind is not None))


def wall_clock_ms_now() -> int:
    """The wall clock in ms (an event's writer time)."""
    return int(time.time() * 1000)
