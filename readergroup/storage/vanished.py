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

Each check is a :mod:`readergroup.core.calls` procedure, so the threaded managers run it
blocking and the asyncio ones await it (on a :class:`~statesync.StateSynchronizer` or an
:class:`~statesync.AsyncStateSynchronizer` and the matching connection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from readergroup.core.calls import Steps, call_on
from readergroup.core.errors import ReaderGroupError
from readergroup.storage.keys import KeyLayout
from readergroup.storage.translate import is_not_found, translate_errors
from statesync.errors import LogRegressedError

_log = logging.getLogger(__name__)

Missing = Callable[[], ReaderGroupError]
Sync = Any
"""A :class:`~statesync.StateSynchronizer` or an :class:`~statesync.AsyncStateSynchronizer`
(the procedures only name its methods)."""


def record_key(connection: Any, scope: str | None) -> str:
    """The hash recording what was created in ``scope`` (``None``: the list of scopes);
    ``connection``: anything with the ``keys`` of a connection."""
    keys: KeyLayout = connection.keys
    return keys.created_record(scope)


def initialize_once(
    connection: Any, scope: str | None, sync: Sync, initial_state: Any, lost: Missing
) -> Steps[bool]:
    """Create ``sync`` (of ``scope``) with ``initial_state`` unless it exists, then load it;
    but if it was created before and has vanished since, raise ``lost()``. Returns whether
    this call created it. ``connection``: its ``records`` and ``keys`` are used."""
    key = record_key(connection, scope)
    with translate_errors(f"check {sync.name}"):
        recorded = bool((yield call_on(connection.records, "hexists", key, sync.name)))
    if recorded:
        yield from fetch_adopting_steps(sync, lost, f"load {sync.name}")
        return False
    with translate_errors(f"create {sync.name}"):
        created = yield from _adopting(sync, call_on(sync, "initialize", initial_state))
        yield call_on(connection.records, "hset", key, sync.name, 1)
    return bool(created)


def forget(connection: Any, scope: str | None, name: str) -> Steps[None]:
    """Drop ``name``'s record: run it *before* deleting the synchronizer on purpose."""
    with translate_errors(f"delete {name}"):
        yield call_on(connection.records, "hdel", record_key(connection, scope), name)


def missing_or_lost(
    connection: Any, scope: str | None, name: str, missing: Missing, lost: Missing
) -> Callable[[], Steps[ReaderGroupError]]:
    """For :func:`fetch_adopting_steps`: the error for ``name`` not found, ``lost()`` if it
    had been created (``missing()`` when that cannot be checked, e.g. by a role without access
    to the record)."""

    def error() -> Steps[ReaderGroupError]:
        try:
            with translate_errors(f"check {name}"):
                key = record_key(connection, scope)
                recorded = bool((yield call_on(connection.records, "hexists", key, name)))
        except ReaderGroupError as exc:
            _log.warning("could not tell whether %s vanished: %s", name, exc)
            return missing()
        return lost() if recorded else missing()

    return error


def fetch_adopting_steps(
    sync: Sync,
    missing: Missing | Callable[[], Steps[ReaderGroupError]],
    operation: str,
) -> Steps[Any]:
    """Fetch ``sync`` and return its state (the error ``missing()`` makes, or the one its
    procedure returns (:func:`missing_or_lost`), if it does not exist); a synchronizer
    deleted and created again is reloaded from scratch, with a warning."""
    try:
        with translate_errors(operation):
            yield from _adopting(sync, call_on(sync, "fetch_updates"))
    except ReaderGroupError as exc:
        if not is_not_found(exc):
            raise
        made = missing()
        error = (yield from made) if not isinstance(made, ReaderGroupError) else made
        raise error from exc
    return sync.state


def _adopting(sync: Sync, operation: Any) -> Steps[object]:
    """``operation``'s result; if it finds ``sync``'s log regressed, reload ``sync`` (returns
    None)."""
    try:
        return (yield operation)
    except LogRegressedError as exc:
        _log.warning("%s was deleted and created again; reloading it: %s", sync.name, exc)
        yield call_on(sync, "resync")
        return None
