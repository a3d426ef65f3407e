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

The decisions are :class:`~readergroup.admin.stream_steps.StreamSteps`' procedures, which
:class:`StreamManager` runs blocking and :class:`~readergroup.aio.stream_manager.
AsyncStreamManager` awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from readergroup.admin.stream_steps import (
    SegmentInfo,
    StreamInfo,
    StreamSteps,
    scale_completion,
)
from readergroup.core import catalog
from readergroup.core.calls import drive
from readergroup.core.catalog import Catalog
from readergroup.core.closing import Closing
from readergroup.core.config import ClientConfig
from readergroup.core.stream_config import StreamConfiguration
from readergroup.core.stream_cut import StreamCut
from readergroup.core.stream_metadata import StreamState
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.storage.segment_records import SegmentState
from statesync import Decision

__all__ = [
    "SegmentInfo",
    "StreamInfo",
    "StreamManager",
    "complete_scale_seals",
    "scale_completion",
]

R = TypeVar("R")


class StreamManager(Closing):
    """Administration of scopes and streams.

    Example::

        with StreamManager.from_url(url) as sm:
            sm.create_scope("shop")
            sm.create_stream("shop", "orders",
                             StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))

    Thread-safe: the synchronizers it holds serialize their own operations. Each method
    runs :class:`~readergroup.admin.stream_steps.StreamSteps`' procedure of the same name
    (see there for what it does).
    """

    def __init__(self, connection: Connection, *, owns_connection: bool = False) -> None:
        self._connection = connection
        self._owns_connection = owns_connection
        self.steps = StreamSteps(connection)

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> StreamManager:
        return cls(RedisConnection.from_url(url, config), owns_connection=True)

    @property
    def connection(self) -> Connection:
        return self._connection

    def close(self) -> None:
        if self._owns_connection:
            self._connection.close()

    # -- scopes -----------------------------------------------------------------------------
    def catalog(self, scope: str) -> catalog.Catalog:
        """``scope``'s catalog (streams, groups, what each group reads), fetched now.

        Raises ScopeNotFoundError if the scope does not exist.
        """
        return drive(self.steps.catalog(scope))

    def update_catalog(self, scope: str, generator: Callable[[Catalog], Decision[R]]) -> R:
        """Conditionally update ``scope``'s catalog (for reader group registration). The
        generator runs on the current catalog of an existing scope; returns its result."""
        return drive(self.steps.update_catalog(scope, generator))

    def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` if it already existed (see
        :meth:`StreamSteps.create_scope`)."""
        return drive(self.steps.create_scope(scope))

    def delete_scope(self, scope: str) -> bool:
        """Delete an empty scope (an operator action); ``False`` if it did not exist."""
        return drive(self.steps.delete_scope(scope))

    def list_scopes(self) -> list[str]:
        """Every scope (an operator action; see :meth:`StreamSteps.list_scopes`)."""
        return drive(self.steps.list_scopes())

    def list_streams(self, scope: str) -> list[str]:
        return drive(self.steps.list_streams(scope))

    # -- streams ----------------------------------------------------------------------------
    def create_stream(
        self, scope: str, stream: str, config: StreamConfiguration | None = None
    ) -> bool:
        """Create ``scope/stream``; ``False`` if it already existed (its config is kept)."""
        return drive(self.steps.create_stream(scope, stream, config))

    def stream_state(self, scope: str, stream: str) -> StreamState:
        """The stream's metadata, fetched now."""
        return drive(self.steps.stream_state(scope, stream))

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Change the configuration (``max_event_size``, scaling policy). The segment count only
        changes by scaling."""
        drive(self.steps.update_stream(scope, stream, config))

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        return drive(self.steps.segment_states(scope, stream, segments))

    def complete_scales(self, scope: str, stream: str) -> StreamState:
        """Finish any interrupted scale of the stream now; return the metadata it checked."""
        return drive(self.steps.complete_scales(scope, stream))

    def get_stream_info(self, scope: str, stream: str) -> StreamInfo:
        return drive(self.steps.get_stream_info(scope, stream))

    def head_cut(self, scope: str, stream: str) -> StreamCut:
        return drive(self.steps.head_cut(scope, stream))

    def tail_cut(self, scope: str, stream: str) -> StreamCut:
        return drive(self.steps.tail_cut(scope, stream))

    def cut_at_time(self, scope: str, stream: str, server_ms: int) -> StreamCut:
        """The cut at the first events appended at or after ``server_ms`` (Redis server time;
        see :meth:`StreamSteps.cut_at_time`)."""
        return drive(self.steps.cut_at_time(scope, stream, server_ms))

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
        return drive(self.steps.scale_stream(scope, stream, sealed_segments, new_key_ranges))

    def seal_stream(self, scope: str, stream: str) -> bool:
        """Seal every segment; writers then get StreamSealedError. ``False`` if already sealed."""
        return drive(self.steps.seal_stream(scope, stream))

    def truncate_stream(self, scope: str, stream: str, stream_cut: StreamCut) -> None:
        """Delete every event before ``stream_cut`` and move the head there (see
        :meth:`StreamSteps.truncate_stream`)."""
        drive(self.steps.truncate_stream(scope, stream, stream_cut))

    def check_cut(self, stream_cut: StreamCut) -> None:
        """Raise InvalidStreamCutError unless ``stream_cut`` fits its stream now."""
        drive(self.steps.check_cut(stream_cut))

    def delete_stream(self, scope: str, stream: str) -> bool:
        """Delete a sealed stream and all its data; ``False`` if it did not exist."""
        return drive(self.steps.delete_stream(scope, stream))


def complete_scale_seals(connection: Any, state: StreamState, *, repair: bool = True) -> None:
    """Seal in Redis every segment the metadata says is sealed, then open the successors
    left closed (:func:`~readergroup.admin.stream_steps.scale_completion`, blocking)."""
    drive(scale_completion(connection.segments, state, repair=repair))
