"""The Redis side of readergroup: one connection object, the segment data plane, and error
translation. The only module of :mod:`readergroup` that imports ``redis``.

Key layout (``prefix`` is ``ClientConfig.key_prefix``; each segment is its own hash tag, so
its keys share a Redis Cluster slot and its scripts run there):

* ``<prefix>:{<scope>/<stream>/<segment id>}:events``: stream; event at offset *o* has
  id ``<o + 1>-0`` and fields ``k`` (routing key, if any), ``p`` (payload), ``w`` (writer ms),
  ``t`` (server ms), ``b`` (byte offset in the segment);
* ``...:meta``: hash of ``created_ms``, ``sealed``, ``events`` (= tail offset), ``bytes``,
  ``head``;
* ``...:writers``  hash: writer id -> last batch sequence number (idempotent appends).

Offsets count events from 0 within a segment; a *position* is the offset of the next event to
read, so ``tail - position`` is the lag in events and ``bytes - b`` the lag in bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from readergroup.core.config import ClientConfig, check_eviction_policy
from readergroup.core.errors import (
    AccessDeniedError,
    AckTimeoutError,
    AckUnsupportedError,
    CoordinationError,
    InvalidConfigError,
    ReaderGroupError,
    RedisFailoverError,
    RedisUnavailableError,
    SegmentNotFoundError,
    TruncatedDataError,
    WrongKeyTypeError,
)
from readergroup.core.routing import segment_name
from readergroup.storage import segment_status
from readergroup.storage.scripts import SCRIPT_NAMES, script_source
from statesync import StateSynchronizer, SyncConfig, SynchronizerNotFoundError, Update
from statesync import errors as sync_errors
from statesync.endpoints import EndpointURLError, is_sentinel_url, split_seeds
from statesync.errors import (
    BackendAccessError,
    BackendFailoverError,
    BackendUnavailableError,
    StateSyncError,
)
from statesync.redis_backend import (
    RedisLogBackend,
    check_acknowledged,
    command_client_for,
    failover_reply,
    run_read_only,
    sentinel_clients,
)

MAX_BLOCK_SECONDS = 5.0
"""Longest single blocking read; callers loop for longer waits (a dead server is noticed)."""


@contextmanager
def translate_errors(operation: str) -> Iterator[None]:
    """Re-raise redis-py and statesync errors from the block as :class:`ReaderGroupError`."""
    try:
        yield
    except ReaderGroupError:
        raise
    except BackendFailoverError as exc:
        raise RedisFailoverError(f"{operation}: {exc}", exc.reply) from exc
    except redis.RedisError as exc:
        reply = failover_reply(exc)
        if reply is None:
            raise _translated(operation, exc) from exc
        raise RedisFailoverError(
            f"Redis is failing over ({reply}) during {operation}: {exc}", reply
        ) from exc
    except StateSyncError as exc:
        raise _translated(operation, exc) from exc


def _translated(operation: str, exc: Exception) -> ReaderGroupError:
    # checked first: redis-py's AuthenticationError is a ConnectionError
    if isinstance(
        exc, (redis.AuthenticationError, redis.exceptions.NoPermissionError, BackendAccessError)
    ):
        return AccessDeniedError(f"Redis refused {operation}: {exc}")
    if isinstance(exc, sync_errors.AckTimeoutError):
        return AckTimeoutError(str(exc))
    if isinstance(exc, sync_errors.AckUnsupportedError):
        return AckUnsupportedError(str(exc))
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, BackendUnavailableError)):
        return RedisUnavailableError(f"Redis unavailable during {operation}: {exc}")
    if isinstance(exc, StateSyncError):
        error = CoordinationError(f"{operation}: {exc}")
        error.retriable = exc.retriable
        return error
    if isinstance(exc, redis.ResponseError) and str(exc).startswith("ACL failure"):
        # a command inside a script the user may not run
        return AccessDeniedError(f"Redis refused {operation}: {exc}")
    return ReaderGroupError(f"Redis error during {operation}: {exc}")


@contextmanager
def missing_as(missing: Callable[[], ReaderGroupError], operation: str) -> Iterator[None]:
    """Like :func:`translate_errors`, but a synchronizer that does not exist becomes the domain
    error ``missing()`` (stream or group not found)."""
    try:
        with translate_errors(operation):
            yield
    except ReaderGroupError as exc:
        if isinstance(exc.__cause__, SynchronizerNotFoundError):
            raise missing() from exc
        raise


def fetch_state(
    sync: StateSynchronizer[Any], missing: Callable[[], ReaderGroupError], operation: str
) -> Any:
    """Fetch ``sync`` and return its state (see :func:`missing_as`). A log that lost writes
    this client had seen (a lossy failover) is adopted (:meth:`StateSynchronizer.follow`)."""
    with missing_as(missing, operation):
        sync.follow()
    return sync.state


class SegmentEvent:
    """One event as stored in a segment: a lazy view over the raw Redis reply.

    Attributes are decoded when read, so a reader that only needs payloads pays for nothing
    else. ``append_events.lua`` writes the fields in a fixed order (``k`` first when present,
    then ``p w t b``); entries in any other shape are decoded by name.
    """

    __slots__ = ("_base", "_fields", "_id", "segment")

    def __init__(self, segment: int, entry_id: bytes, fields: Any) -> None:
        self.segment = segment
        self._id = entry_id
        if len(fields) == 10 and fields[0] == b"k" and fields[8] == b"b":
            self._base = 2
        elif len(fields) == 8 and fields[0] == b"p" and fields[6] == b"b":
            self._base = 0
        else:  # another shape: a client that parsed the fields already, or foreign entries
            named = (
                dict(fields)
                if isinstance(fields, dict)
                else dict(zip(fields[::2], fields[1::2], strict=False))
            )
            self._base = 0 if b"k" not in named else 2
            ordered = [b"k", named[b"k"]] if b"k" in named else []
            for name in (b"p", b"w", b"t", b"b"):
                ordered += (name, named.get(name, b"" if name == b"p" else b"0"))
            fields = ordered
        self._fields = fields

    @property
    def offset(self) -> int:
        """Offset of the event in its segment (0 for the first event ever written)."""
        entry_id = self._id
        return int(entry_id[: entry_id.index(b"-")]) - 1

    @property
    def routing_key(self) -> str | None:
        if self._base == 0:
            return None
        key: bytes = self._fields[1]
        return key.decode("utf-8", "surrogateescape")

    @property
    def payload(self) -> bytes:
        payload: bytes = self._fields[self._base + 1]
        return payload

    @property
    def writer_ms(self) -> int:
        """The writer's clock when ``write_event`` was called (ms since the epoch)."""
        return _int(self._fields[self._base + 3])

    @property
    def server_ms(self) -> int:
        """The Redis server's clock when the event was appended (ms since the epoch)."""
        return _int(self._fields[self._base + 5])

    @property
    def byte_offset(self) -> int:
        """Payload bytes before this event in its segment (for lag in bytes)."""
        return _int(self._fields[self._base + 7])

    def as_tuple(self) -> tuple[int, int, str | None, bytes, int, int, int]:
        return (
            self.segment,
            self.offset,
            self.routing_key,
            self.payload,
            self.writer_ms,
            self.server_ms,
            self.byte_offset,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentEvent) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash((self.segment, self._id))

    def __repr__(self) -> str:
        return (
            f"SegmentEvent(segment={self.segment}, offset={self.offset}, "
            f"routing_key={self.routing_key!r}, payload={self.payload[:32]!r}, "
            f"server_ms={self.server_ms})"
        )


