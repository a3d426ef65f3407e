"""Options and offsets of the Spark data source. Pure code (no pyspark, no Redis).

Offsets are canonical JSON stream cuts: ``{"positions": {"<segment id>": offset, ...},
"stream": "scope/stream", "version": 1}`` with sorted keys, so equal cuts serialize equally and
Spark's checkpoint can compare them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from readergroup.core.errors import InvalidConfigError, InvalidStreamCutError
from readergroup.core.names import validate_name
from readergroup.core.planning import SegmentRange
from readergroup.core.stream_cut import StreamCut
from readergroup.core.stream_metadata import StreamState
from statesync.redaction import redacted_repr

OFFSET_VERSION = 1
SERIALIZERS = ("bytes", "utf8", "json")
BASE_COLUMNS = ("routing_key", "event", "segment_id", "offset", "timestamp")


#: One set of start-position words everywhere: head/tail are accepted for earliest/latest.
_SPARK_WORDS = {"earliest": "earliest", "head": "earliest", "latest": "latest", "tail": "latest"}


def _flag(value: str | None, default: bool, name: str) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise InvalidConfigError(f"option {name} must be true or false, got {value!r}")


def _int(value: str | None, default: int | None, name: str, minimum: int) -> int | None:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidConfigError(f"option {name} must be an integer, got {value!r}") from exc
    if number < minimum:
        raise InvalidConfigError(f"option {name} must be >= {minimum}, got {number}")
    return number


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated options of ``spark.read.format("readergroup")`` (see docs/guides/spark.md)."""

    redis_url: str
    scope: str
    stream: str
    start_stream_cut: str = "earliest"
    end_stream_cut: str = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    max_events_per_partition: int = 100_000
    min_partitions: int = 1
    max_partitions: int = 64
    fail_on_data_loss: bool = True
    serializer: str = "bytes"
    include_headers: bool = False
    """Add the ``headers`` column (map<string, binary>; an empty map for an event without
    headers), as Kafka's source does with ``includeHeaders``."""
    max_events_per_trigger: int | None = None
    subscriber_name: str | None = None
    key_prefix: str = "rg"
    cluster: bool = False

    def __repr__(self) -> str:
        return redacted_repr(self)  # the URL's password hidden

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        missing = [k for k in ("redis_url", "scope", "stream") if not lowered.get(k)]
        if missing:
            raise InvalidConfigError(f"the readergroup source needs options {missing}")
        serializer = lowered.get("serializer", "bytes").lower()
        if serializer not in SERIALIZERS:
            raise InvalidConfigError(f"serializer must be one of {SERIALIZERS}, got {serializer!r}")
        start = lowered.get("start_stream_cut", "earliest")
        end = lowered.get("end_stream_cut", "latest")
        start, end = _SPARK_WORDS.get(start, start), _SPARK_WORDS.get(end, end)
        for value in (start, end):
            if value not in ("earliest", "latest"):
                StreamCut.from_text(value)  # validates, raises InvalidStreamCutError
        return cls(
            redis_url=lowered["redis_url"],
            scope=validate_name(lowered["scope"], "scope"),
            stream=validate_name(lowered["stream"], "stream"),
            start_stream_cut=start,
            end_stream_cut=end,
            starting_timestamp=_int(
                lowered.get("starting_timestamp"), None, "starting_timestamp", 0
            ),
            ending_timestamp=_int(lowered.get("ending_timestamp"), None, "ending_timestamp", 0),
            max_events_per_partition=_int(
                lowered.get("max_events_per_partition"), 100_000, "max_events_per_partition", 1
            )
            or 100_000,
            min_partitions=_int(lowered.get("min_partitions"), 1, "min_partitions", 1) or 1,
            max_partitions=_int(lowered.get("max_partitions"), 64, "max_partitions", 1) or 64,
            fail_on_data_loss=_flag(lowered.get("fail_on_data_loss"), True, "fail_on_data_loss"),
            serializer=serializer,
            include_headers=_flag(lowered.get("include_headers"), False, "include_headers"),
            max_events_per_trigger=_int(
                lowered.get("max_events_per_trigger"), None, "max_events_per_trigger", 1
            ),
            subscriber_name=lowered.get("subscriber_name"),
            key_prefix=lowered.get("key_prefix", "rg"),
            cluster=_flag(lowered.get("cluster"), False, "cluster"),
        )


