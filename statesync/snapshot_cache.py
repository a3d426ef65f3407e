"""A per-process LRU cache of decoded snapshots (the one place :mod:`cachetools` serves here).

Decoding a large snapshot costs far more than hashing its bytes, and every synchronizer of
one process that catches up on the same name reads the same snapshot. Entries are keyed by
a BLAKE2b digest of the bytes *and* the identity of the registered types, so a client that
registered different classes never sees another client's objects.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable

from cachetools import LRUCache

from statesync.codec import DecodedSnapshot

_CACHE: LRUCache[tuple[bytes, Hashable], DecodedSnapshot] = LRUCache(maxsize=32)
_LOCK = threading.Lock()


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


def clear() -> None:
    """Forget every cached snapshot (tests)."""
    with _LOCK:
        _CACHE.clear()
