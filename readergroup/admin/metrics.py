"""Prometheus metrics of reader groups: positions, tails and lag per segment, readers, state,
rebalances and checkpoints per group; and per stream its unfinished transactions and the age
of the oldest (issue 31); read from Redis at scrape time (like Burrow or
kafka-lag-exporter). ``readergroup metrics serve`` runs it as an HTTP endpoint; an application
adds the same metrics to its own registry with :func:`register_metrics`::

    from prometheus_client import REGISTRY
    from readergroup.admin.metrics import register_metrics
    register_metrics(REGISTRY, connection, scopes=["shop"])

Nothing is cached between scrapes: each scrape reads every group once. A group that cannot be
read (deleted meanwhile, Redis unreachable) is counted in ``readergroup_scrape_errors_total``
and left out of that scrape; the endpoint stays up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from readergroup.admin.group_steps import GroupManagerSteps, GroupSteps
from readergroup.admin.stream_steps import StreamSteps
from readergroup.core.calls import Steps, call_on, drive
from readergroup.core.errors import ReaderGroupError
from readergroup.core.group_view import GROUP_STATES, group_state_word
from readergroup.storage.connection import RedisConnection

logger = logging.getLogger(__name__)

SEGMENT_LABELS = ["scope", "group", "stream", "segment"]
GROUP_LABELS = ["scope", "group"]


class _Families:
    """The metric families of one scrape."""

    def __init__(self) -> None:
        def segment(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"readergroup_segment_{name}", text, labels=SEGMENT_LABELS)

        def group(name: str, text: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(
                f"readergroup_group_{name}", text, labels=[*GROUP_LABELS, *labels]
            )

        self.position = segment("position", "Committed position (offset of the next event).")
        self.tail = segment("tail", "Tail offset: events written to the segment so far.")
        self.lag_events = segment("lag_events", "Events after the committed position.")
        self.lag_bytes = segment("lag_bytes", "Bytes after the committed position.")
        self.lag_seconds = segment(
            "lag_seconds", "Age of the oldest event not yet committed (server clock; 0: none)."
        )
        self.readers = group("readers_online", "Readers whose heartbeat is within the session.")
        self.fenced = group(
            "readers_fenced",
            "Members whose heartbeat is older than the session timeout: they fence themselves "
            "and are removed at the next check.",
        )
        self.state = group("state", "1 for the group's state word.", ["state"])
        self.lag_total = group("lag_events", "Events behind, all segments.")
        self.unassigned = group("segments_unassigned", "Segments no reader owns now.")
        self.rebalances = CounterMetricFamily(
            "readergroup_group_rebalances",
            "Readers that joined the group (each join starts a rebalance).",
            labels=GROUP_LABELS,
        )
        self.acquisitions = CounterMetricFamily(
            "readergroup_group_segment_acquisitions",
            "Segments acquired by readers (ownership moves).",
            labels=GROUP_LABELS,
        )
        self.resets = CounterMetricFamily(
            "readergroup_group_resets", "Resets of the group.", labels=GROUP_LABELS
        )
        self.checkpoints = group(
            "checkpoints", "Checkpoints kept in the group's state.", ["status"]
        )
        self.last_checkpoint = group(
            "last_checkpoint_timestamp_seconds", "When the last checkpoint completed (server)."
        )
        self.transactions = GaugeMetricFamily(
            "readergroup_stream_transactions",
            "Unfinished transactions of the stream, by status (OPEN, COMMITTING; an open one "
            "past its lease counts as ABORTED until a sweep removes it).",
            labels=["scope", "stream", "status"],
        )
        self.oldest_transaction = GaugeMetricFamily(
            "readergroup_stream_oldest_transaction_seconds",
            "Age of the stream's oldest unfinished transaction (server clock; 0: none).",
            labels=["scope", "stream"],
        )

    def all(self) -> list[Any]:
        return list(vars(self).values())


class ReaderGroupCollector(Collector):
    """Collects every reader group of ``scopes`` (all scopes if ``None``) at each scrape."""

    def __init__(self, connection: RedisConnection, scopes: Sequence[str] | None = None) -> None:
        self._connection = connection
        self._scopes = list(scopes) if scopes else None
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}

    def _error(self, scope: str, exc: Exception) -> None:
        logger.warning("metrics scrape of scope %s: %s", scope, exc, exc_info=exc)
        self._errors[scope] = self._errors.get(scope, 0) + 1

    def collect(self) -> Iterator[Any]:
        with self._lock:  # one scrape at a time: they share the connection's state handles
            began = time.monotonic()
            stores = (
                self._connection.transactions
                if isinstance(self._connection, RedisConnection)
                else None  # the memory backend has no transactions
            )
            families, up = drive(scrape(self._connection, self._scopes, self._error, stores))
            yield from families.all()
            yield from self._scrape_families(up, time.monotonic() - began)

    def _scrape_families(self, up: int | None, seconds: float | None) -> Iterator[Any]:
        errors = CounterMetricFamily(
            "readergroup_scrape_errors",
            "Scopes or groups that could not be read during scrapes.",
            labels=["scope"],
        )
        for scope, count in sorted(self._errors.items()):
            errors.add_metric([scope], count)
        yield errors
        yield GaugeMetricFamily("readergroup_up", "1 if Redis could be read.", value=up)
        yield GaugeMetricFamily(
            "readergroup_scrape_duration_seconds", "Seconds the last scrape took.", value=seconds
        )

    def describe(self) -> Iterator[Any]:
        """The metric names, without reading Redis (so registering does not scrape)."""
        yield from _Families().all()
        yield from self._scrape_families(None, None)


def _collect_transactions(
    connection: Any, stores: Callable[[str, str], Any], scope: str, out: _Families
) -> Steps[None]:
    """The scope's unfinished transactions, per stream (``stores(scope, stream)``: a stream's
    transaction store, blocking or awaited)."""
    now = yield call_on(connection, "server_time_ms")
    for stream in (yield from StreamSteps(connection).list_streams(scope)):
        store = stores(scope, stream)
        unfinished = yield call_on(store, "unfinished")
        records = yield call_on(store, "records", [txn_id for txn_id, _ in unfinished])
        counts = dict.fromkeys(("OPEN", "COMMITTING", "ABORTED"), 0)
        for record in records:
            status = record.effective_status(now).value
            counts[status] = counts.get(status, 0) + 1
        for status, count in counts.items():
            out.transactions.add_metric([scope, stream, status], count)
        oldest = min((r.created_ms for r in records), default=now)
        out.oldest_transaction.add_metric([scope, stream], max(0, now - oldest) / 1000)


def scrape(
    connection: Any,
    scopes: Sequence[str] | None,
    on_error: Callable[[str, Exception], None],
    stores: Callable[[str, str], Any] | None = None,
) -> Steps[tuple[_Families, int]]:
    """One scrape of every reader group of ``scopes`` (all if ``None``) on ``connection``
    (threaded, or an asyncio managers' connection: see :mod:`readergroup.core.calls`): the
    families and ``readergroup_up``; a scope or group that cannot be read goes to
    ``on_error(scope, exc)`` and is left out. ``stores(scope, stream)``: a stream's transaction
    store (blocking or awaited), for the streams' unfinished transactions (``None``: no
    transactions, the memory backend)."""
    families = _Families()
    up = 1
    try:
        listed = scopes or (yield from StreamSteps(connection).list_scopes())
    except ReaderGroupError as exc:
        on_error("", exc)
        listed, up = [], 0
    for scope in listed:
        try:
            groups = GroupManagerSteps(scope, connection)
            names = yield from groups.list_reader_groups()
        except ReaderGroupError as exc:
            on_error(scope, exc)
            up = 0
            continue
        for name in names:
            try:
                yield from _collect_group(groups.group(name), families)
            except ReaderGroupError as exc:
                on_error(scope, exc)
        if stores is not None:
            try:
                yield from _collect_transactions(connection, stores, scope, families)
            except ReaderGroupError as exc:
                on_error(scope, exc)
    return families, up


def _collect_group(g: GroupSteps, out: _Families) -> Steps[None]:
    metrics = yield from g.get_metrics()
    state = g.sync.state
    members = yield from g.members()
    word = group_state_word(state, members, (yield from g.missing_streams()))
    labels = [g.scope, g.name]
    for row in metrics.segments:
        key = [*labels, row.stream, str(row.segment)]
        out.position.add_metric(key, row.position)
        out.tail.add_metric(key, row.tail)
        out.lag_events.add_metric(key, row.lag.events)
        out.lag_bytes.add_metric(key, row.lag.bytes)
        out.lag_seconds.add_metric(key, row.lag.ms / 1000)
    out.readers.add_metric(labels, sum(not m.stale for m in members))
    out.fenced.add_metric(labels, sum(m.stale for m in members))
    for candidate in GROUP_STATES:
        out.state.add_metric([*labels, candidate], 1 if candidate == word else 0)
    out.lag_total.add_metric(labels, metrics.total.events)
    out.unassigned.add_metric(labels, len(state.unassigned))
    out.rebalances.add_metric(labels, state.next_generation - 1)
    out.acquisitions.add_metric(labels, state.next_token - 1)
    out.resets.add_metric(labels, state.generation)
    done = [c for c in state.checkpoints if c.completed_ms >= 0]
    failed = [c for c in state.checkpoints if c.failed]
    pending = len(state.checkpoints) - len(done) - len(failed)
    for status, count in (("completed", len(done)), ("failed", len(failed))):
        out.checkpoints.add_metric([*labels, status], count)
    out.checkpoints.add_metric([*labels, "pending"], pending)
    if done:
        out.last_checkpoint.add_metric(labels, max(c.completed_ms for c in done) / 1000)


def register_metrics(
    registry: CollectorRegistry, connection: RedisConnection, scopes: Sequence[str] | None = None
) -> ReaderGroupCollector:
    """Add the reader-group metrics of ``scopes`` (all if ``None``) to ``registry``; returns
    the collector (``registry.unregister(collector)`` removes them)."""
    collector = ReaderGroupCollector(connection, scopes)
    registry.register(collector)
    return collector
