"""The console's three views (overview, stream, group) as JSON-ready dicts, read through the
admin APIs (``StreamManager``, ``ReaderGroupManager``, group metrics, stream info, the group's
history) and cached per refresh tick: however many browsers watch, each view is read from
Redis at most once per tick, one read at a time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from readergroup.admin.group_manager import GroupMetrics, Lag, ReaderGroup, ReaderGroupManager
from readergroup.admin.group_positions import cuts_by_stream
from readergroup.admin.stream_manager import StreamInfo, StreamManager
from readergroup.cli.groups import read_history
from readergroup.console.sampling import LagHistory, RateMeter
from readergroup.core.catalog import subscribers_of
from readergroup.core.errors import ReaderGroupError, ReaderGroupNotFoundError
from readergroup.core.group_state import AddReader, GroupState, RemoveReader
from readergroup.core.group_view import group_state_word
from readergroup.core.routing import epoch_of
from readergroup.storage.connection import RedisConnection

logger = logging.getLogger(__name__)

HISTORY_ENTRIES = 200
"""State-log entries the group page shows (and draws the membership timeline from)."""


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def group_flags(state: GroupState) -> list[str]:
    """What an operator wants to know beyond the state word."""
    flags = []
    if any(not c.done for c in state.checkpoints):
        flags.append("checkpoint pending")
    if state.reset_pending:
        flags.append("reset pending")
    if state.end_of_data:
        flags.append("end of data")
    return flags


def segment_label(stream: str, segment: int) -> str:
    return f"{stream}#{segment}"


class ConsoleData:
    """The views, cached for ``tick`` seconds, with the rates and lag history the console
    samples in memory. Thread-safe: each view is computed under its own lock (so a slow
    overview does not hold up a group page), with group handles of its own kind."""

    def __init__(
        self,
        connection: RedisConnection,
        *,
        tick: float = 1.0,
        history_seconds: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection
        self.tick = tick
        self._clock = clock
        self._streams = StreamManager(connection)
        self._managers: dict[str, ReaderGroupManager] = {}
        self._groups: dict[tuple[str, str, str], ReaderGroup] = {}
        self._guard = threading.Lock()
        """Guards the dicts of locks, handles and cached views (held only briefly)."""
        self._locks: dict[Hashable, threading.Lock] = {}
        self._cache: dict[Hashable, tuple[float, dict[str, Any]]] = {}
        self.rates = RateMeter()
        self.lag = LagHistory(seconds=history_seconds)

    # -- caching ----------------------------------------------------------------------------
    def cached(self, key: Hashable, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``compute()`` at most once per tick for ``key``, shared by every caller."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._cache.get(key)
            if hit is not None and self._clock() - hit[0] < self.tick:
                return hit[1]
            value = compute()
            self._cache[key] = (self._clock(), value)
            return value

    def overview(self) -> dict[str, Any]:
        return self.cached(("overview",), self._overview)

    def stream(self, scope: str, stream: str) -> dict[str, Any]:
        return self.cached(("stream", scope, stream), lambda: self._stream(scope, stream))

    def group(self, scope: str, name: str) -> dict[str, Any]:
        return self.cached(("group", scope, name), lambda: self._group(scope, name))

    # -- handles ----------------------------------------------------------------------------
    def _manager(self, scope: str) -> ReaderGroupManager:
        with self._guard:
            manager = self._managers.get(scope)
            if manager is None:
                manager = self._managers[scope] = ReaderGroupManager(scope, self.connection)
            return manager

    def _group_handle(self, kind: str, scope: str, name: str) -> ReaderGroup:
        """The handle the views of ``kind`` use on group ``scope/name`` (one per kind: views of
        different kinds are computed at the same time)."""
        with self._guard:
            handle = self._groups.get((kind, scope, name))
        if handle is None:
            handle = self._manager(scope).get_reader_group(name)
            with self._guard:
                self._groups[(kind, scope, name)] = handle
        return handle

    def _drop_group(self, kind: str, scope: str, name: str) -> None:
        with self._guard:
            self._groups.pop((kind, scope, name), None)

    # -- the overview -----------------------------------------------------------------------
    def _overview(self) -> dict[str, Any]:
        scopes = self._streams.list_scopes()
        streams: list[dict[str, Any]] = []
        groups: list[dict[str, Any]] = []
        for scope in scopes:
            try:
                names = self._streams.list_streams(scope)
                group_names = self._list_groups(scope)
            except ReaderGroupError as exc:
                logger.warning("console: scope %s cannot be read: %s", scope, exc, exc_info=exc)
                streams.append({"scope": scope, "stream": None, "error": error_text(exc)})
                continue
            out_positions: dict[str, dict[Hashable, int]] = {}
            for name in group_names:
                groups.append(self._group_summary(scope, name, out_positions))
            for name in names:
                streams.append(self._stream_summary(scope, name, out_positions.get(name, {})))
        return {"scopes": scopes, "streams": streams, "groups": groups}

    def _list_groups(self, scope: str) -> list[str]:
        return self._manager(scope).list_reader_groups()

    def _stream_summary(
        self, scope: str, name: str, out_positions: dict[Hashable, int]
    ) -> dict[str, Any]:
        try:
            info = self._streams.get_stream_info(scope, name)
        except ReaderGroupError as exc:
            logger.warning("console: stream %s/%s: %s", scope, name, exc, exc_info=exc)
            return {"scope": scope, "stream": name, "error": error_text(exc)}
        now = self._clock()
        self.rates.update(
            ("in", scope, name), now, {s.segment_id: s.tail for s in info.active_segments}
        )
        self.rates.update(("out", scope, name), now, out_positions)
        return {
            "scope": scope,
            "stream": name,
            "epoch": info.epoch,
            "sealed": info.sealed,
            "segments_open": sum(not s.sealed for s in info.active_segments),
            "segments_total": info.total_segments,
            "events": info.events,
            "bytes": sum(s.bytes for s in info.active_segments),
            "rate_in": self.rates.total(("in", scope, name)),
            "rate_out": self.rates.total(("out", scope, name)),
            "head_cut": str(info.head_cut),
        }

    def _group_summary(
        self, scope: str, name: str, out_positions: dict[str, dict[Hashable, int]]
    ) -> dict[str, Any]:
        try:
            g = self._group_handle("overview", scope, name)
            metrics = g.get_metrics()
            members = g.members()
            word = group_state_word(g.sync.state, members, g.missing_streams())
        except ReaderGroupError as exc:
            self._drop_group("overview", scope, name)
            self.lag.forget((scope, name))
            logger.warning("console: group %s/%s: %s", scope, name, exc, exc_info=exc)
            return {"scope": scope, "group": name, "state": "unreadable", "error": error_text(exc)}
        self._record_lag(scope, name, metrics)
        for row in metrics.segments:
            stream = row.stream.partition("/")[2]
            out_positions.setdefault(stream, {})[(name, row.segment)] = row.position
        return {
            "scope": scope,
            "group": name,
            "state": word,
            "flags": group_flags(g.sync.state),
            "readers": sum(not m.stale for m in members),
            "members": len(members),
            "segments": len(metrics.segments),
            "lag_events": metrics.total.events,
            "lag_bytes": metrics.total.bytes,
            "lag_ms": metrics.total.ms,
            "streams": list(g.sync.state.config.streams),
        }

    def _record_lag(self, scope: str, name: str, metrics: GroupMetrics) -> None:
        self.lag.record(
            (scope, name),
            metrics.server_ms,
            metrics.total.events,
            {segment_label(r.stream, r.segment): r.lag.events for r in metrics.segments},
        )

    # -- one stream -------------------------------------------------------------------------
    def _stream(self, scope: str, name: str) -> dict[str, Any]:
        state = self._streams.stream_state(scope, name)
        info = self._streams.get_stream_info(scope, name)
        self.rates.update(
            ("in", scope, name), self._clock(), {s.segment_id: s.tail for s in info.active_segments}
        )
        rates = self.rates.rates(("in", scope, name)) or {}
        segments = [
            {
                "id": record.segment_id,
                "epoch": epoch_of(record.segment_id),
                "low": record.low,
                "high": record.high,
                "predecessors": list(record.predecessors),
                "successors": list(record.successors),
                "sealed_epoch": record.sealed_epoch,
                "truncated": record.truncated,
            }
            for record in sorted(state.segments.values(), key=lambda r: r.segment_id)
        ]
        return {
            "scope": scope,
            "stream": name,
            "epoch": state.epoch,
            "sealed": state.sealed,
            "created_ms": state.created_ms,
            "epochs": [{"epoch": e.epoch, "created_ms": e.created_ms} for e in state.epochs],
            "segments": segments,
            "head": {str(s): o for s, o in sorted(state.head.items())},
            "head_cut": str(info.head_cut),
            "tail_cut": str(info.tail_cut),
            "table": self._segment_rows(info, rates),
            "groups": self._positions_in(scope, name),
        }

    @staticmethod
    def _segment_rows(info: StreamInfo, rates: dict[Hashable, float]) -> list[dict[str, Any]]:
        return [
            {
                "id": s.segment_id,
                "name": s.name,
                "epoch": epoch_of(s.segment_id),
                "low": s.low,
                "high": s.high,
                "head": s.head,
                "tail": s.tail,
                "events": s.tail - s.head,
                "bytes": s.bytes,
                "sealed": s.sealed,
                "rate": rates.get(s.segment_id),
            }
            for s in info.active_segments
        ]

    def _positions_in(self, scope: str, stream: str) -> list[dict[str, Any]]:
        """Each group reading the stream with its committed positions in it."""
        out = []
        for name in subscribers_of(self._streams.catalog(scope), stream):
            try:
                positions = self._group_handle("stream", scope, name).refresh().positions()
            except ReaderGroupError as exc:
                self._drop_group("stream", scope, name)
                out.append({"group": name, "error": error_text(exc), "positions": {}})
                continue
            mine = {str(seg): p for (s, seg), p in positions.items() if s == f"{scope}/{stream}"}
            out.append({"group": name, "positions": mine})
        return out

    # -- one group --------------------------------------------------------------------------
    def _group(self, scope: str, name: str) -> dict[str, Any]:
        try:
            g = self._group_handle("group", scope, name)
            metrics = g.get_metrics()
            members = g.members()
            missing = g.missing_streams()
        except ReaderGroupNotFoundError:
            self._drop_group("group", scope, name)
            self.lag.forget((scope, name))
            raise
        state = g.sync.state
        self._record_lag(scope, name, metrics)
        entries, head = read_history(self.connection, scope, name, HISTORY_ENTRIES)
        return {
            "scope": scope,
            "group": name,
            "state": group_state_word(state, members, missing),
            "flags": group_flags(state),
            "revision": g.sync.revision,
            "server_ms": metrics.server_ms,
            "generation": state.generation,
            "session_timeout_ms": int(state.config.session_timeout * 1000),
            "streams": list(state.config.streams),
            "missing_streams": missing,
            "total_lag": {
                "events": metrics.total.events,
                "bytes": metrics.total.bytes,
                "ms": metrics.total.ms,
            },
            "members": [
                {
                    "reader": m.reader,
                    "client": m.client,
                    "generation": m.generation,
                    "joined_ms": m.joined_ms,
                    "heartbeat_age_ms": m.heartbeat_age_ms,
                    "stale": m.stale,
                    "segments": [segment_label(s, n) for s, n in m.segments],
                    "lag_events": lag_of(metrics.readers, m.reader),
                }
                for m in members
            ],
            "segments": [
                {
                    "segment": segment_label(r.stream, r.segment),
                    "stream": r.stream,
                    "id": r.segment,
                    "reader": r.reader,
                    "waiting": r.reader is None and (r.stream, r.segment) in state.future,
                    "position": r.position,
                    "tail": r.tail,
                    "lag_events": r.lag.events,
                    "lag_bytes": r.lag.bytes,
                    "lag_ms": r.lag.ms,
                }
                for r in metrics.segments
            ],
            "checkpoints": [
                {
                    "name": c.name,
                    "created_ms": c.created_ms,
                    "completed_ms": c.completed_ms,
                    "failed": c.failed,
                    "pending": list(c.pending),
                    "cuts": {s: str(cut) for s, cut in cuts_by_stream(c.positions).items()},
                }
                for c in state.checkpoints
            ],
            "lag_history": self.lag.series((scope, name)),
            "history": {
                "head": head,
                "entries": [
                    {
                        "revision": e.revision,
                        "server_ms": e.server_ms,
                        "time": e.time,
                        "by": e.by,
                        "what": e.what,
                        "membership": membership_events(e.updates),
                    }
                    for e in entries
                ],
            },
        }


def lag_of(readers: dict[str, Lag], reader: str) -> int:
    lag = readers.get(reader)
    return 0 if lag is None else lag.events


def membership_events(updates: tuple[Any, ...]) -> list[dict[str, str]]:
    """Joins and removals in one log entry, for the membership timeline."""
    events = []
    for update in updates:
        if isinstance(update, AddReader):
            events.append({"kind": "joined", "reader": update.reader_id})
        elif isinstance(update, RemoveReader):
            events.append({"kind": "left", "reader": update.reader_id})
    return events
