"""Segment ids, key ranges and routing keys. Pure code.

Segment ids follow Pravega: ``segment_id = (epoch << 32) | number``, where ``number`` is
unique within the stream and ``epoch`` is the stream epoch that created the segment.

Routing keys hash stably onto ``[0, 1)``: the first 8 bytes of ``BLAKE2b(utf-8 key,
digest_size=8)`` read as a big-endian unsigned integer, divided by ``2**64``. The same key
always maps to the same point, in every process and version; a segment owns the keys whose
point falls in its half-open range ``[low, high)``.

>>> segment_id(2, 5)
8589934597
>>> epoch_of(8589934597), number_of(8589934597)
(2, 5)
>>> 0.0 <= key_position("customer-7") < 1.0
True
>>> key_position("customer-7") == key_position("customer-7")
True
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TypeVar

from readergroup.core.errors import InvalidKeyRangesError, InvalidRoutingKeyError

_TWO_POW_64 = float(2**64)
V = TypeVar("V")
_NUMBER_MASK = (1 << 32) - 1


def segment_id(epoch: int, number: int) -> int:
    if not (0 <= epoch <= _NUMBER_MASK and 0 <= number <= _NUMBER_MASK):
        raise ValueError(f"epoch and number must fit in 32 bits, got {epoch}, {number}")
    return (epoch << 32) | number


def epoch_of(segment: int) -> int:
    return segment >> 32


def number_of(segment: int) -> int:
    return segment & _NUMBER_MASK


def segment_name(scope: str, stream: str, segment: int) -> str:
    """Human-readable name: ``scope/stream/number.#epoch.epoch`` (Pravega's form)."""
    return f"{scope}/{stream}/{number_of(segment)}.#epoch.{epoch_of(segment)}"


MAX_ROUTING_KEY_BYTES = 1024
"""Longest routing key, in bytes of its UTF-8 encoding."""


def routing_key_bytes(routing_key: str) -> bytes:
    """The UTF-8 encoding of ``routing_key``; InvalidRoutingKeyError if it is not valid UTF-8
    (a lone surrogate) or longer than :data:`MAX_ROUTING_KEY_BYTES`.

    >>> routing_key_bytes("\\ud800")
    Traceback (most recent call last):
    ...
    readergroup.core.errors.InvalidRoutingKeyError: routing key '\\ud800' is not valid UTF-8: ...
    """
    try:
        encoded = routing_key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRoutingKeyError(
            f"routing key {routing_key[:64]!r} is not valid UTF-8: {exc.reason} at "
            f"position {exc.start}"
        ) from None
    if len(encoded) > MAX_ROUTING_KEY_BYTES:
        raise InvalidRoutingKeyError(
            f"routing key of {len(encoded)} bytes is longer than {MAX_ROUTING_KEY_BYTES} bytes: "
            f"{routing_key[:32]!r}..."
        )
    return encoded


def key_position(routing_key: str) -> float:
    """Where ``routing_key`` falls in ``[0, 1)`` (see the module docstring). Raises
    InvalidRoutingKeyError for a key that is not valid UTF-8 or is too long."""
    digest = hashlib.blake2b(routing_key_bytes(routing_key), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _TWO_POW_64


def uniform_ranges(count: int, low: float = 0.0, high: float = 1.0) -> list[tuple[float, float]]:
    """``count`` equal, contiguous ranges covering ``[low, high)`` exactly.

    >>> uniform_ranges(4)
    [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    """
    if count < 1:
        raise InvalidKeyRangesError(f"need at least one range, got {count}")
    bounds = [low + (high - low) * i / count for i in range(count)] + [high]
    return [(bounds[i], bounds[i + 1]) for i in range(count)]


def check_exact_cover(
    ranges: Sequence[tuple[float, float]], covered: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Return ``ranges`` sorted if they exactly cover the union of ``covered``, else raise.

    Both must be contiguous, non-overlapping, non-empty ranges within ``[0, 1]``; bounds are
    compared exactly (use the bounds of the sealed segments, or fractions that add up).

    >>> check_exact_cover([(0.5, 1.0), (0.0, 0.5)], [(0.0, 1.0)])
    [(0.0, 0.5), (0.5, 1.0)]
    """
    new = _contiguous(ranges, "new key ranges")
    old = _contiguous(covered, "sealed segments' ranges")
    if (new[0][0], new[-1][1]) != (old[0][0], old[-1][1]):
        raise InvalidKeyRangesError(
            f"new key ranges cover [{new[0][0]}, {new[-1][1]}) but the sealed segments cover "
            f"[{old[0][0]}, {old[-1][1]})"
        )
    return new


def _contiguous(ranges: Sequence[tuple[float, float]], what: str) -> list[tuple[float, float]]:
    if not ranges:
        raise InvalidKeyRangesError(f"{what}: empty")
    ordered = sorted((float(lo), float(hi)) for lo, hi in ranges)
    for lo, hi in ordered:
        if not 0.0 <= lo < hi <= 1.0:
            raise InvalidKeyRangesError(f"{what}: [{lo}, {hi}) is not a non-empty part of [0, 1)")
    for (_, hi), (lo, _) in pairwise(ordered):
        if hi != lo:
            kind = "overlap" if lo < hi else "leave a gap"
            raise InvalidKeyRangesError(f"{what}: ranges {kind} at {min(lo, hi)}..{max(lo, hi)}")
    return ordered


class RangeMap:
    """The active segments of a stream, for routing: position -> segment id.

    >>> RangeMap([(7, 0.5, 1.0), (3, 0.0, 0.5)]).segment_at(0.6)
    7
    """

    __slots__ = ("_lows", "_segments")

    def __init__(self, segments: Sequence[tuple[int, float, float]]) -> None:
        ordered = sorted(segments, key=lambda s: s[1])
        self._lows = [low for _, low, _ in ordered]
        self._segments = [segment for segment, _, _ in ordered]

    def segment_at(self, position: float) -> int:
        index = bisect_right(self._lows, position) - 1
        return self._segments[max(index, 0)]

    def segment_for_key(self, routing_key: str) -> int:
        return self.segment_at(key_position(routing_key))

    def group(self, items: list[V], position: Callable[[V], float]) -> dict[int, list[V]]:
        """``items`` by the segment of their ``position``, each segment's in their order. One
        segment (the usual stream) gets ``items`` itself: no position is looked at.

        >>> RangeMap([(7, 0.5, 1.0), (3, 0.0, 0.5)]).group([0.1, 0.7, 0.2], float)
        {3: [0.1, 0.2], 7: [0.7]}
        """
        if len(self._segments) == 1:
            return {self._segments[0]: items}
        groups: dict[int, list[V]] = {}
        segment_at = self.segment_at
        for item in items:
            segment = segment_at(position(item))
            group = groups.get(segment)
            if group is None:
                groups[segment] = [item]
            else:
                group.append(item)
        return groups

    @property
    def segments(self) -> list[int]:
        return list(self._segments)
