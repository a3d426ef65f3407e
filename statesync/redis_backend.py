"""The Redis implementation of :class:`~statesync.backend.LogBackend`.

The only module of :mod:`statesync` that talks to Redis. Keys follow
:class:`~statesync.names.KeyLayout`; each mutation is one Lua script from
:mod:`statesync.scripts`, so it is atomic on the server. Redis errors are translated here,
at the boundary, into :mod:`statesync.errors` (``raise ... from``).

redis-py's own command retries are switched off for this client: a blind re-send of a
script after a lost reply is exactly what the writer sequence numbers exist to make safe,
so retries happen one level up, where the same sequence number is re-sent.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import weakref
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import redis
from redis.backoff import NoBackoff
from redis.cluster import PRIMARY as CLUSTER_PRIMARY
from redis.commands.core import Script
from redis.exceptions import RedisClusterException, SlotNotCoveredError
from redis.retry import Retry

from statesync import redis_wire as wire
from statesync import status
from statesync.backend import AppendOutcome, CompactOutcome, ReadResult
from statesync.durability import Acks
from statesync.endpoints import is_sentinel_url, parse_sentinel_url, sentinel_setup
from statesync.errors import (
    AckTimeoutError,
    AckUnsupportedError,
    BackendAccessError,
    BackendFailoverError,
    BackendProtocolError,
    BackendUnavailableError,
    StateSyncError,
)
from statesync.redis_wire import BLOCKING_SOCKET_TIMEOUT, RedisBackendBase, ScriptCall
from statesync.scripts import SCRIPT_NAMES, script_source

logger = logging.getLogger(__name__)


FAILOVER_REPLIES = frozenset(
    {"NOREPLICAS", "UNBLOCKED", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "LOADING"}
)
"""Error replies of a server that is not (or not yet, or no longer) a writable primary with
enough replicas: the command was not carried out, and will be once the failover is over."""

_FAILOVER_CLASSES: tuple[tuple[type[Exception], str], ...] = (
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
)


def failover_reply(exc: BaseException) -> str | None:
    """The failover reply (one of :data:`FAILOVER_REPLIES`) ``exc`` carries, else ``None``.

    >>> failover_reply(redis.ResponseError("NOREPLICAS Not enough good replicas to write."))
    'NOREPLICAS'
    >>> failover_reply(redis.exceptions.ReadOnlyError("You can't write against a replica."))
    'READONLY'
    >>> failover_reply(redis.ResponseError("ERR unknown command")) is None
    True
    """
    for cls, reply in _FAILOVER_CLASSES:  # redis-py strips the code of the errors it types
        if isinstance(exc, cls):
            return reply
    if isinstance(exc, redis.ResponseError):
        code = str(exc).split(" ", 1)[0]
        if code in FAILOVER_REPLIES:
            return code
    return None


def cluster_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is a cluster client's ``RedisClusterException`` (not a ``RedisError``)
    saying no node could be reached: its slot-table refresh, after a connection error, found
    no node answering (every node down, or the network), or a slot not served meanwhile."""
    if not isinstance(exc, RedisClusterException):
        return False
    return isinstance(exc, SlotNotCoveredError) or isinstance(
        exc.__cause__, (redis.ConnectionError, redis.TimeoutError)
    )


@contextmanager
def translate_redis_errors(operation: str, name: str) -> Iterator[None]:
    """Turn redis-py exceptions raised inside the block into :mod:`statesync.errors`."""
    try:
        yield
    except StateSyncError:
        raise
    except RedisClusterException as exc:
        if cluster_unreachable(exc):
            raise BackendUnavailableError(
                f"synchronizer {name!r}: Redis unavailable during {operation}: {exc}"
            ) from exc
        raise BackendProtocolError(
            f"synchronizer {name!r}: Redis Cluster error during {operation}: {exc}"
        ) from exc
    except redis.RedisError as exc:
        reply = failover_reply(exc)
        if reply is None:
            raise _translated(operation, name, exc) from exc
        raise BackendFailoverError(
            f"synchronizer {name!r}: Redis is failing over ({reply}) during {operation}: {exc}",
            reply,
        ) from exc


_NO_EVALSHA_RO = "_statesync_no_evalsha_ro"
"""Attribute set on a client whose server lacks ``EVALSHA_RO``."""


