"""Telling a synchronizer that never existed from one whose keys vanished.

Redis can lose keys it acknowledged: eviction (refused by default, see
``ClientConfig.allow_key_eviction``), a failover to a replica that had not caught up, a restart
without persistence, an operator's ``DEL``. Every synchronizer this library creates is recorded,
right after its creation, in a hash of its scope, ``<prefix>:{catalog:<scope>}:created``
(synchronizer name -> 1; the scope's catalog, its streams' metadata, its reader groups), or for
the operator's list of scopes in ``<prefix>:{scopes}:created``. Each record lives under keys
only that scope's roles (or the operator) can write, so one scope cannot forge or erase
another's. A synchronizer that is missing but recorded *vanished*: it is reported as lost
(:class:`~readergroup.core.errors.DataLostError`), never silently created again, empty. A
server that lost everything lost the records too: it is a new, empty server, and the
application's idempotent set-up creates everything again. (If a record itself is evicted, a vanished
synchronizer looks never created: that is why evicting policies are refused.)

A synchronizer found deleted and created again (its log regressed) is reloaded from scratch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from readergroup.core.errors import ReaderGroupError
from readergroup.storage.connection_api import Connection
from readergroup.storage.translate import missing_as, translate_errors
from statesync import StateSynchronizer
from statesync.errors import LogRegressedError

_log = logging.getLogger(__name__)

Missing = Callable[[], ReaderGroupError]


def record_key(connection: Connection, scope: str | None) -> str:
    """The hash recording what was created in ``scope`` (``None``: the list of scopes)."""
    return connection.keys.created_record(scope)


def initialize_once(
    connection: Connection,
    scope: str | None,
    sync: StateSynchronizer[Any],
    initial_state: Any,
    lost: Missing,
) -> bool:
    """Create ``sync`` (of ``scope``) with ``initial_state`` unless it exists, then load it;
    but if it was created before and has vanished since, raise ``lost()``. Returns whether
    this call created it."""
    key = record_key(connection, scope)
    with translate_errors(f"check {sync.name}"):
        recorded = bool(connection.records.hexists(key, sync.name))
    if recorded:
        fetch_adopting(sync, lost, f"load {sync.name}")
        return False
    with translate_errors(f"create {sync.name}"):
        created = _adopting(sync, lambda: sync.initialize(initial_state))
        connection.records.hset(key, sync.name, 1)
    return bool(created)


def forget(connection: Connection, scope: str | None, name: str) -> None:
    """Drop ``name``'s record: call it *before* deleting the synchronizer on purpose."""
    with translate_errors(f"delete {name}"):
        connection.records.hdel(record_key(connection, scope), name)


def missing_or_lost(
    connection: Connection, scope: str | None, name: str, missing: Missing, lost: Missing
) -> Missing:
    """For :func:`fetch_adopting`: the error for ``name`` not found, ``lost()`` if it had been
    created (``missing()`` when that cannot be checked, e.g. by a role without access to the
    record)."""

    def error() -> ReaderGroupError:
        try:
            with translate_errors(f"check {name}"):
                recorded = bool(connection.records.hexists(record_key(connection, scope), name))
        except ReaderGroupError as exc:
            _log.warning("could not tell whether %s vanished: %s", name, exc)
            return missing()
        return lost() if recorded else missing()

    return error


def fetch_adopting(sync: StateSynchronizer[Any], missing: Missing, operation: str) -> Any:
    """Fetch ``sync`` and return its state (``missing()`` if it does not exist); a synchronizer
    deleted and created again is reloaded from scratch, with a warning."""
    with missing_as(missing, operation):
        _adopting(sync, sync.fetch_updates)
    return sync.state


def _adopting(sync: StateSynchronizer[Any], operation: Callable[[], object]) -> object:
    """``operation()``; if it finds ``sync``'s log regressed, reload ``sync`` (returns None)."""
    try:
        return operation()
    except LogRegressedError as exc:
        _log.warning("%s was deleted and created again; reloading it: %s", sync.name, exc)
        sync.resync()
        return None
