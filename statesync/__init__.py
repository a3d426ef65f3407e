"""statesync: a replicated state object whose history is an append-only log in Redis.

Every client keeps a local copy, applies the log in order, and changes it only by
conditional appends against the revision it last saw (Pravega's State Synchronizer).
Nothing here knows about streams.
"""

from statesync.aio_backend import AsyncLogBackend
from statesync.aio_memory_backend import AsyncMemoryLogBackend
from statesync.aio_synchronizer import AsyncStateSynchronizer
from statesync.backend import CompactOutcome, LogBackend
from statesync.clock import Clock, ManualClock
from statesync.codec import FORMAT_VERSION
from statesync.config import SyncConfig
from statesync.durability import Acks
from statesync.errors import (
    AckTimeoutError,
    AckUnsupportedError,
    BackendAccessError,
    BackendFailoverError,
    BackendProtocolError,
    BackendUnavailableError,
    BackendUnsupportedError,
    BadEntryError,
    ConflictRetriesExhaustedError,
    CorruptEntryError,
    EncodeError,
    EntryTooLargeError,
    InvalidConfigError,
    InvalidNameError,
    LogRegressedError,
    PoisonedEntryError,
    ReplicaNotLoadedError,
    StateSyncError,
    SynchronizerNotFoundError,
    UnknownUpdateTypeError,
    UpdateRejectedError,
)
from statesync.memory_backend import MemoryLogBackend
from statesync.retry import RetryPolicy
from statesync.synchronizer import StateSynchronizer, SyncStats
from statesync.update import Decision, Update

__all__ = [
    "FORMAT_VERSION",
    "AckTimeoutError",
    "AckUnsupportedError",
    "Acks",
    "AsyncLogBackend",
    "AsyncMemoryLogBackend",
    "AsyncStateSynchronizer",
    "BackendAccessError",
    "BackendFailoverError",
    "BackendProtocolError",
    "BackendUnavailableError",
    "BackendUnsupportedError",
    "BadEntryError",
    "Clock",
    "CompactOutcome",
    "ConflictRetriesExhaustedError",
    "CorruptEntryError",
    "Decision",
    "EncodeError",
    "EntryTooLargeError",
    "InvalidConfigError",
    "InvalidNameError",
    "LogBackend",
    "LogRegressedError",
    "ManualClock",
    "MemoryLogBackend",
    "PoisonedEntryError",
    "ReplicaNotLoadedError",
    "RetryPolicy",
    "StateSyncError",
    "StateSynchronizer",
    "SyncConfig",
    "SyncStats",
    "SynchronizerNotFoundError",
    "UnknownUpdateTypeError",
    "Update",
    "UpdateRejectedError",
]
