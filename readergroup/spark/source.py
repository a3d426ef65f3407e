"""The ``readergroup`` data source for PySpark 4 (batch and streaming reads, batch and
streaming writes). Registered by short name through the ``pyspark_readergroup`` package, so
``spark.read.format("readergroup")`` works with no user code once the ``spark`` extra is
installed.

Executors open their own Redis connections; the driver plans. Offsets are canonical JSON stream
cuts (:mod:`readergroup.spark.options`).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from readergroup.admin.retention import RetentionManager
from readergroup.admin.stream_manager import StreamManager
from readergroup.core.config import ClientConfig
from readergroup.core.errors import (
    AccessDeniedError,
    EventTooLargeError,
    InvalidConfigError,
    InvalidStreamCutError,
    ReaderGroupError,
    StreamSealedError,
    TruncatedDataError,
)
from readergroup.core.headers import encode_headers
from readergroup.core.planning import completed_merge_siblings, plan_ranges, skip_lost
from readergroup.core.routing import RangeMap, key_position
from readergroup.core.stream_cut import StreamCut
from readergroup.core.stream_metadata import StreamState
from readergroup.spark.options import (
    BASE_COLUMNS,
    PartitionSpec,
    SourceOptions,
    decode_offset,
    encode_offset,
    limited_end,
    pack_partitions,
    split_ranges,
)
from readergroup.spark.partition_reader import read_partition_columns, to_record_batch
from readergroup.storage import segment_status
from readergroup.storage.connection import RedisConnection
from readergroup.storage.staging_store import StagedEvent
from statesync.system_clock import SystemClock

try:  # admission control and AvailableNow arrived in Spark 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - exercised only on Spark < 4.2
    ADMISSION_CONTROL = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


BASE_SCHEMA = StructType(
    [
        StructField("routing_key", StringType(), True),
        StructField("event", BinaryType(), True),
        StructField("segment_id", LongType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), False),
    ]
)
HEADERS_FIELD = StructField(
    "headers", MapType(StringType(), BinaryType(), valueContainsNull=False), False
)
"""The ``headers`` column (option ``include_headers=true``): each event's headers, an empty
map for an event without any."""
STAGING_TTL_S = 24 * 3600
log = logging.getLogger(__name__)


def _connection(options: SourceOptions) -> RedisConnection:
    config = ClientConfig(key_prefix=options.key_prefix, cluster=options.cluster)
    return RedisConnection.from_url(options.redis_url, config)


class SegmentPartition(InputPartition):
    """Events ``[start, end)`` of one segment, or (:meth:`packed`) of several segments, read by
    one Spark task, piece after piece (each in offset order)."""

    def __init__(self, segment: int, start: int, end: int) -> None:
        self.pieces: tuple[PartitionSpec, ...] = (PartitionSpec(segment, start, end),)
        super().__init__(self.pieces)

    @classmethod
    def packed(cls, pieces: Sequence[PartitionSpec]) -> SegmentPartition:
        """One partition reading ``pieces`` in order (none: an empty partition)."""
        partition: SegmentPartition = cls.__new__(cls)
        partition.pieces = tuple(pieces)
        InputPartition.__init__(partition, partition.pieces)
        return partition


class _Planner:
    """Driver-side planning shared by the batch and streaming readers."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def resolve(self, manager: StreamManager, which: str, timestamp: int | None) -> StreamCut:
        o = self.options
        if timestamp is not None:
            return manager.cut_at_time(o.scope, o.stream, timestamp)
        if which == "earliest":
            return manager.head_cut(o.scope, o.stream)
        if which == "latest":
            return manager.tail_cut(o.scope, o.stream)
        cut = StreamCut.from_text(which)
        if (cut.scope, cut.stream) != (o.scope, o.stream):
            raise InvalidConfigError(f"cut {cut} is not for {o.scope}/{o.stream}")
        return self.completed(manager, cut)

    def completed(self, manager: StreamManager, cut: StreamCut) -> StreamCut:
        """``cut`` with the merge predecessors it leaves out because they were read to their
        end (a reader group's checkpoint of a half-read merge) added at their final tails."""
        o = self.options
        state = manager.complete_scales(o.scope, o.stream)
        missing = completed_merge_siblings(state, cut.positions)
        if not missing:
            return cut
        tails = manager.segment_states(o.scope, o.stream, sorted(missing))
        ends = {s: max(t.tail, state.head.get(s, 0)) for s, t in tails.items()}
        return StreamCut(o.scope, o.stream, {**cut.positions, **ends})

    def checked_start(self, manager: StreamManager, start: StreamCut) -> StreamCut:
        """``start``, checked against the stream now. With data lost to truncation, a
        TruncatedDataError, or with ``fail_on_data_loss=false`` the same cut with only the lost
        part skipped (a segment below its head starts at the head; a segment truncated away
        is replaced by its lineage's segments in the head cut)."""
        o = self.options
        state = manager.stream_state(o.scope, o.stream)
        unknown = [s for s in start.positions if s not in state.segments]
        if unknown:
            raise InvalidStreamCutError(f"{start.scoped_stream} has no segments {unknown}")
        lost = {
            s: o_
            for s, o_ in start.positions.items()
            if state.segments[s].truncated or o_ < state.head.get(s, 0)
        }
        if not lost:
            manager.check_cut(start)
            return start
        if o.fail_on_data_loss:
            segment = min(lost)
            raise TruncatedDataError(
                f"{start.scoped_stream}/{segment}",
                lost[segment],
                state.head.get(segment, -1),
                " (fail_on_data_loss=false skips lost data)",
            )
        skipped = StreamCut(o.scope, o.stream, skip_lost(state, start.positions))
        try:
            manager.check_cut(skipped)
        except InvalidStreamCutError as exc:
            raise TruncatedDataError(
                f"{start.scoped_stream}/{min(lost)}",
                lost[min(lost)],
                -1,
                f" and the rest of the cut cannot be kept around the lost part ({exc})",
            ) from exc
        log.warning(
            "%s: start cut %s is partly truncated (segments %s); skipping to %s "
            "(fail_on_data_loss=false)",
            start.scoped_stream,
            start,
            sorted(lost),
            skipped,
        )
        return skipped

    def partitions(
        self, manager: StreamManager, start: StreamCut, end: StreamCut | None
    ) -> list[SegmentPartition]:
        o = self.options
        state = manager.complete_scales(o.scope, o.stream)  # sealed tails are final
        segments = list(state.segments)
        tails = {
            s: st.tail for s, st in manager.segment_states(o.scope, o.stream, segments).items()
        }
        ranges = plan_ranges(
            state, dict(start.positions), None if end is None else dict(end.positions), tails
        )
        specs = split_ranges(ranges, o.max_events_per_partition, o.min_partitions)
        most = max(o.max_partitions, o.min_partitions)
        packed = pack_partitions(specs, most, o.max_events_per_partition)
        return [SegmentPartition.packed(pieces) for pieces in packed]


