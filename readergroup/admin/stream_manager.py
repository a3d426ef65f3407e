"""``StreamManager``: scopes and streams, their scaling, sealing, truncation and deletion.

All metadata lives in state synchronizers (one catalog per scope, the operator's list of
scopes, and one per stream); the data plane is Redis Streams
(:mod:`readergroup.storage.segment_store`). There is no controller process: any client may run
any of these operations, and conditional appends keep concurrent ones consistent.

Order of effects, chosen so that a crash at any point leaves a state the next call repairs:

* ``create_stream``: catalog entry, then segments in Redis, then the stream's metadata.
* ``scale_stream``: successors created in Redis *closed* (sealed, flagged ``opening``), then
  the metadata names them (atomically sealing the predecessors there), then the predecessors
  are sealed in Redis, then the successors are opened. So a successor takes no event before
  every predecessor stopped taking events: per key, server times never go back across a
  scale, and time cuts are exact. A scale left undone by a crash (predecessors unsealed, or
  successors closed) is completed by :meth:`StreamManager.complete_scales`, which the next
  ``scale_stream``, ``seal_stream``, ``get_stream_info``, ``cut_at_time`` and the Spark source
  run, and readers seal a predecessor they reach the end of.
* ``truncate_stream``: the metadata head moves first (readers stop asking for older data),
  then the data is deleted.
* ``delete_stream``: the catalog entry (so a role that may not delete streams changes
  nothing), then data, then metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from readergroup.admin.group_member import segments_text
from readergroup.core import catalog
from readergroup.core.catalog import Catalog, ScopeList
from readergroup.core.closing import Closing
from readergroup.core.config import ClientConfig
from readergroup.core.errors import (
    DataLostError,
    InvalidStreamCutError,
    LegacyLayoutError,
    NoLegacyCatalogError,
    ScaleConflictError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamLostError,
    StreamNotFoundError,
    StreamNotSealedError,
)
from readergroup.core.names import (
    LEGACY_CATALOG_SYNC_NAME,
    SCOPES_SYNC_NAME,
    catalog_sync_name,
    stream_sync_name,
    validate_name,
)
from readergroup.core.planning import ancestors, time_positions
from readergroup.core.routing import epoch_of, number_of, segment_id, segment_name
from readergroup.core.steps import StepDriver
from readergroup.core.stream_config import StreamConfiguration
from readergroup.core.stream_cut import StreamCut, check_cut_covers
from readergroup.core.stream_metadata import (
    STATE_TYPES,
    UPDATE_TYPES,
    ScaleStream,
    SealStream,
    StreamState,
    TruncateStream,
    UpdateStreamConfig,
    check_scale,
    initial_state,
)
from readergroup.storage import vanished
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_records import SegmentState
from readergroup.storage.translate import fetch_state, missing_as, translate_errors
from statesync import Decision, StateSynchronizer

log = logging.getLogger(__name__)
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment as ``get_stream_info`` reports it."""

    segment_id: int
    name: str
    low: float
    high: float
    head: int
    tail: int
    bytes: int
    sealed: bool


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream's shape and extent: active segments, epoch, head and tail cuts, sizes."""

    scope: str
    stream: str
    config: StreamConfiguration
    epoch: int
    sealed: bool
    created_ms: int
    active_segments: tuple[SegmentInfo, ...]
    head_cut: StreamCut
    tail_cut: StreamCut
    total_segments: int

    @property
    def events(self) -> int:
        """Events between the head and the tail cut, over every segment still stored."""
        return sum(s.tail - s.head for s in self.active_segments)


