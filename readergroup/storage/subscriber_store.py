"""External retention subscribers on Redis: :class:`SubscriberStore`, per stream a hash of
subscriber name -> the text of the stream cut it published (see
:mod:`readergroup.admin.retention`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from readergroup.storage.keys import KeyLayout
from readergroup.storage.translate import as_text, translate_errors


class SubscriberStore:
    """The published cuts of every stream under one key prefix. Thread-safe."""

    def __init__(self, client: redis.Redis, keys: KeyLayout) -> None:
        self._client = client
        self._keys = keys

    def publish(self, scope: str, stream: str, subscriber: str, cut: str) -> None:
        """Record (or replace) ``subscriber``'s cut of ``scope/stream``."""
        with translate_errors("publish subscriber"):
            self._client.hset(self._keys.subscribers(scope, stream), subscriber, cut)

    def unsubscribe(self, scope: str, stream: str, subscriber: str) -> None:
        with translate_errors("unsubscribe"):
            self._client.hdel(self._keys.subscribers(scope, stream), subscriber)

    def published(self, scope: str, stream: str) -> dict[str, str]:
        """Every subscriber of ``scope/stream`` and the cut text it published."""
        with translate_errors("read subscribers"):
            raw: Mapping[Any, Any] = self._client.hgetall(self._keys.subscribers(scope, stream))
        return {as_text(name): as_text(cut) for name, cut in raw.items()}

    def delete(self, scope: str, stream: str) -> None:
        """Forget every subscriber of ``scope/stream`` (the stream is being deleted: a stream
        created again under its name must not be truncated at an old cut)."""
        with translate_errors("delete subscribers"):
            self._client.delete(self._keys.subscribers(scope, stream))