def read_partition(
    options: SourceOptions, schema: StructType, partition: SegmentPartition
) -> Iterator[pa.RecordBatch]:
    """Executor side: read one partition's pieces in order, each in chunks, and yield Arrow
    record batches (:mod:`readergroup.spark.partition_reader`: no transaction, columns built
    directly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    connection = _connection(options)
    try:
        for piece in partition.pieces:
            for columns in read_partition_columns(
                connection,
                options.scope,
                options.stream,
                piece.segment,
                piece.start,
                piece.end,
                skip_lost=not options.fail_on_data_loss,
            ):
                yield to_record_batch(
                    columns, arrow_schema, options.serializer, options.include_headers
                )
    finally:
        connection.close()


class ReaderGroupBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        connection = _connection(self.options)
        try:
            manager = StreamManager(connection)
            planner = _Planner(self.options)
            start = planner.resolve(
                manager, self.options.start_stream_cut, self.options.starting_timestamp
            )
            end = planner.resolve(
                manager, self.options.end_stream_cut, self.options.ending_timestamp
            )
            start = planner.checked_start(manager, start)
            return planner.partitions(manager, start, end) or [SegmentPartition.packed(())]
        finally:
            connection.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentPartition)
        return read_partition(self.options, self.schema, partition)


class ReaderGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads between stream cuts. Deterministic for a given pair of offsets, so a
    query restarted from its checkpoint re-reads exactly the same events."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        if options.max_events_per_trigger is not None and not ADMISSION_CONTROL:
            raise InvalidConfigError(
                "max_events_per_trigger needs Spark >= 4.2 (admission control for Python sources)"
            )
        self.options = options
        self.schema = schema
        self._target: dict[str, Any] | None = None

    def _with(self, work: Any) -> Any:
        connection = _connection(self.options)
        try:
            return work(StreamManager(connection), connection)
        finally:
            connection.close()

    def initialOffset(self) -> dict[str, Any]:
        def initial(manager: StreamManager, _: RedisConnection) -> dict[str, Any]:
            planner = _Planner(self.options)
            cut = planner.resolve(
                manager, self.options.start_stream_cut, self.options.starting_timestamp
            )
            return encode_offset(planner.checked_start(manager, cut))

        return dict(self._with(initial))

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_events_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_events_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        def latest(manager: StreamManager, _: RedisConnection) -> dict[str, Any]:
            return encode_offset(manager.tail_cut(self.options.scope, self.options.stream))

        self._target = self._with(latest)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        o = self.options
        budget = limit.max_rows if ADMISSION_CONTROL and isinstance(limit, ReadMaxRows) else None

        def latest(manager: StreamManager, _: RedisConnection) -> dict[str, Any]:
            # a predecessor is final only once sealed in Redis: finish any interrupted scale
            # before reading tails, or a writer with cached metadata could still append to a
            # segment this offset already passed
            state = manager.complete_scales(o.scope, o.stream)
            planner = _Planner(o)
            begin = decode_offset(start) if start else manager.head_cut(o.scope, o.stream)
            begin = planner.checked_start(manager, planner.completed(manager, begin))
            end = decode_offset(self._target) if self._target else None
            tails = {
                s: st.tail
                for s, st in manager.segment_states(o.scope, o.stream, list(state.segments)).items()
            }
            ranges = plan_ranges(
                state, dict(begin.positions), None if end is None else dict(end.positions), tails
            )
            positions = limited_end(state, ranges, budget)
            if not positions:
                return encode_offset(begin)
            return encode_offset(StreamCut(o.scope, o.stream, positions))

        return dict(self._with(latest))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        def plan(manager: StreamManager, _: RedisConnection) -> list[SegmentPartition]:
            planner = _Planner(self.options)
            begin = planner.completed(manager, decode_offset(start))
            begin = planner.checked_start(manager, begin)
            return planner.partitions(manager, begin, decode_offset(end))

        return list(self._with(plan))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentPartition)
        return read_partition(self.options, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Publish the committed cut so consumption-based retention keeps what is unread."""
        cut = decode_offset(end)
        name = self.options.subscriber_name or f"spark:{cut.scoped_stream}"

        def publish(manager: StreamManager, _: RedisConnection) -> None:
            RetentionManager(manager).publish(self.options.scope, self.options.stream, name, cut)

        self._with(publish)

    def stop(self) -> None:
        return None


