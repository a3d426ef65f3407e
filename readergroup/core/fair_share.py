"""How many segments each reader of a group should own, and who has a move to make. Pure
counting over ``reader -> segments owned`` (no group state), so the group state's updates can
say which readers a change concerns (:func:`readers_with_moves`) without importing the
balancing on top of them (:mod:`readergroup.core.balance`, which re-exports these).

>>> fair_share(8, 3)
(2, 3)
>>> sorted(readers_with_moves({"a": 4, "b": 4, "c": 0}, unassigned=0))  # a, b above ceil 3
['a', 'b']
>>> sorted(readers_with_moves({"a": 3, "b": 3, "c": 0}, unassigned=2))  # c takes 2
['c']
>>> sorted(readers_with_moves({"a": 3, "b": 3, "c": 2}, unassigned=0))  # balanced
[]
>>> sorted(readers_with_moves({"a": 3, "b": 3, "c": 1}, unassigned=0))  # one donor, in turn
['b']
>>> sorted(readers_with_moves({"a": 3, "b": 3, "c": 1}, 0, lags={"a": 120, "b": 0}))  # a lags
['a']

Turns and lag (Pravega's ``calculateAcquireTime`` / ``calculateReleaseTime``, as an order
instead of delays): among readers the counts leave tied for a move, the one with less lag
acquires first and the one with more lag releases first (:func:`taker_key`,
:func:`donor_key`), by the lags the readers published in the group's state
(:func:`~readergroup.core.lag.lag_ranks`). Counts decide first, so the fair shares are the
same with or without lags.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Collection, Iterable, Mapping

from readergroup.core.lag import lag_ranks


def fair_share(segments: int, readers: int) -> tuple[int, int]:
    """``(floor, ceil)`` of segments per reader; ``(0, 0)`` without readers."""
    if readers <= 0:
        return 0, 0
    return segments // readers, -(-segments // readers)


def acquire_count(owned: int, counts: Mapping[str, int], unassigned: int) -> int:
    """How many unassigned segments a reader owning ``owned`` should take now: its whole
    share at once (each reader takes at most ``ceil``, so this never overshoots)."""
    floor, ceil = fair_share(sum(counts.values()) + unassigned, len(counts))
    if owned < floor:
        wanted = floor - owned
    else:
        starving = sum(1 for c in counts.values() if c < floor)
        wanted = 0 if starving else ceil - owned
    return max(0, min(wanted, unassigned))


def release_count(owned: int, counts: Mapping[str, int], unassigned: int, max_moves: int) -> int:
    """How many segments a reader owning ``owned`` should give back now."""
    floor, ceil = fair_share(sum(counts.values()) + unassigned, len(counts))
    if owned > ceil:
        return min(owned - ceil, max_moves)
    if owned > floor and unassigned == 0:
        deficit = sum(floor - c for c in counts.values() if c < floor)
        if deficit:
            return min(owned - floor, deficit, 1, max_moves)
    return 0


TurnKey = Callable[[str], tuple[int, int]]
"""A reader's place among the candidates for a move: lower goes first (ties: a hash of the
id)."""


def taker_key(counts: Mapping[str, int], lag: Callable[[str], int]) -> TurnKey:
    """The order in which readers take segments: fewest owned first, then least lag."""
    return lambda reader: (counts[reader], lag(reader))


def donor_key(counts: Mapping[str, int], lag: Callable[[str], int]) -> TurnKey:
    """The order in which readers give segments up: most owned first, then most lag."""
    return lambda reader: (-counts[reader], -lag(reader))


def in_turn(candidates: Iterable[str], key: TurnKey) -> list[str]:
    """``candidates`` by ``key``, then a hash of the reader id: the same order for every reader
    reading the same state. When several readers may make the same move but fewer are needed,
    the first make it and the others wait, instead of all racing for it (a herd: one reader
    joining a thousand made about half of them release at once; one leaving made all of them
    go for its segments).

    >>> in_turn(["a", "b", "c"], taker_key({"a": 2, "b": 1, "c": 2}, lambda r: 0))[0]
    'b'
    """
    return sorted(candidates, key=lambda r: (key(r), zlib.crc32(r.encode()), r))


def readers_with_moves(
    counts: Mapping[str, int],
    unassigned: int,
    frozen: Collection[str] = (),
    lags: Mapping[str, int] | None = None,
) -> frozenset[str]:
    """The readers (of ``counts``: reader -> segments owned) that would move a segment in this
    state under the balancing rules, turns included
    (:func:`~readergroup.core.balance.segments_to_acquire` and
    :func:`~readergroup.core.balance.segments_to_release` non-empty), ``frozen`` readers (a
    checkpoint or reset awaits them) excepted: those a change leaving the group in this state
    must wake. The others would move nothing, so waking them costs a refresh for nothing: when
    one reader of a hundred is short, only the donors whose turn it is release. O(R log R),
    where asking each reader is O(R^2 log R). ``lags``: the lags the readers published
    (:func:`~readergroup.core.lag.lag_ranks`)."""
    floor, ceil = fair_share(sum(counts.values()) + unassigned, len(counts))
    lag = lag_ranks(lags or {}, counts)
    takes, gives = taker_key(counts, lag), donor_key(counts, lag)
    movable = [r for r in counts if r not in frozen]
    movers: list[str] = []
    if unassigned:
        starving = [r for r in movable if counts[r] < floor]
        wanted = sum(floor - counts[r] for r in starving)
        if wanted >= unassigned:  # none to spare: the first in turn take it all
            offset = 0
            for reader in in_turn(starving, takes):
                if offset >= unassigned:
                    break
                movers.append(reader)
                offset += floor - counts[reader]
        elif starving:
            movers += starving
        if not any(c < floor for c in counts.values()):  # one extra each, in turn, up to ceil
            takers = in_turn((r for r in movable if counts[r] < ceil), takes)
            movers += takers[:unassigned]
    movers += (r for r in movable if counts[r] > ceil)
    deficit = sum(floor - c for c in counts.values() if c < floor)
    if deficit and not unassigned:  # one each for those below floor, from those above it
        donors = in_turn((r for r in movable if counts[r] > floor), gives)
        movers += donors[:deficit]
    return frozenset(movers)
