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
"""

from __future__ import annotations

from collections.abc import Mapping


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


def readers_with_moves(counts: Mapping[str, int], unassigned: int) -> frozenset[str]:
    """The readers (of ``counts``: reader -> segments owned) for which :func:`acquire_count`
    or :func:`release_count` is not zero: those a change leaving the group in this state must
    wake. The others would move nothing. O(R), where asking each reader is O(R^2)."""
    floor, ceil = fair_share(sum(counts.values()) + unassigned, len(counts))
    starving = deficit = 0
    for c in counts.values():
        if c < floor:
            starving += 1
            deficit += floor - c
    movers = []
    for reader, owned in counts.items():
        if owned > ceil or (owned > floor and unassigned == 0 and deficit):
            movers.append(reader)  # releases
        elif unassigned and (owned < floor or (not starving and owned < ceil)):
            movers.append(reader)  # acquires
    return frozenset(movers)
