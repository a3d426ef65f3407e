"""Operating a stream's transactions (``readergroup txn list`` / ``abort``, metrics):
:class:`TransactionAdmin`. Listing sweeps first (aborts transactions past their lease,
completes committing ones whose committer vanished), so it needs no live writer."""

from __future__ import annotations

from dataclasses import dataclass

from readergroup.client.metadata_cache import StreamMetadataCache
from readergroup.client.txn_completion import TxnCompleter, sweep
from readergroup.core.errors import TransactionNotFoundError
from readergroup.core.transactions import TxnRecord, TxnStatus
from readergroup.storage.connection import RedisConnection

RETENTION_MS = 86_400_000
"""How long a record finished here is kept (a writer's default ``retention``)."""


@dataclass(frozen=True, slots=True)
class TxnSummary:
    """One unfinished transaction as an operator sees it."""

    txn_id: str
    status: TxnStatus
    transactional_id: str
    age_s: float
    events: int
    bytes: int
    expires_in_s: float  # an open one's lease (negative: past it); a committing one's grace

    @classmethod
    def of(cls, record: TxnRecord, now_ms: int, deadline_ms: int) -> TxnSummary:
        return cls(
            record.txn_id,
            record.effective_status(now_ms),
            record.transactional_id,
            max(0, now_ms - record.created_ms) / 1000,
            record.events,
            record.size,
            (deadline_ms - now_ms) / 1000,
        )


class TransactionAdmin:
    """The transactions of ``scope/stream``."""

    def __init__(self, connection: RedisConnection, scope: str, stream: str) -> None:
        self._connection = connection
        self.store = connection.transactions(scope, stream)
        metadata = StreamMetadataCache(connection, connection.config.metadata_ttl)
        self._completer = TxnCompleter(
            connection.segments, metadata, self.store, retention_ms=RETENTION_MS
        )

    def sweep(self) -> int:
        """Finish what is past its deadline; returns how many."""
        now = self._connection.server_time_ms()
        return sweep(self.store, self._completer, now, RETENTION_MS)

    def list(self, *, sweep_first: bool = True) -> list[TxnSummary]:
        """Unfinished transactions (open, committing), oldest first."""
        if sweep_first:
            self.sweep()
        now = self._connection.server_time_ms()
        unfinished = self.store.unfinished()
        deadlines = dict(unfinished)
        records = self.store.records([txn_id for txn_id, _ in unfinished])
        rows = [TxnSummary.of(r, now, deadlines[r.txn_id]) for r in records]
        return sorted(rows, key=lambda row: -row.age_s)

    def abort(self, txn_id: str) -> TxnStatus:
        """Abort an open transaction whoever holds it (its writer's next call is refused);
        returns ABORTED. A committing or committed one cannot be: TransactionClosedError."""
        if self.store.record(txn_id) is None:
            raise TransactionNotFoundError(
                f"{self.store.subject(txn_id)} does not exist", txn_id=txn_id
            )
        self.store.finish(txn_id, "force", RETENTION_MS)
        return TxnStatus.ABORTED
