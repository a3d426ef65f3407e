"""Serializers: how events become bytes and back. Pure code.

A serializer is any object with ``serialize(value) -> bytes`` and
``deserialize(data: bytes) -> value`` (:class:`Serializer`). Failures raise
:class:`~readergroup.core.errors.SerializationError`. Never pickle: events cross Redis. Readers also
turn any other exception of a serializer (the application's own included) into a
``SerializationError`` naming the stream, segment and offset.
"""

from __future__ import annotations

import json
from typing import Generic, Protocol, TypeVar

import msgpack

from readergroup.core.errors import SerializationError

T = TypeVar("T")


class Serializer(Protocol[T]):
    def serialize(self, value: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


class BytesSerializer:
    """Events are ``bytes`` (``bytearray``/``memoryview`` accepted), passed through."""

    def serialize(self, value: bytes) -> bytes:
        if type(value) is bytes:  # immutable: no copy needed
            return value
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise SerializationError(f"BytesSerializer needs bytes, got {type(value).__name__}")
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return data if type(data) is bytes else bytes(data)


class UTF8StringSerializer:
    """Events are ``str``, stored as UTF-8."""

    def serialize(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise SerializationError(f"UTF8StringSerializer needs str, got {type(value).__name__}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates
            raise SerializationError(f"not encodable as UTF-8: {exc}") from exc

    def deserialize(self, data: bytes) -> str:
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(f"event is not valid UTF-8: {exc}") from exc


class JsonSerializer(Generic[T]):
    """Events are JSON values (compact, UTF-8, no NaN)."""

    def serialize(self, value: T) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"not JSON-serializable: {exc}") from exc

    def deserialize(self, data: bytes) -> T:
        try:
            result: T = json.loads(bytes(data))
            return result
        except (ValueError, UnicodeDecodeError) as exc:
            raise SerializationError(f"event is not valid JSON: {exc}") from exc
        except RecursionError as exc:  # arrays or objects nested deeper than Python recurses
            raise SerializationError(f"event nests JSON too deeply to decode: {exc}") from exc


class MsgpackSerializer(Generic[T]):
    """Events are msgpack values (no extension types)."""

    def serialize(self, value: T) -> bytes:
        try:
            packed: bytes = msgpack.packb(value, use_bin_type=True)
            return packed
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(f"not msgpack-serializable: {exc}") from exc

    def deserialize(self, data: bytes) -> T:
        try:
            result: T = msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
            return result
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            raise SerializationError(f"event is not valid msgpack: {exc}") from exc
