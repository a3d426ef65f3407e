"""Per-event headers: string keys, bytes values, bounded size (issue 30 item 7).

An event with headers is stored with one more field, ``h``, holding them packed with msgpack
as a map of str -> bin (``msgpack.packb(dict, use_bin_type=True)``); an event without headers
has no ``h`` field at all, so it is stored exactly as before headers existed. Readers of
earlier versions decode entries by field name when they are not in a layout they know
(``canonical_fields`` in :mod:`readergroup.storage.segment_records`) and ignore names they do
not know: they read a headers-carrying event as the same event without headers.

Bounds, checked by ``write_event`` before anything is queued:

* at most :data:`MAX_HEADERS` headers;
* keys are non-empty ``str``; values are bytes-like (``bytes``, ``bytearray``,
  ``memoryview``; stored as bytes);
* the packed headers are at most :data:`MAX_HEADERS_BYTES`, **and** payload plus packed
  headers are at most the stream's ``max_event_size`` (headers count against it, so the
  server-side check of ``append_events.lua`` bounds the whole stored event).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import msgpack

from readergroup.core.errors import EventTooLargeError, SerializationError

MAX_HEADERS = 64
"""Most headers one event may carry."""

MAX_HEADERS_BYTES = 64 * 1024
"""Largest packed size of one event's headers, bytes (they also count against the stream's
``max_event_size``)."""

Headers = Mapping[str, bytes | bytearray | memoryview]
"""What ``write_event`` takes as ``headers`` (values stored as bytes)."""

NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})
"""The headers of an event without any (shared, read-only)."""


def encode_headers(headers: Headers | None, where: str) -> bytes:
    """``headers`` packed as stored in the ``h`` field; ``b""`` for none (``None`` or empty:
    the event is stored without ``h``). ``where`` names the event in errors (stream, routing
    key). Raises :class:`SerializationError` for a key that is not a non-empty ``str`` or a
    value that is not bytes-like, :class:`EventTooLargeError` for more than
    :data:`MAX_HEADERS` headers or more than :data:`MAX_HEADERS_BYTES` packed."""
    if not headers:
        return b""
    if not isinstance(headers, Mapping):
        raise SerializationError(
            f"headers must be a mapping of str to bytes, got {type(headers).__name__} for "
            f"{where}; nothing was written"
        )
    if len(headers) > MAX_HEADERS:
        raise EventTooLargeError(
            f"{len(headers)} headers exceed the limit of {MAX_HEADERS} for {where}; nothing "
            "was written"
        )
    checked: dict[str, bytes] = {}
    for key, value in headers.items():
        if type(key) is not str or not key:
            raise SerializationError(
                f"header key {key!r} is not a non-empty str, for {where}; nothing was written"
            )
        if type(value) is bytes:
            checked[key] = value
        elif isinstance(value, (bytearray, memoryview)):
            checked[key] = bytes(value)
        else:
            hint = " (encode it)" if isinstance(value, str) else ""
            raise SerializationError(
                f"header {key!r} has a {type(value).__name__} value, not bytes{hint}, for "
                f"{where}; nothing was written"
            )
    try:
        packed: bytes = msgpack.packb(checked, use_bin_type=True)
    except (ValueError, TypeError, OverflowError) as exc:  # a key msgpack cannot encode
        raise SerializationError(f"headers of {where} cannot be packed: {exc}") from exc
    if len(packed) > MAX_HEADERS_BYTES:
        largest = max(checked, key=lambda name: len(name) + len(checked[name]))
        raise EventTooLargeError(
            f"headers of {len(packed)} bytes exceed the limit of {MAX_HEADERS_BYTES} for "
            f"{where} (largest: header {largest!r}); nothing was written"
        )
    return packed


def decode_headers(raw: bytes | None, where: str) -> Mapping[str, bytes]:
    """The headers stored as ``raw`` (an ``h`` field; ``None``: none), read-only.
    ``where`` names the event (segment and offset) in the :class:`SerializationError` raised
    for a field that is not such a map (an entry not written by this library)."""
    if raw is None or raw == b"":
        return NO_HEADERS
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise SerializationError(f"headers of {where} are not valid msgpack: {exc}") from exc
    if not isinstance(value, dict) or not all(
        type(key) is str and type(item) is bytes for key, item in value.items()
    ):
        raise SerializationError(
            f"headers of {where} are not a map of str to bytes (not written by this library)"
        )
    return MappingProxyType(value)