@dataclass
class StagedCommit(WriterCommitMessage):
    """What one task staged: (segment, staging key) pairs and the event count."""

    staged: list[tuple[int, str]]
    events: int


class _Stager:
    """Executor side of the sink: route rows to segments and stage them in Redis."""

    def __init__(self, options: SourceOptions, job: str) -> None:
        self.options = options
        self.job = job

    def stage(self, rows: Iterator[Any]) -> StagedCommit:
        o = self.options
        connection = _connection(o)
        try:
            state = StreamManager(connection).stream_state(o.scope, o.stream)
            ranges = _writable_ranges(state)
            limit = state.config.max_event_size
            part = uuid.uuid4().hex[:12]
            by_segment: dict[int, list[StagedEvent]] = {}
            now = int(time.time() * 1000)
            for row in rows:
                key, payload, headers = _row_event(row)
                size = len(payload) + len(headers)
                if size > limit:
                    with_headers = f" ({len(headers)} of them headers)" if headers else ""
                    raise EventTooLargeError(
                        f"event of {size} bytes{with_headers} exceeds max_event_size {limit} "
                        f"of {o.scope}/{o.stream}; nothing from this write is committed"
                    )
                position = key_position(key) if key is not None else _spread(payload)
                by_segment.setdefault(ranges.segment_at(position), []).append(
                    (key, payload, now, headers)
                )
            staged = []
            for segment, events in by_segment.items():
                stage_key = connection.staging.staging_key(
                    o.scope, o.stream, self.job, segment, part
                )
                connection.staging.stage(stage_key, events, STAGING_TTL_S)
                staged.append((segment, stage_key))
            return StagedCommit(staged, sum(len(e) for e in by_segment.values()))
        finally:
            connection.close()


