"""The Spark sink's commits, on the transactions of :mod:`readergroup.core.transactions` (one
implementation of staged commits, issue 31):

* the driver's writer (one per batch job, one per streaming query) bumps the epoch of its
  transactional id (``spark:<job>`` or ``spark:<writer_id>``): tasks of an earlier attempt of
  the driver are fenced;
* each task begins a transaction of its own under that epoch and stages its rows in it (nothing
  visible), returning the transaction's id in its commit message;
* the driver merges the tasks' transactions into the job's (``txn_merge.lua``: its id names the
  job, so a job is merged once: a retried or replayed commit finds it), then commits it as any
  transaction: routed by key on the segments current at commit, all or nothing, completed by
  whoever finds it committing. On Redis Cluster too.

Spark's ``abort`` aborts the tasks' transactions; anything left open expires with its lease.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from readergroup.client.metadata_cache import StreamMetadataCache
from readergroup.client.serializers import BytesSerializer
from readergroup.client.transactions import (
    TransactionalEventStreamWriter,
    TransactionalWriterConfig,
)
from readergroup.core.errors import (
    EventTooLargeError,
    ReaderGroupError,
    StreamSealedError,
    TransactionError,
)
from readergroup.core.transactions import TxnStatus
from readergroup.spark.options import SourceOptions
from readergroup.storage.connection import RedisConnection
from readergroup.storage.staging_store import StagedEvent

log = logging.getLogger(__name__)

LEASE_S = 24 * 3600.0
"""How long a task's staged rows wait for the driver's commit (then they expire)."""
STAGE_EVENTS = 1000
"""Rows per stage call."""


@dataclass
class StagedCommit(WriterCommitMessage):
    """What one task staged: its transaction (``txns``) under the driver's transactional id
    and epoch (``holder``), and the event count. ``staged``: (segment, staging key) pairs of
    the sink before transactions, always empty now."""

    staged: list[tuple[int, str]]
    events: int
    txns: list[str] = field(default_factory=list)
    holder: tuple[str, int] | None = None


def sink_id(job: str) -> str:
    """The transactional id of a sink writing ``job`` (a batch job, or a query's writer id)."""
    return f"spark:{job}"


def new_epoch(connection: RedisConnection, scope: str, stream: str, transactional_id: str) -> int:
    """A new driver instance: bump the id's epoch (tasks of an older instance are fenced)."""
    return connection.transactions(scope, stream).next_epoch(transactional_id)


def stage_task(
    connection: RedisConnection,
    options: SourceOptions,
    holder: tuple[str, int],
    events: Iterator[StagedEvent],
    limit: int,
) -> StagedCommit:
    """Stage one task's events in a transaction of its own (see the module docstring)."""
    store = connection.transactions(options.scope, options.stream)
    transactional_id, epoch = holder
    txn_id = f"{transactional_id}:task-{uuid.uuid4().hex[:12]}"
    caller = f"{epoch}:{transactional_id}"
    retention_ms = int(LEASE_S * 1000)
    store.begin(txn_id, transactional_id, epoch, retention_ms, retention_ms)
    chunk: list[StagedEvent] = []
    count = 0
    try:
        for event in events:
            size = len(event[1]) + len(event[3])
            if size > limit:
                with_headers = f" ({len(event[3])} of them headers)" if event[3] else ""
                raise EventTooLargeError(
                    f"event of {size} bytes{with_headers} exceeds max_event_size {limit} of "
                    f"{options.scope}/{options.stream}; nothing from this write is committed"
                )
            chunk.append(event)
            count += 1
            if len(chunk) >= STAGE_EVENTS:
                store.stage(txn_id, caller, chunk, retention_ms)
                chunk = []
        if chunk:
            store.stage(txn_id, caller, chunk, retention_ms)
    except BaseException:
        store.finish(txn_id, "force", retention_ms)
        raise
    return StagedCommit([], count, [txn_id], holder)


def commit_job(
    connection: RedisConnection, options: SourceOptions, job: str, messages: Sequence[Any]
) -> int:
    """Driver side: merge the tasks' transactions into the job's and commit it, once per job.
    Returns the events committed now (0 when the job was committed before). A sealed stream
    raises StreamSealedError and commits nothing."""
    commits = [m for m in messages if m is not None]
    if any(m.staged for m in commits):
        raise ReaderGroupError(
            f"job {job}: tasks staged with the sink of an earlier readergroup version (staging "
            "lists); run the job again with one version on the driver and the executors"
        )
    if not any(m.txns for m in commits):
        return 0  # no task staged anything
    holders = {m.holder for m in commits if m.holder is not None}
    transactional_id, epoch = holders.pop() if holders else (sink_id(job), 0)
    if holders:
        raise TransactionError(f"job {job}: tasks of several sink instances; nothing committed")
    writer = _writer(connection, options, transactional_id, epoch)
    store = writer.store
    target = f"{transactional_id}:job-{job}"
    sources = [t for m in commits for t in m.txns]
    before = store.merge(
        target, sources, transactional_id, epoch, writer.config.lease_ms, writer.config.retention_ms
    )
    if before:
        log.info("job %s: merged before (%s)", job, before)
    txn = writer.get_txn(target)  # completes it if it was committing
    status = txn.status()
    if status is TxnStatus.COMMITTED:
        return 0 if before else sum(m.events for m in commits)
    try:
        txn.commit()
    except StreamSealedError as exc:
        txn.abort()
        raise StreamSealedError(
            f"stream {options.scope}/{options.stream} was sealed; nothing from this write is "
            "committed"
        ) from exc
    return sum(m.events for m in commits) if not before else 0


def abort_job(connection: RedisConnection, options: SourceOptions, messages: Sequence[Any]) -> None:
    """Spark's abort: the tasks' transactions go (their rows were never visible)."""
    store = connection.transactions(options.scope, options.stream)
    for txn_id in (t for m in messages if m is not None for t in m.txns):
        try:
            store.finish(txn_id, "force", int(LEASE_S * 1000))
        except TransactionError as exc:  # merged or gone already
            log.info("abort of %s: %s", txn_id, exc)


def _writer(
    connection: RedisConnection, options: SourceOptions, transactional_id: str, epoch: int
) -> TransactionalEventStreamWriter[bytes]:
    metadata = StreamMetadataCache(connection, connection.config.metadata_ttl)
    config = TransactionalWriterConfig(transactional_id=transactional_id, lease=LEASE_S)
    return TransactionalEventStreamWriter(
        connection,
        metadata,
        options.scope,
        options.stream,
        BytesSerializer(),
        config,
        epoch=epoch,
    )
