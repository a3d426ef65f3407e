"""What a writer keeps of its acknowledged batches, to put them back where a failover lost them.

With ``acks=leader`` (or more replicas than ``replicas=N`` waits for, under a forced Sentinel
failover), a promoted replica may lack the last batches the old primary acknowledged. The
writer finds out at its next append to such a segment: the stored tail is behind the highest
tail it saw acknowledged there (``append_events.lua`` replies ``REGRESSED`` to a batch sent
with ``report_regression``). It then appends again, in order, the batches it still holds that
begin exactly at the stored tail and go on without a gap (its own events only: where another
writer's events were, the chain stops). Each goes back with its entry ids and fields
unchanged (:class:`~readergroup.storage.segment_records.Replay`), so readers that had read it
see the same log; the rest, if any, is recorded lost as before.

Kept: each batch acknowledged in the last ``window`` seconds, within ``max_bytes`` of payload
(oldest dropped first; the batches' own lists roughly double that in memory, and they are let
go at the next acknowledgement or put-back, not while the writer is idle). Pure apart from the
clock; the sender thread is its only user.

When it works, and when it does not (docs/guides/high-availability.md states the same):

* the put-back happens at the writer's next append to the segment: readers wait
  ``ReaderConfig.shrunk_log_grace`` (10 s) for a shorter log to fill before they report the
  loss, so a writer silent on that segment for longer has its events reported lost to readers
  that had read them, and delivered to them a second time after the report;
* the chain stops at another writer's events: the first writer of the segment to append after
  the failover records the rest of its own range lost, and with it other writers' events
  there, even if those writers still hold them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from readergroup.storage.segment_records import AppendBatch, Replay


@dataclass(frozen=True, slots=True)
class _Kept:
    batch: AppendBatch
    replay: Replay
    size: int
    at: float


class AcknowledgedBatches:
    """A writer's acknowledged batches of the last ``window`` seconds (at most ``max_bytes``
    of payload), per segment, to replay after a failover lost them.

    >>> from readergroup.storage.segment_records import AppendBatch
    >>> now = [0.0]
    >>> kept = AcknowledgedBatches(window=10.0, max_bytes=100, clock=lambda: now[0])
    >>> def batch(sequence: int, count: int) -> AppendBatch:
    ...     return AppendBatch("s", "t", 0, "w", sequence, count, [], 10)
    >>> kept.keep(batch(1, 5), first_offset=100, epoch=7, server_ms=1, created="1", size=10)
    >>> kept.keep(batch(2, 5), first_offset=105, epoch=7, server_ms=2, created="1", size=10)
    >>> # a gap before the third: another writer's events were at 110..114
    >>> kept.keep(batch(3, 5), first_offset=115, epoch=7, server_ms=3, created="1", size=10)
    >>> [(b.sequence, b.replay.first_offset) for b in kept.replays(0, tail=100, seen=120)]
    [(1, 100), (2, 105)]
    >>> kept.replays(0, tail=101, seen=120)  # nothing of its own begins at the stored tail
    []
    >>> now[0] = 11.0
    >>> kept.keep(batch(4, 5), first_offset=120, epoch=7, server_ms=4, created="1", size=10)
    >>> kept.replays(0, tail=100, seen=125)  # the first three are past the window
    []
    """

    def __init__(self, *, window: float, max_bytes: int, clock: Callable[[], float]) -> None:
        self._window = window
        self._max_bytes = max_bytes
        self._clock = clock
        self._kept: deque[_Kept] = deque()
        self._bytes = 0

    @property
    def enabled(self) -> bool:
        return self._window > 0 and self._max_bytes > 0

    def keep(
        self,
        batch: AppendBatch,
        *,
        first_offset: int,
        epoch: int,
        server_ms: int,
        created: str,
        size: int,
    ) -> None:
        """``batch`` was acknowledged at ``first_offset`` under ``epoch`` (server ms
        ``server_ms``) in the segment created at ``created``, ``size`` bytes of payload."""
        if not self.enabled:
            return
        now = self._clock()
        replay = Replay(first_offset, epoch, server_ms, created)
        self._kept.append(_Kept(batch, replay, size, now))
        self._bytes += size
        self._forget(now)

    def replays(self, segment: int, *, tail: int, seen: int) -> list[AppendBatch]:
        """The kept batches of ``segment`` that chain from ``tail`` (the stored tail) towards
        ``seen`` (the highest tail acknowledged), each beginning where the one before ends,
        ready to append again (:attr:`AppendBatch.replay` set, no regression check)."""
        self._forget(self._clock())
        by_first = {
            kept.replay.first_offset: kept
            for kept in self._kept
            if kept.batch.segment == segment and kept.replay.first_offset < seen
        }
        out: list[AppendBatch] = []
        at = tail
        while (kept := by_first.get(at)) is not None:
            out.append(
                replace(
                    kept.batch,
                    seen_tail=0,
                    seen_created="",
                    report_regression=False,
                    replay=kept.replay,
                )
            )
            at += kept.batch.count
        return out

    def _forget(self, now: float) -> None:
        kept = self._kept
        while kept and (kept[0].at < now - self._window or self._bytes > self._max_bytes):
            self._bytes -= kept.popleft().size
