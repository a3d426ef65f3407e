"""Completing committing transactions, whoever began them: :class:`TxnCompleter` (one
idempotent append per plan entry, re-routing entries whose segment was sealed before taking
them, then COMMITTED) and :func:`sweep` (aborts transactions past their lease, completes
committing ones whose committer vanished, forgets old writer-table entries). States and
guarantees: :mod:`readergroup.core.transactions`."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Sequence

from readergroup.client.metadata_cache import StreamMetadataCache
from readergroup.core.errors import (
    ReaderGroupError,
    SegmentNotFoundError,
    StreamSealedError,
    TransactionClosedError,
    TransactionError,
    TransactionNotFoundError,
)
from readergroup.core.routing import key_position
from readergroup.core.transactions import CommitPlan, PlanEntry, TxnRecord, TxnStatus
from readergroup.storage import segment_status
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from readergroup.storage.staging_store import StagedEvent
from readergroup.storage.txn_store import TxnStore

logger = logging.getLogger(__name__)


class TxnCompleter:
    """Completes committing transactions of one stream (any client may)."""

    _MAX_ROUNDS = 50
    _RECHECK_AFTER = 30.0
    """Seconds after which a completion re-reads the record before appending more (a
    quarter of the retention if that is shorter: the writer-table fields that make a replay a
    no-op are forgotten ``retention`` after the transaction finished)."""

    def __init__(
        self,
        connection: RedisConnection,
        metadata: StreamMetadataCache,
        store: TxnStore,
        *,
        retention_ms: int,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._connection = connection
        self._metadata = metadata
        self._store = store
        self._retention_ms = retention_ms
        self._recheck_after = min(self._RECHECK_AFTER, retention_ms / 4000)
        self._rng = rng or random.Random()  # noqa: S311 (spreading keyless events)
        self.after_entry: Callable[[PlanEntry], None] | None = None
        """Test hook: called after each plan entry landed (then entries go one per round),
        to kill the committer between segments."""

    def complete(self, record: TxnRecord, staged: Sequence[StagedEvent] | None = None) -> None:
        """Complete ``record`` (COMMITTING): every plan entry in its segment, the positions,
        then COMMITTED. ``staged``: its staged events if the caller holds them (else read)."""
        store = self._store
        txn_id = record.txn_id
        if record.status is TxnStatus.COMMITTED:
            return
        if record.status is not TxnStatus.COMMITTING or record.plan is None:
            raise TransactionClosedError(
                f"{store.subject(txn_id)} is {record.status.value}, not committing",
                txn_id=txn_id,
                status=record.status.value,
            )
        if staged is None:
            staged = store.staged(txn_id)
        if len(staged) != record.events:
            refreshed = store.record(txn_id)
            if refreshed is not None and refreshed.status is TxnStatus.COMMITTED:
                return  # completed meanwhile by another client (its staged list is gone)
            raise ReaderGroupError(
                f"{store.subject(txn_id)}: {len(staged)} staged events, record says "
                f"{record.events}; not completed"
            )
        plan, version = record.plan, record.plan_version
        landed: set[int] = set()
        checked = [self._clock()]
        for _ in range(self._MAX_ROUNDS):
            sealed = self._apply(txn_id, plan, staged, landed, checked)
            if sealed is None:
                return  # finished by another client meanwhile: append nothing more
            if not sealed:
                break
            replanned = self._reroute(record, plan, version, sealed, staged)
            if replanned is None:
                return  # another completer re-planned and finished it meanwhile
            plan, version = replanned
        else:
            raise ReaderGroupError(
                f"{store.subject(txn_id)}: segments kept sealing under its commit for "
                f"{self._MAX_ROUNDS} rounds; it stays committing (any client completes it)"
            )
        entries = [(e.segment, _entry_writer(txn_id, e)) for e in plan.entries]
        store.finish(txn_id, "commit", self._retention_ms, landed=entries)

    def _still_committing(self, txn_id: str, checked: list[float]) -> bool:
        """Whether the record still says COMMITTING, re-read when ``checked[0]`` (the last
        time it was known) is older than the recheck interval: a completer that took long
        checks before appending more (the writer table fields that make a replay a no-op are
        deleted ``retention`` after the transaction finished)."""
        now = self._clock()
        if now - checked[0] <= self._recheck_after:
            return True
        record = self._store.record(txn_id)
        checked[0] = now
        return record is not None and record.status is TxnStatus.COMMITTING

    def _apply(
        self,
        txn_id: str,
        plan: CommitPlan,
        staged: Sequence[StagedEvent],
        landed: set[int],
        checked: list[float],
    ) -> list[PlanEntry] | None:
        """Append every entry of ``plan`` not landed yet; returns the entries whose segment
        was sealed (or is gone) without holding them; None: the transaction was found
        finished (by another client) before an append (see :meth:`_still_committing`)."""
        store, scope, stream = self._store, self._store.scope, self._store.stream
        max_size = self._metadata.get(scope, stream).config.max_event_size
        todo = [e for e in plan.entries if e.tag not in landed]
        rounds = [[e] for e in todo] if self.after_entry is not None else [todo]
        sealed: list[PlanEntry] = []
        for entries in rounds:
            if not self._still_committing(txn_id, checked):
                return None
            batches = [
                AppendBatch.of(
                    scope,
                    stream,
                    entry.segment,
                    _entry_writer(txn_id, entry),
                    1,
                    [staged[i] for i in entry.indexes],
                    max(max_size, 1),
                )
                for entry in entries
            ]
            replies = self._connection.segments.append(batches) if batches else []
            for entry, reply in zip(entries, replies, strict=True):
                error = reply.error
                if reply.status in (segment_status.OK, segment_status.DUPLICATE) and not error:
                    landed.add(entry.tag)
                elif reply.status == segment_status.SEALED or isinstance(
                    error, SegmentNotFoundError
                ):
                    if store.applied(entry.segment, _entry_writer(txn_id, entry)):
                        landed.add(entry.tag)  # it landed before the seal
                    else:
                        sealed.append(entry)
                elif error is not None:
                    raise error
                if entry.tag in landed and self.after_entry is not None:
                    self.after_entry(entry)
        return sealed

    def _reroute(
        self,
        record: TxnRecord,
        plan: CommitPlan,
        version: int,
        sealed: list[PlanEntry],
        staged: Sequence[StagedEvent],
    ) -> tuple[CommitPlan, int] | None:
        """Route the events of ``sealed`` entries to the segments current now; agree on the
        new plan with any other completer (compare-and-set). None: another completer
        finished the transaction meanwhile (COMMITTED: its plan's entries all landed)."""
        store = self._store
        self._metadata.invalidate(store.scope, store.stream)
        state = self._metadata.get(store.scope, store.stream)
        if state.sealed:
            raise StreamSealedError(
                f"{store.subject(record.txn_id)}: stream sealed while committing; it stays "
                "committing until the stream takes writes again"
            )
        ranges = state.range_map()
        new = plan
        for entry in sealed:
            routes = {i: ranges.segment_at(position(staged[i], self._rng)) for i in entry.indexes}
            new = new.rerouted(entry.tag, routes)
        try:
            replanned = store.replan(record.txn_id, version, new)
        except TransactionClosedError as exc:
            if exc.status == TxnStatus.COMMITTED.value:
                return None
            raise
        if replanned:
            logger.info(
                "%s: %d plan entries re-routed off sealed segments",
                store.subject(record.txn_id),
                len(sealed),
            )
            return new, version + 1
        current = store.record(record.txn_id)  # another completer's plan: follow it
        if current is None or current.plan is None:
            raise TransactionNotFoundError(
                f"{store.subject(record.txn_id)} vanished while committing", txn_id=record.txn_id
            )
        return current.plan, current.plan_version


def sweep(store: TxnStore, completer: TxnCompleter, now_ms: int, retention_ms: int) -> int:
    """Finish the stream's transactions past their deadline (server ms ``now_ms``): abort
    OPEN ones, complete COMMITTING ones. Returns how many it finished."""
    finished = 0
    store.forget_finished(now_ms - retention_ms)
    for txn_id, _ in store.unfinished(until_ms=now_ms):
        try:
            record = store.record(txn_id)
            if record is None or record.status is TxnStatus.OPEN:
                if store.finish(txn_id, "expire", retention_ms):
                    logger.info("%s: lease expired, aborted", store.subject(txn_id))
                    finished += 1
            elif record.status is TxnStatus.COMMITTING:
                completer.complete(record)
                logger.info("%s: completed for a committer gone", store.subject(txn_id))
                finished += 1
        except TransactionError as exc:  # finished meanwhile by someone else
            logger.info("%s: not swept: %s", store.subject(txn_id), exc)
        except ReaderGroupError as exc:
            logger.warning("%s: sweep failed: %s", store.subject(txn_id), exc, exc_info=exc)
    return finished


def _entry_writer(txn_id: str, entry: PlanEntry) -> str:
    """The writer id a plan entry is appended under (its segment's writer table dedupes)."""
    return f"txn:{txn_id}:{entry.tag}"


def position(event: StagedEvent, rng: random.Random) -> float:
    """An event's key-space position: its routing key's, or a random one without a key."""
    return _key_position(event[0]) if event[0] is not None else rng.random()


_key_position = functools.lru_cache(maxsize=65536)(key_position)
"""Routing keys repeat: their positions are kept (as the plain writer does)."""
