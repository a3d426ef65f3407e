"""Configuration of a :class:`~statesync.StateSynchronizer` (frozen, validated)."""

from __future__ import annotations

from dataclasses import dataclass, field

from statesync.durability import Acks
from statesync.errors import InvalidConfigError
from statesync.names import validate_name
from statesync.retry import RetryPolicy

MiB = 1024 * 1024
MAX_ENTRY_BYTES_LIMIT = 64 * MiB
MAX_SNAPSHOT_BYTES_LIMIT = 256 * MiB


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncConfig:
    """Settings of one synchronizer client. Every field has a documented default.

    Attributes:
        key_prefix: first part of every Redis key (default ``"statesync"``); see
            :mod:`statesync.names` for the rule.
        max_entry_bytes: largest encoded log entry, checked before anything is sent and again
            in the append script (default 1 MiB; 1 byte to 64 MiB).
        read_batch: entries fetched per round trip while catching up (default 1000; 1-100000).
        retry: attempts, deadline and backoff of ``update_state`` and of appends that meet a
            connection error (default :class:`RetryPolicy` defaults: 64 attempts, 30 s).
        socket_timeout: seconds a Redis command may take before it counts as failed
            (default 10.0; > 0). Blocking waits use their own connection.
        share_decoded_snapshots: keep decoded snapshots in a per-process LRU cache (32
            entries, keyed by a digest of the snapshot bytes and the registered types) so that
            synchronizers reading the same snapshot decode it once (default True). States are
            then shared objects: ``apply_to`` must return new values, never mutate.
        share_applied_states: keep the state after each log entry in a per-process LRU cache
            (1,024 entries, keyed by log name, revision and the log's history there) so that
            synchronizers of one process following the same log decode and apply each entry
            once, and none applies an entry another one appended (default True). States are
            shared objects, as with ``share_decoded_snapshots``.
        max_snapshot_bytes: largest snapshot read or written (default 64 MiB; 1 byte to
            256 MiB). A larger one in Redis is not transferred: it is a ``CorruptEntryError``.
        compact_every: if set, the client whose append lands at a revision that is a multiple
            of it compacts right after (best effort), so logs stay short without a separate
            compactor (default None: never automatically; 10 to 10,000,000).
        acks: when an append counts as acknowledged: :class:`~statesync.durability.Acks`
            (default leader; ``Acks.parse("replicas=1")`` waits for one replica).
    """

    key_prefix: str = "statesync"
    max_entry_bytes: int = 1 * MiB
    read_batch: int = 1000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    socket_timeout: float = 10.0
    share_decoded_snapshots: bool = True
    share_applied_states: bool = True
    max_snapshot_bytes: int = 64 * MiB
    compact_every: int | None = None
    acks: Acks = field(default_factory=Acks)

    def __post_init__(self) -> None:
        validate_name(self.key_prefix, what="key prefix")
        if not 1 <= self.max_entry_bytes <= MAX_ENTRY_BYTES_LIMIT:
            raise InvalidConfigError(
                f"max_entry_bytes must be 1..{MAX_ENTRY_BYTES_LIMIT}, got {self.max_entry_bytes}"
            )
        if not 1 <= self.max_snapshot_bytes <= MAX_SNAPSHOT_BYTES_LIMIT:
            raise InvalidConfigError(
                f"max_snapshot_bytes must be 1..{MAX_SNAPSHOT_BYTES_LIMIT}, "
                f"got {self.max_snapshot_bytes}"
            )
        if not 1 <= self.read_batch <= 100_000:
            raise InvalidConfigError(f"read_batch must be 1..100000, got {self.read_batch}")
        if self.compact_every is not None and not 10 <= self.compact_every <= 10_000_000:
            raise InvalidConfigError(
                f"compact_every must be 10..10000000, got {self.compact_every}"
            )
        if not isinstance(self.retry, RetryPolicy):
            raise InvalidConfigError("retry must be a RetryPolicy")
        if not isinstance(self.acks, Acks):
            raise InvalidConfigError("acks must be a statesync.Acks")
        if not self.socket_timeout > 0:
            raise InvalidConfigError(f"socket_timeout must be > 0, got {self.socket_timeout}")
