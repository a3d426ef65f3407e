"""The decisions of stream administration, written once (see :mod:`readergroup.core.calls`):
:class:`StreamSteps` holds, as procedures, everything
:class:`~readergroup.admin.stream_manager.StreamManager` does (threaded, blocking) and
:class:`~readergroup.aio.stream_manager.AsyncStreamManager` does (asyncio, awaited), on the
connection it is given: a threaded :class:`~readergroup.storage.connection_api.Connection` or an
asyncio :class:`~readergroup.storage.aio_admin.AsyncAdminConnection`. The order of effects is
:mod:`readergroup.admin.stream_manager`'s (see there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from readergroup.admin.group_member import segments_text
from readergroup.core import catalog
from readergroup.core.calls import Steps, call_on
from readergroup.core.catalog import Catalog, ScopeList
from readergroup.core.errors import (
    DataLostError,
    InvalidStreamCutError,
    LegacyLayoutError,
    NoLegacyCatalogError,
    ReaderGroupError,
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
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_records import SegmentState
from readergroup.storage.translate import missing_as, translate_errors
from statesync import Decision

# the manager's logger name, kept: operators configure and grep it (``-v`` prints it)
log = logging.getLogger("readergroup.admin.stream_manager")
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


class StreamSteps:
    """Scopes and streams, as procedures on ``connection`` (threaded or asyncio; see the
    module docstring). It caches the synchronizers it opens, like the managers did."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self._scope_list = connection.synchronizer(
            SCOPES_SYNC_NAME, catalog.SCOPE_LIST_UPDATE_TYPES
        )
        self._catalogs: dict[str, Any] = {}
        self._streams: dict[tuple[str, str], Any] = {}

    # -- catalogs (one per scope) and the list of scopes (operator only) ---------------------
    def _catalog_sync(self, scope: str) -> Any:
        sync = self._catalogs.get(scope)
        if sync is None:
            sync = self.connection.synchronizer(catalog_sync_name(scope), catalog.UPDATE_TYPES)
            self._catalogs[scope] = sync
        return sync

    @staticmethod
    def _no_scope(scope: str) -> ScopeNotFoundError:
        return ScopeNotFoundError(
            f"scope {scope!r} does not exist (data written before per-scope catalogs needs "
            "`readergroup admin migrate` once)"
        )

    def server_time_ms(self) -> Steps[int]:
        now: int = yield call_on(self.connection, "server_time_ms")
        return now

    def catalog(self, scope: str) -> Steps[catalog.Catalog]:
        """``scope``'s catalog (streams, groups, what each group reads), fetched now.

        Raises ScopeNotFoundError if the scope does not exist.
        """
        validate_name(scope, "scope")
        sync = self._catalog_sync(scope)
        missing = vanished.missing_or_lost(
            self.connection,
            scope,
            sync.name,
            lambda: self._no_scope(scope),
            _lost_catalog(self.connection.keys, scope),
        )
        state: catalog.Catalog = yield from vanished.fetch_adopting_steps(
            sync, missing, "read catalog"
        )
        if catalog.is_closed(state):
            raise self._no_scope(scope)
        return state

    def update_catalog(self, scope: str, generator: Callable[[Catalog], Decision[R]]) -> Steps[R]:
        """Conditionally update ``scope``'s catalog (for reader group registration). The
        generator runs on the current catalog of an existing scope; returns its result."""
        validate_name(scope, "scope")

        def checked(state: catalog.Catalog) -> Decision[R]:
            if catalog.is_closed(state):
                raise self._no_scope(scope)
            return generator(state)

        sync = self._catalog_sync(scope)
        if not sync.is_loaded:
            yield from self.catalog(scope)  # a scope that does not exist, or whose catalog vanished
        result: R = yield from _missing_as(
            call_on(sync, "update_state", checked), lambda: self._no_scope(scope), "update catalog"
        )
        return result

    def _load_scope_list(self) -> Steps[dict[str, Any]]:
        lost = lambda: DataLostError("the list of scopes vanished from Redis")  # noqa: E731
        initial = catalog.EMPTY_SCOPE_LIST
        yield from vanished.initialize_once(self.connection, None, self._scope_list, initial, lost)
        state: catalog.ScopeList = self._scope_list.state
        return state

    def _update_scope_list(self, generator: Callable[[ScopeList], Decision[R]]) -> Steps[R]:
        yield from self._load_scope_list()
        with translate_errors("update the list of scopes"):
            result: R = yield call_on(self._scope_list, "update_state", generator)
        return result

    def create_scope(self, scope: str) -> Steps[bool]:
        """Create ``scope``; ``False`` if it already existed.

        Creating a scope is an operator action (it lists the scope); on an existing scope this
        only reads the scope's own catalog, so a scope's admin may call it too.
        """
        validate_name(scope, "scope")
        sync = self._catalog_sync(scope)
        try:
            yield from self.catalog(scope)
            return False
        except ScopeNotFoundError:
            pass
        now = yield from self.server_time_ms()

        def add(state: catalog.ScopeList) -> Decision[bool]:
            if scope in catalog.listed_scopes(state):
                return [], False
            return [catalog.ListScope(scope, now)], True

        listed = yield from self._update_scope_list(add)  # first: refused unless operator
        if sync.is_loaded and catalog.is_closed(sync.state):  # an interrupted delete_scope's
            yield from vanished.forget(self.connection, scope, sync.name)
            with translate_errors("create scope"):
                yield call_on(sync, "delete")
        initial = catalog.empty_catalog()
        created = yield from vanished.initialize_once(
            self.connection, scope, sync, initial, _lost_catalog(self.connection.keys, scope)
        )
        if listed or created:
            log.info("created scope %s", scope)
        return listed or created

    def delete_scope(self, scope: str) -> Steps[bool]:
        """Delete an empty scope (an operator action); ``False`` if it did not exist."""
        validate_name(scope, "scope")

        def check_empty(state: catalog.Catalog) -> None:
            streams, groups = catalog.streams_of(state), catalog.groups_of(state)
            if streams or groups:
                raise ScopeNotEmptyError(
                    f"scope {scope!r} still has streams {sorted(streams)} or reader groups "
                    f"{sorted(groups)}; delete them first"
                )

        yield from self.list_scopes()  # first: refused unless operator
        try:
            check_empty((yield from self.catalog(scope)))  # fail fast, before changing anything
            exists = True
        except ScopeNotFoundError:
            exists = False
        listed_ms: list[int] = []

        def unlist(state: catalog.ScopeList) -> Decision[bool]:
            listed_ms[:] = [catalog.listed_scopes(state).get(scope, -1)]
            if scope not in catalog.listed_scopes(state):
                return [], False
            return [catalog.UnlistScope(scope)], True

        unlisted = yield from self._update_scope_list(unlist)
        if exists:

            def close(state: catalog.Catalog) -> Decision[None]:
                check_empty(state)
                return [catalog.CloseScope()], None

            try:
                yield from self.update_catalog(scope, close)
            except ScopeNotEmptyError:  # a stream or group was added meanwhile: list it again
                if unlisted:
                    yield from self._update_scope_list(
                        lambda s: ([catalog.ListScope(scope, listed_ms[0])], None)
                    )
                raise
            except ScopeNotFoundError:
                pass
            yield from vanished.forget(self.connection, scope, catalog_sync_name(scope))
            with translate_errors("delete scope"):
                yield call_on(self._catalog_sync(scope), "delete")
        if unlisted or exists:
            log.info("deleted scope %s", scope)
        return unlisted or exists

    def list_scopes(self) -> Steps[list[str]]:
        """Every scope (an operator action: scope roles cannot enumerate other scopes).
        Raises LegacyLayoutError while the old shared catalog is there (its scopes are listed
        only once ``readergroup admin migrate`` has moved them)."""
        scopes = sorted(catalog.listed_scopes((yield from self._load_scope_list())))
        legacy = self.connection.synchronizer(LEGACY_CATALOG_SYNC_NAME, catalog.LEGACY_UPDATE_TYPES)
        try:
            yield from fetch_state_steps(
                legacy, lambda: NoLegacyCatalogError("no old catalog"), "list scopes"
            )
        except NoLegacyCatalogError:
            return scopes
        raise LegacyLayoutError(
            "Redis holds data written before per-scope catalogs (the old shared catalog): run "
            "`readergroup admin migrate` once, as the operator role, to list its scopes"
        )

    def list_streams(self, scope: str) -> Steps[list[str]]:
        return sorted(catalog.streams_of((yield from self.catalog(scope))))

    # -- streams ----------------------------------------------------------------------------
    def create_stream(
        self, scope: str, stream: str, config: StreamConfiguration | None = None
    ) -> Steps[bool]:
        """Create ``scope/stream``; ``False`` if it already existed (its config is kept)."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        config = config or StreamConfiguration()
        now = yield from self.server_time_ms()

        def add(state: catalog.Catalog) -> Decision[bool]:
            if stream in catalog.streams_of(state):
                return [], False
            return [catalog.AddStream(stream, now)], True

        created = yield from self.update_catalog(scope, add)
        state = initial_state(scope, stream, config, now)
        # idempotent steps, repeated on every call so an interrupted creation completes
        segments = self.connection.segments
        yield call_on(segments, "create_segments", scope, stream, list(state.segments), now)
        sync = self._sync(scope, stream)
        lost = _lost_stream(scope, stream)
        yield from vanished.initialize_once(self.connection, scope, sync, state, lost)
        if created:
            log.info("created stream %s/%s with %d segments", scope, stream, len(state.segments))
        return created

    def _sync(self, scope: str, stream: str) -> Any:
        key = (scope, stream)
        sync = self._streams.get(key)
        if sync is None:
            sync = self.connection.synchronizer(
                stream_sync_name(scope, stream), UPDATE_TYPES, STATE_TYPES
            )
            self._streams[key] = sync
        return sync

    def _loaded_sync(self, scope: str, stream: str) -> Steps[Any]:
        sync = self._sync(scope, stream)
        if not sync.is_loaded:
            yield from self._fetch(sync, scope, stream)
        return sync

    def _fetch(self, sync: Any, scope: str, stream: str) -> Steps[StreamState]:
        missing = vanished.missing_or_lost(
            self.connection,
            scope,
            sync.name,
            lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist"),
            _lost_stream(scope, stream),
        )
        state: StreamState = yield from vanished.fetch_adopting_steps(
            sync, missing, "read stream metadata"
        )
        return state

    def stream_state(self, scope: str, stream: str) -> Steps[StreamState]:
        """The stream's metadata, fetched now."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        sync = self._sync(scope, stream)
        state: StreamState = yield from self._fetch(sync, scope, stream)
        return state

    def _update(
        self, scope: str, stream: str, generator: Callable[[StreamState], Decision[R]]
    ) -> Steps[R]:
        sync = yield from self._loaded_sync(scope, stream)
        missing = lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist")  # noqa: E731
        result: R = yield from _missing_as(
            call_on(sync, "update_state", generator), missing, "update stream metadata"
        )
        return result

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> Steps[None]:
        """Change the configuration (``max_event_size``, scaling policy). The segment count only
        changes by scaling."""
        if not isinstance(config, StreamConfiguration):
            raise TypeError("config must be a StreamConfiguration")
        yield from self._update(scope, stream, lambda state: ([UpdateStreamConfig(config)], None))

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> Steps[dict[int, SegmentState]]:
        states: dict[int, SegmentState] = yield call_on(
            self.connection.segments, "segment_states", scope, stream, segments
        )
        return states

    def complete_scales(self, scope: str, stream: str) -> Steps[StreamState]:
        """Finish any interrupted scale of the stream now; return the metadata it checked.

        Afterwards every segment the metadata calls sealed is sealed in Redis (its tail is
        final) and every successor whose predecessors are sealed is open."""
        state = yield from self.stream_state(scope, stream)
        yield from scale_completion(self.connection.segments, state)
        return state

    def get_stream_info(self, scope: str, stream: str) -> Steps[StreamInfo]:
        state = yield from self.complete_scales(scope, stream)
        last_epoch = state.epochs[-1].segments
        shown = [r.segment_id for r in state.active_segments] or list(last_epoch)
        seg_states = yield from self.segment_states(
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

    def head_cut(self, scope: str, stream: str) -> Steps[StreamCut]:
        state = yield from self.stream_state(scope, stream)
        return StreamCut(scope, stream, dict(state.head))

    def tail_cut(self, scope: str, stream: str) -> Steps[StreamCut]:
        return (yield from self.get_stream_info(scope, stream)).tail_cut

    def cut_at_time(self, scope: str, stream: str, server_ms: int) -> Steps[StreamCut]:
        """The cut at the first events appended at or after ``server_ms`` (Redis server time),
        exact per segment and never behind the head: reading from it returns exactly the
        events appended at or after ``server_ms`` that are still stored, reading up to it
        exactly those before (see :func:`~readergroup.core.planning.time_positions`). One
        round trip per segment the walk visits, as each is located."""
        state = yield from self.complete_scales(scope, stream)
        located: dict[int, tuple[int, int]] = {}
        unknown: list[int] = []

        def locate(segment: int) -> tuple[int, int]:
            if segment in located:
                return located[segment]
            unknown.append(segment)  # the walk stops here (in the cut) and is done again
            return 0, 1

        unknown.extend(sorted(state.head))
        positions: dict[int, int] = {}
        while unknown:
            for segment in unknown:
                offset, tail = yield call_on(
                    self.connection.segments, "offset_at_time", scope, stream, segment, server_ms
                )
                located[segment] = (max(offset, state.head.get(segment, 0)), tail)
            unknown.clear()
            positions = time_positions(state, locate)
        return StreamCut(scope, stream, positions)

    def scale_stream(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_key_ranges: Sequence[tuple[float, float]],
    ) -> Steps[list[int]]:
        """Seal ``sealed_segments`` and open successors over ``new_key_ranges`` (which must cover
        exactly the sealed segments' ranges). Split = 1 -> k, merge = k -> 1. Returns the new
        segment ids. Raises InvalidKeyRangesError, ScaleConflictError, StreamSealedError."""
        sealed = tuple(int(s) for s in sealed_segments)
        ranges = [(float(lo), float(hi)) for lo, hi in new_key_ranges]
        segments = self.connection.segments
        for _ in range(self.connection.config.retry.max_attempts):
            state = yield from self.complete_scales(scope, stream)
            check_scale(state, sealed, ranges)  # fail fast, before touching Redis
            epoch = state.epoch + 1
            numbers = range(state.next_number, state.next_number + len(ranges))
            planned = [segment_id(epoch, n) for n in numbers]
            now = yield from self.server_time_ms()
            yield call_on(segments, "create_closed_segments", scope, stream, planned, now)

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

            created = yield from self._update(scope, stream, scale)
            if created is not None:
                yield call_on(segments, "seal_segments", scope, stream, sealed)
                # every predecessor is sealed now: successors may take writes
                yield call_on(segments, "open_segments", scope, stream, created)
                scoped = f"{scope}/{stream}"
                log.info(
                    "scaled %s: sealed %s, opened %s",
                    scoped,
                    segments_text([(scoped, s) for s in sealed]),
                    segments_text([(scoped, s) for s in created]),
                )
                return list(created)
        raise ScaleConflictError(f"scale of {scope}/{stream} lost every race to other scales")

    def seal_stream(self, scope: str, stream: str) -> Steps[bool]:
        """Seal every segment; writers then get StreamSealedError. ``False`` if already sealed."""
        now = yield from self.server_time_ms()

        def seal(state: StreamState) -> Decision[bool]:
            if state.sealed:
                return [], False
            return [SealStream(now)], True

        changed = yield from self._update(scope, stream, seal)
        state = yield from self.stream_state(scope, stream)
        yield from scale_completion(self.connection.segments, state, repair=False)
        if changed:
            log.info("sealed stream %s/%s", scope, stream)
        return changed

    def truncate_stream(self, scope: str, stream: str, stream_cut: StreamCut) -> Steps[None]:
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
        state = yield from self.stream_state(scope, stream)
        cut = dict(stream_cut.positions)
        yield from self._check_cut(state, cut)
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

        yield from self._update(scope, stream, truncate)
        segments = self.connection.segments
        for segment, offset in cut.items():
            yield call_on(segments, "truncate", scope, stream, segment, offset)
        yield call_on(segments, "delete_segments", scope, stream, sorted(before))
        log.info(
            "truncated %s/%s at a cut over %d segments (%d older segments deleted)",
            scope,
            stream,
            len(cut),
            len(before),
        )

    def _check_cut(self, state: StreamState, cut: dict[int, int]) -> Steps[None]:
        ranges = {s: (r.low, r.high) for s, r in state.segments.items() if not r.truncated}
        check_cut_covers(StreamCut(state.scope, state.stream, cut), ranges)
        tails = yield from self.segment_states(state.scope, state.stream, list(cut))
        past = {s: (o, tails[s].tail) for s, o in cut.items() if o > tails[s].tail}
        if past:
            raise InvalidStreamCutError(f"cut offsets are past the tails (offset, tail): {past}")

    def check_cut(self, stream_cut: StreamCut) -> Steps[None]:
        """Raise InvalidStreamCutError unless ``stream_cut`` fits its stream now."""
        state = yield from self.stream_state(stream_cut.scope, stream_cut.stream)
        yield from self._check_cut(state, dict(stream_cut.positions))

    def delete_stream(self, scope: str, stream: str) -> Steps[bool]:
        """Delete a sealed stream and all its data; ``False`` if it did not exist."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        state: StreamState | None
        try:
            state = yield from self.stream_state(scope, stream)
        except StreamNotFoundError:
            state = None
        if state is not None and not state.sealed:
            raise StreamNotSealedError(f"stream {scope}/{stream} must be sealed before deletion")

        def remove(current: catalog.Catalog) -> Decision[bool]:
            if stream not in catalog.streams_of(current):
                return [], False
            return [catalog.RemoveStream(stream)], True

        try:  # first: only the scope's admin gets past this step
            removed = yield from self.update_catalog(scope, remove)
        except ScopeNotFoundError:
            removed = False
        if state is not None:
            segments = self.connection.segments
            yield call_on(segments, "delete_segments", scope, stream, list(state.segments))
        yield call_on(self.connection, "forget_stream", scope, stream)
        yield from vanished.forget(self.connection, scope, stream_sync_name(scope, stream))
        if state is not None:
            with translate_errors("delete stream metadata"):
                yield call_on(self._sync(scope, stream), "delete")
            self._streams.pop((scope, stream), None)
        if removed or state is not None:
            log.info("deleted stream %s/%s", scope, stream)
        return removed or state is not None


def _missing_as(
    operation: Any, missing: Callable[[], ReaderGroupError], description: str
) -> Steps[Any]:
    """``operation``'s result (:func:`~readergroup.storage.translate.missing_as` around it)."""
    with missing_as(missing, description):
        return (yield operation)


def fetch_state_steps(
    sync: Any, missing: Callable[[], ReaderGroupError], operation: str
) -> Steps[Any]:
    """:func:`~readergroup.storage.translate.fetch_state` as a procedure: fetch ``sync``
    adopting a log that lost writes this client had seen; its state."""
    yield from _missing_as(call_on(sync, "follow"), missing, operation)
    return sync.state


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


def scale_completion(segments: Any, state: StreamState, *, repair: bool = True) -> Steps[None]:
    """Seal in Redis every segment the metadata says is sealed, then open the successors
    left closed (repairs interrupted scales, see :mod:`readergroup.admin.stream_manager`), on
    ``segments`` (a connection's segment store, threaded or asyncio). Idempotent. With
    ``repair`` False (``seal_stream`` sealing what it just marked sealed) nothing is logged.

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
    states = yield call_on(segments, "segment_states", scope, stream, inactive + closed)
    unsealed = [s for s in inactive if states[s].exists and not states[s].sealed]
    if unsealed:
        named = segments_text([(f"{scope}/{stream}", s) for s in unsealed])
        if repair:
            log.warning("sealing %s left unsealed by a scale", named)
        yield call_on(segments, "seal_segments", scope, stream, unsealed)
    closed = [s for s in closed if states[s].sealed]
    opened = (yield call_on(segments, "open_segments", scope, stream, closed)) if closed else []
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
