"""Exceptions raised by :mod:`readergroup`. Every one derives from :class:`ReaderGroupError`.

``retriable`` says whether the same call can succeed later without anyone fixing anything.
Redis errors and :mod:`statesync` errors are translated at the boundary
(:func:`readergroup.storage.translate.translate_errors`) with ``raise ... from``.
"""

from __future__ import annotations


class ReaderGroupError(Exception):
    """Root of every error raised by readergroup."""

    retriable: bool = False


class EmbeddedRedisError(ReaderGroupError):
    """No Redis could be had: no ``REDIS_URL``, no container engine, no server binary, or the
    server binary failed to start (its log is quoted)."""


class SparkWorkersError(ReaderGroupError):
    """Spark's Python workers run an interpreter that cannot import this library (so Spark
    cannot find or run the ``readergroup`` data source); the message says what to set."""


class InvalidNameError(ReaderGroupError, ValueError):
    """A scope, stream, reader group or reader name breaks the naming rule."""


class InvalidConfigError(ReaderGroupError, ValueError):
    """A configuration value is out of its documented range."""


class InvalidKeyRangesError(ReaderGroupError, ValueError):
    """New key ranges of a scale do not exactly cover the ranges of the sealed segments."""


class InvalidRoutingKeyError(ReaderGroupError, ValueError):
    """A routing key is not valid UTF-8 (a lone surrogate) or is longer than
    ``MAX_ROUTING_KEY_BYTES`` (1024 bytes of UTF-8); nothing was written."""


class InvalidStreamCutError(ReaderGroupError, ValueError):
    """A stream cut's text is malformed, or the cut does not fit the stream."""


class EventTooLargeError(ReaderGroupError, ValueError):
    """A serialized event exceeds the stream's ``max_event_size``; nothing was written."""


class SerializationError(ReaderGroupError, ValueError):
    """A serializer could not encode or decode an event."""


class ScopeNotFoundError(ReaderGroupError, LookupError):
    """The scope does not exist."""


class ScopeNotEmptyError(ReaderGroupError):
    """``delete_scope`` on a scope that still has streams (or reader groups)."""


class StreamNotFoundError(ReaderGroupError, LookupError):
    """The stream does not exist in the scope."""


class ReaderGroupNotFoundError(ReaderGroupError, LookupError):
    """The reader group does not exist in the scope (never created, or deleted)."""


class ReaderGroupInUseError(ReaderGroupError):
    """An operation that would hurt a live group was refused: the group has online readers
    (``delete_reader_group`` without ``force``)."""


class OlderReadersOnlineError(ReaderGroupError):
    """An operation that readers of an older version cannot follow was refused while such
    readers are online (``readergroup admin migrate`` without ``force``); the message names
    them by group. Upgrade or stop them first."""


class StreamSealedError(ReaderGroupError):
    """The stream is sealed: no more events can be written to it."""


class StreamNotSealedError(ReaderGroupError):
    """``delete_stream`` needs a sealed stream; call ``seal_stream`` first."""


class ScaleConflictError(ReaderGroupError):
    """The segments to seal are no longer active (another scale won the race)."""


class SegmentNotFoundError(ReaderGroupError, LookupError):
    """The segment does not exist (never created, or deleted by truncation)."""


class TruncatedDataError(ReaderGroupError):
    """A read asked for data below the stream's head: it was deleted by truncation."""

    def __init__(self, segment: str, offset: int, head: int, hint: str = "") -> None:
        where = f"is below the head {head}" if head >= 0 else "is in a deleted segment"
        super().__init__(
            f"segment {segment}: offset {offset} {where}; that data was truncated{hint}"
        )
        self.segment = segment
        self.offset = offset
        self.head = head


class WriterClosedError(ReaderGroupError):
    """The writer was closed; it accepts no more events."""


class WriterForkedError(WriterClosedError):
    """The writer was created in another process and copied into this one by ``fork()``
    (``os.fork``, ``multiprocessing`` with the ``fork`` start method): its sender thread was not
    copied, so nothing given to it here would ever be sent. Create the writer in the child
    (after the fork), from a factory of the child's own or the inherited one; the parent's
    writer keeps working in the parent."""