def _writable_ranges(state: StreamState) -> RangeMap:
    """The active segments to route to; a sealed stream takes no writes."""
    if state.sealed:
        raise StreamSealedError(
            f"stream {state.scope}/{state.stream} was sealed (server ms {state.sealed_ms}); "
            "nothing from this write is committed"
        )
    return state.range_map()


def _spread(payload: bytes) -> float:
    """Events without a routing key: a position derived from the payload (deterministic)."""
    return key_position(payload.hex()[:64])


def _row_event(row: Any) -> tuple[str | None, bytes, bytes]:
    """A row's routing key, payload and packed headers (``b""``: none): the ``event``
    column, and the optional ``routing_key`` and ``headers`` (map of string to binary)."""
    fields = row.asDict() if hasattr(row, "asDict") else dict(row)
    if "event" not in fields:
        raise ReaderGroupError("rows written to readergroup need an 'event' column")
    event = fields["event"]
    if isinstance(event, str):
        payload = event.encode("utf-8")
    elif isinstance(event, (bytes, bytearray)):
        payload = bytes(event)
    else:
        raise ReaderGroupError(
            f"the 'event' column must be string or binary, not {type(event).__name__}"
        )
    key = fields.get("routing_key")
    key = None if key is None else str(key)
    where = f"the row with routing key {key!r}"
    return key, payload, encode_headers(fields.get("headers"), where)


def commit_job(options: SourceOptions, job: str, messages: Sequence[Any]) -> int:
    """Driver side: commit every task's staged events atomically (one script), once per job.
    A sealed target (the stream scaled meanwhile) re-routes the staged events and retries,
    with backoff; a sealed stream raises StreamSealedError and commits nothing."""
    staged = [pair for m in messages if m is not None for pair in m.staged]
    connection = _connection(options)
    budget = connection.config.retry.start(SystemClock(), random.Random())  # noqa: S311
    try:
        while True:
            code, value = connection.staging.commit_staged(
                options.scope, options.stream, job, staged
            )
            if code != segment_status.SEALED:  # committed now, or before
                return value if code == segment_status.OK else 0
            delay = budget.next_delay()
            if delay is None:
                break
            time.sleep(delay)
            try:
                staged = _restage(connection, options, job, staged)
            except StreamSealedError:
                connection.staging.discard([key for _, key in staged])
                raise
        connection.staging.discard([key for _, key in staged])
        raise ReaderGroupError(f"job {job}: target segments kept sealing; nothing committed")
    finally:
        connection.close()


