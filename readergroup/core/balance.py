"""Fair-share balancing and liveness maths for reader groups. Pure functions.

Fair share: with ``S`` segments (assigned or unassigned) and ``R`` online readers, every reader
should own ``floor = S // R`` or ``ceil = -(-S // R)`` segments. The rules, applied by each reader
to itself on every refresh, converge to sizes that differ by at most one and then stop moving:

* **acquire** unassigned segments up to ``floor``; beyond that, up to ``ceil`` only while no
  other reader is below ``floor`` (so a starving reader gets them first);
* **release** down to ``ceil`` when above it; release down to ``floor`` only while another
  reader is below ``floor`` and no segment is unassigned. Between ``floor`` and ``ceil`` nothing
  moves: that band is the hysteresis that keeps the group from flapping;
* moves that several readers could make but fewer are needed are made **in turn**, in an order
  every reader computes alike from the state (fewest segments first, then least lag, then a
  hash of the reader id; see :func:`~readergroup.core.lag.lag_ranks`): the extra segments up
  to ``ceil`` go to the first readers at ``floor`` (the k-th takes
  the k-th oldest unassigned segment); when the readers below ``floor`` want all that is
  unassigned (or more), each takes its want from the oldest in that order, after those before
  it; only the first ``deficit`` readers above ``floor`` (most segments first, then most lag)
  release one for a reader below it. The
  others move nothing (no herd of conflicting updates when one reader joins or leaves a large
  group);
* a reader acquires its whole share in one update (like Pravega's reader group; bounded by the
  rule above, not by a fixed cap) and releases at most ``max_moves`` segments per update (the
  caller releases again at once while the cap cut a release short); the oldest segments (lowest
  epoch) are acquired first, within an epoch in an order of the reader's own (a hash of reader
  and segment), so readers acquiring at the same time mostly pick different segments and their
  updates (keyed by segment) do not conflict; the most recently acquired are released first
  (owners stay sticky).

>>> fair_share(8, 3)
(2, 3)
>>> counts = {"a": 4, "b": 4, "c": 0}
>>> release_count(4, counts, unassigned=0, max_moves=16)   # a and b: above ceil 3
1
>>> acquire_count(0, {"a": 3, "b": 3, "c": 0}, unassigned=2)   # c: up to floor 2
2
>>> acquire_count(0, {"a": 0}, unassigned=1024)   # a lone reader: everything, in one update
1024
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Mapping

from readergroup.core.fair_share import (
    TurnKey,
    acquire_count,
    donor_key,
    fair_share,
    in_turn,
    release_count,
    taker_key,
)
from readergroup.core.group_state import GroupState, ReaderRecord, SegKey
from readergroup.core.lag import lag_ranks
from readergroup.core.routing import epoch_of, number_of

__all__ = [  # the counting rules live in fair_share (the group state's updates use them too)
    "acquire_count",
    "acquisition_order",
    "expired_readers",
    "fair_share",
    "in_turn",
    "next_expiry_ms",
    "release_count",
    "segment_age",
    "segments_to_acquire",
    "segments_to_release",
]


def segment_age(segment: SegKey) -> tuple[int, int, str]:
    """Sort key: oldest first (lowest epoch, then number, then stream)."""
    return epoch_of(segment[1]), number_of(segment[1]), segment[0]


def acquisition_order(reader_id: str) -> Callable[[SegKey], tuple[int, int, int, str]]:
    """Sort key of ``reader_id``'s acquisitions: lowest epoch first, then a hash of reader and
    segment (deterministic, different for every reader), then number and stream."""
    salt = reader_id.encode()

    def key(segment: SegKey) -> tuple[int, int, int, str]:
        spread = zlib.crc32(f"{segment[0]}/{segment[1]}".encode(), zlib.crc32(salt))
        return epoch_of(segment[1]), spread, number_of(segment[1]), segment[0]

    return key


def segments_to_acquire(state: GroupState, reader_id: str) -> list[SegKey]:
    counts = state.counts()
    owned = counts.get(reader_id, 0)
    unassigned = len(state.unassigned)
    count = acquire_count(owned, counts, unassigned)
    if not count:
        return []
    floor, ceil = fair_share(sum(counts.values()) + unassigned, len(counts))
    takes = taker_key(counts, lag_ranks(state.lags, counts))
    if owned >= floor:  # one extra segment, which every reader at floor may take: in turn
        takers = [r for r, c in counts.items() if floor <= c < ceil and not state.frozen_for(r)]
        turn = _turn(reader_id, takers, takes)
        if turn >= unassigned:
            return []
        return [heapq.nsmallest(turn + 1, state.unassigned, key=segment_age)[turn]]
    starving = [r for r, c in counts.items() if c < floor and not state.frozen_for(r)]
    if sum(floor - counts[r] for r in starving) >= unassigned:  # none to spare: in turn
        ordered = in_turn(starving, takes)
        before = ordered[: ordered.index(reader_id)] if reader_id in ordered else ordered
        offset = sum(floor - counts[r] for r in before)
        if offset >= unassigned:
            return []
        take = min(count, unassigned - offset)
        return heapq.nsmallest(offset + take, state.unassigned, key=segment_age)[offset:]
    order = acquisition_order(reader_id)
    if count >= unassigned:
        return sorted(state.unassigned, key=order)
    return heapq.nsmallest(count, state.unassigned, key=order)


def segments_to_release(state: GroupState, reader_id: str, max_moves: int) -> list[SegKey]:
    counts = state.counts()
    mine = state.owned_by(reader_id)
    unassigned = len(state.unassigned)
    count = release_count(len(mine), counts, unassigned, max_moves)
    floor, ceil = fair_share(sum(counts.values()) + unassigned, len(counts))
    if count and len(mine) <= ceil:  # one for a reader below floor, from any above it: in turn
        deficit = sum(floor - c for c in counts.values() if c < floor)
        donors = [r for r, c in counts.items() if c > floor and not state.frozen_for(r)]
        gives = donor_key(counts, lag_ranks(state.lags, counts))
        if _turn(reader_id, donors, gives) >= deficit:
            count = 0
    newest_first = sorted(mine, key=lambda s: mine[s].token, reverse=True)
    return newest_first[:count]


def _turn(reader_id: str, candidates: list[str], key: TurnKey) -> int:
    """``reader_id``'s place in :func:`_in_turn` order; ``len(candidates)`` if not among them."""
    ordered = in_turn(candidates, key)
    return ordered.index(reader_id) if reader_id in ordered else len(ordered)


