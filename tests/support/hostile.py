"""Hostile bytes for decoders: what a rogue client could plant in Redis."""

from __future__ import annotations

import msgpack


def nested_ext(depth: int, code: int = 1) -> bytes:
    """An extension value nested ``depth`` deep: ext holding an array holding the next ext."""
    payload = msgpack.packb([1])
    for _ in range(depth):
        payload = msgpack.packb([msgpack.ExtType(code, payload)])
    return bytes(payload)


def hostile_entry(depth: int, code: int = 1) -> bytes:
    """A log entry whose single update is ``depth`` extension levels deep (936 bytes at 200:
    the entry that overflowed the C stack of every reader)."""
    return bytes(
        msgpack.packb({"v": 1, "w": "w", "u": [msgpack.ExtType(code, nested_ext(depth, code))]})
    )
