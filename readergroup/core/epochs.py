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


def diverged_at(read: Epochs, history: Epochs, position: int) -> int | None:
    """The first offset below ``position`` that a reader read and the log no longer has, or
    ``None`` when the log still holds everything it read.

    ``read``: each epoch the reader read and the first offset it read under it, in reading
    order; it read every offset from the first pair's up to ``position``. ``history``: the
    log's epochs and the offsets they begin at, oldest first."""
    begins = dict(history)
    ends = {epoch: end for (epoch, _), (_, end) in pairwise(history)}
    for index, (epoch, first) in enumerate(read):
        until = read[index + 1][1] if index + 1 < len(read) else position
        if until <= first:
            continue
        if epoch not in begins or begins[epoch] > first:
            return first
        end = ends.get(epoch)
        if end is not None and end < until:
            return max(end, first)
    return None
