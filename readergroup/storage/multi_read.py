"""``XREAD BLOCK`` over many stream keys at once (segments and state logs), on one server or
slot by slot on a cluster: :class:`MultiKeyReader`. Raw replies; parsing is the caller's."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from readergroup.core.errors import ReaderGroupError, WrongKeyTypeError
from readergroup.storage.translate import translate_errors
from statesync.redis_wire import BLOCKING_SOCKET_MARGIN, MAX_PARKED_BLOCK_MS

MAX_BLOCK_SECONDS = 5.0
"""Longest single blocking read; callers loop for longer waits (a dead server is noticed)."""

BLOCKING_READ_SOCKET_TIMEOUT = MAX_BLOCK_SECONDS + BLOCKING_SOCKET_MARGIN
"""Socket timeout of a client whose blocking reads never park (threaded ones, a cluster's):
above :data:`MAX_BLOCK_SECONDS` by :data:`~statesync.redis_wire.BLOCKING_SOCKET_MARGIN`."""

MAX_PARKED_BLOCK_SECONDS = MAX_PARKED_BLOCK_MS / 1000
"""Longest block of an idle asyncio reader's parked ``XREAD`` (10 s; see
:meth:`~readergroup.aio.session.AsyncGroupSession.parked_hold`): no call waits that long on it
unless nothing needs it sooner. The blocking clients' socket timeouts exceed it by
:data:`~statesync.redis_wire.BLOCKING_SOCKET_MARGIN`."""

CLUSTER_BLOCK_SECONDS = 0.1
"""On a cluster, longest blocking read of the first key alone after a sweep of every slot
found nothing (one ``XREAD`` cannot name keys of several slots)."""


def by_key(reply: Any) -> dict[str, Any]:
    """An XREAD reply (RESP3 map or RESP2 list) as key -> entries."""
    items = reply.items() if isinstance(reply, dict) else (reply or [])
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in items}


def block_ms(timeout: float, longest: float = MAX_BLOCK_SECONDS) -> int:
    """``XREAD BLOCK``'s milliseconds for a wait of ``timeout`` s (at least 1, at most
    ``longest``: longer waits are several reads)."""
    return max(1, int(min(timeout, longest) * 1000))


def xread_command(
    positions: Mapping[str, str],
    limit: int,
    block: float | None = None,
    longest: float = MAX_BLOCK_SECONDS,
) -> tuple[Any, ...]:
    """The ``XREAD COUNT limit [BLOCK ms] STREAMS ...`` command of ``positions`` (key -> the
    entry id to read after), as arguments for ``send_command``/``execute_command`` (``block``
    at most ``longest`` s)."""
    waits: tuple[Any, ...] = () if block is None else ("BLOCK", block_ms(block, longest))
    return ("XREAD", "COUNT", limit, *waits, "STREAMS", *positions, *positions.values())


def by_slot(positions: Mapping[str, str], keyslot: Callable[[str], int]) -> list[dict[str, str]]:
    """``positions`` split by hash slot (``keyslot``: a cluster client's), one ``XREAD`` each,
    the slot of the first key first.

    >>> by_slot({"a": "0", "b": "1", "c": "2"}, lambda key: key in "ac")
    [{'a': '0', 'c': '2'}, {'b': '1'}]
    """
    slots: dict[int, dict[str, str]] = {}
    for key, last in positions.items():
        slots.setdefault(keyslot(key), {})[key] = last
    return list(slots.values())


def first_alone(positions: Mapping[str, str]) -> dict[str, str]:
    """The first key of ``positions`` (the group's log, for readers) and its position: what a
    cluster's read blocks on after a sweep found nothing."""
    first = next(iter(positions))
    return {first: positions[first]}


def not_streams(keys: Sequence[str], types: Sequence[Any]) -> list[str]:
    """Those of ``keys`` whose ``TYPE`` (``types``, in order) exists and is not a stream."""
    return [
        key
        for key, kind in zip(keys, types, strict=True)
        if (kind.decode() if isinstance(kind, bytes) else str(kind)) not in ("stream", "none")
    ]


class MultiKeyReader:
    """Blocking reads over arbitrary stream keys: ``client`` for commands, ``blocking_client``
    (socket timeout above :data:`MAX_BLOCK_SECONDS`) for ``XREAD BLOCK``."""

    def __init__(self, client: redis.Redis, blocking_client: redis.Redis, cluster: bool) -> None:
        self._client = client
        self._blocking = blocking_client
        self._cluster = cluster

    def read_keys(self, positions: Mapping[str, str], timeout: float, limit: int) -> dict[str, Any]:
        """``XREAD BLOCK`` over arbitrary stream keys (segments and state logs) in one call:
        returns key -> raw entries for the keys that had something (at most 5 s per call).
        Raises :class:`WrongKeyTypeError` naming the keys that are not streams."""
        if not positions:
            return {}
        try:
            if self._cluster:
                return self._read_keys_by_slot(positions, timeout, limit)
            streams: dict[Any, Any] = dict(positions)
            with translate_errors("read"):
                reply: Any = self._blocking.xread(streams, count=limit, block=block_ms(timeout))
            return by_key(reply)
        except ReaderGroupError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            wrong = self._keys_of_wrong_type(list(positions))
            if not wrong:
                raise
            raise WrongKeyTypeError(wrong) from exc

    def hash_fields(self, keys: Sequence[str], fields: Sequence[str]) -> list[Any]:
        """``HMGET`` of ``fields`` of each of ``keys`` (pipelined) on the connections the
        reads use: a check of what reads brought asks the server they came from (after a
        Sentinel switch, the command and read pools may reach different servers for a
        moment)."""
        with translate_errors("read"):
            pipe = self._blocking.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, *fields)
            replies: list[Any] = pipe.execute()
        return replies

    def _keys_of_wrong_type(self, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` that exist and are not streams (one pipelined ``TYPE`` each)."""
        with translate_errors("read"):
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.type(key)
            types = pipe.execute()
        return not_streams(keys, types)

    def _read_keys_by_slot(
        self, positions: Mapping[str, str], timeout: float, limit: int
    ) -> dict[str, Any]:
        """Cluster mode: one XREAD per hash slot, pipelined; with nothing new anywhere, block
        on the first key (the group's log, for readers) for at most a tenth of a second."""
        keyslot = self._client.keyslot  # type: ignore[attr-defined]
        with translate_errors("read"):
            pipe = self._client.pipeline(transaction=False)
            for streams in by_slot(positions, keyslot):
                pipe.xread(dict(streams), count=limit)  # type: ignore[arg-type]
            replies = pipe.execute()
            result: dict[str, Any] = {}
            for reply in replies:
                result.update(by_key(reply))
            if result:
                return result
            single: dict[Any, Any] = first_alone(positions)
            block = block_ms(min(timeout, CLUSTER_BLOCK_SECONDS))
            reply = self._blocking.xread(single, count=limit, block=block)
        return by_key(reply)
