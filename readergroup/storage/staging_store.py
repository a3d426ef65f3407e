"""Staged writes on Redis: :class:`StagingStore` keeps events in a staging list (expiring
unless committed) and commits a job's lists to their segments at once with
``commit_staged.lua`` (idempotent per job). The Spark sink used it before it was built on
transactions (:mod:`readergroup.spark.txn_sink`); :data:`StagedEvent` is the staged event
of both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.commands.core import Script

from readergroup.storage import segment_status
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_records import wire_key
from readergroup.storage.translate import translate_errors

StagedEvent = tuple[str | None, bytes, int, bytes]
"""A staged event: routing key (``None``: none), payload, writer ms, packed headers (``b""``:
none; :mod:`readergroup.core.headers`)."""


class StagingStore:
    """Staging lists and staged commits under one key prefix. Thread-safe."""

    def __init__(self, client: redis.Redis, scripts: Mapping[str, Script], keys: KeyLayout) -> None:
        self._client = client
        self._scripts = scripts
        self._keys = keys

    def staging_key(self, scope: str, stream: str, job: str, segment: int, part: str) -> str:
        return self._keys.staging(scope, stream, job, segment, part)

    def stage(
        self, key: str, events: Sequence[StagedEvent | tuple[str | None, bytes, int]], ttl_s: int
    ) -> None:
        """Append events ``(routing key, payload, writer ms[, packed headers or b""])`` to a
        staging list (expires after ``ttl_s`` if never committed), in the layout
        ``commit_staged.lua`` reads: an event without headers as three items, as before
        headers existed; one with headers as four, its first item marked ``h``."""
        with translate_errors("stage"):
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(events), 1000):
                flat: list[Any] = []
                for routing_key, payload, writer_ms, *headers in events[start : start + 1000]:
                    if headers and headers[0]:
                        flat += ("h" + wire_key(routing_key), payload, writer_ms, headers[0])
                    else:
                        flat += (wire_key(routing_key), payload, writer_ms)
                pipe.rpush(key, *flat)
            pipe.expire(key, ttl_s)
            pipe.execute()

    def read_staged(self, key: str) -> list[StagedEvent]:
        """The events of a staging list, as :meth:`stage` takes them."""
        with translate_errors("read staged"):
            flat: list[bytes] = list(self._client.lrange(key, 0, -1))  # type: ignore[arg-type]
        out: list[StagedEvent] = []
        at = 0
        while at + 2 < len(flat):
            wire, payload, writer_ms = flat[at : at + 3]
            headers = b""
            if wire[:1] == b"h":
                wire, headers = wire[1:], flat[at + 3] if at + 3 < len(flat) else b""
                at += 1
            routing_key = None if not wire else wire[1:].decode("utf-8", "surrogateescape")
            out.append((routing_key, payload, int(writer_ms), headers))
            at += 3
        return out

    def commit_staged(
        self, scope: str, stream: str, job: str, staged: Sequence[tuple[int, str]]
    ) -> tuple[int, int]:
        """Run ``commit_staged.lua`` over ``(segment, staging key)`` pairs: returns the status
        and the events committed (or the sealed segment's index)."""
        keys = [self._keys.staged_jobs(scope, stream)]
        for segment, stage_key in staged:
            meta, events, _ = self._keys.segment(scope, stream, segment)
            keys += (meta, events, stage_key)
        with translate_errors("commit staged"):
            reply = self._scripts["commit_staged"](keys=keys, args=[job, len(staged)])
        code = segment_status.check("commit_staged", f"{scope}/{stream}", reply)
        return code, int(reply[1])

    def discard(self, keys: Sequence[str]) -> None:
        """Delete staging lists (committed, or of an aborted job)."""
        if keys:
            with translate_errors("delete"):
                self._client.delete(*keys)

    def forget_jobs(self, scope: str, stream: str) -> None:
        """Delete the record of the jobs committed to ``scope/stream`` (the stream is being
        deleted: a job of the same id writing to a stream created again under its name must
        not be taken for a retry and dropped)."""
        with translate_errors("delete committed jobs"):
            self._client.delete(self._keys.staged_jobs(scope, stream))