def encode_offset(cut: StreamCut) -> dict[str, Any]:
    """A stream cut as Spark's offset: a dict of primitives with a version field.

    >>> encode_offset(StreamCut("a", "b", {4294967296: 3, 1: 0}))
    {'positions': {'1': 0, '4294967296': 3}, 'stream': 'a/b', 'version': 1}
    """
    positions = {str(s): o for s, o in sorted(cut.positions.items())}
    return {"positions": positions, "stream": cut.scoped_stream, "version": OFFSET_VERSION}


def decode_offset(offset: Mapping[str, Any] | str) -> StreamCut:
    """The stream cut an offset names; anything malformed raises InvalidStreamCutError."""
    try:
        data = json.loads(offset) if isinstance(offset, str) else dict(offset)
        if data.get("version") != OFFSET_VERSION:
            raise InvalidStreamCutError(f"offset version {data.get('version')!r} is not supported")
        scope, _, stream = str(data["stream"]).partition("/")
        positions = {int(s): int(o) for s, o in dict(data["positions"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidStreamCutError(f"not a readergroup offset: {offset!r}") from exc
    return StreamCut(scope, stream, positions)


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """One Spark partition: events ``[start, end)`` of one segment."""

    segment: int
    start: int
    end: int


def split_ranges(
    ranges: list[SegmentRange], max_events: int, min_partitions: int
) -> list[PartitionSpec]:
    """Cut segment ranges into partitions of at most ``max_events`` events, and into at least
    ``min_partitions`` pieces when there are enough events.

    >>> split_ranges([SegmentRange(1, 0, 10), SegmentRange(2, 5, 5)], 4, 1)
    [PartitionSpec(segment=1, start=0, end=4), PartitionSpec(segment=1, start=4, end=8), \
PartitionSpec(segment=1, start=8, end=10)]
    """
    total = sum(r.events for r in ranges)
    size = max_events
    if min_partitions > 1 and total:
        size = max(1, min(size, -(-total // min_partitions)))
    out = []
    for r in ranges:
        for start in range(r.start, r.end, size):
            out.append(PartitionSpec(r.segment, start, min(start + size, r.end)))
    return out


def pack_partitions(
    specs: list[PartitionSpec], max_partitions: int, max_events: int
) -> list[tuple[PartitionSpec, ...]]:
    """Group ``specs`` (in their order) into Spark partitions: one each while there are at most
    ``max_partitions``, else whole specs packed into at most ``max_partitions`` partitions of
    about equal events (each but the last holds at least ``total / max_partitions``), a
    partition never passing ``max_events`` events (which wins when both cannot hold). Many small
    segments then cost a few tasks, not one each; a segment's events stay in order in one spec.

    >>> specs = [PartitionSpec(s, 0, 1) for s in range(5)] + [PartitionSpec(9, 0, 3)]
    >>> [[(p.segment, p.end) for p in part] for part in pack_partitions(specs, 3, 10)]
    [[(0, 1), (1, 1), (2, 1)], [(3, 1), (4, 1), (9, 3)]]
    """
    if len(specs) <= max_partitions:
        return [(spec,) for spec in specs]
    total = sum(spec.end - spec.start for spec in specs)
    least = -(-total // max_partitions)
    packed: list[tuple[PartitionSpec, ...]] = []
    current: list[PartitionSpec] = []
    events = 0
    for spec in specs:
        size = spec.end - spec.start
        if current and events + size > max_events:
            packed.append(tuple(current))
            current, events = [], 0
        current.append(spec)
        events += size
        if events >= least:
            packed.append(tuple(current))
            current, events = [], 0
    if current:
        packed.append(tuple(current))
    return packed


def limited_end(
    state: StreamState, ranges: list[SegmentRange], budget: int | None
) -> dict[int, int]:
    """The end cut after reading ``ranges`` (predecessors first) with at most ``budget`` events.

    A segment is read only once all its predecessors in the plan are read to their ends, so the
    cut never holds a successor before its predecessor is complete; it covers the key space
    with the segments that have no read successor.
    """
    ends: dict[int, int] = {}
    complete: set[int] = set()
    planned = {r.segment for r in ranges}
    remaining = budget
    for r in ranges:
        blocked = [
            p for p in state.segments[r.segment].predecessors if p in planned and p not in complete
        ]
        if blocked:
            continue
        take = r.events if remaining is None else min(r.events, remaining)
        ends[r.segment] = r.start + take
        if remaining is not None:
            remaining -= take
        if r.start + take == r.end:
            complete.add(r.segment)
    return {
        s: o
        for s, o in ends.items()
        if not any(succ in ends for succ in state.segments[s].successors)
    }
