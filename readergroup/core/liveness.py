"""When a member may judge the others' sessions expired. Pure: fed each heartbeat reply.

Heartbeats are stamped by the server's clock and judged on it, which is sound while the
heartbeat hash keeps every beat. Two situations break that, and in both every member looks
silent to the first one that gets through:

* **the hash lost beats**: a failover promoted a replica that had not received the latest ones.
  Under Sentinel the old primary keeps taking writes for several seconds after the promotion
  (until the Sentinels turn it into a replica), so the promoted replica's beats can be older
  than a whole session although every reader kept beating;
* **nobody could beat**: an outage (a failover, a restart) longer than the session timeout.

A member detects either from the replies themselves: a beat older than one it saw before under
the same generation (the hash went back), or its own previous beat older than a session (it was
cut off, so others probably were too). It then removes nobody for one session timeout on the
answering server's clock: every live member gets one session to beat again, so only readers
that are really gone are removed (one session later than otherwise).

>>> guard = ExpiryGuard(session_timeout_ms=1_000)
>>> guard.observe("a", 10_000, {"a": (1, 10_000), "b": (2, 9_900)})
True
>>> guard.observe("a", 10_300, {"a": (1, 10_300), "b": (2, 9_000)})   # b's beat went back
False
>>> guard.observe("a", 11_299, {"a": (1, 11_299), "b": (2, 9_000)})   # still in the grace
False
>>> guard.observe("a", 11_300, {"a": (1, 11_300), "b": (2, 9_000)})   # b had its session
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class ExpiryGuard:
    """Tracks the heartbeats one member has seen; see the module doc."""

    session_timeout_ms: int
    grace_until_ms: int | None = None
    """Server time before which this member removes nobody (``None``: no grace running)."""
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)
    _my_last_ms: int | None = None

    def observe(
        self,
        me: str,
        now_ms: int,
        beats: Mapping[str, tuple[int, int]] | None,
        *,
        own_lost: bool = False,
    ) -> bool:
        """Record the reply to ``me``'s heartbeat (``beats``: reader -> (generation, ms), with
        ``me``'s just written at ``now_ms``; ``None`` when the reply listed none; ``own_lost``:
        the store lost ``me``'s own previous beat, see :meth:`lost`); return whether expiries
        may be judged now."""
        went_back = beats is not None and self.went_back(beats)
        if own_lost or went_back or self.was_cut_off(now_ms):
            self.grace_until_ms = now_ms + self.session_timeout_ms
        if own_lost:
            self._seen = {}  # beats seen before the loss prove nothing more: the grace runs
        if beats is not None:
            self._seen = dict(beats)
        self._my_last_ms = now_ms
        if self.grace_until_ms is not None and now_ms >= self.grace_until_ms:
            self.grace_until_ms = None
        return self.grace_until_ms is None

    def went_back(self, beats: Mapping[str, tuple[int, int]]) -> bool:
        """Whether some reader's beat is older than the one seen before, same generation (a
        beat that vanished may have been forgotten on purpose: not counted)."""
        for reader_id, (generation, ms) in beats.items():
            seen = self._seen.get(reader_id)
            if seen is not None and seen[0] == generation and ms < seen[1]:
                return True
        return False

    def lost(self, generation: int, before: tuple[int, int] | None) -> bool:
        """Whether the store lost this member's own previous beat: its entry as stored before
        this beat (``before``) is missing, or of its generation and older than the beat it last
        wrote. Replicas apply writes in order, so a failover that lost any beat this member saw
        before its own latest beat lost that beat too: every member sees the loss in its own
        entry, without reading the others'.

        >>> guard = ExpiryGuard(session_timeout_ms=1_000)
        >>> guard.observe("a", 10_000, None)
        True
        >>> guard.lost(1, (1, 10_000)), guard.lost(1, (1, 9_000)), guard.lost(1, None)
        (False, True, True)
        """
        if self._my_last_ms is None:
            return False
        return before is None or (before[0] == generation and before[1] < self._my_last_ms)

    def was_cut_off(self, now_ms: int) -> bool:
        """Whether this member's own previous beat is more than a session old."""
        return self._my_last_ms is not None and now_ms - self._my_last_ms > self.session_timeout_ms
