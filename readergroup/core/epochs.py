"""Where a segment's log diverged from what a reader read: Kafka's log-truncation detection
(KIP-320) on the epochs of ``epoch.lua``. Pure.

Every segment entry carries the segment's epoch when it was appended (a new epoch begins when
the server appending changed: a failover, a restart). The log keeps its epochs' first offsets,
and an epoch begun on a primary that was lost later is not in the surviving log's history (its
number is never given again). A reader remembers the epochs it read and where it began reading
each; when it meets an entry of an epoch it did not expect, it compares:

* an epoch it read that the log's history ends earlier (the next epoch begins before where the
  reader went on reading) or does not have at all: the offsets it read under that epoch from
  there on are gone, and the entries now at them are new events it must not skip;
* otherwise the log only went on under a new epoch (a restart or a failover that lost nothing
  this reader had read).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

Epochs = Sequence[tuple[int, int]]
"""``(epoch, offset)`` pairs, oldest first."""


def diverged_at(
    read: Epochs, history: Epochs, position: int, tail: int | None = None
) -> int | None:
    """The first offset below ``position`` that a reader read and the log no longer has, or
    ``None`` when the log still holds everything it read.

    ``read``: each epoch the reader read and the first offset it read under it, in reading
    order; it read every offset from the first pair's up to ``position``. ``history``: the
    log's epochs and the offsets they begin at, oldest first. ``tail``: the log's tail, where
    its last epoch ends (``None``: not known, the log reaches ``position``).

    An epoch the log does not have diverged where the reader began reading it, or earlier:
    where the log's last epoch before it ends (Kafka's OffsetsForLeaderEpoch)."""
    begins = dict(history)
    ends = {epoch: end for (epoch, _), (_, end) in pairwise(history)}
    if tail is not None and history:
        ends[history[-1][0]] = tail
    for index, (epoch, first) in enumerate(read):
        until = read[index + 1][1] if index + 1 < len(read) else position
        if until <= first:
            continue
        if epoch not in begins:
            below = end_of_epoch(epoch, history, tail)
            return first if below is None else min(first, below)
        if begins[epoch] > first:
            return first
        end = ends.get(epoch)
        if end is not None and end < until:
            return max(end, first)
    return None


def end_of_epoch(epoch: int, history: Epochs, tail: int | None) -> int | None:
    """Where the log's last epoch at or before ``epoch`` ends: where the next one begins, or
    ``tail`` for its last (``None``: not known). Epoch numbers only grow along a log, so an
    offset read under ``epoch`` past this end is not in the log (KIP-320's end offset for a
    leader epoch)."""
    found: int | None = None
    for index, (number, _) in enumerate(history):
        if number > epoch:
            break
        found = index
    if found is None:
        return 0
    return history[found + 1][1] if found + 1 < len(history) else tail


def committed_divergence(epoch: int, history: Epochs, tail: int, position: int) -> int | None:
    """Where the log diverged below a position ``position`` committed after reading the
    offset before it under ``epoch``, or ``None`` when the log still holds it: the end of the
    log's last epoch at or before ``epoch``, if that is below ``position`` (KIP-320)."""
    end = end_of_epoch(epoch, history, tail)
    return end if end is not None and end < position else None


def epoch_at(history: Epochs, offset: int) -> tuple[int, int]:
    """The log's epoch holding ``offset`` and where it begins: its last epoch beginning at or
    before ``offset``."""
    found = _begun_at(history, offset)
    if found is not None:
        return found
    return history[0] if history else (0, 0)


def read_epoch(read: Epochs, offset: int) -> int:
    """The epoch a reader read ``offset`` under (``read`` as for :func:`diverged_at`), or
    ``-1`` when it read nothing at or before it."""
    found = _begun_at(read, offset)
    return -1 if found is None else found[0]


def _begun_at(epochs: Epochs, offset: int) -> tuple[int, int] | None:
    """The last of ``epochs`` (oldest first) beginning at or before ``offset``, or ``None``."""
    found = None
    for pair in epochs:
        if pair[1] > offset:
            break
        found = pair
    return found
