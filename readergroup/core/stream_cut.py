"""Stream cuts: a position in a whole stream, one offset per segment. Pure code.

A cut maps segment ids to event offsets such that the segments' key ranges cover ``[0, 1)``
exactly; every offset is an event boundary (offsets count events, see :mod:`readergroup`).
Reading "from a cut" reads, in each segment, the events at and after its offset, then the
successors.

Text form (round-trips, validated)::

    rgcut1:<scope>/<stream>:<segment id>=<offset>,<segment id>=<offset>,...

with segment ids in increasing order, e.g. ``rgcut1:shop/orders:0=15,1=0,4294967298=7``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from readergroup.core.errors import InvalidKeyRangesError, InvalidStreamCutError
from readergroup.core.names import validate_name
from readergroup.core.routing import check_exact_cover

_PREFIX = "rgcut1"
_TEXT = re.compile(r"rgcut1:([^/:]+)/([^/:]+):((?:\d+=\d+)(?:,\d+=\d+)*)\Z")
_MAX_TEXT = 1 << 20


@dataclass(frozen=True, slots=True)
class StreamCut:
    """An immutable position across every segment of one stream.

    >>> cut = StreamCut("shop", "orders", {1: 0, 0: 15})
    >>> str(cut)
    'rgcut1:shop/orders:0=15,1=0'
    >>> StreamCut.from_text(str(cut)) == cut
    True
    """

    scope: str
    stream: str
    positions: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_name(self.scope, "scope")
        validate_name(self.stream, "stream")
        if not self.positions:
            raise InvalidStreamCutError("a stream cut needs at least one segment")
        clean: dict[int, int] = {}
        for segment, offset in self.positions.items():
            if not (isinstance(segment, int) and isinstance(offset, int)):
                raise InvalidStreamCutError(f"segment ids and offsets must be ints: {segment!r}")
            if segment < 0 or offset < 0:
                raise InvalidStreamCutError(f"negative segment or offset: {segment}={offset}")
            clean[segment] = offset
        object.__setattr__(self, "positions", dict(sorted(clean.items())))

    @property
    def scoped_stream(self) -> str:
        return f"{self.scope}/{self.stream}"

    def to_text(self) -> str:
        body = ",".join(f"{s}={o}" for s, o in self.positions.items())
        return f"{_PREFIX}:{self.scope}/{self.stream}:{body}"

    __str__ = to_text

    @classmethod
    def from_text(cls, text: str) -> StreamCut:
        """Parse the text form; any other input raises :class:`InvalidStreamCutError`."""
        if not isinstance(text, str) or len(text) > _MAX_TEXT:
            raise InvalidStreamCutError("a stream cut's text form must be a str under 1 MiB")
        match = _TEXT.match(text.strip())
        if match is None:
            raise InvalidStreamCutError(
                f"not a stream cut: {text[:80]!r} (expected 'rgcut1:scope/stream:SEG=OFF,...')"
            )
        positions: dict[int, int] = {}
        for pair in match.group(3).split(","):
            segment, offset = (int(part) for part in pair.split("="))
            if segment in positions:
                raise InvalidStreamCutError(f"segment {segment} appears twice in {text[:80]!r}")
            positions[segment] = offset
        try:
            return cls(match.group(1), match.group(2), positions)
        except InvalidStreamCutError:
            raise
        except Exception as exc:  # name validation
            raise InvalidStreamCutError(f"not a stream cut: {exc}") from exc

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self.positions.items())

    def __hash__(self) -> int:
        return hash((self.scope, self.stream, tuple(self.positions.items())))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, StreamCut) and (
            (self.scope, self.stream, dict(self.positions))
            == (other.scope, other.stream, dict(other.positions))
        )


def check_cut_covers(cut: StreamCut, ranges: Mapping[int, tuple[float, float]]) -> None:
    """Raise unless ``cut``'s segments are known (``ranges``) and cover ``[0, 1)`` exactly."""
    unknown = [s for s in cut.positions if s not in ranges]
    if unknown:
        raise InvalidStreamCutError(f"{cut.scoped_stream} has no segments {unknown}")
    try:
        check_exact_cover([ranges[s] for s in cut.positions], [(0.0, 1.0)])
    except InvalidKeyRangesError as exc:
        raise InvalidStreamCutError(f"cut does not cover the key space exactly: {exc}") from exc
