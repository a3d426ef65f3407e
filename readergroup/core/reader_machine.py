"""The reader's hand-out state machine: what one reader may hand out, and when. Sans-IO.

Like h11's connection object, :class:`ReaderMachine` is pure: no I/O, no threads, no clock.
Its inputs are what happens to the reader (the application's read calls, decisions taken by
the reader's group maintenance on a freshly read group state, round trips that landed,
rebalance listeners that returned, close) and its outputs are what the driver must do next
(the methods' return values and :class:`ReadStep`). Every transition of the reader's
hand-out lives here; drivers (the threaded :class:`~readergroup.client.reader.EventStreamReader`,
and any other) only carry the outputs out. The explorer
(:mod:`tests.support.reader_explorer`) runs it under every interleaving of those inputs.

**The application moves past events by calling again.** An event handed out by a read call is
the application's until its *next* read call (commit-on-get): only then has it surely been
processed. So anything that must happen after the application is done with a segment's
events (giving the segment up, acknowledging a checkpoint) waits for a read call; anything the
application must hear first (a checkpoint, listeners, a removal) happens inside one.

Segments (one phase per owned segment; only ``SERVING`` segments that the application has not
paused are handed out; a paused segment stays owned and is released like any other)::

    adopt ─┬─(no listeners)──────────────────────────────────────────────► SERVING
           └─► ACQUIRED ──read call: on_segments_acquired returned──────► SERVING
    SERVING ──release decided──► RELEASING
    RELEASING ──read call (the application moved past what it was handed);
                on_segments_released returned (a commit in it lands)────► RELEASABLE
    RELEASING ──decided while nothing was with the application and no listener────► RELEASABLE
    RELEASABLE ──the release landed────────────────────────────────────► (forgotten)
    RELEASABLE ──not released, still this reader's────► ACQUIRED (listeners) / SERVING
    RELEASING ──no longer to release (the application was not told)────► SERVING
    any ──lost (taken away, reset, removed)──► (forgotten; on_segments_lost at the next read)

Checkpoint (one at a time)::

    NONE ──seen in the group state──► DUE ──read call: handed out first──► HANDED_OUT
    HANDED_OUT ──next read call (or leaving)──► ACK_DUE ──acknowledged──► NONE

Membership::

    MEMBER ──removed (declared offline, session expired, group deleted, fenced)──► REMOVED
    any ──close──► CLOSED

Rules (each checked by the explorer, each with a mutant it catches):

1. No event of a segment is handed out once the reader decided or learned that it releases
   or loses it (the segment leaves ``SERVING`` at that moment), and a release is sent only
   once the application moved past every event of it that was handed out: the next owner
   starts exactly where this one's application stopped (0 duplicates, per-key order kept).
2. A checkpoint seen in the state is handed out by the first read call after that, before any
   further event.
3. A removed reader's every read call raises; it hands out nothing more.
4. ``on_segments_released`` is called before the release is sent (segments still owned, so a
   commit made in it lands); ``on_segments_acquired`` returns before any event of those
   segments is handed out. Both are called by the reading thread, inside a read call.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from readergroup.core.group_state import SegKey


class SegmentPhase(Enum):
    ACQUIRED = "acquired"
    """Adopted; ``on_segments_acquired`` has not returned yet: nothing is handed out."""
    SERVING = "serving"
    """Handed out."""
    RELEASING = "releasing"
    """To be given up: nothing more is handed out; waits for the application to move past
    what it was handed, and for ``on_segments_released``."""
    RELEASABLE = "releasable"
    """The release may be sent."""


class CheckpointPhase(Enum):
    NONE = "none"
    DUE = "due"
    HANDED_OUT = "handed out"
    ACK_DUE = "ack due"


@dataclass(frozen=True, slots=True)
class ReadStep:
    """What a read call must do, in this order, before it hands out any event.

    ``lost``: call ``on_segments_lost`` (or ``on_segments_released``) for these;
    ``completed``: call ``on_segments_released`` for these (read to their end); ``removed``:
    then raise :class:`~readergroup.core.errors.ReaderNotInGroupError` with this text;
    ``closed``: raise the closed error; ``released``: call ``on_segments_released`` and then
    :meth:`ReaderMachine.released_heard`; ``acquired``: call ``on_segments_acquired`` and then
    :meth:`ReaderMachine.acquired_heard`; ``checkpoint``: hand this checkpoint out (and
    nothing else) through :meth:`ReaderMachine.hand_out_checkpoint`; ``ack``: a checkpoint
    the application moved past is due to be acknowledged (the maintenance sends it)."""

    lost: tuple[SegKey, ...] = ()
    completed: tuple[SegKey, ...] = ()
    removed: str | None = None
    closed: bool = False
    released: tuple[SegKey, ...] = ()
    acquired: tuple[SegKey, ...] = ()
    checkpoint: str | None = None
    ack: bool = False
    freed: tuple[SegKey, ...] = ()
    """Segments this call made releasable (no listener to tell): their releases may be sent."""


class ReaderMachine:
    """One reader's hand-out state (see the module doc for every transition)."""

    def __init__(self, reader_id: str, *, listeners: bool = False) -> None:
        self.reader_id = reader_id
        self.listeners = listeners
        """Whether rebalance listeners are registered (without any, nothing waits for them)."""
        self.segments: dict[SegKey, SegmentPhase] = {}
        self.checkpoint: str | None = None
        self.checkpoint_phase = CheckpointPhase.NONE
        self.checkpoint_positions: dict[SegKey, int] = {}
        """Where the checkpoint was handed out (set by :meth:`hand_out_checkpoint`)."""
        self.removed: str | None = None
        self.closed = False
        self.paused: set[SegKey] = set()
        """Segments the application paused (Kafka's ``pause``): owned, not handed out."""
        self._lost: list[SegKey] = []
        """Lost segments the application has not heard of yet."""
        self._completed: list[SegKey] = []
        """Completed segments the application has not heard of yet."""

    # -- queries ------------------------------------------------------------------------------
    def phase(self, key: SegKey) -> SegmentPhase | None:
        return self.segments.get(key)

    def serving(self, key: SegKey) -> bool:
        """Whether ``key``'s events are handed out (serving and not paused)."""
        return self.segments.get(key) is SegmentPhase.SERVING and key not in self.paused

    def in_phase(self, phase: SegmentPhase) -> list[SegKey]:
        return [k for k, p in self.segments.items() if p is phase]

    @property
    def needs_reader(self) -> bool:
        """Whether something awaits the reading thread's next read call (a driver keeps any
        fast path shut while it does)."""
        return (
            self.removed is not None
            or self.closed
            or bool(self._lost)
            or bool(self._completed)
            or self.checkpoint_phase in (CheckpointPhase.DUE, CheckpointPhase.HANDED_OUT)
            or any(
                p in (SegmentPhase.ACQUIRED, SegmentPhase.RELEASING) for p in self.segments.values()
            )
        )

    @property
    def checkpoint_busy(self) -> bool:
        """A checkpoint awaits this reader or its acknowledgement: nothing is to be released
        or completed until it is done."""
        return self.checkpoint_phase is not CheckpointPhase.NONE

    @property
    def ack_due(self) -> tuple[str, dict[SegKey, int]] | None:
        """The checkpoint to acknowledge now, with where it was handed out."""
        if self.checkpoint_phase is CheckpointPhase.ACK_DUE and self.checkpoint is not None:
            return self.checkpoint, dict(self.checkpoint_positions)
        return None

    # -- inputs from the group maintenance ----------------------------------------------------
    def adopt(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """The group gives this reader ``keys``; returns those to hand out at once (the others
        wait for ``on_segments_acquired`` at the next read call)."""
        serve = []
        for key in keys:
            if key in self.segments:
                continue
            if self.listeners:
                self.segments[key] = SegmentPhase.ACQUIRED
            else:
                self.segments[key] = SegmentPhase.SERVING
                serve.append(key)
        return serve

    def pause(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """The application pauses ``keys`` (owned ones); returns those to stop handing out."""
        held = []
        for key in keys:
            if key in self.segments and key not in self.paused:
                if self.serving(key):
                    held.append(key)
                self.paused.add(key)
        return held

    def resume(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """The application resumes ``keys``; returns those to hand out again."""
        serve = []
        for key in keys:
            if key in self.paused:
                self.paused.discard(key)
                if self.serving(key):
                    serve.append(key)
        return serve

    def want_release(
        self, keys: Iterable[SegKey], *, moved_past: Collection[SegKey]
    ) -> tuple[list[SegKey], list[SegKey]]:
        """Release ``keys`` (serving ones; others are left as they are). ``moved_past``: those
        of which nothing is with the application now. Returns ``(held, releasable)``: the
        segments to stop handing out now, and those whose release may be sent at once."""
        held, releasable = [], []
        for key in keys:
            if self.segments.get(key) is not SegmentPhase.SERVING:
                continue
            held.append(key)
            if key in moved_past and not self.listeners:
                self.segments[key] = SegmentPhase.RELEASABLE
                releasable.append(key)
            else:
                self.segments[key] = SegmentPhase.RELEASING
        return held, releasable

    def keep(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """``keys`` are no longer to be released (the group's state changed before the release
        was sent); returns those to hand out again at once (the application had not been told
        of the release; the others go through ``on_segments_acquired`` again)."""
        serve = []
        for key in keys:
            phase = self.segments.get(key)
            if phase is SegmentPhase.RELEASING or (
                phase is SegmentPhase.RELEASABLE and not self.listeners
            ):
                self.segments[key] = SegmentPhase.SERVING
                if key not in self.paused:
                    serve.append(key)
            elif phase is SegmentPhase.RELEASABLE:
                self.segments[key] = SegmentPhase.ACQUIRED
        return serve

    def released(self, keys: Iterable[SegKey]) -> None:
        """The release of ``keys`` landed (or its outcome is unknown: the next look at the
        group adopts whatever is still this reader's): they are forgotten."""
        for key in keys:
            self.segments.pop(key, None)
            self.paused.discard(key)

    def lose(self, keys: Iterable[SegKey]) -> None:
        """``keys`` are no longer this reader's (taken away by a reset or another's move,
        completed, or the reader was fenced): nothing more of them is handed out."""
        for key in keys:
            phase = self.segments.pop(key, None)
            self.paused.discard(key)
            if phase is not None and phase is not SegmentPhase.RELEASABLE:
                self._lost.append(key)

    def complete(self, keys: Iterable[SegKey]) -> None:
        """``keys`` were read to their end and completed: forgotten (nothing was left); the
        application hears of them at its next read call."""
        for key in keys:
            self.paused.discard(key)
            if self.segments.pop(key, None) is not None:
                self._completed.append(key)

    def remove(self, reason: str) -> list[SegKey]:
        """The reader is no longer a member (removed, expired, fenced, group deleted): every
        segment is lost; returns them. The first reason is kept."""
        if self.removed is None:
            self.removed = reason
        lost = list(self.segments)
        self.lose(lost)
        self.checkpoint, self.checkpoint_phase = None, CheckpointPhase.NONE
        return lost

    def checkpoint_seen(self, name: str) -> bool:
        """A checkpoint awaits this reader in the group's state; whether it was queued (one at
        a time: a later one is taken once this one is acknowledged)."""
        if self.checkpoint_phase is not CheckpointPhase.NONE or self.removed is not None:
            return False
        self.checkpoint, self.checkpoint_phase = name, CheckpointPhase.DUE
        return True

    def acknowledged(self) -> None:
        """The checkpoint's acknowledgement was sent (or failed for good)."""
        if self.checkpoint_phase is CheckpointPhase.ACK_DUE:
            self.checkpoint, self.checkpoint_phase = None, CheckpointPhase.NONE
            self.checkpoint_positions = {}

    def reset(self) -> list[SegKey]:
        """The group was reset: every segment and the checkpoint are dropped (lost: they belong
        to the old generation); returns the segments."""
        lost = list(self.segments)
        self.lose(lost)
        self.checkpoint, self.checkpoint_phase = None, CheckpointPhase.NONE
        self.checkpoint_positions = {}
        return lost

    # -- inputs from the reading thread -------------------------------------------------------
    def read_call(self) -> ReadStep:
        """A read call begins: the application moved past every event handed out before it.
        Returns what the call must do before handing out any event."""
        lost, completed = tuple(self._lost), tuple(self._completed)
        self._lost.clear()
        self._completed.clear()
        if self.closed:
            return ReadStep(lost=lost, completed=completed, closed=True)
        if self.removed is not None:
            return ReadStep(lost=lost, completed=completed, removed=self.removed)
        ack = self.checkpoint_phase is CheckpointPhase.HANDED_OUT
        if ack:
            self.checkpoint_phase = CheckpointPhase.ACK_DUE
        released = tuple(self.in_phase(SegmentPhase.RELEASING))
        freed: tuple[SegKey, ...] = ()
        if not self.listeners:
            for key in released:
                self.segments[key] = SegmentPhase.RELEASABLE
            released, freed = (), released
        acquired = tuple(self.in_phase(SegmentPhase.ACQUIRED))
        due = self.checkpoint if self.checkpoint_phase is CheckpointPhase.DUE else None
        return ReadStep(lost, completed, None, False, released, acquired, due, ack, freed)

    def released_heard(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """``on_segments_released`` returned (or raised) for ``keys``: their releases may be
        sent; returns those still to release."""
        ready = []
        for key in keys:
            if self.segments.get(key) is SegmentPhase.RELEASING:
                self.segments[key] = SegmentPhase.RELEASABLE
                ready.append(key)
        return ready

    def acquired_heard(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """``on_segments_acquired`` returned (or raised) for ``keys``: returns those to hand
        out from now on."""
        serve = []
        for key in keys:
            if self.segments.get(key) is SegmentPhase.ACQUIRED:
                self.segments[key] = SegmentPhase.SERVING
                if key not in self.paused:
                    serve.append(key)
        return serve

    def hand_out_checkpoint(self, positions: Mapping[SegKey, int]) -> str:
        """The read call hands the due checkpoint out (and nothing else) at ``positions`` (of
        the events handed out before it)."""
        assert self.checkpoint is not None and self.checkpoint_phase is CheckpointPhase.DUE
        self.checkpoint_phase = CheckpointPhase.HANDED_OUT
        self.checkpoint_positions = dict(positions)
        return self.checkpoint

    def leaving(self) -> None:
        """The reader leaves: a checkpoint handed out is acknowledged now, as the next read
        call would (the application moved past it by closing)."""
        if self.checkpoint_phase is CheckpointPhase.HANDED_OUT:
            self.checkpoint_phase = CheckpointPhase.ACK_DUE

    def close(self) -> list[SegKey]:
        """The application closes the reader: nothing more is handed out; returns the segments
        it had (the driver gives them back as it leaves)."""
        self.closed = True
        owned = list(self.segments)
        self.segments.clear()
        self.paused.clear()
        return owned

    def rejoined(self) -> None:
        """A new incarnation after a removal: starts with nothing (lost segments the
        application has not heard of yet are still told at its next read call)."""
        self.removed = None
        self.segments.clear()
        self.paused.clear()
        self.checkpoint, self.checkpoint_phase = None, CheckpointPhase.NONE
        self.checkpoint_positions = {}