def expired_readers(
    readers: Mapping[str, ReaderRecord],
    heartbeats: Mapping[str, tuple[int, int]],
    now_ms: int,
    session_timeout_ms: int,
) -> list[tuple[str, int]]:
    """Readers whose last sign of life is older than the session timeout, on server time.

    A reader's last sign of life is its newest heartbeat *for its current generation*, or its
    join time if it has not beaten yet. Returns ``(reader_id, generation)`` pairs.

    >>> r = {"a": ReaderRecord("a", 1, 0), "b": ReaderRecord("b", 2, 0)}
    >>> beats = {"a": (1, 9_000), "b": (1, 9_500)}   # b's beat is for an older generation
    >>> expired_readers(r, beats, now_ms=12_000, session_timeout_ms=10_000)
    [('b', 2)]
    """
    out = []
    for reader_id, record in sorted(readers.items()):
        beat = heartbeats.get(reader_id)
        last = record.joined_ms
        if beat is not None and beat[0] == record.generation:
            last = max(last, beat[1])
        if now_ms - last > session_timeout_ms:
            out.append((reader_id, record.generation))
    return out


def next_expiry_ms(
    readers: Mapping[str, ReaderRecord],
    heartbeats: Mapping[str, tuple[int, int]],
    session_timeout_ms: int,
) -> int | None:
    """Server time at which the next reader would expire if it does not beat again."""
    lasts = []
    for reader_id, record in readers.items():
        beat = heartbeats.get(reader_id)
        last = record.joined_ms
        if beat is not None and beat[0] == record.generation:
            last = max(last, beat[1])
        lasts.append(last)
    return min(lasts) + session_timeout_ms + 1 if lasts else None