def _restage(
    connection: RedisConnection, options: SourceOptions, job: str, staged: list[tuple[int, str]]
) -> list[tuple[int, str]]:
    # finish a scale left undone (successors still closed) before routing again; a writer
    # role may not seal or open segments: it then waits for whoever may (bounded retries)
    manager = StreamManager(connection)
    try:
        state = manager.complete_scales(options.scope, options.stream)
    except AccessDeniedError as exc:
        log.warning("job %s: cannot finish an interrupted scale: %s", job, exc, exc_info=exc)
        state = manager.stream_state(options.scope, options.stream)
    ranges = _writable_ranges(state)
    regrouped: dict[int, list[StagedEvent]] = {}
    for _, key in staged:
        for event in connection.staging.read_staged(key):
            routing_key, payload = event[0], event[1]
            position = key_position(routing_key) if routing_key is not None else _spread(payload)
            regrouped.setdefault(ranges.segment_at(position), []).append(event)
    connection.staging.discard([key for _, key in staged])
    part = uuid.uuid4().hex[:12]
    out = []
    for segment, events in regrouped.items():
        key = connection.staging.staging_key(options.scope, options.stream, job, segment, part)
        connection.staging.stage(key, events, STAGING_TTL_S)
        out.append((segment, key))
    return out


def abort_job(options: SourceOptions, messages: Sequence[Any]) -> None:
    connection = _connection(options)
    try:
        connection.staging.discard([key for m in messages if m is not None for _, key in m.staged])
    finally:
        connection.close()


class ReaderGroupBatchWriter(DataSourceWriter):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.job = f"batch-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> StagedCommit:
        return _Stager(self.options, self.job).stage(iterator)

    def commit(self, messages: list[Any]) -> None:
        commit_job(self.options, self.job, messages)

    def abort(self, messages: list[Any]) -> None:
        abort_job(self.options, messages)


class ReaderGroupStreamWriter(DataSourceStreamWriter):
    """Each micro-batch is committed once: the job id is ``<writer_id>:<batch id>``, so a batch
    Spark replays after a failure is recognised and not written again. Give every query its own
    stable ``writer_id`` option."""

    def __init__(self, options: SourceOptions, writer_id: str) -> None:
        self.options = options
        self.writer_id = writer_id

    def write(self, iterator: Iterator[Any]) -> StagedCommit:
        return _Stager(self.options, f"{self.writer_id}:staging").stage(iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        commit_job(self.options, f"{self.writer_id}:{batchId}", messages)

    def abort(self, messages: list[Any], batchId: int) -> None:
        abort_job(self.options, messages)


class ReaderGroupDataSource(DataSource):
    """``format("readergroup")``: options and columns in docs/guides/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "readergroup"

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(dict(self.options))

    def schema(self) -> StructType:
        options = self._options()
        if options.serializer == "json":
            raise InvalidConfigError(
                "serializer=json needs a schema: .schema('routing_key string, offset long, "
                "amount int, ...'); event fields become columns by name"
            )
        fields = list(BASE_SCHEMA.fields)
        if options.serializer == "utf8":
            fields = [
                f if f.name != "event" else StructField("event", StringType(), True) for f in fields
            ]
        if options.include_headers:
            fields.append(HEADERS_FIELD)
        return StructType(fields)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ReaderGroupBatchReader(self._options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ReaderGroupStreamReader(self._options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidConfigError("streams are append-only: use mode('append')")
        return ReaderGroupBatchWriter(_sink_options(self._options()))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = dict(self.options)
        writer_id = (
            options.get("writer_id") or f"spark-{options.get('scope')}-{options.get('stream')}"
        )
        return ReaderGroupStreamWriter(_sink_options(self._options()), writer_id)


def _sink_options(options: SourceOptions) -> SourceOptions:
    if options.cluster:
        raise InvalidConfigError(
            "the readergroup sink commits a batch atomically in one script across segments, "
            "which spans hash slots: it does not run on Redis Cluster"
        )
    return options


__all__ = ["BASE_COLUMNS", "ReaderGroupDataSource"]