@dataclass(frozen=True, slots=True)
class SegmentState:
    """A segment's data-plane counters: ``head`` and ``tail`` offsets, bytes, sealed flag."""

    segment: int
    exists: bool
    head: int
    tail: int
    bytes: int
    sealed: bool


_META_FIELDS = ("created_ms", "sealed", "events", "bytes", "head")


def _segment_state(segment: int, fields: Sequence[Any]) -> SegmentState:
    """A segment's state from ``HMGET meta`` of :data:`_META_FIELDS`."""
    created, sealed, events, size, head = fields
    return SegmentState(
        segment,
        created is not None,
        int(head or 0),
        int(events or 0),
        int(size or 0),
        sealed == b"1",
    )


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """Events bound for one segment, sent as one idempotent ``append_events.lua`` call.

    ``event_args`` is the flattened ARGV tail: per event the wire routing key (``""`` for
    none, else ``"k" + key``), the payload and the writer timestamp in ms.
    """

    scope: str
    stream: str
    segment: int
    writer: str
    sequence: int
    count: int
    event_args: list[Any]
    max_event_size: int

    @classmethod
    def of(
        cls,
        scope: str,
        stream: str,
        segment: int,
        writer: str,
        sequence: int,
        events: Sequence[tuple[str | None, bytes, int]],
        max_event_size: int,
    ) -> AppendBatch:
        """Build a batch from ``(routing key, payload, writer ms)`` tuples."""
        args: list[Any] = []
        for key, payload, writer_ms in events:
            args += (wire_key(key), payload, writer_ms)
        return cls(scope, stream, segment, writer, sequence, len(events), args, max_event_size)

    def script_args(self) -> list[Any]:
        return [self.writer, self.sequence, self.max_event_size, self.count, *self.event_args]


