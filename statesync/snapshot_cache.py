"""Per-process caches shared by the synchronizers of one process: decoded snapshots (an LRU
cache, the one place :mod:`cachetools` serves here) and states after a log entry.

Decoding a large snapshot costs far more than hashing its bytes, and every synchronizer of
one process that catches up on the same name reads the same snapshot. Entries are keyed by
a BLAKE2b digest of the bytes *and* the identity of the registered types, so a client that
registered different classes never sees another client's objects.

Likewise every synchronizer of a process that follows the same log decodes and applies the
same entries (a hundred readers of one group in one process apply each of its entries a
hundred times). The state after an entry is a function of the log's history at that entry
(a chain of hashes over the incarnation and every payload, see ``history.lua``): the first
synchronizer to reach it (by applying the entry, or by appending it) stores the state under
``(name, revision, history, types)`` and the others take it from there. States are immutable
values (``apply_to`` returns new ones), so sharing them is safe.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable
from typing import Any

from cachetools import LRUCache

from statesync.codec import DecodedSnapshot

_CACHE: LRUCache[tuple[bytes, Hashable], DecodedSnapshot] = LRUCache(maxsize=32)
_LOCK = threading.Lock()

_STATES: dict[tuple[str, int, str, Hashable], Any] = {}
"""(name, revision, history, types) -> the state after that entry, oldest first: a plain dict
read without the lock (a lookup is atomic), so a hundred threads looking up states do not
queue behind one another; stores take :data:`_STATES_LOCK` and drop the oldest beyond
:data:`_STATES_KEPT`."""
_STATES_KEPT = 1024
"""States kept: a burst of a group's moves while its readers are at different revisions
(states share structure, so this is far less than 1,024 copies)."""
_STATES_LOCK = threading.Lock()


def decode_shared(
    data: bytes, registry_key: Hashable, decode: Callable[[bytes], DecodedSnapshot]
) -> DecodedSnapshot:
    """Return ``decode(data)``, reusing an earlier result for the same bytes and types."""
    key = (hashlib.blake2b(data, digest_size=20).digest(), registry_key)
    with _LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    decoded = decode(data)
    with _LOCK:
        _CACHE[key] = decoded
    return decoded


def state_after(name: str, revision: int, history: str, registry_key: Hashable) -> Any | None:
    """The state of log ``name`` after the entry at ``revision`` whose history is ``history``,
    if a synchronizer of this process registered with the same types stored it; else None."""
    return _STATES.get((name, revision, history, registry_key))


def remember_state(
    name: str, revision: int, history: str, registry_key: Hashable, state: Any
) -> None:
    """Store the state of log ``name`` after the entry at ``revision`` (see
    :func:`state_after`); a ``history`` of ``""`` (not known) stores nothing."""
    if history:
        with _STATES_LOCK:
            _STATES[(name, revision, history, registry_key)] = state
            while len(_STATES) > _STATES_KEPT:
                del _STATES[next(iter(_STATES))]


def clear() -> None:
    """Forget every cached snapshot and state (tests)."""
    with _LOCK:
        _CACHE.clear()
    with _STATES_LOCK:
        _STATES.clear()
