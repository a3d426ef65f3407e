"""Exhaustive small-scope explorer of the reader's hand-out state machine
(:mod:`readergroup.core.reader_machine`).

Every interleaving, breadth first up to ``depth`` steps, of what can happen to one reader: the
application's read calls (each hands out the checkpoint or one buffered event of a serving
segment, after what the machine says comes first), the maintenance deciding to release a
segment (with or without anything still with the application), sending a release, the state
no longer asking for one, the group handing a segment to this reader, another reader
taking a released segment over and reading on from where it was released, a checkpoint
appearing in the state and its acknowledgement landing, the reader's removal, and close; with
and without rebalance listeners. The steps drive the real :class:`ReaderMachine` exactly as
the threaded driver (``readergroup/client/group_session.py``) does; the segments, the other
reader and the application are a model. After every step the rules of the machine's module
doc are checked:

1. ``handed-after-release``: no event of a segment is handed out after the reader decided to
   release it or learned it lost it; ``duplicate``: after a release, the other reader never
   hands out an event this reader handed out (a release is sent only at a position the
   application moved past). After a loss (a reset, a removal) events after the last commit
   come again by design (at-least-once): the model forgets what was handed out then.
2. ``late-checkpoint``: a read call after the state showed a checkpoint hands it out before
   any event.
3. ``removed-reads``: a removed reader's read calls raise and hand out nothing.
4. ``listener-order``: ``on_segments_released`` is heard before the release is sent, and
   ``on_segments_acquired`` before any event of the segment is handed out.
5. ``handed-while-paused``: nothing of a segment the application paused is handed out.

States are hashed on the machine's fields and the model's, so each is expanded once.
``python -m tests.support.reader_explorer --depth N`` runs it from the command line
(``make explore`` does).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from readergroup.core.reader_machine import ReaderMachine, SegmentPhase

A, B = ("x/s", 0), ("x/s", 1)
SEGMENTS = (A, B)
LENGTH = 3
"""Events per segment (offsets 0..LENGTH-1), all buffered."""


class RuleViolation(AssertionError):
    """A rule failed; the message names it and the trace that led there."""


@dataclass
class World:
    """The machine and the model around it (copied for every branch)."""

    machine: ReaderMachine
    listeners: bool
    returned: dict[Any, int] = field(default_factory=dict)
    """This reader's position per owned segment (after the last event handed out)."""
    consumed: dict[Any, int] = field(default_factory=dict)
    """Up to where the application moved past (commit-on-get)."""
    committed: dict[Any, int] = field(default_factory=dict)
    """The group's position per segment (where an owner starts)."""
    mine: set[Any] = field(default_factory=set)
    """Segments the group gives this reader."""
    other: dict[Any, int] = field(default_factory=dict)
    """Segments the other reader owns, with its position."""
    handed: set[tuple[Any, int]] = field(default_factory=set)
    """Every (segment, offset) this reader handed out."""
    decided: set[Any] = field(default_factory=set)
    """Segments this reader decided to release or learned it lost: nothing more of them."""
    paused: set[Any] = field(default_factory=set)
    """Segments the application paused."""
    heard_released: set[Any] = field(default_factory=set)
    heard_acquired: set[Any] = field(default_factory=set)
    checkpoint_seen: bool = False
    """The state showed a checkpoint the application has not been handed yet."""
    checkpoints_left: int = 1
    removed: bool = False

    def copy(self) -> World:
        machine = ReaderMachine(self.machine.reader_id, listeners=self.machine.listeners)
        machine.segments = dict(self.machine.segments)
        machine.checkpoint = self.machine.checkpoint
        machine.checkpoint_phase = self.machine.checkpoint_phase
        machine.checkpoint_positions = dict(self.machine.checkpoint_positions)
        machine.removed = self.machine.removed
        machine.closed = self.machine.closed
        machine.paused = set(self.machine.paused)
        machine._lost = list(self.machine._lost)
        machine._completed = list(self.machine._completed)
        return World(
            machine,
            self.listeners,
            dict(self.returned),
            dict(self.consumed),
            dict(self.committed),
            set(self.mine),
            dict(self.other),
            set(self.handed),
            set(self.decided),
            set(self.paused),
            set(self.heard_released),
            set(self.heard_acquired),
            self.checkpoint_seen,
            self.checkpoints_left,
            self.removed,
        )

    def key(self) -> tuple[Any, ...]:
        m = self.machine
        return (
            tuple(sorted((k, p.value) for k, p in m.segments.items())),
            m.checkpoint_phase.value,
            m.removed is not None,
            m.closed,
            tuple(sorted(m.paused)),
            tuple(sorted(m._lost)),
            tuple(sorted(m._completed)),
            tuple(sorted(self.returned.items())),
            tuple(sorted(self.consumed.items())),
            tuple(sorted(self.committed.items())),
            tuple(sorted(self.mine)),
            tuple(sorted(self.other.items())),
            tuple(sorted(self.handed)),
            tuple(sorted(self.decided)),
            tuple(sorted(self.paused)),
            tuple(sorted(self.heard_released)),
            tuple(sorted(self.heard_acquired)),
            self.checkpoint_seen,
            self.checkpoints_left,
            self.removed,
        )


