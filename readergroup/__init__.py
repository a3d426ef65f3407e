"""readergroup: Pravega-style streams and reader groups on Redis, built on :mod:`statesync`."""

from importlib.metadata import PackageNotFoundError, version

from readergroup.admin.autoscale import AutoScaler, ScaleAction, plan_scaling
from readergroup.admin.group_manager import (
    CheckpointResult,
    GroupMetrics,
    Lag,
    ReaderGroup,
    ReaderGroupManager,
    ResetResult,
    SegmentDistribution,
)
from readergroup.admin.retention import RetentionManager
from readergroup.admin.stream_manager import SegmentInfo, StreamInfo, StreamManager
from readergroup.client.batch_client import BatchClient
from readergroup.client.client_factory import EventStreamClientFactory
from readergroup.client.reader import EventRead, EventStreamReader, RebalanceListener
from readergroup.client.serializers import (
    BytesSerializer,
    JsonSerializer,
    MsgpackSerializer,
    Serializer,
    UTF8StringSerializer,
)
from readergroup.client.writer import (
    EventPointer,
    EventStreamWriter,
    EventWriterConfig,
    WriteFuture,
)
from readergroup.core.config import ClientConfig
from readergroup.core.errors import (
    AccessDeniedError,
    AckTimeoutError,
    AckUnsupportedError,
    CheckpointError,
    CommitRefusedError,
    CoordinationError,
    CorruptSegmentError,
    DataLostError,
    EmbeddedRedisError,
    EventTooLargeError,
    InvalidConfigError,
    InvalidKeyRangesError,
    InvalidNameError,
    InvalidRoutingKeyError,
    InvalidStreamCutError,
    OlderReadersOnlineError,
    ReaderAlreadyOnlineError,
    ReaderClosedError,
    ReaderGroupError,
    ReaderGroupInUseError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    ReaderReplacedError,
    RebalanceListenerError,
    RedisFailoverError,
    RedisUnavailableError,
    ScaleConflictError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentNotFoundError,
    SegmentNotOwnedError,
    SerializationError,
    StreamLostError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    TruncatedDataError,
    UnsafeServerConfigError,
    WriteFailedError,
    WriterClosedError,
    WriterForkedError,
    WrongKeyTypeError,
)
from readergroup.core.group_config import ReaderConfig, ReaderGroupConfig
from readergroup.core.planning import SegmentRange
from readergroup.core.routing import key_position, segment_id
from readergroup.core.stream_config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from readergroup.core.stream_cut import StreamCut
from readergroup.storage.segment_records import SegmentEvent

try:
    # One source for the version: pyproject.toml's, as installed (a wheel or an editable install).
    __version__ = version("readergroup")
except PackageNotFoundError:  # pragma: no cover - the source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = [
    "AccessDeniedError",
    "AckTimeoutError",
    "AckUnsupportedError",
    "AutoScaler",
    "BatchClient",
    "BytesSerializer",
    "CheckpointError",
    "CheckpointResult",
    "ClientConfig",
    "CommitRefusedError",
    "CoordinationError",
    "CorruptSegmentError",
    "DataLostError",
    "EmbeddedRedisError",
    "EventPointer",
    "EventRead",
    "EventStreamClientFactory",
    "EventStreamReader",
    "EventStreamWriter",
    "EventTooLargeError",
    "EventWriterConfig",
    "GroupMetrics",
    "InvalidConfigError",
    "InvalidKeyRangesError",
    "InvalidNameError",
    "InvalidRoutingKeyError",
    "InvalidStreamCutError",
    "JsonSerializer",
    "Lag",
    "MsgpackSerializer",
    "OlderReadersOnlineError",
    "ReaderAlreadyOnlineError",
    "ReaderClosedError",
    "ReaderConfig",
    "ReaderGroup",
    "ReaderGroupConfig",
    "ReaderGroupError",
    "ReaderGroupInUseError",
    "ReaderGroupManager",
    "ReaderGroupNotFoundError",
    "ReaderNotInGroupError",
    "ReaderReplacedError",
    "RebalanceListener",
    "RebalanceListenerError",
    "RedisFailoverError",
    "RedisUnavailableError",
    "ResetResult",
    "RetentionManager",
    "RetentionPolicy",
    "ScaleAction",
    "ScaleConflictError",
    "ScalingPolicy",
    "ScopeNotEmptyError",
    "ScopeNotFoundError",
    "SegmentDistribution",
    "SegmentEvent",
    "SegmentInfo",
    "SegmentNotFoundError",
    "SegmentNotOwnedError",
    "SegmentRange",
    "SerializationError",
    "Serializer",
    "StreamConfiguration",
    "StreamCut",
    "StreamInfo",
    "StreamLostError",
    "StreamManager",
    "StreamNotFoundError",
    "StreamNotSealedError",
    "StreamSealedError",
    "TruncatedDataError",
    "UTF8StringSerializer",
    "UnsafeServerConfigError",
    "WriteFailedError",
    "WriteFuture",
    "WriterClosedError",
    "WriterForkedError",
    "WrongKeyTypeError",
    "__version__",
    "key_position",
    "plan_scaling",
    "segment_id",
]