class WriteFailedError(ReaderGroupError):
    """An event could not be written within the writer's delivery timeout.

    Retriable: the cause (``__cause__``) was transient, typically Redis being unreachable.
    The event was not acknowledged; it may or may not be in the stream. ``deadline``: when the
    event's delivery timeout ran out (its write time + ``delivery_timeout``, on the writer's
    monotonic clock), if the failure is that.
    """

    retriable = True

    def __init__(self, message: str, *, deadline: float | None = None) -> None:
        super().__init__(message)
        self.deadline = deadline


class RedisUnavailableError(ReaderGroupError, ConnectionError):
    """Redis could not be reached or did not answer in time."""

    retriable = True


class RedisFailoverError(RedisUnavailableError):
    """Redis answered with a failover reply (``reply``: READONLY, NOREPLICAS, UNBLOCKED,
    TRYAGAIN, CLUSTERDOWN, MASTERDOWN or LOADING): the command was not carried out because a
    primary is being switched or is not yet ready. Retriable, like an outage."""

    def __init__(self, message: str, reply: str) -> None:
        super().__init__(message)
        self.reply = reply


class AckTimeoutError(RedisUnavailableError):
    """Appended events landed on the primary but were not acknowledged as
    ``ClientConfig.acks`` asks (too few replicas, or no fsync) within ``ack_timeout``.
    Retriable: the writer re-sends the same batch (it never lands twice) and waits again."""


class AckUnsupportedError(ReaderGroupError):
    """The server cannot give the acknowledgement ``ClientConfig.acks`` asks for
    (``fsync`` needs WAITAOF, Redis/Valkey 7.2+, and ``appendonly yes``)."""


class AccessDeniedError(ReaderGroupError, PermissionError):
    """Redis refused the command: authentication failed or the ACL user lacks permission."""


class UnsafeServerConfigError(ReaderGroupError):
    """The Redis server may delete this library's keys on its own: its ``maxmemory-policy``
    evicts keys that have no TTL (``allkeys-*``). Set ``noeviction`` (see
    docs/guides/production-redis.md), or opt out with ``ClientConfig(allow_key_eviction=True)``."""


class UnsupportedServerError(ReaderGroupError):
    """The server is older than the oldest this library supports (Redis 7.0; Valkey's first
    release, 7.2, is newer), or did not say which version it is. Refused on connect."""


class LegacyLayoutError(ReaderGroupError):
    """Redis holds data written before per-scope catalogs (the old shared catalog): run
    ``readergroup admin migrate`` once, as the operator role."""


class DataLostError(ReaderGroupError):
    """Redis lost keys this library wrote: a catalog, stream or reader group that was created
    is gone (eviction, a failover to a replica that had not caught up, a restart without
    persistence, a ``DEL``). It is never created again silently, empty; see
    docs/guides/production-redis.md for what to do."""


class StreamLostError(DataLostError, StreamNotFoundError):
    """A stream's metadata vanished from Redis (see :class:`DataLostError`). ``delete_stream``
    still removes what is left of it, after which it can be created again."""


class CoordinationError(ReaderGroupError):
    """The shared state (a state synchronizer) refused or failed an operation; see
    ``__cause__`` for the :mod:`statesync` error."""


class CorruptSegmentError(ReaderGroupError):
    """A segment's stored data breaks the layout (a rogue write): its key holds the wrong type,
    or its entries skip offsets that were never truncated. Reading stops at the fault in that
    segment only; the events before it were delivered and the other segments keep flowing."""

    def __init__(self, segment: str, key: str, detail: str) -> None:
        super().__init__(f"segment {segment} (key {key}): {detail}; reading it stops here")
        self.segment = segment
        self.key = key


class WrongKeyTypeError(ReaderGroupError):
    """Redis keys the library reads hold a value of another type (a rogue write); ``keys``
    names them."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(f"keys of the wrong type (not a stream): {', '.join(keys)}")
        self.keys = keys


# -- group membership and checkpoints --------------------------------------------------------
class ReaderNotInGroupError(ReaderGroupError):
    """The reader is not (or no longer) an online member: it was declared dead, exceeded
    ``max_poll_interval``, or left. Create a reader with the same id to rejoin."""


class DeadLetterError(ReaderGroupError):
    """An event that failed every attempt could not be written to the dead-letter stream; the
    handler's last exception is the ``__cause__``. The run stops; nothing is skipped."""


