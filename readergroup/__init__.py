"""readergroup: Pravega-style streams and reader groups on Redis, built on :mod:`statesync`."""

from readergroup.autoscale import AutoScaler, ScaleAction, plan_scaling
from readergroup.batch_client import BatchClient
from readergroup.client_factory import EventStreamClientFactory
from readergroup.config import ClientConfig
from readergroup.errors import (
    AccessDeniedError,
    AckTimeoutError,
    AckUnsupportedError,
    CoordinationError,
    CorruptSegmentError,
    EmbeddedRedisError,
    EventTooLargeError,
    InvalidConfigError,
    InvalidKeyRangesError,
    InvalidNameError,
    InvalidRoutingKeyError,
    InvalidStreamCutError,
    ReaderGroupError,
    ReaderGroupInUseError,
    ReaderGroupNotFoundError,
    RedisFailoverError,
    RedisUnavailableError,
    ScaleConflictError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentNotFoundError,
    SerializationError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    TruncatedDataError,
    WriteFailedError,
    WriterClosedError,
    WrongKeyTypeError,
)
from readergroup.group_config import ReaderConfig, ReaderGroupConfig
from readergroup.group_manager import (
    CheckpointResult,
    GroupMetrics,
    Lag,
    ReaderGroup,
    ReaderGroupManager,
    ResetResult,
    SegmentDistribution,
)
from readergroup.group_state import (
    CheckpointError,
    ReaderAlreadyOnlineError,
    ReaderNotInGroupError,
    SegmentNotOwnedError,
)
from readergroup.planning import SegmentRange
from readergroup.reader import EventRead, EventStreamReader, RebalanceListener
from readergroup.redis_io import SegmentEvent
from readergroup.retention import RetentionManager
from readergroup.routing import key_position, segment_id
from readergroup.serializers import (
    BytesSerializer,
    JsonSerializer,
    MsgpackSerializer,
    Serializer,
    UTF8StringSerializer,
)
from readergroup.stream_config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from readergroup.stream_cut import StreamCut
from readergroup.stream_manager import SegmentInfo, StreamInfo, StreamManager
from readergroup.writer import EventPointer, EventStreamWriter, EventWriterConfig, WriteFuture

__version__ = "0.1.0"

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
    "CoordinationError",
    "CorruptSegmentError",
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
    "ReaderAlreadyOnlineError",
    "ReaderConfig",
    "ReaderGroup",
    "ReaderGroupConfig",
    "ReaderGroupError",
    "ReaderGroupInUseError",
    "ReaderGroupManager",
    "ReaderGroupNotFoundError",
    "ReaderNotInGroupError",
    "RebalanceListener",
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
    "StreamManager",
    "StreamNotFoundError",
    "StreamNotSealedError",
    "StreamSealedError",
    "TruncatedDataError",
    "UTF8StringSerializer",
    "WriteFailedError",
    "WriteFuture",
    "WriterClosedError",
    "WrongKeyTypeError",
    "__version__",
    "key_position",
    "plan_scaling",
    "segment_id",
]