def wire_key(routing_key: str | None) -> str:
    """How ``append_events.lua`` receives a routing key: ``""`` for none, else ``"k" + key``."""
    return "" if routing_key is None else "k" + routing_key


@dataclass(frozen=True, slots=True)
class AppendReply:
    """One batch's outcome. ``error`` is set when the batch was refused (its ``status`` is then
    :data:`REFUSED`): nothing of it was written, since every command of ``append_events.lua``
    that can fail (a key of the wrong type, a missing segment, an event too large) runs before
    its first write."""

    status: int
    first_offset: int = -1
    server_ms: int = 0
    tail: int = -1
    error: ReaderGroupError | None = None


REFUSED = -1
""":attr:`AppendReply.status` of a batch refused with an error."""


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _int(value: bytes) -> int:
    """A stored integer field; ``-1`` when an entry not written by this library garbled it."""
    try:
        return int(value)
    except (ValueError, TypeError):
        return -1


def _by_key(reply: Any) -> dict[str, Any]:
    """An XREAD reply (RESP3 map or RESP2 list) as key -> entries."""
    items = reply.items() if isinstance(reply, dict) else (reply or [])
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in items}


def parse_event(segment: int, entry: Any) -> SegmentEvent:
    """A :class:`SegmentEvent` over one raw XRANGE/XREAD item ``[id, [field, value, ...]]``."""
    return SegmentEvent(segment, entry[0], entry[1])


def _append_reply(batch: AppendBatch, reply: Any) -> AppendReply:
    """One batch's reply, read on its own: an error reply refuses this batch only, naming its
    segment; the other batches of the pipeline keep their own replies."""
    name = segment_name(batch.scope, batch.stream, batch.segment)
    try:
        if isinstance(reply, Exception):
            with translate_errors(f"append to segment {name}"):
                raise reply
        code = segment_status.check("append_events", name, reply)
    except ReaderGroupError as exc:
        return AppendReply(REFUSED, error=exc)
    if code == segment_status.OK:
        return AppendReply(code, int(reply[1]), int(reply[3]))
    if code == segment_status.SEALED:
        return AppendReply(code, tail=int(reply[1]))
    return AppendReply(code)


