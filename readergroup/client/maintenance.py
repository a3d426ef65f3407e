"""Group maintenance off the reading thread: the hand-out gate and the maintenance thread.

Like aiokafka's coordinator beside its fetcher, each reader runs its group maintenance
(refresh, rebalance, commits, completion of sealed segments, checkpoint acknowledgements) on a
**maintenance thread** of its own, so a read call never waits on a group round trip and the
group is maintained while the application holds events without reading (a slow handler, a
full ``run()`` queue). Three threads share one reader:

* **R**, the reading thread (the application's read calls): hands events out, fetches data;
* **M**, the maintenance thread (:func:`maintain_in_background`): every group round trip;
* **H**, the heartbeat thread (:mod:`~readergroup.client.group_session`): liveness, fencing.

What they share, and how
------------------------
* The **segment table** (the fetcher's owned segments, their buffers and positions) is guarded
  by a :class:`HandOutGate`: its ``lock`` (held by R for the local work of a read call's slow
  path, never across a blocking wait; by M only for local steps, never across a round trip),
  plus the fast path's ``busy`` flag. R's fast path takes no lock: it sets ``busy``, checks the
  session's ``quiet_until`` (the *open* window), hands out, clears ``busy``. M changes the
  table only inside :meth:`HandOutGate.closed`: it takes the lock, shuts the window
  (``quiet_until = 0``), then waits for ``busy`` to clear. Under the GIL these stores and loads
  are sequentially consistent, so (Dekker) either R's check saw the window shut and it takes
  the slow path (and so the lock), or M waits until R's hand-out is over. Only R's slow path
  reopens the window, under the lock: never while M holds it.
* The **mailbox** R checks once per call (three flags, O(1) on the fast path): the open
  window, ``fenced``, and the fetcher's pending ``errors``. M posts to it: a checkpoint to hand
  out (window shut), an error a read call must raise (appended to ``errors``), fencing. R posts
  to M with flags and a wake-up (``wake``): the state logs woke a fetch (group or streams
  dirty), the application moved past a checkpoint handed out (its acknowledgement is due).
* **Group round trips** (M's rounds, an explicit ``commit()``, ``close()``, ``rejoin()``) are
  serialized by the session's group lock (taken before the gate's lock, never after).

Transitions of an owned segment
-------------------------------
Every decision about what may be handed out is the reader's state machine's
(:class:`~readergroup.core.reader_machine.ReaderMachine`, sans-IO: its module doc lists every
transition and rule); this module and :mod:`~readergroup.client.group_session` only carry its
outputs out. The machine is changed only under the gate's lock; a change that takes a segment
out of hand-out is made inside :meth:`HandOutGate.closed`, and the fetcher's rotation (what
R's hand-out visits) follows the machine's ``SERVING`` segments there.

* *adopt* (M): the group gives this reader a segment (acquired, or handed back). M prepares it
  (the stream's metadata read outside any lock) and adds it inside ``closed``: handed out at
  once without listeners; with listeners, held until R's next read call has called
  ``on_segments_acquired``.
* *release* (fair share; M decides, R lets go): on the state just refreshed, M picks the
  segments above share (those already on their way out, then those of which nothing is with
  the application, then the newest) and, inside ``closed``, stops handing them out: from then
  on R hands out nothing of them. The release is sent (by M, allowing only those segments:
  ``only_listed``) once the application moved past every event of them that was handed out,
  that is at once if nothing of them was with it and no listener is to be told, else after
  R's next read call (which calls ``on_segments_released`` first: a commit there lands).
  Positions: *consumed* in auto mode (everything handed out, by then), the committed one in
  manual mode. A release whose outcome is unknown (the round trip failed) drops the segment:
  the next round adopts whatever the group still gives this reader, at its committed position.
* *complete*: a segment read to its final tail, consumed, with nothing buffered or pending is
  completed by a round trip, then taken out inside ``closed`` (listeners hear of it as
  released at R's next read call).
* *taken away* (a reset, another's move seen in the state) and *removed* (declared offline,
  session expired: seen by M's refresh, by H, or by R's own lease check): out of the table
  inside ``closed``; R's next read call tells ``on_segments_lost`` and, when removed, raises
  :class:`~readergroup.core.errors.ReaderNotInGroupError`.
* *R's fetch*: R computes what to read under the lock, releases it for the blocking wait, takes
  it back and applies each segment's reply only if that segment is still the same object in
  the table at the same fetch position (otherwise the reply is stale and dropped).

Checkpoints and removals within ``group_refresh_time``: a fetch of R that waits on the group's
wake streams is woken by them; when none has within ``group_refresh_time`` (R is handing out
buffered events, or the application is not reading), M reads the group log itself. A
checkpoint found there is handed out by R's next read call before any further event; R's
next call after that acknowledges it (M sends it). No segment is released or completed while a
checkpoint awaits this reader.

Guarantees: a read call with buffered events returns them without a group round trip; the
group is maintained whatever R does (blocked in the application, or in a fetch); nothing of a
segment is handed out once the reader decided to release it or learned it lost it, and a
release lands only where the application moved past (a graceful rebalance hands out nothing
twice); auto commits and releases use consumed positions only; rebalance listeners are called
on R inside a read call (or on the thread that closes the reader), never under the gate's lock.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from readergroup.core.calls import Steps, call
from readergroup.core.errors import (
    ReaderGroupError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
)

logger = logging.getLogger(__name__)

SPIN = 0.0002
"""Seconds M sleeps while waiting for R's fast path to finish a hand-out (microseconds of work;
longer only when R is preempted)."""

MAX_BACKOFF = 1.0
"""Cap (seconds) of the jittered backoff between failed maintenance rounds."""


class HandOutGate:
    """Mutual exclusion between R's hand-out and M's changes to the segment table (see the
    module doc). ``shut`` closes the fast path's window (sets the session's ``quiet_until`` to
    0)."""

    __slots__ = ("_shut", "busy", "lock")

    def __init__(self, shut: Callable[[], None]) -> None:
        self.lock = threading.RLock()
        self.busy = False
        """R is in a fast-path hand-out (set before it checks the window, cleared after)."""
        self._shut = shut

    @contextmanager
    def closed(self) -> Iterator[None]:
        """Hold the lock with the window shut and no fast-path hand-out under way: the table
        may change. (From R's slow path too: ``busy`` is clear there.)"""
        with self.lock:
            self._shut()
            while self.busy:
                time.sleep(SPIN)
            yield

    @contextmanager
    def released(self) -> Iterator[None]:
        """Let go of the lock (held once by R's slow path) for a blocking wait."""
        self.lock.release()
        try:
            yield
        finally:
            self.lock.acquire()


class Maintained(Protocol):
    """What the maintenance thread runs: a group session."""

    reader_id: str
    gone: bool
    closed: bool

    @property
    def fenced(self) -> str | None: ...

    def maintenance_due_in(self) -> float: ...

    def maintain_steps(self) -> Steps[bool]: ...

    def post_error(self, error: BaseException) -> None: ...


class Signal(Protocol):
    def is_set(self) -> bool: ...

    def clear(self) -> None: ...


def maintenance_steps(
    session: Maintained, wake: Signal, stop: Signal, rng: random.Random
) -> Steps[None]:
    """M's loop, as call steps (:mod:`readergroup.core.calls`: a thread drives them blocking,
    an asyncio task awaiting): a round whenever R or H posts work (``wake``: waited on by the
    driver's ``wait_wake``) or an interval is due, until ``stop`` is set or the reader is
    fenced, closed or its group deleted. A failed round is reported to R (raised by its next
    read call) and retried after a jittered backoff (the driver's ``pause``, cut short by
    ``stop``); so is a round that could not reach Redis (not reported: reads go on with what is
    buffered, and the lease check fences the reader if the outage outlasts the session)."""
    failures = 0
    while not stop.is_set():
        if failures:
            delay = rng.uniform(0, min(MAX_BACKOFF, 0.05 * 2 ** min(failures, 5)))
            yield from call("stopped_within", delay)
        else:
            yield from call("wait_wake", session.maintenance_due_in())
        wake.clear()
        if stop.is_set() or session.closed or session.gone or session.fenced is not None:
            return
        try:
            failures = 0 if (yield from session.maintain_steps()) else failures + 1
        except (ReaderNotInGroupError, ReaderGroupNotFoundError):
            return  # fenced or deleted: R raises it on its next call
        except ReaderGroupError as exc:
            failures += 1
            logger.warning(
                "reader %r: group maintenance failed; retrying", session.reader_id, exc_info=exc
            )
            session.post_error(exc)
        except Exception as exc:  # a bug must not silently end the group's maintenance
            failures += 1
            logger.warning(
                "reader %r: group maintenance failed unexpectedly; retrying",
                session.reader_id,
                exc_info=exc,
            )
            session.post_error(exc)
