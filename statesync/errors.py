"""Exceptions raised by :mod:`statesync`.

Every exception derives from :class:`StateSyncError`. Each class says, through its
``retriable`` attribute, whether calling the same operation again later can succeed
without anyone changing anything (``True``: a transient outage or lost race) or whether
the cause must be fixed first (``False``: bad input, corrupt data, a programming error).

Errors from the Redis client are translated at the backend boundary with
``raise ... from`` so the original error stays available as ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statesync.update import Update


class StateSyncError(Exception):
    """Root of every error raised by statesync."""

    retriable: bool = False


class InvalidNameError(StateSyncError, ValueError):
    """A synchronizer name or key prefix breaks the naming rule."""


class InvalidConfigError(StateSyncError, ValueError):
    """A configuration value is out of its documented range."""


class EncodeError(StateSyncError, TypeError):
    """A value cannot be encoded: an unregistered type or a type msgpack cannot carry."""


class EntryTooLargeError(StateSyncError, ValueError):
    """An encoded log entry is larger than ``SyncConfig.max_entry_bytes``; nothing was written."""

    def __init__(self, name: str, size: int, limit: int, setting: str = "max_entry_bytes") -> None:
        what = "entry" if setting == "max_entry_bytes" else "snapshot"
        super().__init__(
            f"synchronizer {name!r}: encoded {what} is {size} bytes, "
            f"over the limit of {limit} bytes (SyncConfig.{setting}); nothing was written"
        )
        self.name = name
        self.size = size
        self.limit = limit


class UpdateRejectedError(StateSyncError):
    """An update's ``apply_to`` raised against the writer's own state; it was not appended.

    The original exception is ``__cause__``.
    """

    def __init__(self, name: str, revision: int, update: object) -> None:
        super().__init__(
            f"synchronizer {name!r}: {type(update).__name__}.apply_to raised at revision "
            f"{revision}; the update was not appended"
        )
        self.name = name
        self.revision = revision
        self.update = update


class BadEntryError(StateSyncError):
    """A log entry or snapshot read back from the backend cannot be applied.

    The replica's local state stays at ``last_good_revision``. Other replicas that can
    apply the entry are not affected. Not retriable: the entry must be fixed, or a
    snapshot written past it by :meth:`StateSynchronizer.compact` from a healthy replica.
    """

    def __init__(self, name: str, revision: int, last_good_revision: int, reason: str) -> None:
        super().__init__(
            f"synchronizer {name!r}: entry at revision {revision} cannot be applied "
            f"({reason}); local state stays at revision {last_good_revision}"
        )
        self.name = name
        self.revision = revision
        self.last_good_revision = last_good_revision
        self.reason = reason


class CorruptEntryError(BadEntryError):
    """The entry's bytes are not a valid encoded entry of a supported format version."""


class UnknownUpdateTypeError(BadEntryError):
    """The entry names an update or state type that this replica has not registered."""


class PoisonedEntryError(BadEntryError):
    """The entry decoded, but one of its updates raised while being applied."""


class SynchronizerNotFoundError(StateSyncError, LookupError):
    """The synchronizer does not exist (never initialized, or deleted)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"synchronizer {name!r} does not exist: call initialize() first (or it was deleted)"
        )
        self.name = name


class ReplicaNotLoadedError(StateSyncError):
    """The local copy has not been loaded yet: call ``initialize`` or ``fetch_updates``."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"synchronizer {name!r}: no local state yet; call initialize() or fetch_updates()"
        )
        self.name = name


class LogRegressedError(StateSyncError):
    """The shared log is behind or different from what this replica has already applied.

    Happens when Redis lost acknowledged writes (a failover to a replica that had not
    received them, a restart without persistence) or when the synchronizer was deleted and
    created again. The local copy is kept; call :meth:`StateSynchronizer.resync` to drop it
    and adopt the log's state.
    """

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"synchronizer {name!r}: {detail}; call resync() to adopt the log")
        self.name = name


class ConflictRetriesExhaustedError(StateSyncError):
    """``update_state`` lost the race for the log on every attempt within its budget."""

    retriable = True

    def __init__(self, name: str, attempts: int, elapsed: float) -> None:
        super().__init__(
            f"synchronizer {name!r}: conditional update still conflicting after {attempts} "
            f"attempts in {elapsed:.3f}s (SyncConfig.retry); nothing was appended by this call"
        )
        self.name = name
        self.attempts = attempts
        self.elapsed = elapsed


class BackendUnavailableError(StateSyncError, ConnectionError):
    """The backend (Redis) could not be reached or did not answer in time.

    For an append, the outcome may be unknown to the caller; appends are idempotent per
    writer, so the library never applies one twice, and the state shows whether it landed.
    """

    retriable = True


class BackendFailoverError(BackendUnavailableError):
    """Redis answered with a failover reply (``reply``: READONLY, NOREPLICAS, UNBLOCKED,
    TRYAGAIN, CLUSTERDOWN, MASTERDOWN or LOADING; MOVED for a durable append sent to a cluster
    node that lost its slot): the command was not carried out because a primary is being
    switched or is not yet ready. Retriable, like an outage."""

    def __init__(self, message: str, reply: str) -> None:
        super().__init__(message)
        self.reply = reply


class AckTimeoutError(BackendUnavailableError):
    """An append landed on the primary, but not as durably as ``Acks`` asks (too few replicas,
    or no fsync) within its timeout. Retriable: the append is re-sent with the same sequence
    number (it never lands twice) and waited for again. Until acknowledged, a failover may
    lose it."""


class AckUnsupportedError(StateSyncError):
    """The server cannot give the acknowledgement ``Acks`` asks for (``fsync`` needs WAITAOF,
    Redis/Valkey 7.2+, and ``appendonly yes``). The append itself landed on the primary."""


class BackendAccessError(StateSyncError, PermissionError):
    """The backend refused the command: authentication or ACL permissions."""


class BackendUnsupportedError(StateSyncError):
    """The backend cannot run on the client or topology given (the message says which to use
    instead). Not retriable."""


class BackendProtocolError(StateSyncError):
    """The backend answered in a way the protocol does not allow (wrong key type, bad reply)."""


class EndpointURLError(InvalidConfigError):
    """A Redis URL that cannot be understood (the message says which part)."""


# -- internal signals: raised and caught inside statesync, which wraps them with context ----
class DecodeError(StateSyncError):
    """Bytes that are not a valid encoding. Internal: callers wrap it with context."""


class UnknownTypeError(DecodeError):
    """An encoded dataclass names a type that is not registered. Internal."""


class ApplyError(StateSyncError):
    """An update raised while applying an entry. Internal: ``__cause__`` is the original."""

    def __init__(self, revision: int, update: Update) -> None:
        super().__init__(f"{type(update).__name__}.apply_to raised at revision {revision}")
        self.revision = revision
        self.update = update


class RevisionGapError(StateSyncError):
    """An entry does not directly follow the replica's revision. Internal."""