class StreamManager(Closing):
    """Administration of scopes and streams.

    Example::

        with StreamManager.from_url(url) as sm:
            sm.create_scope("shop")
            sm.create_stream("shop", "orders",
                             StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))

    Thread-safe: the synchronizers it holds serialize their own operations.
    """

    def __init__(self, connection: Connection, *, owns_connection: bool = False) -> None:
        self._connection = connection
        self._owns_connection = owns_connection
        self._scope_list = connection.synchronizer(
            SCOPES_SYNC_NAME, catalog.SCOPE_LIST_UPDATE_TYPES
        )
        self._catalogs: dict[str, StateSynchronizer[catalog.Catalog]] = {}
        self._streams: dict[tuple[str, str], StateSynchronizer[StreamState]] = {}

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> StreamManager:
        return cls(RedisConnection.from_url(url, config), owns_connection=True)

    @property
    def connection(self) -> Connection:
        return self._connection

    def close(self) -> None:
        if self._owns_connection:
            self._connection.close()

    # -- catalogs (one per scope) and the list of scopes (operator only) ---------------------
    def _catalog_sync(self, scope: str) -> StateSynchronizer[catalog.Catalog]:
        sync = self._catalogs.get(scope)
        if sync is None:
            sync = self._connection.synchronizer(catalog_sync_name(scope), catalog.UPDATE_TYPES)
            self._catalogs[scope] = sync
        return sync

    @staticmethod
    def _no_scope(scope: str) -> ScopeNotFoundError:
        return ScopeNotFoundError(
            f"scope {scope!r} does not exist (data written before per-scope catalogs needs "
            "`readergroup admin migrate` once)"
        )

    def catalog(self, scope: str) -> catalog.Catalog:
        """``scope``'s catalog (streams, groups, what each group reads), fetched now.

        Raises ScopeNotFoundError if the scope does not exist.
        """
        validate_name(scope, "scope")
        sync = self._catalog_sync(scope)
        missing = vanished.missing_or_lost(
            self._connection,
            scope,
            sync.name,
            lambda: self._no_scope(scope),
            _lost_catalog(self._connection.keys, scope),
        )
        state: catalog.Catalog = vanished.fetch_adopting(sync, missing, "read catalog")
        if catalog.is_closed(state):
            raise self._no_scope(scope)
        return state

    def update_catalog(self, scope: str, generator: Callable[[Catalog], Decision[R]]) -> R:
        """Conditionally update ``scope``'s catalog (for reader group registration). The
        generator runs on the current catalog of an existing scope; returns its result."""
        validate_name(scope, "scope")

        def checked(state: catalog.Catalog) -> Decision[R]:
            if catalog.is_closed(state):
                raise self._no_scope(scope)
            return generator(state)

        sync = self._catalog_sync(scope)
        if not sync.is_loaded:
            self.catalog(scope)  # a scope that does not exist, or whose catalog vanished
        with missing_as(lambda: self._no_scope(scope), "update catalog"):
            return sync.update_state(checked)

    def _load_scope_list(self) -> dict[str, Any]:
        lost = lambda: DataLostError("the list of scopes vanished from Redis")  # noqa: E731
        initial = catalog.EMPTY_SCOPE_LIST
        vanished.initialize_once(self._connection, None, self._scope_list, initial, lost)
        state: catalog.ScopeList = self._scope_list.state
        return state

    def _update_scope_list(self, generator: Callable[[ScopeList], Decision[R]]) -> R:
        self._load_scope_list()
        with translate_errors("update the list of scopes"):
            return self._scope_list.update_state(generator)

    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` if it already existed.

        Creating a scope is an operator action (it lists the scope); on an existing scope this
        only reads the scope's own catalog, so a scope's admin may call it too.
        """
        validate_name(scope, "scope")
        sync = self._catalog_sync(scope)
        try:
            self.catalog(scope)
            return False
        except ScopeNotFoundError:
            pass
        now = self._connection.server_time_ms()

        def add(state: catalog.ScopeList) -> Decision[bool]:
            if scope in catalog.listed_scopes(state):
                return [], False
            return [catalog.ListScope(scope, now)], True

        listed = self._update_scope_list(add)  # first: refused unless operator
        if sync.is_loaded and catalog.is_closed(sync.state):  # an interrupted delete_scope's
            vanished.forget(self._connection, scope, sync.name)
            with translate_errors("create scope"):
                sync.delete()
        initial = catalog.empty_catalog()
        created = vanished.initialize_once(
            self._connection, scope, sync, initial, _lost_catalog(self._connection.keys, scope)
        )
        if listed or created:
            log.info("created scope %s", scope)
        return listed or created

    def delete_scope(self, scope: str) -> bool:
        """Delete an empty scope (an operator action); ``False`` if it did not exist."""
        validate_name(scope, "scope")

        def check_empty(state: catalog.Catalog) -> None:
            streams, groups = catalog.streams_of(state), catalog.groups_of(state)
            if streams or groups:
                raise ScopeNotEmptyError(
                    f"scope {scope!r} still has streams {sorted(streams)} or reader groups "
                    f"{sorted(groups)}; delete them first"
                )

        self.list_scopes()  # first: refused unless operator
        try:
            check_empty(self.catalog(scope))  # fail fast, before changing anything
            exists = True
        except ScopeNotFoundError:
            exists = False
        listed_ms: list[int] = []

        def unlist(state: catalog.ScopeList) -> Decision[bool]:
            listed_ms[:] = [catalog.listed_scopes(state).get(scope, -1)]
            if scope not in catalog.listed_scopes(state):
                return [], False
            return [catalog.UnlistScope(scope)], True

        unlisted = self._update_scope_list(unlist)
        if exists:

            def close(state: catalog.Catalog) -> Decision[None]:
                check_empty(state)
                return [catalog.CloseScope()], None

            try:
                self.update_catalog(scope, close)
            except ScopeNotEmptyError:  # a stream or group was added meanwhile: list it again
                if unlisted:
                    self._update_scope_list(
                        lambda s: ([catalog.ListScope(scope, listed_ms[0])], None)
                    )
                raise
            except ScopeNotFoundError:
                pass
            vanished.forget(self._connection, scope, catalog_sync_name(scope))
            with translate_errors("delete scope"):
                self._catalog_sync(scope).delete()
        if unlisted or exists:
            log.info("deleted scope %s", scope)
        return unlisted or exists

    def list_scopes(self) -> list[str]:
        """Every scope (an operator action: scope roles cannot enumerate other scopes).
        Raises LegacyLayoutError while the old shared catalog is there (its scopes are listed
        only once ``readergroup admin migrate`` has moved them)."""
        scopes = sorted(catalog.listed_scopes(self._load_scope_list()))
        legacy = self._connection.synchronizer(
            LEGACY_CATALOG_SYNC_NAME, catalog.LEGACY_UPDATE_TYPES
        )
        try:
            fetch_state(legacy, lambda: NoLegacyCatalogError("no old catalog"), "list scopes")
        except NoLegacyCatalogError:
            return scopes
        raise LegacyLayoutError(
            "Redis holds data written before per-scope catalogs (the old shared catalog): run "
            "`readergroup admin migrate` once, as the operator role, to list its scopes"
        )

    def list_streams(self, scope: str) -> list[str]:
        return sorted(catalog.streams_of(self.catalog(scope)))

    # -- streams ----------------------------------------------------------------------------
    def create_stream(
        self, scope: str, stream: str, config: StreamConfiguration | None = None
    ) -> bool:
        """Create ``scope/stream``; ``False`` if it already existed (its config is kept)."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        config = config or StreamConfiguration()
        now = self._connection.server_time_ms()

        def add(state: catalog.Catalog) -> Decision[bool]:
            if stream in catalog.streams_of(state):
                return [], False
            return [catalog.AddStream(stream, now)], True

        created = self.update_catalog(scope, add)
        state = initial_state(scope, stream, config, now)
        # idempotent steps, repeated on every call so an interrupted creation completes
        self._connection.segments.create_segments(scope, stream, list(state.segments), now)
        sync = self._sync(scope, stream, must_exist=False)
        vanished.initialize_once(self._connection, scope, sync, state, _lost_stream(scope, stream))
        if created:
            log.info("created stream %s/%s with %d segments", scope, stream, len(state.segments))
        return created

    def _sync(
        self, scope: str, stream: str, must_exist: bool = True
    ) -> StateSynchronizer[StreamState]:
        key = (scope, stream)
        sync = self._streams.get(key)
        if sync is None:
            sync = self._connection.synchronizer(
                stream_sync_name(scope, stream), UPDATE_TYPES, STATE_TYPES
            )
            self._streams[key] = sync
        if must_exist and not sync.is_loaded:
            self._fetch(sync, scope, stream)
        return sync

    def _fetch(self, sync: StateSynchronizer[StreamState], scope: str, stream: str) -> StreamState:
        missing = vanished.missing_or_lost(
            self._connection,
            scope,
            sync.name,
            lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist"),
            _lost_stream(scope, stream),
        )
        state: StreamState = vanished.fetch_adopting(sync, missing, "read stream metadata")
        return state

    def stream_state(self, scope: str, stream: str) -> StreamState:
        """The stream's metadata, fetched now."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        return self._fetch(self._sync(scope, stream), scope, stream)

    def _update(
        self, scope: str, stream: str, generator: Callable[[StreamState], Decision[R]]
    ) -> R:
        sync = self._sync(scope, stream)
        missing = lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist")  # noqa: E731
        with missing_as(missing, "update stream metadata"):
            return sync.update_state(generator)

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Change the configuration (``max_event_size``, scaling policy). The segment count only
        changes by scaling."""
        if not isinstance(config, StreamConfiguration):
            raise TypeError("config must be a StreamConfiguration")
        self._update(scope, stream, lambda state: ([UpdateStreamConfig(config)], None))

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        return self._connection.segments.segment_states(scope, stream, segments)

    def complete_scales(self, scope: str, stream: str) -> StreamState:
        """Finish any interrupted scale of the stream now; return the metadata it checked.

        Afterwards every segment the metadata calls sealed is sealed in Redis (its tail is
        final) and every successor whose predecessors are sealed is open."""
        state = self.stream_state(scope, stream)
        self._complete_seals(state)
        return state

    def _complete_seals(self, state: StreamState) -> None:
        complete_scale_seals(self._connection, state)

    def get_stream_info(self, scope: str, stream: str) -> StreamInfo:
        state = self.stream_state(scope, stream)
        self._complete_seals(state)
        last_epoch = state.epochs[-1].segments
        shown = [r.segment_id for r in state.active_segments] or list(last_epoch)
        seg_states = self._connection.segments.segment_states(
            scope, stream, sorted(set(shown) | set(state.head))
        )
        infos = tuple(
            SegmentInfo(
                s,
                segment_name(scope, stream, s),
                state.segments[s].low,
                state.segments[s].high,
                seg_states[s].head,
                seg_states[s].tail,
                seg_states[s].bytes,
                seg_states[s].sealed,
            )
            for s in sorted(shown, key=lambda s: state.segments[s].low)
        )
        return StreamInfo(
            scope=scope,
            stream=stream,
            config=state.config,
            epoch=state.epoch,
            sealed=state.sealed,
            created_ms=state.created_ms,
            active_segments=infos,
            head_cut=StreamCut(scope, stream, dict(state.head)),
            tail_cut=StreamCut(scope, stream, {s: seg_states[s].tail for s in shown}),
            total_segments=len(state.segments),
        )

    def head_cut(self, scope: str, stream: str) -> StreamCut:
        state = self.stream_state(scope, stream)
        return StreamCut(scope, stream, dict(state.head))

    def tail_cut(self, scope: str, stream: str) -> StreamCut:
        return self.get_stream_info(scope, stream).tail_cut

    def cut_at_time(self, scope: str, stream: str, server_ms: int) -> StreamCut:
        """The cut at the first events appended at or after ``server_ms`` (Redis server time),
        exact per segment and never behind the head: reading from it returns exactly the
        events appended at or after ``server_ms`` that are still stored, reading up to it
        exactly those before (see :func:`~readergroup.core.planning.time_positions`)."""
        state = self.complete_scales(scope, stream)

        def locate(segment: int) -> tuple[int, int]:
            offset, tail = self._connection.segments.offset_at_time(
                scope, stream, segment, server_ms
            )
            return max(offset, state.head.get(segment, 0)), tail

        return StreamCut(scope, stream, time_positions(state, locate))

    def scale_stream(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_key_ranges: Sequence[tuple[float, float]],
    ) -> list[int]:
        """Seal ``sealed_segments`` and open successors over ``new_key_ranges`` (which must cover
        exactly the sealed segments' ranges). Split = 1 -> k, merge = k -> 1. Returns the new
        segment ids. Raises InvalidKeyRangesError, ScaleConflictError, StreamSealedError."""
        sealed = tuple(int(s) for s in sealed_segments)
        ranges = [(float(lo), float(hi)) for lo, hi in new_key_ranges]
        for _ in range(self._connection.config.retry.max_attempts):
            state = self.stream_state(scope, stream)
            self._complete_seals(state)
            check_scale(state, sealed, ranges)  # fail fast, before touching Redis
            epoch = state.epoch + 1
            numbers = range(state.next_number, state.next_number + len(ranges))
            planned = [segment_id(epoch, n) for n in numbers]
            now = self._connection.server_time_ms()
            self._connection.segments.create_closed_segments(scope, stream, planned, now)

            def scale(
                current: StreamState,
                epoch: int = epoch,
                planned: list[int] = planned,
                now: int = now,
            ) -> Decision[list[int] | None]:
                ordered = check_scale(current, sealed, ranges)
                if current.epoch + 1 != epoch or current.next_number != number_of(planned[0]):
                    return [], None  # another scale won: plan again with fresh successors
                return [ScaleStream(epoch, sealed, tuple(ordered), now)], planned

            created = self._update(scope, stream, scale)
            if created is not None:
                self._connection.segments.seal_segments(scope, stream, sealed)
                # every predecessor is sealed now: successors may take writes
                self._connection.segments.open_segments(scope, stream, created)
                scoped = f"{scope}/{stream}"
                log.info(
                    "scaled %s: sealed %s, opened %s",
                    scoped,
                    segments_text([(scoped, s) for s in sealed]),
                    segments_text([(scoped, s) for s in created]),
                )
                return list(created)
        raise ScaleConflictError(f"scale of {scope}/{stream} lost every race to other scales")

    def seal_stream(self, scope: str, stream: str) -> bool:
        """Seal every segment; writers then get StreamSealedError. ``False`` if already sealed."""
        now = self._connection.server_time_ms()

        def seal(state: StreamState) -> Decision[bool]:
            if state.sealed:
                return [], False
            return [SealStream(now)], True

        changed = self._update(scope, stream, seal)
        complete_scale_seals(self._connection, self.stream_state(scope, stream), repair=False)
        if changed:
            log.info("sealed stream %s/%s", scope, stream)
        return changed

    def truncate_stream(self, scope: str, stream: str, stream_cut: StreamCut) -> None:
        """Delete every event before ``stream_cut`` and move the head there.

        The cut must cover the key space with segments still stored, at offsets within each
        segment, and must not be behind the current head.
        """
        if not isinstance(stream_cut, StreamCut):
            raise InvalidStreamCutError("truncate_stream needs a StreamCut")
        if (stream_cut.scope, stream_cut.stream) != (scope, stream):
            raise InvalidStreamCutError(
                f"cut is for {stream_cut.scoped_stream}, not {scope}/{stream}"
            )
        state = self.stream_state(scope, stream)
        cut = dict(stream_cut.positions)
        self._check_cut(state, cut)
        before = ancestors(state, cut)
        before_head = ancestors(state, dict(state.head))
        behind_head = [s for s in state.head if s in cut and cut[s] < state.head[s]] + [
            s for s in cut if s in before_head
        ]
        if behind_head:
            raise InvalidStreamCutError(
                f"cut is behind the stream's head at segments {behind_head}"
            )

        def truncate(current: StreamState) -> Decision[None]:
            if dict(current.head) != dict(state.head):
                raise InvalidStreamCutError("the head moved while truncating; retry with a new cut")
            return [TruncateStream(tuple(cut.items()), tuple(sorted(before)))], None

        self._update(scope, stream, truncate)
        for segment, offset in cut.items():
            self._connection.segments.truncate(scope, stream, segment, offset)
        self._connection.segments.delete_segments(scope, stream, sorted(before))
        log.info(
            "truncated %s/%s at a cut over %d segments (%d older segments deleted)",
            scope,
            stream,
            len(cut),
            len(before),
        )

    def _check_cut(self, state: StreamState, cut: dict[int, int]) -> None:
        ranges = {s: (r.low, r.high) for s, r in state.segments.items() if not r.truncated}
        check_cut_covers(StreamCut(state.scope, state.stream, cut), ranges)
        tails = self._connection.segments.segment_states(state.scope, state.stream, list(cut))
        past = {s: (o, tails[s].tail) for s, o in cut.items() if o > tails[s].tail}
        if past:
            raise InvalidStreamCutError(f"cut offsets are past the tails (offset, tail): {past}")

    def check_cut(self, stream_cut: StreamCut) -> None:
        """Raise InvalidStreamCutError unless ``stream_cut`` fits its stream now."""
        state = self.stream_state(stream_cut.scope, stream_cut.stream)
        self._check_cut(state, dict(stream_cut.positions))

    def delete_stream(self, scope: str, stream: str) -> bool:
        """Delete a sealed stream and all its data; ``False`` if it did not exist."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        try:
            state = self.stream_state(scope, stream)
        except StreamNotFoundError:
            state = None
        if state is not None and not state.sealed:
            raise StreamNotSealedError(f"stream {scope}/{stream} must be sealed before deletion")

        def remove(current: catalog.Catalog) -> Decision[bool]:
            if stream not in catalog.streams_of(current):
                return [], False
            return [catalog.RemoveStream(stream)], True

        try:  # first: only the scope's admin gets past this step
            removed = self.update_catalog(scope, remove)
        except ScopeNotFoundError:
            removed = False
        if state is not None:
            self._connection.segments.delete_segments(scope, stream, list(state.segments))
        self._connection.forget_stream(scope, stream)
        vanished.forget(self._connection, scope, stream_sync_name(scope, stream))
        if state is not None:
            with translate_errors("delete stream metadata"):
                self._sync(scope, stream, must_exist=False).delete()
            self._streams.pop((scope, stream), None)
        if removed or state is not None:
            log.info("deleted stream %s/%s", scope, stream)
        return removed or state is not None


def _lost_catalog(keys: KeyLayout, scope: str) -> vanished.Missing:
    return lambda: DataLostError(
        f"the catalog of scope {scope!r} vanished from Redis; once its loss is dealt with, "
        f"HDEL {keys.created_record(scope)} {catalog_sync_name(scope)} lets create_scope "
        "create it again"
    )


def _lost_stream(scope: str, stream: str) -> vanished.Missing:
    return lambda: StreamLostError(
        f"the metadata of stream {scope}/{stream} vanished from Redis; delete_stream removes "
        "what is left of it"
    )


def complete_scale_seals(
    connection: Connection, state: StreamState, *, repair: bool = True
) -> None:
    """Seal in Redis every segment the metadata says is sealed, then open the successors
    left closed (repairs interrupted scales, see the module docstring). Idempotent. With
    ``repair`` False (``seal_stream`` sealing what it just marked sealed) nothing is logged.
    The decisions are :func:`scale_completion`'s (the asyncio writer drives them too)."""
    segments = connection.segments
    calls = {
        "states": segments.segment_states,
        "seal": segments.seal_segments,
        "open": segments.open_segments,
    }
    driver = StepDriver(scale_completion(state, repair=repair))
    while (step := driver.next()) is not None:
        verb, ids = step
        driver.reply = calls[verb](state.scope, state.stream, ids)


ScaleStep = tuple[str, list[int]]
"""A step of :func:`scale_completion`: ``("states", segments)`` (send their
:class:`~readergroup.storage.segment_records.SegmentState` by id), ``("seal", segments)``
or ``("open", segments)`` (send what the segment store's ``seal_segments`` /
``open_segments`` return)."""


def scale_completion(state: StreamState, *, repair: bool = True) -> Generator[ScaleStep, Any, None]:
    """:func:`complete_scale_seals`'s decisions, as steps (see
    :class:`~readergroup.core.steps.StepDriver`).

    Reads the states of only the segments the newest epoch changed (O(that change), not the
    stream's history): every ``scale_stream`` completes the seals of the state it plans
    from and lands only if the epoch is still that state's, so once epoch ``e`` exists every
    segment sealed before ``e`` is sealed in Redis and every successor created before ``e`` is
    open. What may be left undone is the newest scale's predecessors and successors, and the
    segments a ``seal_stream`` sealed (the last epoch's own segments)."""
    scope, stream = state.scope, state.stream
    inactive, closed = _newest_changes(state)
    if not (inactive or closed):
        return
    states = yield ("states", inactive + closed)
    unsealed = [s for s in inactive if states[s].exists and not states[s].sealed]
    if unsealed:
        named = segments_text([(f"{scope}/{stream}", s) for s in unsealed])
        if repair:
            log.warning("sealing %s left unsealed by a scale", named)
        yield ("seal", unsealed)
    closed = [s for s in closed if states[s].sealed]
    opened = (yield ("open", closed)) if closed else []
    if opened:
        named = segments_text([(f"{scope}/{stream}", s) for s in opened])
        log.warning("opened %s left closed by a scale", named)


def _newest_changes(state: StreamState) -> tuple[list[int], list[int]]:
    """The segments the newest epoch sealed (by its scale, or since by a stream seal) and its
    successors still active: those an interrupted scale or seal may have left undone."""
    last = state.epochs[-1]
    records = state.segments
    created = [s for s in last.segments if epoch_of(s) == last.epoch and records[s].predecessors]
    sealed = dict.fromkeys(p for s in created for p in records[s].predecessors)
    sealed.update(dict.fromkeys(s for s in last.segments if not records[s].active))
    inactive = [s for s in sealed if not records[s].truncated]
    return inactive, [s for s in created if records[s].active]
