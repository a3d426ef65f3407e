"""``StreamManager``: scopes and streams, their scaling, sealing, truncation and deletion.

All metadata lives in state synchronizers (the catalog, and one per stream); the data plane
is Redis Streams (:mod:`readergroup.redis_io`). There is no controller process: any client
may run any of these operations, and conditional appends keep concurrent ones consistent.

Order of effects, chosen so that a crash at any point leaves a state the next call repairs:

* ``create_stream``: catalog entry, then segments in Redis, then the stream's metadata.
* ``scale_stream``: successors created in Redis, then the metadata names them (atomically
  sealing the predecessors there), then the predecessors are sealed in Redis. A seal left
  undone by a crash is completed by the next ``scale_stream``, ``seal_stream`` or
  ``get_stream_info``, and by readers reaching the segment's end.
* ``truncate_stream``: the metadata head moves first (readers stop asking for older data),
  then the data is deleted.
* ``delete_stream``: data, then metadata, then the catalog entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from readergroup import catalog
from readergroup.closing import Closing
from readergroup.config import ClientConfig
from readergroup.errors import (
    InvalidStreamCutError,
    ScaleConflictError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamNotFoundError,
    StreamNotSealedError,
)
from readergroup.names import CATALOG_SYNC_NAME, stream_sync_name, validate_name
from readergroup.planning import ancestors
from readergroup.redis_io import (
    RedisConnection,
    SegmentState,
    fetch_state,
    missing_as,
    translate_errors,
)
from readergroup.routing import number_of, segment_id, segment_name
from readergroup.stream_config import StreamConfiguration
from readergroup.stream_cut import StreamCut, check_cut_covers
from readergroup.stream_metadata import (
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
from statesync import StateSynchronizer


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

    def __init__(self, connection: RedisConnection, *, owns_connection: bool = False) -> None:
        self._connection = connection
        self._owns_connection = owns_connection
        self._catalog = connection.synchronizer(CATALOG_SYNC_NAME, catalog.UPDATE_TYPES)
        self._streams: dict[tuple[str, str], StateSynchronizer[StreamState]] = {}

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> StreamManager:
        return cls(RedisConnection.from_url(url, config), owns_connection=True)

    @property
    def connection(self) -> RedisConnection:
        return self._connection

    def close(self) -> None:
        if self._owns_connection:
            self._connection.close()

    # -- catalog ----------------------------------------------------------------------------
    def _catalog_state(self) -> dict[str, dict[str, int]]:
        return catalog.scopes_of(self.catalog())

    def catalog(self) -> catalog.Catalog:
        """The whole catalog, fetched now."""
        with translate_errors("read catalog"):
            if not self._catalog.is_loaded:
                self._catalog.initialize(catalog.EMPTY_CATALOG)
            else:
                self._catalog.fetch_updates()
            state: catalog.Catalog = self._catalog.state
            return state

    def update_catalog(self, generator: Any) -> Any:
        """Conditionally update the catalog (for reader group registration)."""
        return self._update_catalog(generator)

    def _update_catalog(self, generator: Any) -> Any:
        self._catalog_state()
        with translate_errors("update catalog"):
            return self._catalog.update_state(generator)

    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` if it already existed."""
        validate_name(scope, "scope")

        def create(state: catalog.Catalog) -> Any:
            if scope in catalog.scopes_of(state):
                return [], False
            return [catalog.CreateScope(scope)], True

        return bool(self._update_catalog(create))

    def delete_scope(self, scope: str) -> bool:
        """Delete an empty scope; ``False`` if it did not exist."""
        validate_name(scope, "scope")

        def delete(state: catalog.Catalog) -> Any:
            scopes = catalog.scopes_of(state)
            if scope not in scopes:
                return [], False
            if scopes[scope] or catalog.groups_of(state, scope):
                raise ScopeNotEmptyError(
                    f"scope {scope!r} still has streams {sorted(scopes[scope])} or reader groups "
                    f"{sorted(catalog.groups_of(state, scope))}; delete them first"
                )
            return [catalog.DeleteScope(scope)], True

        return bool(self._update_catalog(delete))

    def list_scopes(self) -> list[str]:
        return sorted(self._catalog_state())

    def list_streams(self, scope: str) -> list[str]:
        validate_name(scope, "scope")
        scopes = self._catalog_state()
        if scope not in scopes:
            raise ScopeNotFoundError(f"scope {scope!r} does not exist")
        return sorted(scopes[scope])

    # -- streams ----------------------------------------------------------------------------
    def create_stream(
        self, scope: str, stream: str, config: StreamConfiguration | None = None
    ) -> bool:
        """Create ``scope/stream``; ``False`` if it already existed (its config is kept)."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        config = config or StreamConfiguration()
        now = self._connection.server_time_ms()

        def add(state: catalog.Catalog) -> Any:
            scopes = catalog.scopes_of(state)
            if scope not in scopes:
                raise ScopeNotFoundError(f"scope {scope!r} does not exist; create_scope first")
            if stream in scopes[scope]:
                return [], False
            return [catalog.AddStream(scope, stream, now)], True

        created = bool(self._update_catalog(add))
        state = initial_state(scope, stream, config, now)
        # idempotent steps, repeated on every call so an interrupted creation completes
        self._connection.create_segments(scope, stream, list(state.segments), now)
        with translate_errors("create stream"):
            self._sync(scope, stream, must_exist=False).initialize(state)
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

    @staticmethod
    def _fetch(sync: StateSynchronizer[StreamState], scope: str, stream: str) -> StreamState:
        state: StreamState = fetch_state(
            sync,
            lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist"),
            "read stream metadata",
        )
        return state

    def stream_state(self, scope: str, stream: str) -> StreamState:
        """The stream's metadata, fetched now."""
        validate_name(scope, "scope")
        validate_name(stream, "stream")
        return self._fetch(self._sync(scope, stream), scope, stream)

    def _update(self, scope: str, stream: str, generator: Any) -> Any:
        sync = self._sync(scope, stream)
        missing = lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist")  # noqa: E731
        with missing_as(missing, "update stream metadata"):
            return sync.update_state(generator)

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Change the configuration (``max_event_size``, scaling policy). The segment count only
        changes by scaling."""
        if not isinstance(config, StreamConfiguration):
            raise TypeError("config must be a StreamConfiguration")
        self._update(scope, stream, lambda state: [UpdateStreamConfig(config)])

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        return self._connection.segment_states(scope, stream, segments)

    def _complete_seals(self, state: StreamState) -> None:
        """Seal in Redis every segment the metadata says is sealed (repairs interrupted scales)."""
        candidates = [
            r.segment_id for r in state.segments.values() if not r.active and not r.truncated
        ]
        if not candidates:
            return
        states = self._connection.segment_states(state.scope, state.stream, candidates)
        for segment, seg_state in states.items():
            if seg_state.exists and not seg_state.sealed:
                self._connection.seal(state.scope, state.stream, segment)

    def get_stream_info(self, scope: str, stream: str) -> StreamInfo:
        state = self.stream_state(scope, stream)
        self._complete_seals(state)
        last_epoch = state.epochs[-1].segments
        shown = [r.segment_id for r in state.active_segments] or list(last_epoch)
        seg_states = self._connection.segment_states(
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
        clipped to the head."""
        state = self.stream_state(scope, stream)
        epoch = state.epoch_at(server_ms)
        if any(state.segments[s].truncated for s in epoch.segments):
            return StreamCut(scope, stream, dict(state.head))
        positions = {
            s: max(
                state.head.get(s, 0), self._connection.offset_at_time(scope, stream, s, server_ms)
            )
            for s in epoch.segments
        }
        return StreamCut(scope, stream, positions)

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
            self._connection.create_segments(scope, stream, planned, now)

            def scale(
                current: StreamState,
                epoch: int = epoch,
                planned: list[int] = planned,
                now: int = now,
            ) -> Any:
                ordered = check_scale(current, sealed, ranges)
                if current.epoch + 1 != epoch or current.next_number != number_of(planned[0]):
                    return [], None  # another scale won: plan again with fresh successors
                return [ScaleStream(epoch, sealed, tuple(ordered), now)], planned

            created = self._update(scope, stream, scale)
            if created is not None:
                for old in sealed:
                    self._connection.seal(scope, stream, old)
                return list(created)
        raise ScaleConflictError(f"scale of {scope}/{stream} lost every race to other scales")

    def seal_stream(self, scope: str, stream: str) -> bool:
        """Seal every segment; writers then get StreamSealedError. ``False`` if already sealed."""
        now = self._connection.server_time_ms()

        def seal(state: StreamState) -> Any:
            if state.sealed:
                return [], False
            return [SealStream(now)], True

        changed = bool(self._update(scope, stream, seal))
        self._complete_seals(self.stream_state(scope, stream))
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
        behind_head = [s for s in state.head if s in cut and cut[s] < state.head[s]] + [
            s for s in cut if s in ancestors(state, dict(state.head))
        ]
        if behind_head:
            raise InvalidStreamCutError(
                f"cut is behind the stream's head at segments {behind_head}"
            )

        def truncate(current: StreamState) -> Any:
            if dict(current.head) != dict(state.head):
                raise InvalidStreamCutError("the head moved while truncating; retry with a new cut")
            return [TruncateStream(tuple(cut.items()), tuple(sorted(before)))]

        self._update(scope, stream, truncate)
        for segment, offset in cut.items():
            self._connection.truncate(scope, stream, segment, offset)
        self._connection.delete_segments(scope, stream, sorted(before))

    def _check_cut(self, state: StreamState, cut: dict[int, int]) -> None:
        ranges = {s: (r.low, r.high) for s, r in state.segments.items() if not r.truncated}
        check_cut_covers(StreamCut(state.scope, state.stream, cut), ranges)
        tails = self._connection.segment_states(state.scope, state.stream, list(cut))
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
        if state is not None:
            if not state.sealed:
                raise StreamNotSealedError(
                    f"stream {scope}/{stream} must be sealed before deletion"
                )
            self._connection.delete_segments(scope, stream, list(state.segments))
            with translate_errors("delete stream metadata"):
                self._sync(scope, stream, must_exist=False).delete()
            self._streams.pop((scope, stream), None)

        def remove(current: catalog.Catalog) -> Any:
            if stream not in catalog.scopes_of(current).get(scope, {}):
                return [], False
            return [catalog.RemoveStream(scope, stream)], True

        removed = bool(self._update_catalog(remove))
        return removed or state is not None