class ReaderReplacedError(ReaderNotInGroupError):
    """A newer incarnation of this reader id joined the group and took its segments over
    (static membership: the same id restarted elsewhere). Final: this incarnation must stop;
    it does not rejoin by itself (two processes with one id would fence each other)."""


class ReaderClosedError(ReaderGroupError):
    """The reader was closed (perhaps by another thread): it reads no more. Iteration over a
    reader ends cleanly instead."""


class RebalanceListenerError(ReaderGroupError):
    """A rebalance listener raised (its exception is the ``__cause__``). Raised by the read
    call that called it, after the change it was told of was carried out (segments released
    or handed out all the same); the reader stays usable."""


class ReaderAlreadyOnlineError(ReaderGroupError):
    """Another live reader with this id is online in the group."""


class SegmentNotOwnedError(ReaderGroupError):
    """The reader does not own the segment (any more) under the fencing token it presented."""


class CommitRefusedError(ReaderGroupError):
    """A commit was refused for positions past what their segments' logs hold now (a failover
    lost the tail the reader had read; ``refused`` maps each such segment to the position it
    asked for and the log's end). The other positions were committed. Retriable: a writer's
    retry may append the same events again, or the reader reports the loss and reads on
    from the log's end; the same commit then succeeds."""

    retriable = True

    def __init__(self, message: str, refused: dict[tuple[str, int], tuple[int, int]]) -> None:
        super().__init__(message)
        self.refused = refused


class CheckpointError(ReaderGroupError):
    """A checkpoint could not be taken: too many outstanding, a duplicate name, or it failed
    (``pending_readers`` names the readers that did not acknowledge it in time)."""

    def __init__(self, message: str, pending_readers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.pending_readers = pending_readers


# -- internal signals (caught where raised) --------------------------------------------------
class NoLegacyCatalogError(ReaderGroupError):
    """There is no catalog of the old layout (internal to ``readergroup admin migrate``)."""


class SubscribedGroupGoneError(ReaderGroupError):
    """A subscribed group was deleted between reading the catalog and reading its state
    (internal to retention, which then skips the group)."""


class NativeAppendConflictError(ReaderGroupError):
    """A round cannot be sent as native ``XADD``s (a watched key changed, or the segment is not
    in the plain state the native path needs): nothing of it was written, and the caller sends
    it through ``append_events.lua`` (internal to ``readergroup/storage/native_append.py``)."""


# -- transactions (readergroup/core/transactions.py) -----------------------------------------
class TransactionError(ReaderGroupError):
    """A transaction could not do what was asked; ``txn_id`` names it, ``status`` is what it
    is now (a :class:`~readergroup.core.transactions.TxnStatus` value, ``""`` if unknown)."""

    def __init__(self, message: str, *, txn_id: str = "", status: str = "") -> None:
        super().__init__(message)
        self.txn_id = txn_id
        self.status = status


class TransactionClosedError(TransactionError):
    """The transaction is not open any more (committing, committed, aborting or aborted):
    it takes no more events and cannot be committed or aborted again (Pravega's
    ``TxnFailedException``)."""


class TransactionExpiredError(TransactionClosedError):
    """The transaction outlived its lease without being committed: the system aborted it and
    nothing of it was or will be written."""


class TransactionNotFoundError(TransactionError, LookupError):
    """No transaction of that id (never begun, or finished so long ago its record expired)."""


class TransactionFencedError(TransactionError):
    """Another writer instance with the same transactional id (or one that resumed this
    transaction with ``get_txn``) fenced this one, as Kafka's ``ProducerFencedException``:
    what it asked was refused and nothing of it landed. Close this writer."""


class TransactionPositionsError(TransactionError):
    """A consume-transform-produce commit was refused because its reader no longer owns the
    segments whose positions it carries (they moved to another reader): nothing of the
    transaction landed, and it was aborted."""