def _violation(rule: str, trace: list[str], detail: str) -> RuleViolation:
    return RuleViolation(f"{rule}: {detail}; trace: {' -> '.join(trace)}")


# -- the steps (each returns False when it does not apply) -----------------------------------
def read_call(w: World, trace: list[str], pick: Any) -> bool:
    """A read call, as the driver's ``_serve`` makes it: the application moved past what it
    was handed; the machine's step (listeners, removal, checkpoint); then one event of the
    serving segment ``pick``."""
    m = w.machine
    if m.closed:
        return False
    for key in w.returned:
        w.consumed[key] = w.returned[key]
    step = m.read_call()
    if step.released:
        w.heard_released.update(step.released)
        m.released_heard(step.released)
    if step.acquired:
        w.heard_acquired.update(step.acquired)
        m.acquired_heard(step.acquired)
    if step.removed is not None or step.closed:
        return True  # raised: nothing handed out
    if w.removed:
        raise _violation("removed-reads", trace, "a removed reader's read call did not raise")
    if step.checkpoint is not None:
        m.hand_out_checkpoint(dict(w.returned))
        w.checkpoint_seen = False
        return True
    if w.checkpoint_seen:
        raise _violation("late-checkpoint", trace, "a read call skipped the due checkpoint")
    if pick is None:
        return True
    if not m.serving(pick) or w.returned.get(pick, LENGTH) >= LENGTH:
        return False
    offset = w.returned[pick]
    if pick in w.decided:
        raise _violation("handed-after-release", trace, f"{pick} offset {offset} handed out")
    if pick in w.paused:
        raise _violation("handed-while-paused", trace, f"{pick} offset {offset} handed out")
    if w.listeners and pick not in w.heard_acquired:
        raise _violation("listener-order", trace, f"{pick} handed out before acquired")
    w.handed.add((pick, offset))
    w.returned[pick] = offset + 1
    return True


def decide_release(w: World, trace: list[str], key: Any) -> bool:
    """The maintenance decides, on a fresh state, to give ``key`` back."""
    m = w.machine
    if m.removed is not None or m.closed or m.checkpoint_busy or not m.serving(key):
        return False
    moved_past = {key} if w.consumed.get(key) == w.returned.get(key) else set()
    held, _ = m.want_release([key], moved_past=moved_past)
    w.decided.update(held)
    return True


