"""Staged writes of the Spark sink on Redis: :class:`StagingStore` keeps each task's events in
a staging list (expiring unless committed) and commits a job's lists to their segments at once
with ``commit_staged.lua`` (idempotent per job)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.commands.core import Script

from readergroup.storage import segment_status
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_records import wire_key
from readergroup.storage.translate import translate_errors


class StagingStore:
    """Staging lists and staged commits under one key prefix. Thread-safe."""

    def __init__(self, client: redis.Redis, scripts: Mapping[str, Script], keys: KeyLayout) -> None:
        self._client = client
        self._scripts = scripts
        self._keys = keys

    def staging_key(self, scope: str, stream: str, job: str, segment: int, part: str) -> str:
        return self._keys.staging(scope, stream, job, segment, part)

    def stage(self, key: str, events: Sequence[tuple[str | None, bytes, int]], ttl_s: int) -> None:
        """Append events to a staging list (expires after ``ttl_s`` if never committed)."""
        with translate_errors("stage"):
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(events), 1000):
                flat: list[Any] = []
                for routing_key, payload, writer_ms in events[start : start + 1000]:
                    flat += (wire_key(routing_key), payload, writer_ms)
                pipe.rpush(key, *flat)
            pipe.expire(key, ttl_s)
            pipe.execute()

    def read_staged(self, key: str) -> list[tuple[str | None, bytes, int]]:
        with translate_errors("read staged"):
            flat: list[bytes] = list(self._client.lrange(key, 0, -1))  # type: ignore[arg-type]
        return [
            (None if not k else k[1:].decode("utf-8", "surrogateescape"), p, int(w))
            for k, p, w in zip(flat[::3], flat[1::3], flat[2::3], strict=False)
        ]

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
