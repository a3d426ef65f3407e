"""The ``readergroup`` data source for PySpark 4 (batch and streaming reads, batch and
streaming writes). Registered by short name through the ``pyspark_readergroup`` package, so
``spark.read.format("readergroup")`` works with no user code once the ``spark`` extra is
installed.

Executors open their own Redis connections; the driver plans. Offsets are canonical JSON stream
cuts (:mod:`readergroup.spark.options`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
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
    InvalidConfigError,
    InvalidStreamCutError,
    ReaderGroupError,
    StreamSealedError,
    TruncatedDataError,
)
from readergroup.core.headers import encode_headers
from readergroup.core.planning import completed_merge_siblings, plan_ranges, skip_lost
from readergroup.core.routing import RangeMap
from readergroup.core.stream_cut import StreamCut
from readergroup.core.stream_metadata import StreamState
from readergroup.spark import txn_sink
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
from readergroup.spark.txn_sink import StagedCommit, new_epoch, sink_id, stage_task
from readergroup.storage.connection import RedisConnection
from readergroup.storage.staging_store import StagedEvent

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


class _Stager:
    """Executor side of the sink: a task's rows staged in a transaction of its own
    (:mod:`readergroup.spark.txn_sink`). ``holder``: the driver's transactional id and epoch
    (default: the job's own, begun here)."""

    def __init__(
        self, options: SourceOptions, job: str, holder: tuple[str, int] | None = None
    ) -> None:
        self.options = options
        self.job = job
        self.holder = holder

    def stage(self, rows: Iterator[Any]) -> StagedCommit:
        o = self.options
        connection = _connection(o)
        try:
            state = StreamManager(connection).stream_state(o.scope, o.stream)
            _writable_ranges(state)
            holder = self.holder
            if holder is None:
                tid = sink_id(self.job)
                holder = (tid, new_epoch(connection, o.scope, o.stream, tid))
            now = int(time.time() * 1000)
            events = (_staged(_row_event(row), now) for row in rows)
            return stage_task(connection, o, holder, events, state.config.max_event_size)
        finally:
            connection.close()


def _staged(event: tuple[str | None, bytes, bytes], now: int) -> StagedEvent:
    key, payload, headers = event
    return key, payload, now, headers


def _writable_ranges(state: StreamState) -> RangeMap:
    """The active segments to route to; a sealed stream takes no writes."""
    if state.sealed:
        raise StreamSealedError(
            f"stream {state.scope}/{state.stream} was sealed (server ms {state.sealed_ms}); "
            "nothing from this write is committed"
        )
    return state.range_map()


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
    """Driver side: commit every task's staged rows at once, once per job
    (:func:`readergroup.spark.txn_sink.commit_job`)."""
    connection = _connection(options)
    try:
        return txn_sink.commit_job(connection, options, job, messages)
    finally:
        connection.close()


def abort_job(options: SourceOptions, messages: Sequence[Any]) -> None:
    connection = _connection(options)
    try:
        txn_sink.abort_job(connection, options, messages)
    finally:
        connection.close()


def _driver_holder(
    options: SourceOptions, transactional_id: str, *, fence: bool
) -> tuple[str, int]:
    """The transactional id and epoch the tasks stage under: with ``fence`` a new epoch
    (fencing tasks of older instances: a batch job's writer is made once), else the current
    one (Spark makes a query's stream writer more than once; batch ids dedup its commits)."""
    connection = _connection(options)
    try:
        store = connection.transactions(options.scope, options.stream)
        epoch = 0 if fence else store.epoch(transactional_id)
        return transactional_id, epoch or new_epoch(
            connection, options.scope, options.stream, transactional_id
        )
    finally:
        connection.close()


class ReaderGroupBatchWriter(DataSourceWriter):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.job = f"batch-{uuid.uuid4().hex}"
        self.holder = _driver_holder(options, sink_id(self.job), fence=True)

    def write(self, iterator: Iterator[Any]) -> StagedCommit:
        return _Stager(self.options, self.job, self.holder).stage(iterator)

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
        self.holder = _driver_holder(options, sink_id(writer_id), fence=False)

    def write(self, iterator: Iterator[Any]) -> StagedCommit:
        return _Stager(self.options, f"{self.writer_id}:staging", self.holder).stage(iterator)

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
    return options


__all__ = ["BASE_COLUMNS", "ReaderGroupDataSource"]