def _connect_checking_eviction_policy(connection: Any) -> None:
    """redis-py's ``redis_connect_func``: set up a new socket as usual, then check the policy."""
    connection.on_connect()
    _check_eviction_policy(connection)


def _check_eviction_policy(connection: Any) -> None:
    """Refuse a server whose ``maxmemory-policy`` may evict keys, on a new socket (so checked
    again after every reconnect, to a restarted or failed-over server too). RedisCluster calls
    it after its own set-up of the socket."""
    try:
        connection.send_command("INFO", "memory")
        info = connection.read_response()
        if isinstance(info, bytes):
            info = info.decode("utf-8", "replace")
        for line in str(info).splitlines():
            name, _, value = line.partition(":")
            if name == "maxmemory_policy":
                check_eviction_policy(value.strip())
    except redis.exceptions.NoPermissionError as exc:
        connection.disconnect()
        raise AccessDeniedError(
            f"Redis refused INFO, needed to check its maxmemory-policy ({exc}): grant the ACL "
            "user +info, or opt out with ClientConfig(allow_key_eviction=True)"
        ) from exc
    except ReaderGroupError:
        connection.disconnect()  # never leave an unchecked socket in the pool
        raise


class RedisConnection:
    """One Redis client (and its pool) shared by everything a factory or manager creates.

    Thread-safe. redis-py's own retries are off: appends are retried one level up with the
    same sequence number, which the scripts deduplicate.
    """

    def __init__(
        self, client: redis.Redis, config: ClientConfig, blocking_client: redis.Redis | None = None
    ) -> None:
        self.config = config
        self.client = client
        self.cluster = config.cluster
        self._acks = config.durability
        self.log_backend = RedisLogBackend(
            client,
            key_prefix=config.key_prefix,
            blocking_client=blocking_client,
            acks=self._acks,
        )
        # events are parsed by parse_event from the raw reply: skip redis-py's dict building
        for command_client in (client, self.log_backend.blocking_client):
            command_client.set_response_callback("XRANGE", _raw_reply)
            command_client.set_response_callback("XREAD", _raw_reply)
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }
        if self.cluster:  # pipelines cannot reload a script a node lost: load them everywhere
            with translate_errors("load scripts"):
                for name in SCRIPT_NAMES:
                    client.script_load(script_source(name))
        self._sync_config = SyncConfig(
            key_prefix=config.key_prefix,
            retry=config.retry,
            socket_timeout=config.socket_timeout,
            compact_every=1000,
            acks=self._acks,
        )

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> RedisConnection:
        config = config or ClientConfig()
        options: dict[str, Any] = {
            "socket_connect_timeout": min(config.socket_timeout, 5.0),
            **dict(config.redis_options),
        }
        try:
            sentinel = is_sentinel_url(url)
            first, seeds = (url, []) if sentinel else split_seeds(url)
        except EndpointURLError as exc:
            raise InvalidConfigError(str(exc)) from exc
        if sentinel and config.cluster:
            raise InvalidConfigError("a redis+sentinel:// URL cannot name a cluster")
        if not config.allow_key_eviction:
            options["redis_connect_func"] = (
                _check_eviction_policy if config.cluster else _connect_checking_eviction_policy
            )
        with translate_errors("connect"):
            if sentinel:
                try:
                    client, blocking = sentinel_clients(
                        url,
                        socket_timeout=config.socket_timeout,
                        blocking_socket_timeout=MAX_BLOCK_SECONDS + 5,
                        sentinel_options=dict(config.sentinel_options),
                        retry=Retry(NoBackoff(), 0),
                        **options,
                    )
                except EndpointURLError as exc:
                    raise InvalidConfigError(str(exc)) from exc
                return cls(client, config, blocking)
            if config.cluster:
                from redis.cluster import ClusterNode, RedisCluster

                nodes = [
                    ClusterNode(host, port)  # type: ignore[no-untyped-call]
                    for host, port in seeds
                ]
                cluster = RedisCluster.from_url(
                    first, startup_nodes=nodes, socket_timeout=config.socket_timeout, **options
                )
                cluster_blocking = RedisCluster.from_url(
                    first, startup_nodes=nodes, socket_timeout=MAX_BLOCK_SECONDS + 5, **options
                )
                return cls(cluster, config, cluster_blocking)  # type: ignore[arg-type]
            if len(seeds) > 1:
                raise InvalidConfigError(
                    f"{len(seeds)} hosts in the URL: several seeds need ClientConfig(cluster=True)"
                )
            client = redis.Redis.from_url(
                url, socket_timeout=config.socket_timeout, retry=Retry(NoBackoff(), 0), **options
            )
        return cls(client, config)

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        writer_label: str | None = None,
    ) -> StateSynchronizer[Any]:
        """A state synchronizer on this connection (it does not own the connection)."""
        return StateSynchronizer(
            self.log_backend,
            name,
            update_types=update_types,
            state_types=state_types,
            config=self._sync_config,
            writer_label=writer_label,
        )

    def server_time_ms(self) -> int:
        with translate_errors("TIME"):
            return self.log_backend.server_time_ms()

    def close(self) -> None:
        self.log_backend.close()

    # -- segment keys -----------------------------------------------------------------------
    def segment_keys(self, scope: str, stream: str, segment: int) -> tuple[str, str, str]:
        """(meta, events, writers) keys of one segment."""
        base = f"{self.config.key_prefix}:{{{scope}/{stream}/{segment}}}"
        return f"{base}:meta", f"{base}:events", f"{base}:writers"

    # -- segment operations -----------------------------------------------------------------
    def create_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        """Create segments' meta hashes (idempotent: an existing segment is left alone)."""
        with translate_errors("create segments"):
            pipe = self.client.pipeline(transaction=False)
            for segment in segments:
                pipe.hsetnx(self.segment_keys(scope, stream, segment)[0], "created_ms", now_ms)
            pipe.execute()

    def create_closed_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        """Create a scale's successors sealed until :meth:`open_segment` (idempotent: an
        existing segment is left alone); see ``create_closed_segment.lua``."""
        for segment in segments:
            self._run("create_closed_segment", scope, stream, segment, 1, now_ms)

    def open_segment(self, scope: str, stream: str, segment: int) -> bool:
        """Open a successor created closed, once its predecessors are sealed; ``False`` if it
        was open already or is sealed for real."""
        return bool(self._run("open_segment", scope, stream, segment, 1)[1])

    def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]:
        """Send every batch in one pipelined round trip; one reply per batch, in order. A batch
        the server refuses gets a reply carrying the error (:attr:`AppendReply.error`); only a
        failure of the round trip itself raises.

        Unless ``ClientConfig.acks`` is leader, the acknowledgement wait follows on the same
        connection, and a shortfall raises (retriable :class:`AckTimeoutError`)."""
        script = self._scripts["append_events"]
        wait = self._acks.wait_command()
        waits: list[Any] = []
        replies: list[Any] = []
        with translate_errors("append"):
            if self.cluster and wait is not None:  # per node: the append, then the wait
                for batch in batches:
                    keys = list(self.segment_keys(batch.scope, batch.stream, batch.segment))
                    node_pipe = command_client_for(self.client, keys[0]).pipeline(False)
                    script(keys=keys, args=batch.script_args(), client=node_pipe)
                    node_pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
                    reply, acknowledged = node_pipe.execute(raise_on_error=False)
                    replies.append(reply)
                    waits.append(acknowledged)
            elif self.cluster:  # redis-py does not pipeline scripts across a cluster
                for batch in batches:
                    meta, events, writers = self.segment_keys(
                        batch.scope, batch.stream, batch.segment
                    )
                    try:
                        replies.append(
                            script(keys=[meta, events, writers], args=batch.script_args())
                        )
                    except redis.ResponseError as exc:
                        replies.append(exc)
            else:
                pipe = self.client.pipeline(transaction=False)
                for batch in batches:
                    meta, events, writers = self.segment_keys(
                        batch.scope, batch.stream, batch.segment
                    )
                    script(keys=[meta, events, writers], args=batch.script_args(), client=pipe)
                if wait is not None:
                    pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
                replies = pipe.execute(raise_on_error=False)
                if wait is not None:
                    waits.append(replies.pop())
        results = [
            _append_reply(batch, reply) for batch, reply in zip(batches, replies, strict=True)
        ]
        if any(r.status not in (segment_status.SEALED, REFUSED) for r in results):
            with translate_errors("append"):
                for acknowledged in waits:
                    where = f"stream {batches[0].scope}/{batches[0].stream}"
                    check_acknowledged(self._acks, acknowledged, where)
        return results

    def _run(
        self, script: str, scope: str, stream: str, segment: int, keys: int, *args: Any
    ) -> Any:
        meta, events, writers = self.segment_keys(scope, stream, segment)
        with translate_errors(script):
            reply = self._scripts[script](keys=[meta, events, writers][:keys], args=list(args))
        segment_status.check(script, segment_name(scope, stream, segment), reply)
        return reply

    def seal(self, scope: str, stream: str, segment: int) -> int:
        """Seal a segment (idempotent); return its final tail offset."""
        return int(self._run("seal_segment", scope, stream, segment, 1)[1])

    def truncate(self, scope: str, stream: str, segment: int, offset: int) -> int:
        """Delete events below ``offset``; return how many were removed."""
        return int(self._run("truncate_segment", scope, stream, segment, 2, offset)[2])

    def offset_at_time(
        self, scope: str, stream: str, segment: int, server_ms: int
    ) -> tuple[int, int]:
        """The first offset appended at or after ``server_ms`` (at least the head; the tail
        when every event is older), and the tail."""
        meta, events, _ = self.segment_keys(scope, stream, segment)
        with translate_errors("offset_at_time"):
            reply = run_read_only(
                self.client, self._scripts["offset_at_time"], [meta, events], [server_ms]
            )
        segment_status.check("offset_at_time", segment_name(scope, stream, segment), reply)
        return int(reply[1]), int(reply[2])

    def read_range(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> tuple[SegmentState, list[SegmentEvent]]:
        """Events ``[start, stop)`` (``stop=-1``: to the tail), at most ``limit``, with the
        segment's state read atomically alongside. Raises TruncatedDataError below the head."""
        meta, events, _ = self.segment_keys(scope, stream, segment)
        last = "+" if stop < 0 else f"{stop}-0"
        with translate_errors("read"):
            pipe = self.client.pipeline(transaction=True)  # MULTI/EXEC: state and events agree
            pipe.hmget(meta, *_META_FIELDS)
            pipe.xrange(events, f"{start + 1}-0", last, count=limit)
            (created, sealed, tail, size, head), entries = pipe.execute()
        name = segment_name(scope, stream, segment)
        state = _segment_state(segment, (created, sealed, tail, size, head))
        if not state.exists:
            raise SegmentNotFoundError(f"segment {name} does not exist")
        if start < state.head:
            raise TruncatedDataError(name, start, state.head)
        return state, [parse_event(segment, entry) for entry in entries]

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        """Head, tail, bytes and sealed flag of each segment, in one round trip."""
        with translate_errors("segment state"):
            pipe = self.client.pipeline(transaction=False)
            for segment in segments:
                meta = self.segment_keys(scope, stream, segment)[0]
                pipe.hmget(meta, *_META_FIELDS)
            replies = pipe.execute()
        return {
            segment: _segment_state(segment, fields)
            for segment, fields in zip(segments, replies, strict=True)
        }

    def read_blocking(
        self,
        scope: str,
        stream: str,
        positions: Mapping[int, int],
        timeout: float,
        limit: int,
    ) -> dict[int, list[SegmentEvent]]:
        """Events at or after each segment's position, from several segments in one call,
        blocking up to ``timeout`` seconds (at most 5 per call) until at least one has
        something (``XREAD BLOCK``; no busy loop). Segments with nothing new are absent."""
        by_key = {self.segment_keys(scope, stream, s)[1]: s for s in positions}
        reply = self.read_keys(
            {key: f"{positions[s]}-0" for key, s in by_key.items()}, timeout, limit
        )
        return {
            by_key[key]: [parse_event(by_key[key], entry) for entry in entries]
            for key, entries in reply.items()
        }

    def heartbeat(
        self, key: str, reader_id: str, generation: int, action: str = "beat"
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        """Renew (``action="forget"``: delete) ``reader_id``'s heartbeat unless a newer
        generation holds it (``action="claim"``: write whatever is stored; ``""``: change
        none); return the server time and every reader's ``(generation, server ms)``."""
        with translate_errors("heartbeat"):
            now_ms, flat = self._scripts["heartbeat"](
                keys=[key], args=[reader_id, generation, action]
            )
        beats: dict[str, tuple[int, int]] = {}
        for name, value in zip(flat[::2], flat[1::2], strict=False):
            generation_text, _, ms_text = value.partition(b" ")
            try:
                beats[name.decode()] = (int(generation_text), int(ms_text))
            except ValueError:
                continue  # a malformed row is ignored: that reader then looks silent
        return int(now_ms), beats

    def forget_heartbeat(self, key: str, reader_id: str, generation: int) -> None:
        """Delete ``reader_id``'s heartbeat if it is of ``generation`` or older."""
        self.heartbeat(key, reader_id, generation, "forget")

    def read_keys(self, positions: Mapping[str, str], timeout: float, limit: int) -> dict[str, Any]:
        """``XREAD BLOCK`` over arbitrary stream keys (segments and state logs) in one call:
        returns key -> raw entries for the keys that had something (at most 5 s per call).
        Raises :class:`WrongKeyTypeError` naming the keys that are not streams."""
        if not positions:
            return {}
        try:
            if self.cluster:
                return self._read_keys_by_slot(positions, timeout, limit)
            block = max(1, int(min(timeout, MAX_BLOCK_SECONDS) * 1000))
            streams: dict[Any, Any] = dict(positions)
            with translate_errors("read"):
                reply: Any = self.log_backend.blocking_client.xread(
                    streams, count=limit, block=block
                )
            return _by_key(reply)
        except ReaderGroupError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            wrong = self._keys_of_wrong_type(list(positions))
            if not wrong:
                raise
            raise WrongKeyTypeError(wrong) from exc

    def _keys_of_wrong_type(self, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` that exist and are not streams (one pipelined ``TYPE`` each)."""
        with translate_errors("read"):
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.type(key)
            types = pipe.execute()
        return [
            key
            for key, kind in zip(keys, types, strict=True)
            if (kind.decode() if isinstance(kind, bytes) else str(kind)) not in ("stream", "none")
        ]

    def _read_keys_by_slot(
        self, positions: Mapping[str, str], timeout: float, limit: int
    ) -> dict[str, Any]:
        """Cluster mode: one XREAD per hash slot, pipelined; with nothing new anywhere, block
        on the first key (the group's log, for readers) for at most a tenth of a second."""
        by_slot: dict[int, dict[Any, Any]] = {}
        for key, last in positions.items():
            slot: int = self.client.keyslot(key)  # type: ignore[attr-defined]
            by_slot.setdefault(slot, {})[key] = last
        with translate_errors("read"):
            pipe = self.client.pipeline(transaction=False)
            for streams in by_slot.values():
                pipe.xread(streams, count=limit)
            replies = pipe.execute()
            result: dict[str, Any] = {}
            for reply in replies:
                result.update(_by_key(reply))
            if result:
                return result
            first = next(iter(positions))
            block = max(1, int(min(timeout, 0.1) * 1000))
            single: dict[Any, Any] = {first: positions[first]}
            reply = self.log_backend.blocking_client.xread(single, count=limit, block=block)
        return _by_key(reply)

    def lag_probe(
        self, scope: str, stream: str, positions: Mapping[int, int]
    ) -> dict[int, tuple[int, int, int, int]]:
        """Per segment ``(tail, bytes, byte offset at position, server ms at position)`` in one
        round trip; the last two are the totals and ``-1`` when the position is at the tail."""
        with translate_errors("lag"):
            pipe = self.client.pipeline(transaction=False)
            for segment, position in positions.items():
                meta, events, _ = self.segment_keys(scope, stream, segment)
                pipe.hmget(meta, "events", "bytes")
                entry_id = f"{position + 1}-0"
                pipe.xrange(events, entry_id, entry_id, count=1)
            replies = pipe.execute()
        out = {}
        for index, segment in enumerate(positions):
            (tail, size), entries = replies[2 * index], replies[2 * index + 1]
            total = int(size or 0)
            if entries:
                event = SegmentEvent(segment, entries[0][0], entries[0][1])
                out[segment] = (int(tail or 0), total, event.byte_offset, event.server_ms)
            else:
                out[segment] = (int(tail or 0), total, total, -1)
        return out

    # -- staged writes (the Spark sink) ------------------------------------------------------
    def staging_key(self, scope: str, stream: str, job: str, segment: int, part: str) -> str:
        return f"{self.config.key_prefix}:{{stage:{scope}/{stream}}}:{job}:{part}:{segment}"

    def stage(self, key: str, events: Sequence[tuple[str | None, bytes, int]], ttl_s: int) -> None:
        """Append events to a staging list (expires after ``ttl_s`` if never committed)."""
        with translate_errors("stage"):
            pipe = self.client.pipeline(transaction=False)
            for start in range(0, len(events), 1000):
                flat: list[Any] = []
                for routing_key, payload, writer_ms in events[start : start + 1000]:
                    flat += (wire_key(routing_key), payload, writer_ms)
                pipe.rpush(key, *flat)
            pipe.expire(key, ttl_s)
            pipe.execute()

    def read_staged(self, key: str) -> list[tuple[str | None, bytes, int]]:
        with translate_errors("read staged"):
            flat: list[bytes] = list(self.client.lrange(key, 0, -1))  # type: ignore[arg-type]
        return [
            (None if not k else k[1:].decode("utf-8", "surrogateescape"), p, int(w))
            for k, p, w in zip(flat[::3], flat[1::3], flat[2::3], strict=False)
        ]

    def commit_staged(
        self, scope: str, stream: str, job: str, staged: Sequence[tuple[int, str]]
    ) -> tuple[int, int]:
        """Run ``commit_staged.lua`` over ``(segment, staging key)`` pairs: returns the status
        and the events committed (or the sealed segment's index)."""
        keys = [f"{self.config.key_prefix}:{{stage:{scope}/{stream}}}:jobs"]
        for segment, stage_key in staged:
            meta, events, _ = self.segment_keys(scope, stream, segment)
            keys += (meta, events, stage_key)
        with translate_errors("commit staged"):
            reply = self._scripts["commit_staged"](keys=keys, args=[job, len(staged)])
        code = segment_status.check("commit_staged", f"{scope}/{stream}", reply)
        return code, int(reply[1])

    def delete_keys(self, keys: Sequence[str]) -> None:
        if keys:
            with translate_errors("delete"):
                self.client.delete(*keys)

    def delete_segments(self, scope: str, stream: str, segments: Sequence[int]) -> None:
        """Delete segments' keys: one DEL per segment (its keys share a hash slot)."""
        with translate_errors("delete segments"):
            pipe = self.client.pipeline(transaction=False)
            for segment in segments:
                pipe.delete(*self.segment_keys(scope, stream, segment))
            pipe.execute()