def send_release(w: World, trace: list[str], key: Any) -> bool:
    """The maintenance sends the release of a releasable segment (auto commit: at the
    position the application consumed); the other reader takes it over there."""
    m = w.machine
    if m.phase(key) is not SegmentPhase.RELEASABLE or m.removed is not None:
        return False
    if w.listeners and key not in w.heard_released:
        raise _violation("listener-order", trace, f"{key} released before it was heard")
    position = w.consumed[key]
    if position != w.returned[key]:
        raise _violation(
            "duplicate",
            trace,
            f"{key} released at {position} while the application holds up to {w.returned[key]}",
        )
    m.released([key])
    w.paused.discard(key)
    w.mine.discard(key)
    w.committed[key] = position
    w.other[key] = position
    del w.returned[key], w.consumed[key]
    return True


def keep(w: World, trace: list[str], key: Any) -> bool:
    """The state no longer asks for a release decided earlier (a reader left)."""
    m = w.machine
    if m.phase(key) is not SegmentPhase.RELEASING:
        return False
    m.keep([key])
    if m.phase(key) is SegmentPhase.SERVING:  # no longer on its way out (paused or not)
        w.decided.discard(key)
    return True


def acquire(w: World, trace: list[str], key: Any) -> bool:
    """The group gives ``key`` (unowned, or given back by the other reader at its position)."""
    m = w.machine
    if key in w.mine or m.removed is not None or m.closed or key in m.segments:
        return False
    start = w.other.pop(key, w.committed.get(key, 0))
    w.committed[key] = start
    w.mine.add(key)
    w.returned[key] = w.consumed[key] = start
    w.decided.discard(key)
    w.heard_acquired.discard(key)
    w.heard_released.discard(key)
    m.adopt([key])
    return True


def other_reads(w: World, trace: list[str], key: Any) -> bool:
    """The other reader hands out its next event of ``key``."""
    position = w.other.get(key)
    if position is None or position >= LENGTH:
        return False
    if (key, position) in w.handed:
        raise _violation("duplicate", trace, f"{key} offset {position} handed out twice")
    w.other[key] = position + 1
    return True


def lose(w: World, trace: list[str], key: Any) -> bool:
    """A reset takes ``key`` away (this reader learns it from the state)."""
    m = w.machine
    if key not in m.segments or m.removed is not None:
        return False
    m.lose([key])
    w.paused.discard(key)
    w.decided.add(key)
    w.mine.discard(key)
    w.handed = {h for h in w.handed if h[0] != key}  # after a loss, again from the commit
    return True


def pause(w: World, trace: list[str], key: Any) -> bool:
    """The application pauses ``key`` (it stays owned: released like any other)."""
    m = w.machine
    if key not in m.segments or key in m.paused:
        return False
    m.pause([key])
    w.paused.add(key)
    return True


def resume(w: World, trace: list[str], key: Any) -> bool:
    m = w.machine
    if key not in w.paused:
        return False
    m.resume([key])
    w.paused.discard(key)
    return True


def checkpoint(w: World, trace: list[str], _: Any) -> bool:
    """A checkpoint appears in the state the maintenance reads."""
    m = w.machine
    if w.checkpoints_left == 0 or m.removed is not None or m.closed:
        return False
    if not m.checkpoint_seen("cp"):
        return False
    w.checkpoints_left -= 1
    w.checkpoint_seen = True
    return True


def acknowledge(w: World, trace: list[str], _: Any) -> bool:
    m = w.machine
    if m.ack_due is None:
        return False
    m.acknowledged()
    return True


def remove(w: World, trace: list[str], _: Any) -> bool:
    m = w.machine
    if m.removed is not None or m.closed:
        return False
    w.decided.update(m.remove("removed"))
    w.paused.clear()
    w.handed.clear()  # after a loss, again from the commit (at-least-once)
    w.removed = True
    w.checkpoint_seen = False
    return True


def close(w: World, trace: list[str], _: Any) -> bool:
    m = w.machine
    if m.closed:
        return False
    w.decided.update(m.close())
    w.paused.clear()
    return True