def run_read_only(
    client: redis.Redis, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """Run a script that only reads with ``EVALSHA_RO`` (loading it on ``NOSCRIPT``), so an ACL
    user with read-only key patterns (``%R~``) may run it: Redis checks the keys ``EVALSHA``
    declares as writable. Falls back to ``EVALSHA`` on servers older than Redis 7."""
    if getattr(client, _NO_EVALSHA_RO, False):
        return script(keys=list(keys), args=list(args), client=client)
    try:
        try:
            return client.evalsha_ro(script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            client.script_load(script.script)
            return client.evalsha_ro(script.sha, len(keys), *keys, *args)
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        setattr(client, _NO_EVALSHA_RO, True)
        return script(keys=list(keys), args=list(args), client=client)


_SCRIPT_DENIALS = ("ACL failure", "The user executing the script can't")
"""How a denial inside a script begins: Redis 7.2+ and Valkey (``ACL failure in script: No
permissions to run...``), Redis 7.0 (``The user executing the script can't run this command
or subcommand`` / ``...can't access at least one of the keys``)."""


def is_access_denied(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing this user: a failed login, a command or key its ACL
    rules do not grant (``NOPERM``), or the same inside a script, in any server's words."""
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.NoPermissionError)):
        return True
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(_SCRIPT_DENIALS)


def _translated(operation: str, name: str, exc: redis.RedisError) -> StateSyncError:
    where = f"synchronizer {name!r}"
    # checked first: redis-py's AuthenticationError is a ConnectionError
    if is_access_denied(exc):
        return BackendAccessError(f"{where}: Redis refused {operation}: {exc}")
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return BackendUnavailableError(f"{where}: Redis unavailable during {operation}: {exc}")
    if isinstance(exc, redis.ResponseError):
        return BackendProtocolError(f"{where}: Redis rejected {operation}: {exc}")
    return BackendProtocolError(f"{where}: Redis error during {operation}: {exc}")


def command_client_for(client: Any, key: str) -> redis.Redis:
    """A plain client whose pipelines run on the server holding ``key`` (for a cluster
    client, that node's), so an append and the wait after it share one connection."""
    if isinstance(client, redis.Redis):
        return client
    node_client: redis.Redis = client.get_redis_connection(client.get_node_from_key(key))
    return node_client


def run_acknowledged(
    client: Any, script: Script, keys: Sequence[str], args: Sequence[Any], wait: Sequence[Any]
) -> Any:
    """``script`` (an append) then the ``wait`` command, in one pipeline on the server holding
    ``keys[0]``; returns ``(reply, wait reply)``, errors as values.

    On a cluster the pipeline bypasses the client's redirections: a ``MOVED``/``ASK`` reply (the
    slot's primary changed, as after a failover) refreshes the client's slot table and raises
    a retriable :class:`BackendFailoverError`, so the retry goes to the new primary."""
    pipe = command_client_for(client, keys[0]).pipeline(transaction=False)
    script(keys=list(keys), args=list(args), client=pipe)
    pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
    reply, acknowledged = pipe.execute(raise_on_error=False)
    moved = slot_moved(keys[0], reply)
    if moved is not None:
        nodes = getattr(client, "nodes_manager", None)
        if nodes is not None:
            nodes.initialize()
        raise moved from reply
    return reply, acknowledged


def slot_moved(key: str, reply: Any) -> BackendFailoverError | None:
    """The retriable error for a ``MOVED``/``ASK`` reply to a command on ``key`` sent past the
    cluster client's redirections (the caller refreshes the client's slot table first)."""
    if not isinstance(reply, (redis.exceptions.MovedError, redis.exceptions.AskError)):
        return None
    return BackendFailoverError(
        f"the slot of {key!r} moved to {reply.host}:{reply.port} (a failover): {reply}", "MOVED"
    )


def check_acknowledged(acks: Acks, reply: Any, where: str, client: Any = None) -> None:
    """Raise unless ``reply`` (to ``acks.wait_command()``, or the error it drew) shows the
    append acknowledged as ``acks`` asks.

    ``client``: the client the append went through. A shortfall or a failover reply is what a
    primary the Sentinels just demoted answers (its replica was promoted, so nobody replicates
    it any more): a Sentinel client asks the Sentinels again at once (see
    :func:`recheck_primary`), so the retry goes to the new primary instead of the old one."""
    if isinstance(reply, Exception):
        code = failover_reply(reply)
        if code is not None or isinstance(reply, (redis.ConnectionError, redis.TimeoutError)):
            recheck_primary(client)
        if code is not None:
            raise BackendFailoverError(
                f"{where}: Redis is failing over ({code}) while waiting for acks={acks}: {reply}",
                code,
            ) from reply
        if isinstance(reply, (redis.ConnectionError, redis.TimeoutError)):
            raise BackendUnavailableError(f"{where}: waiting for acks={acks}: {reply}") from reply
        raise AckUnsupportedError(
            f"{where}: acks={acks} needs WAITAOF (Redis/Valkey 7.2+) and "
            f"appendonly yes; the server answered: {reply}; the append landed on the primary"
        ) from reply
    shortfall = acks.shortfall(reply)
    if shortfall is not None:
        recheck_primary(client)
        raise AckTimeoutError(
            f"{where}: the append landed on the primary, but {shortfall} "
            f"(acks={acks}); a failover may still lose it"
        )


SENTINEL_CHECK_INTERVAL = 1.0
"""Seconds between two questions to the Sentinels about where the primary is (per pool)."""

SENTINEL_RECHECK_INTERVAL = 0.1
"""Least seconds between two questions asked at once by :func:`recheck_primary` (per pool),
so that many threads meeting one failover ask once."""


def recheck_primary(client: Any) -> None:
    """Ask the Sentinels now where the primary is, if ``client`` is a Sentinel client (else
    nothing): on a switch its pool closes every connection to the old primary, so the next
    command goes to the new one. Called on signs that the primary may have been demoted (a
    ``WAIT`` shortfall, a failover reply), which the periodic question would otherwise notice
    only up to :data:`SENTINEL_CHECK_INTERVAL` later."""
    follow_now = getattr(getattr(client, "connection_pool", None), "follow_now", None)
    if follow_now is not None:
        follow_now()


class PrimarySwitches(Protocol):
    """How often a client has seen its primary change (see :func:`primary_switches`)."""

    @property
    def count(self) -> int: ...


def primary_switches(client: Any) -> PrimarySwitches | None:
    """The count of primary switches ``client`` has seen, or ``None`` for a plain client (a
    failover behind one address breaks its connections, which its user sees as an outage).

    A Sentinel client counts the switches its pools learn (its blocking-read twin shares the
    count); a cluster client counts ``MOVED`` replies that changed a slot's primary and
    slot-table refreshes that changed the set of primaries. A switch a client took in its
    stride (idle connections closed, a command redirected) shows nowhere else: a user holding
    positions on the old primary (a reader) compares the count between two reads to learn
    that it should check them."""
    pool = getattr(client, "connection_pool", None)
    siblings = getattr(pool, "siblings", None)
    if isinstance(siblings, _SiblingPools):
        return siblings
    nodes = getattr(client, "nodes_manager", None)
    if nodes is None:
        return None
    with _COUNTING:
        counted = getattr(nodes, _CLUSTER_SWITCHES, None)
        if not isinstance(counted, _ClusterSwitches):
            counted = _ClusterSwitches(nodes)
            setattr(nodes, _CLUSTER_SWITCHES, counted)
    return counted


_COUNTING = threading.Lock()
_CLUSTER_SWITCHES = "_statesync_primary_switches"
"""Attribute of a cluster client's nodes manager holding its :class:`_ClusterSwitches`."""


class _ClusterSwitches:
    """Counts a cluster client's primary switches: wraps its nodes manager's ``move_slot`` (a
    ``MOVED`` reply, counted when the slot's primary changed by it; an ``ASK`` is a migration
    under way, not counted) and ``initialize`` (a slot-table refresh, counted when the set of
    primaries changed, as a failover changes it). Counted once the manager has taken the
    change in, so a reader that sees the count checks its logs on the new primary. The
    manager's own lock is not taken here: the wrapped methods take it themselves."""

    def __init__(self, nodes: Any) -> None:
        self.count = 0
        self._lock = threading.Lock()
        move_slot, initialize = nodes.move_slot, nodes.initialize

        def counting_move_slot(error: Any) -> Any:
            before = _slot_primary(nodes, error)
            moved = move_slot(error)
            if not isinstance(error, redis.exceptions.AskError) and (
                _slot_primary(nodes, error) != before
            ):
                self._counted()
            return moved

        def counting_initialize(*args: Any, **kwargs: Any) -> Any:
            before = primaries_of(nodes)
            done = initialize(*args, **kwargs)
            if primaries_of(nodes) != before:
                self._counted()
            return done

        nodes.move_slot, nodes.initialize = counting_move_slot, counting_initialize

    def _counted(self) -> None:
        with self._lock:
            self.count += 1


def primaries_of(nodes: Any) -> frozenset[str]:
    """The names of the primaries in a cluster nodes manager's table."""
    return frozenset(
        name
        for name, node in dict(nodes.nodes_cache).items()
        if node.server_type == CLUSTER_PRIMARY
    )


def _slot_primary(nodes: Any, error: Any) -> str | None:
    """The name of the node a cluster nodes manager's table gives for the slot of a ``MOVED``
    or ``ASK`` reply (``None``: none yet)."""
    serving = nodes.slots_cache.get(getattr(error, "slot_id", None))
    return serving[0].name if serving else None


class _SiblingPools:
    """The Sentinel pools of one client pair (commands, blocking reads): a switch one of them
    learns is followed by the others at once, not at their own next question to the Sentinels
    (a blocking read in flight on the old primary would otherwise wait there up to its block
    time, or until the Sentinels demote that server). ``count``: the switches learned."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.count = 0

    def add(self, pool: Any) -> None:
        with self._lock:
            self._pools.add(pool)

    def learned(self, learner: Any, address: Any) -> None:
        """``learner`` found that the Sentinels name the primary ``address``: the others
        follow, then the switch is counted (a reader seeing the count checks its logs on the
        new primary)."""
        with self._lock:
            others = [pool for pool in self._pools if pool is not learner]
        for pool in others:
            pool.follow_sibling(address)
        with self._lock:
            self.count += 1


def warn_of_switch(service: str, before: Any, after: Any, learned: str) -> None:
    """The WARNING a Sentinel pool (threaded or asyncio) logs when it leaves the old primary
    ``before`` for ``after`` (``learned``: how it learned, for the log)."""
    logger.warning(
        "Sentinels of %r name a new primary %s (was %s)%s: closing every connection to the old one",
        service,
        after,
        before,
        learned,
    )


def _leave(pool: Any) -> None:
    """Leave the old primary: close ``pool``'s idle connections and shut down the sockets of
    those in use, so that a command or a blocking read waiting there gets a connection error
    at once and its own thread closes the connection. Closing a connection under the thread
    using it (redis-py's ``disconnect(inuse_connections=True)``) races with its reads: a
    reader's parked read met a half-closed connection and died of a ``TypeError`` inside
    redis-py."""
    pool.disconnect(inuse_connections=False)
    lock, in_use = getattr(pool, "_lock", None), getattr(pool, "_in_use_connections", None)
    if lock is None or in_use is None:  # another redis-py layout: close them as it does
        pool.disconnect(inuse_connections=True)
        return
    with lock:
        connections = list(in_use)
    for connection in connections:
        sock = getattr(connection, "_sock", None)
        if sock is None:
            continue
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:  # closed by its own thread meanwhile
            logger.warning(
                "leaving the old primary: a connection was closed already: %s", exc, exc_info=exc
            )


def _telling(pool: Any, siblings: _SiblingPools) -> Any:
    """``pool.proxy.get_master_address`` that also tells ``siblings`` of a switch (weak
    references only: the proxy keeps it, and must not keep itself or its pool alive)."""
    proxy = pool.proxy
    discover = type(proxy).get_master_address
    proxy_ref, pool_ref = weakref.ref(proxy), weakref.ref(pool)

    def get_master_address() -> Any:
        asked = proxy_ref()
        if asked is None:
            raise redis.ConnectionError("the Sentinel pool was closed")
        before = asked.master_address
        after = discover(asked)
        learner = pool_ref()
        if learner is not None and before is not None and after != before:
            siblings.learned(learner, after)
        return after

    return get_master_address


def _following_pool_class() -> type:
    """A pool class for one client pair: its pools share one :class:`_SiblingPools`."""
    from redis.sentinel import SentinelConnectionPool

    siblings = _SiblingPools()

    class FollowingSentinelPool(SentinelConnectionPool):
        """A Sentinel pool that asks the Sentinels again (at most every
        :data:`SENTINEL_CHECK_INTERVAL` s) when it hands out a connection, and on a switch
        closes every connection to the old primary, in use ones too (a blocked read there would
        wait on a server that is no longer the primary). redis-py alone asks only when it opens
        a connection, so clients kept writing to the old primary, which stays writable for
        seconds after a Sentinel failover, and lost those writes when it became a replica.

        A switch this pool learns (from its own question, or a new connection's) is passed to
        the client's other pools (:class:`_SiblingPools`), which leave the old primary too."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
            self._asked_at = 0.0
            self._asking = threading.Lock()
            self._unanswered = False
            # redis-py's connections ask the pool's proxy where the primary is when they
            # connect: the proxy's answers are watched too, so no switch goes untold
            self.proxy.get_master_address = _telling(self, siblings)  # type: ignore[method-assign]
            self.siblings = siblings
            siblings.add(self)

        def follow_sibling(self, address: Any) -> None:
            """Another pool of this client learned that the Sentinels name ``address``: close
            every connection to the old primary now (nothing to do before the first one)."""
            before = self.proxy.master_address
            if before is None or before == address:
                return
            self.proxy.master_address = address
            self._switched(before, address, ", another pool of this client learned")

        def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            self._ask(SENTINEL_CHECK_INTERVAL)
            return super().get_connection(*args, **kwargs)

        def follow_now(self) -> None:
            """Ask the Sentinels now (unless asked within :data:`SENTINEL_RECHECK_INTERVAL`)."""
            self._ask(SENTINEL_RECHECK_INTERVAL)

        def _ask(self, interval: float) -> None:
            now = time.monotonic()
            if now - self._asked_at >= interval and self._asking.acquire(False):
                try:
                    self._asked_at = now
                    self._follow()
                finally:
                    self._asking.release()

        def _follow(self) -> None:
            before = self.master_address
            if before is None:
                return  # nothing connected yet: the first connection asks anyway
            try:
                # closes the idle connections on a switch
                after = self.get_master_address()  # type: ignore[no-untyped-call]
            except redis.RedisError as exc:  # keep the primary we have, ask again later
                if not self._unanswered:
                    logger.warning(
                        "Sentinels of %r did not answer where the primary is; staying on %s",
                        self.service_name,
                        before,
                        exc_info=exc,
                    )
                self._unanswered = True
                return
            self._unanswered = False
            if after != before:
                self._switched(before, after, "")

        def _switched(self, before: Any, after: Any, learned: str) -> None:
            """The Sentinels name the primary ``after``, no longer ``before``: leave the old
            one (``learned``: how this pool learned it, for the log)."""
            warn_of_switch(self.service_name, before, after, learned)
            _leave(self)

    return FollowingSentinelPool


def sentinel_clients(
    url: str,
    *,
    socket_timeout: float,
    blocking_socket_timeout: float,
    sentinel_options: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[redis.Redis, redis.Redis]:
    """(command client, blocking client) for the primary a ``redis+sentinel://`` URL names.

    ``options`` go to the primary's connections (TLS files, ``retry``...); ``sentinel_options``
    to the Sentinels' (for example their own password)."""
    from redis.sentinel import Sentinel

    target = parse_sentinel_url(url)
    options, sentinel_kwargs = sentinel_setup(
        target, options, socket_timeout=socket_timeout, sentinel_options=sentinel_options
    )
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        target.sentinels, sentinel_kwargs=sentinel_kwargs, **options
    )
    pool = _following_pool_class()
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service, socket_timeout=socket_timeout, db=target.db, connection_pool_class=pool
    )
    blocking: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service,
        socket_timeout=blocking_socket_timeout,
        db=target.db,
        connection_pool_class=pool,
    )
    return client, blocking


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


class RedisLogBackend(RedisBackendBase[redis.Redis]):
    """Synchronizer logs stored in one Redis (or Valkey) server. Thread-safe.

    Who may call what: any thread may call any method; blocking waits use a separate
    connection pool so they never hold up appends and reads.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        key_prefix: str = "statesync",
        blocking_client: redis.Redis | None = None,
        acks: Acks | None = None,
    ) -> None:
        """``client`` may also be a ``redis.cluster.RedisCluster``; then pass a second cluster
        client (socket timeout above 5 s) as ``blocking_client``. ``acks``: when an append
        counts as acknowledged (default leader, see :mod:`statesync.durability`)."""
        super().__init__(client, key_prefix=key_prefix, blocking_client=blocking_client, acks=acks)
        self._scripts: dict[str, Script] = {
            script: client.register_script(script_source(script)) for script in SCRIPT_NAMES
        }

    def _blocking_twin(self, client: redis.Redis) -> redis.Redis:
        pool = client.connection_pool
        kwargs = wire.blocking_options(pool.connection_kwargs, _no_retry())
        return redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )

    @classmethod
    def _connect(
        cls, url: str, socket_timeout: float, redis_kwargs: dict[str, Any]
    ) -> tuple[redis.Redis, redis.Redis | None]:
        if is_sentinel_url(url):
            return sentinel_clients(
                url,
                socket_timeout=socket_timeout,
                blocking_socket_timeout=BLOCKING_SOCKET_TIMEOUT,
                retry=_no_retry(),
                **redis_kwargs,
            )
        options = wire.client_options(socket_timeout)
        return redis.Redis.from_url(url, retry=_no_retry(), **options, **redis_kwargs), None

    def _run(self, name: str, call: ScriptCall) -> Any:
        with translate_redis_errors(call.script, name):
            return self._scripts[call.script](keys=call.keys, args=call.args)

    # -- LogBackend -------------------------------------------------------------------------
    def initialize(self, name: str, snapshot: bytes, incarnation: str) -> bool:
        call = wire.initialize_call(self.keys(name), snapshot, incarnation)
        return wire.initialized(name, self._run(name, call))

    def append(self, name: str, payload: bytes, **options: Any) -> AppendOutcome:
        call = wire.append_call(self.keys(name), payload, **options)
        return wire.append_outcome(name, self._append_acknowledged(name, call))

    def wake(self, name: str, revision: int, followers: Collection[str] | None) -> bool:
        call = wire.wake_call(self.keys(name), revision, followers)
        return call is not None and wire.woke(name, self._run(name, call))

    def _append_acknowledged(self, name: str, call: ScriptCall) -> Any:
        """Run append.lua, then (unless acks=leader) the wait command on the same connection;
        a landed or duplicate append raises if it is not acknowledged as asked."""
        wait = self._acks.wait_command()
        if wait is None:
            return self._run(name, call)
        with translate_redis_errors("append", name):
            reply, acknowledged = run_acknowledged(
                self._client, self._scripts["append"], call.keys, call.args, wait
            )
            if isinstance(reply, Exception):
                raise reply
        if int(reply[0]) in (status.OK, status.DUPLICATE):
            check_acknowledged(self._acks, acknowledged, f"synchronizer {name!r}", self._client)
        return reply

    def read(self, name: str, after_revision: int, limit: int, **limits: Any) -> ReadResult:
        call = wire.read_call(self.keys(name), after_revision, limit, **limits)
        with translate_redis_errors("read", name):
            reply = run_read_only(self._client, self._scripts["read"], call.keys, call.args)
        return wire.read_result(name, reply)

    def wait(self, name: str, after_revision: int, timeout: float, **which: Any) -> bool:
        streams = wire.wait_streams(self.keys(name), after_revision, **which)
        for block in wire.block_chunks(timeout):
            with translate_redis_errors("wait", name):
                reply = self._blocking.xread(streams, count=1, block=block)
            if reply:
                return True
        return False

    def compact(self, name: str, revision: int, snapshot: bytes, **anchors: Any) -> CompactOutcome:
        call = wire.compact_call(self.keys(name), revision, snapshot, **anchors)
        return wire.compact_outcome(name, self._run(name, call))

    def delete(self, name: str) -> bool:
        k = self.keys(name)

        def delete_all(pipe: Any) -> None:  # (re-run if a wake-up named a follower meanwhile)
            followers = [wire.text(f) for f in pipe.zrange(k.wakers, 0, -1)]
            pipe.multi()
            pipe.delete(*k.all, *map(k.follower_wake, followers))

        with translate_redis_errors("delete", name):  # (one slot: the node holding it)
            replies: Any = command_client_for(self._client, k.meta).transaction(
                delete_all, k.wakers
            )
        return wire.deleted(replies)

    def server_time_ms(self) -> int:
        with translate_redis_errors("time", "-"):
            return wire.time_ms(self._client.time())

    def close(self) -> None:
        self._blocking.close()
        self._client.close()
