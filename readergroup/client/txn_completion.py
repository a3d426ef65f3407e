"""Completing committing transactions, whoever began them: :class:`TxnCompleter` (one
idempotent append per plan entry, re-routing entries whose segment was sealed before taking
them, then COMMITTED) and :func:`sweep` (aborts transactions past their lease, completes
committing ones whose committer vanished, forgets old writer-table entries). States and
guarantees: :mod:`readergroup.core.transactions`.

Written once as call steps (:mod:`readergroup.core.calls`) on a store, a metadata cache and
a connection's appends that are either blocking (the threaded writer: :meth:`TxnCompleter.
complete`, :func:`sweep`) or awaited (the asyncio writer drives :meth:`TxnCompleter.
complete_steps` and :func:`sweep_steps` with :func:`~readergroup.storage.aio_calls.
drive_async`)."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from readergroup.core.calls import Steps, call_on, drive
from readergroup.core.errors import (
    ReaderGroupError,
    SegmentNotFoundError,
    StreamSealedError,
    TransactionClosedError,
    TransactionError,
    TransactionNotFoundError,
)
from readergroup.core.routing import key_position
from readergroup.core.transactions import (
    ENTRY_CHUNK,
    CommitPlan,
    PlanEntry,
    TxnRecord,
    TxnStatus,
)
from readergroup.storage import segment_status
from readergroup.storage.segment_records import AppendBatch
from readergroup.storage.staging_store import StagedEvent

logger = logging.getLogger(__name__)


class TxnCompleter:
    """Completes committing transactions of one stream (any client may). ``segments``,
    ``metadata`` and ``store``: a connection's appends, a stream metadata cache and a
    transaction store, blocking or awaited (then drive :meth:`complete_steps`)."""

    _MAX_ROUNDS = 50
    _RECHECK_AFTER = 0.25
    """Seconds after which a completion re-reads the record before appending more: the
    writer-table fields that make a replay a no-op are forgotten by the sweep of any writer
    of the stream ``retention`` after the transaction finished, its own retention, which may
    be as short as 1 s (a quarter of that)."""

    def __init__(
        self,
        segments: Any,
        metadata: Any,
        store: Any,
        *,
        retention_ms: int,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._segments = segments
        self._metadata = metadata
        self._store = store
        self._retention_ms = retention_ms
        self._rng = rng or random.Random()  # noqa: S311 (spreading keyless events)
        self.after_entry: Callable[[PlanEntry], None] | None = None
        """Test hook: called after each plan entry landed (then entries go one per round),
        to kill the committer between segments."""

    def complete(self, record: TxnRecord, staged: Sequence[StagedEvent] | None = None) -> None:
        """Complete ``record`` (COMMITTING): every plan entry in its segment, the positions,
        then COMMITTED. ``staged``: its staged events if the caller holds them (else read).
        Blocking (:meth:`complete_steps` driven)."""
        drive(self.complete_steps(record, staged))

    def complete_steps(
        self, record: TxnRecord, staged: Sequence[StagedEvent] | None = None
    ) -> Steps[None]:
        """See :meth:`complete`."""
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
            staged = yield call_on(store, "staged", txn_id)
            assert staged is not None
        if len(staged) != record.events:
            refreshed = yield call_on(store, "record", txn_id)
            if refreshed is not None and refreshed.status is TxnStatus.COMMITTED:
                return  # completed meanwhile by another client (its staged list is gone)
            raise ReaderGroupError(
                f"{store.subject(txn_id)}: {len(staged)} staged events, record says "
                f"{record.events}; not completed"
            )
        plan, version = record.plan, record.plan_version
        progress: dict[int, int] = {}
        checked = [self._clock()]
        for _ in range(self._MAX_ROUNDS):
            sealed = yield from self._apply(txn_id, plan, staged, progress, checked)
            if sealed is None:
                return  # finished by another client meanwhile: append nothing more
            if not sealed:
                break
            replanned = yield from self._reroute(record, plan, version, sealed, staged, progress)
            if replanned is None:
                return  # another completer re-planned and finished it meanwhile
            plan, version = replanned
        else:
            raise ReaderGroupError(
                f"{store.subject(txn_id)}: segments kept sealing under its commit for "
                f"{self._MAX_ROUNDS} rounds; it stays committing (any client completes it)"
            )
        entries = [(e.segment, _entry_writer(txn_id, e)) for e in plan.entries]
        yield call_on(store, "finish", txn_id, "commit", self._retention_ms, landed=entries)

    def _still_committing(self, txn_id: str, checked: list[float]) -> Steps[bool]:
        """Whether the record still says COMMITTING, re-read when ``checked[0]`` (the last
        time it was known) is older than the recheck interval: a completer that took long
        checks before appending more (the writer table fields that make a replay a no-op are
        deleted ``retention`` after the transaction finished)."""
        now = self._clock()
        if now - checked[0] <= self._RECHECK_AFTER:
            return True
        record = yield call_on(self._store, "record", txn_id)
        checked[0] = now
        return record is not None and record.status is TxnStatus.COMMITTING

    def _apply(
        self,
        txn_id: str,
        plan: CommitPlan,
        staged: Sequence[StagedEvent],
        progress: dict[int, int],
        checked: list[float],
    ) -> Steps[list[PlanEntry] | None]:
        """Append every chunk of ``plan``'s entries not landed yet (``progress``: entry tag ->
        chunks landed, :data:`~readergroup.core.transactions.ENTRY_CHUNK`), one chunk per
        entry per round; returns the entries whose segment was sealed (or is gone) before
        taking all of them (``progress`` then says how many it took); None: the transaction
        was found finished (by another client) before an append (:meth:`_still_committing`)."""
        todo = [e for e in plan.entries if progress.get(e.tag, 0) < e.chunks]
        groups = [[e] for e in todo] if self.after_entry is not None else [todo]
        sealed: list[PlanEntry] = []
        for group in groups:
            pending = group
            while pending:
                if not (yield from self._still_committing(txn_id, checked)):
                    return None
                pending = yield from self._append_chunks(txn_id, pending, staged, progress, sealed)
        return sealed

    def _append_chunks(
        self,
        txn_id: str,
        entries: list[PlanEntry],
        staged: Sequence[StagedEvent],
        progress: dict[int, int],
        sealed: list[PlanEntry],
    ) -> Steps[list[PlanEntry]]:
        """One round: the next chunk of each of ``entries``; returns those with more to go."""
        store, scope, stream = self._store, self._store.scope, self._store.stream
        state = yield call_on(self._metadata, "get", scope, stream)
        max_size = max(state.config.max_event_size, 1)
        batches = []
        for entry in entries:
            done = progress.get(entry.tag, 0)
            chunk = entry.indexes[done * ENTRY_CHUNK : (done + 1) * ENTRY_CHUNK]
            writer = _entry_writer(txn_id, entry)
            events = [staged[i] for i in chunk]
            batches.append(
                AppendBatch.of(scope, stream, entry.segment, writer, done + 1, events, max_size)
            )
        replies = yield call_on(self._segments, "append", batches)
        more: list[PlanEntry] = []
        for entry, reply in zip(entries, replies, strict=True):
            error = reply.error
            if reply.status in (segment_status.OK, segment_status.DUPLICATE) and not error:
                progress[entry.tag] = progress.get(entry.tag, 0) + 1
            elif reply.status == segment_status.SEALED or isinstance(error, SegmentNotFoundError):
                # the chunks it took before the seal stay; a sealed segment changes no more
                taken = yield call_on(store, "applied", entry.segment, _entry_writer(txn_id, entry))
                progress[entry.tag] = min(taken, entry.chunks)
                if taken < entry.chunks:
                    sealed.append(entry)
                    continue
            elif error is not None:
                raise error
            if progress[entry.tag] < entry.chunks:
                more.append(entry)
            elif self.after_entry is not None:
                self.after_entry(entry)
        return more

    def _reroute(
        self,
        record: TxnRecord,
        plan: CommitPlan,
        version: int,
        sealed: list[PlanEntry],
        staged: Sequence[StagedEvent],
        progress: Mapping[int, int],
    ) -> Steps[tuple[CommitPlan, int] | None]:
        """Route the events of ``sealed`` entries to the segments current now; agree on the
        new plan with any other completer (compare-and-set). None: another completer
        finished the transaction meanwhile (COMMITTED: its plan's entries all landed)."""
        store = self._store
        self._metadata.invalidate(store.scope, store.stream)
        state = yield call_on(self._metadata, "get", store.scope, store.stream)
        if state.sealed:
            raise StreamSealedError(
                f"{store.subject(record.txn_id)}: stream sealed while committing; it stays "
                "committing until the stream takes writes again"
            )
        ranges = state.range_map()
        new = plan
        for entry in sealed:
            taken = progress.get(entry.tag, 0)  # chunks it took before the seal: they stay
            rest = entry.indexes[taken * ENTRY_CHUNK :]
            routes = {i: ranges.segment_at(position(staged[i], self._rng)) for i in rest}
            new = new.rerouted(entry.tag, routes, taken)
        try:
            replanned = yield call_on(store, "replan", record.txn_id, version, new)
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
        current = yield call_on(
            store, "record", record.txn_id
        )  # another completer's plan: follow it
        if current is None or current.plan is None:
            raise TransactionNotFoundError(
                f"{store.subject(record.txn_id)} vanished while committing", txn_id=record.txn_id
            )
        return current.plan, current.plan_version


def sweep(store: Any, completer: TxnCompleter, now_ms: int, retention_ms: int) -> int:
    """Finish the stream's transactions past their deadline (server ms ``now_ms``): abort
    OPEN ones, complete COMMITTING ones. Returns how many it finished. Blocking."""
    return drive(sweep_steps(store, completer, now_ms, retention_ms))


def sweep_steps(store: Any, completer: TxnCompleter, now_ms: int, retention_ms: int) -> Steps[int]:
    """See :func:`sweep`."""
    finished = 0
    yield call_on(store, "forget_finished", now_ms - retention_ms)
    unfinished = yield call_on(store, "unfinished", until_ms=now_ms)
    for txn_id, _ in unfinished:
        try:
            record = yield call_on(store, "record", txn_id)
            if record is None or record.status in (TxnStatus.OPEN, TxnStatus.MERGING):
                if (yield call_on(store, "finish", txn_id, "expire", retention_ms)):
                    logger.info("%s: lease expired, aborted", store.subject(txn_id))
                    finished += 1
            elif record.status is TxnStatus.COMMITTING:
                yield from completer.complete_steps(record)
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