STEPS: list[tuple[str, Callable[[World, list[str], Any], bool], tuple[Any, ...]]] = [
    ("read", read_call, (None, *SEGMENTS)),
    ("decide", decide_release, SEGMENTS),
    ("send", send_release, SEGMENTS),
    ("keep", keep, SEGMENTS),
    ("acquire", acquire, SEGMENTS),
    ("other", other_reads, SEGMENTS),
    ("lose", lose, SEGMENTS),
    ("pause", pause, SEGMENTS),
    ("resume", resume, SEGMENTS),
    ("checkpoint", checkpoint, (None,)),
    ("ack", acknowledge, (None,)),
    ("remove", remove, (None,)),
    ("close", close, (None,)),
]


@dataclass
class Report:
    states: int = 0
    transitions: int = 0
    per_depth: list[int] = field(default_factory=list)
    phases: set[str] = field(default_factory=set)
    """Every segment and checkpoint phase reached."""
    seconds: float = 0.0


def _start(listeners: bool) -> World:
    world = World(ReaderMachine("r", listeners=listeners), listeners)
    world.mine.add(A)
    world.returned[A] = world.consumed[A] = 0
    world.committed = {A: 0, B: 0}
    world.machine.adopt([A])
    if listeners:
        world.heard_acquired.add(A)
        world.machine.acquired_heard([A])
    return world


def _moves(world: World) -> Iterator[tuple[str, Callable[[World, list[str], Any], bool], Any]]:
    for name, step, args in STEPS:
        for arg in args:
            yield name, step, arg


def explore(depth: int, *, deadline_s: float = 120.0) -> Report:
    """Every interleaving up to ``depth`` steps, with and without listeners; raises
    :class:`RuleViolation` at the first broken rule."""
    report = Report()
    began = time.monotonic()
    for listeners in (False, True):
        start = _start(listeners)
        seen = {start.key()}
        frontier: list[tuple[World, list[str]]] = [(start, [f"listeners={listeners}"])]
        for level in range(depth):
            following: list[tuple[World, list[str]]] = []
            for world, trace in frontier:
                for name, step, arg in _moves(world):
                    branch = world.copy()
                    label = f"{name}({'' if arg is None else arg[1]})"
                    if not step(branch, [*trace, label], arg):
                        continue
                    report.transitions += 1
                    key = branch.key()
                    if key in seen:
                        continue
                    seen.add(key)
                    report.phases.update(p.value for p in branch.machine.segments.values())
                    report.phases.add(f"checkpoint {branch.machine.checkpoint_phase.value}")
                    following.append((branch, [*trace, label]))
            if len(report.per_depth) <= level:
                report.per_depth.append(0)
            report.per_depth[level] += len(following)
            frontier = following
            if time.monotonic() - began > deadline_s:
                raise TimeoutError(f"exploration passed {deadline_s}s at depth {level + 1}")
        report.states += len(seen)
    report.seconds = time.monotonic() - began
    return report


def main() -> None:
    from tests.support.reader_mutants import MUTANTS, mutated

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=10)
    args = parser.parse_args()
    report = explore(args.depth, deadline_s=3600)
    print(
        f"reader machine: depth {args.depth}: {report.states} states, {report.transitions} "
        f"transitions, phases reached {sorted(report.phases)}, per depth {report.per_depth}, "
        f"{report.seconds:.1f}s: every rule held"
    )
    for name, rule, replacements in MUTANTS:
        try:
            with mutated(replacements):
                explore(args.depth, deadline_s=3600)
        except RuleViolation as exc:
            caught = str(exc).split(":")[0]
            verdict = "caught" if caught == rule else f"caught as {caught}, expected {rule}"
            print(f"mutant {name!r}: {verdict}: {str(exc)[:160]}")
        else:
            raise SystemExit(f"mutant {name!r}: NOT caught at depth {args.depth}")


if __name__ == "__main__":
    main()
