"""Reading a state log on ``redis.asyncio``: the interim source of stream metadata for the
asyncio writer (:class:`~readergroup.aio.metadata.LogStreamStates`), until statesync's
asyncio synchronizer (``AsyncStateSynchronizer``, being built alongside) replaces it; then
this module goes.

One page is one ``read.lua`` call (read-only, ``EVALSHA_RO``; loaded on ``NOSCRIPT``), its
reply parsed as :meth:`statesync.redis_backend.RedisLogBackend.read` parses it. statesync's
own parsing is private to it, so the few lines are repeated here rather than imported from a
module that is being reorganised.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError

from readergroup.storage.aio_append import script_sha
from readergroup.storage.translate import translate_errors
from statesync import status
from statesync.backend import RawEntry, ReadResult
from statesync.names import KeyLayout
from statesync.scripts import script_source

_READ = script_source("read")
_READ_SHA = script_sha(_READ)


async def read_log(
    client: redis.asyncio.Redis, key_prefix: str, name: str, after_revision: int, limit: int
) -> ReadResult:
    """One page of the state log ``name``: its entries after ``after_revision`` (``-1``: the
    newest snapshot first), at most ``limit``. Raises statesync's
    :class:`~statesync.errors.SynchronizerNotFoundError` when it does not exist, else
    readergroup's errors."""
    keys = KeyLayout(key_prefix, name)
    args: list[Any] = [keys.meta, keys.log, keys.snapshots, after_revision, limit, -1, -1]
    with translate_errors(f"read {name}"):
        try:
            reply = await client.evalsha_ro(_READ_SHA, 3, *args)
        except NoScriptError:
            await client.script_load(_READ)
            reply = await client.evalsha_ro(_READ_SHA, 3, *args)
    status.raise_for_status("read", name, reply)
    head, incarnation, snapshot_revision, snapshot, entries, anchor, history = reply[1:8]
    return ReadResult(
        int(head),
        _text(incarnation),
        int(snapshot_revision),
        snapshot,
        [_entry(entry) for entry in entries],
        _text(anchor),
        _text(history),
    )


def _text(value: Any) -> str:
    if value is None or value is False:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _entry(entry: Any) -> RawEntry:
    """One ``XRANGE`` item of the log (``<revision>-0``, fields ``d`` payload, ``t`` server
    ms, ``h`` history); anything else becomes an entry that fails to decode, naming its
    revision."""
    entry_id, fields = entry
    revision_part, _, sequence_part = entry_id.partition(b"-")
    values = dict(zip(fields[::2], fields[1::2], strict=False))
    payload = values.get(b"d")
    if sequence_part != b"0" or payload is None:
        return RawEntry(int(revision_part), 0, b"")
    time_ms = values.get(b"t", b"0")
    return RawEntry(
        int(revision_part),
        int(time_ms) if time_ms.isdigit() else 0,
        payload,
        _text(values.get(b"h")),
    )
