"""Least-privilege Redis ACL rules per role, generated from the key layout. Pure code.

Four roles. Three are confined to one scope (their key patterns match only that scope's keys,
see :meth:`readergroup.storage.keys.KeyLayout.scope_patterns`); the operator is cluster-wide:

* ``writer``: writes events (``EventStreamWriter``, the Spark sink, transactional writers and
  their transactions' keys) and reads stream metadata;
* ``reader``: reads events (readers, ``BatchClient``, the Spark source), updates its groups'
  state (joins, commits, checkpoints, resets, ``reader_offline``) and publishes retention cuts;
* ``admin``: everything within the scope: streams, reader groups, the scope's catalog,
  truncation and retention;
* ``operator``: every key under the prefix: creates, lists and deletes scopes, migrates old
  layouts.

Each role gets exactly the commands the library issues for it (including those its Lua scripts
call, which Redis checks against the caller's rules): no ``@dangerous``, no keyspace scans
(``SCAN``, ``KEYS``, ``RANDOMKEY``, ``DBSIZE``), no ``SCRIPT FLUSH`` or ``FUNCTION FLUSH``.
Read-only key patterns (``%R~``) need Redis 7.0 or Valkey 7.2 or later; the library runs its
read-only scripts with ``EVALSHA_RO`` so they pass such patterns.

>>> rules("writer", "shop").keys[0]
'~rg:{shop/*'
>>> "+xread" in rules("reader", "shop").commands, "+xread" in rules("writer", "shop").commands
(True, False)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from readergroup.core.errors import InvalidConfigError
from readergroup.core.names import validate_name
from readergroup.storage.keys import KeyLayout
from statesync.durability import Acks
from statesync.errors import StateSyncError
from statesync.names import validate_name as validate_prefix

ROLES = ("writer", "reader", "admin", "operator")
CONSOLE_ROLE = "console"
"""The web console's read-only role (``readergroup console`` without ``--allow-actions``):
every scope's keys, but only commands that read. Kept out of :data:`ROLES` (the README's
table); ``rules("console")`` and ``readergroup acl rules --role console`` give it."""

# What the library sends for each capability (redis-py's own commands, and what each Lua
# script calls). Kept as small sets so a role is the union of what its calls need.
_CONNECT = {"hello", "time", "info|memory"}  # HELLO: server version; INFO memory: eviction
# (no CLIENT SETINFO: the library does not send it, so one set of rules fits Redis 7.0 too)
_SCRIPTS = {"evalsha", "evalsha_ro", "script|load"}
_PIPELINED_SCRIPTS = {"script|exists"}  # redis-py checks a pipeline's scripts first
_STATE_READ = {"hget", "hmget", "xrange", "hstrlen"}  # statesync read.lua
_STATE_WAIT = {"xread"}  # wait_for_updates
_STATE_APPEND = {"hget", "hset", "time", "xadd", "hdel", "hgetall", "hkeys", "hmget", "xtrim"}
_STATE_APPEND |= {"pexpire", "zadd", "zremrangebyscore"}  # followers.lua (append, wake)
_STATE_CREATE_DELETE = {"exists", "del", "hset", "time"}  # initialize.lua, delete
_STATE_CREATE_DELETE |= {"watch", "unwatch", "zrange", "multi", "exec"}  # delete (wake streams)
_SEGMENT_READ = {"hmget", "xrange", "xread", "multi", "exec", "type"}  # read_range: MULTI/EXEC;
# TYPE only after a WRONGTYPE reply, to name the key a rogue write replaced
_SEGMENT_APPEND = {"hget", "hmget", "hset", "time", "xadd", "info|server"}  # append_events.lua
# (INFO server: the run_id that begins a new epoch, epoch.lua), and natively:
_SEGMENT_APPEND |= {"watch", "unwatch", "multi", "exec", "type"}  # storage/native_append.py
_SEGMENT_SEAL = {"exists", "hget", "hmget", "hset", "hdel"}  # seal/open_segment.lua
_SEGMENT_ADMIN = {"hsetnx", "xtrim", "del"}  # create, truncate_segment.lua, delete
_HEARTBEATS = {"hget", "hmget", "hgetall", "hset", "time", "hdel", "hlen"}  # heartbeat.lua
_SUBSCRIBERS = {"hset", "hdel", "hgetall"}  # publish, unsubscribe, retention
_STAGING = {"rpush", "expire", "lrange", "del", "hexists", "hget", "hmget", "hset", "xadd"}
_STAGING |= {"info|server"}  # commit_staged.lua's epoch.lua

_TXN = {"hget", "hmget", "hset", "hgetall", "hincrby", "zadd", "zrem", "zrangebyscore"}
_TXN |= {"zremrangebyscore", "rpush", "lrange", "del", "pexpire", "persist", "exists", "lpop"}
# (txn_*.lua scripts, records, epochs, sweeps; readergroup/core/transactions.py)
_TXN_SEGMENT = {"hexists", "hdel"}  # a segment's writer table: whether it holds a
# transaction's entry; the entry forgotten after the retention
_TXN_ADMIN = {"zrange", "del"}  # deleting a stream deletes its transactions

_WRITER = _CONNECT | _SCRIPTS | _PIPELINED_SCRIPTS | _STATE_READ | _SEGMENT_APPEND | _STAGING
_WRITER |= _TXN | _TXN_SEGMENT
_CLUSTER = {"cluster|slots", "command"}  # redis-py's cluster client: topology, key positions
_WRITER_METADATA = {"evalsha_ro", "hget", "hmget", "hstrlen", "xrange"}  # selector: stream metadata
_WRITER_STAGING = {"rpush", "expire", "lrange", "del", "hexists"}  # selector: staging keys
_READER = (
    _CONNECT
    | _SCRIPTS
    | _PIPELINED_SCRIPTS  # seal_segment after a split, pipelined
    | _STATE_READ
    | _STATE_WAIT
    | _STATE_APPEND
    | _SEGMENT_READ
    | _SEGMENT_SEAL
    | _HEARTBEATS
    | _SUBSCRIBERS
)
_ADMIN = _WRITER | _READER | _STATE_CREATE_DELETE | _SEGMENT_ADMIN | _SEGMENT_SEAL | _TXN_ADMIN
_CONSOLE = _CONNECT | _SCRIPTS | _STATE_READ | _SEGMENT_READ | {"hgetall", "hexists"}

COMMANDS: dict[str, frozenset[str]] = {
    "writer": frozenset(_WRITER),
    "reader": frozenset(_READER),
    "admin": frozenset(_ADMIN),
    "operator": frozenset(_ADMIN),
    CONSOLE_ROLE: frozenset(_CONSOLE),
}

FORBIDDEN = frozenset(
    {"scan", "keys", "randomkey", "dbsize", "script|flush", "function|flush", "flushall"}
)
"""Commands no role ever gets (keyspace scans reveal other scopes' names; flushes break them)."""

CAN: dict[str, str] = {
    "writer": "write events to the scope's streams (writers, transactions, Spark sink); read "
    "stream metadata",
    "reader": "read events (readers, batch client, Spark source); join, commit, checkpoint, "
    "reset and inspect the scope's reader groups; publish retention cuts",
    "admin": "everything within the scope: create, scale, seal, truncate and delete streams; "
    "create, list and delete reader groups; retention; plus what writers and readers do",
    "operator": "everything, in every scope: create, list and delete scopes; "
    "`readergroup admin migrate`",
    CONSOLE_ROLE: "read everything, in every scope: what the web console shows",
}
CANNOT: dict[str, str] = {
    "writer": "read or delete events; change stream metadata (scale, seal, truncate); touch "
    "reader groups, retention cuts or the catalog",
    "reader": "append events; change stream metadata; create or delete groups; read the catalog",
    "admin": "create, delete or list scopes; read or write any other scope's keys",
    "operator": "run `@dangerous` commands, scan the keyspace, flush scripts or functions",
    CONSOLE_ROLE: "write anything (the console's actions need an admin or operator user)",
}


Selector = tuple[tuple[str, ...], tuple[str, ...]]
"""Key patterns and commands allowed together (an ACL selector, ``(~keys +commands)``)."""


@dataclass(frozen=True, slots=True)
class Rules:
    """The key patterns and commands of one role (``ACL SETUSER`` syntax), plus selectors:
    commands allowed only on some of the keys."""

    role: str
    keys: tuple[str, ...]
    commands: tuple[str, ...]
    selectors: tuple[Selector, ...] = ()

    @property
    def all_commands(self) -> frozenset[str]:
        """Every command name granted, on any keys."""
        names = {c[1:] for c in self.commands}
        return frozenset(names.union(*({c[1:] for c in cmds} for _, cmds in self.selectors)))

    def setuser_args(self, user: str, password: str | None = None) -> list[str]:
        """The ``ACL SETUSER`` command as arguments (for ``execute_command``). With
        ``password`` only its SHA-256 is included (``#<hex>``); without one the user has no
        password and cannot log in until one is added."""
        secret = [] if password is None else ["#" + hashlib.sha256(password.encode()).hexdigest()]
        words = ["ACL", "SETUSER", user, "reset", "on", *secret, "resetchannels", *self.keys]
        selectors = [f"({' '.join([*keys, *cmds])})" for keys, cmds in self.selectors]
        return [*words, "-@all", *self.commands, *selectors]

    def setuser(self, user: str, password: str | None = None) -> str:
        """The same as one line for ``redis-cli`` (selectors in double quotes)."""
        return " ".join(
            f'"{word}"' if " " in word else word for word in self.setuser_args(user, password)
        )


def _plus(commands: set[str]) -> tuple[str, ...]:
    return tuple(f"+{c}" for c in sorted(commands))


def rules(
    role: str,
    scope: str | None = None,
    prefix: str = "rg",
    *,
    cluster: bool = False,
    acks: str = "leader",
) -> Rules:
    """The rules of ``role`` (``writer``, ``reader`` and ``admin`` need a ``scope``). With
    ``cluster`` also what a Redis Cluster client sends to learn the topology and key positions
    (``CLUSTER SLOTS``, ``COMMAND``). With ``acks`` (``ClientConfig.acks``) also the command
    that waits for the acknowledgement after each append (``WAIT`` or ``WAITAOF``)."""
    validate_prefix(prefix, what="key prefix")
    generated = _rules(role, scope, prefix)
    extra = set(_CLUSTER) if cluster else set()
    try:
        wait = Acks.parse(acks).wait_command()
    except StateSyncError as exc:
        raise InvalidConfigError(str(exc)) from exc
    if wait is not None:  # sent in a pipeline after the append script: SCRIPT EXISTS first
        extra |= {str(wait[0]).lower(), *_PIPELINED_SCRIPTS}
    if not extra:
        return generated
    commands = _plus({c[1:] for c in generated.commands} | extra)
    return Rules(role, generated.keys, commands, generated.selectors)


def _rules(role: str, scope: str | None, prefix: str) -> Rules:
    if role not in (*ROLES, CONSOLE_ROLE):
        raise InvalidConfigError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if role in ("operator", CONSOLE_ROLE):
        return Rules(role, (f"~{KeyLayout(prefix).everything()}",), _plus(set(COMMANDS[role])))
    if scope is None:
        raise InvalidConfigError(f"the {role} role needs a scope")
    k = KeyLayout(prefix).scope_patterns(validate_name(scope, "scope"))
    if role == "writer":
        # DEL only on staging keys, XRANGE only on stream metadata: a writer can neither read
        # nor delete its scope's events
        return Rules(
            role,
            (f"~{k['segments']}", f"~{k['staging']}"),
            _plus(
                _CONNECT
                | _SCRIPTS - {"evalsha_ro"}
                | _PIPELINED_SCRIPTS
                | _SEGMENT_APPEND
                | _TXN_SEGMENT
            ),
            (
                ((f"%R~{k['streams']}",), _plus(_WRITER_METADATA)),
                ((f"~{k['staging']}",), _plus(_WRITER_STAGING)),
                ((f"~{k['transactions']}",), _plus(_TXN | {"evalsha", "script|load"})),
            ),
        )
    keys = {
        "reader": (
            f"%R~{k['segments']}",
            f"~{k['segment_meta']}",  # readers seal the segments they read to the end
            f"%R~{k['streams']}",
            f"~{k['groups']}",
            f"~{k['subscribers']}",
        ),
        "admin": tuple(
            f"~{k[kind]}"
            for kind in (
                "segments",
                "streams",
                "groups",
                "catalog",
                "subscribers",
                "staging",
                "transactions",
            )
        ),
    }[role]
    return Rules(role, keys, _plus(set(COMMANDS[role])))


def default_user(role: str, scope: str | None) -> str:
    return f"rg-{role}" + (f"-{scope}" if scope else "")


def markdown_table(scope: str = "S", prefix: str = "rg") -> str:
    """The roles table of docs/guides/security.md: keys, commands, what each can and cannot do."""
    lines = ["| role | keys | commands | can | cannot |", "|---|---|---|---|---|"]
    for role in ROLES:
        r = rules(role, None if role == "operator" else scope, prefix)
        keys = " ".join(f"`{k}`" for k in r.keys)
        words = ["-@all", *r.commands]
        words += [f"({' '.join([*keys_, *cmds])})" for keys_, cmds in r.selectors]
        commands = "`" + " ".join(words).replace("|", "\\|") + "`"
        lines.append(f"| {role} | {keys} | {commands} | {CAN[role]} | {CANNOT[role]} |")
    return "\n".join(lines) + "\n"
