"""The reader machine with one rule taken out each (mutants): the explorer
(:mod:`tests.support.reader_explorer`) must catch every one, so a green exploration means
something. Each mutant is ``(name, the rule the explorer must report, [(method, replacement)])``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from readergroup.core.group_state import SegKey
from readergroup.core.reader_machine import ReaderMachine, ReadStep, SegmentPhase

_read_call = ReaderMachine.read_call


def _leaky_release(
    self: ReaderMachine, keys: Iterable[SegKey], *, moved_past: Collection[SegKey]
) -> tuple[list[SegKey], list[SegKey]]:
    """Says the segments are held, but they go on serving."""
    return [k for k in keys if self.segments.get(k) is SegmentPhase.SERVING], []


def _hasty_release(
    self: ReaderMachine, keys: Iterable[SegKey], *, moved_past: Collection[SegKey]
) -> tuple[list[SegKey], list[SegKey]]:
    """Releasable at once, whether the application moved past them or not."""
    held = [k for k in keys if self.segments.get(k) is SegmentPhase.SERVING]
    for key in held:
        self.segments[key] = SegmentPhase.RELEASABLE
    return held, held


def _checkpoint_behind_the_data(self: ReaderMachine) -> ReadStep:
    step = _read_call(self)
    if step.checkpoint is not None and self.in_phase(SegmentPhase.SERVING):
        return replace(step, checkpoint=None)
    return step


def _removed_reads_on(self: ReaderMachine) -> ReadStep:
    removed, self.removed = self.removed, None
    try:
        return _read_call(self)
    finally:
        self.removed = removed


def _eager_adopt(self: ReaderMachine, keys: Iterable[SegKey]) -> list[SegKey]:
    """Serves at once, listeners or not."""
    serve = [k for k in keys if k not in self.segments]
    for key in serve:
        self.segments[key] = SegmentPhase.SERVING
    return serve


def _serves_paused(self: ReaderMachine, key: SegKey) -> bool:
    return self.segments.get(key) is SegmentPhase.SERVING


def _release_unheard(self: ReaderMachine) -> ReadStep:
    """Releasable without waiting for ``on_segments_released``."""
    step = _read_call(self)
    for key in step.released:
        self.segments[key] = SegmentPhase.RELEASABLE
    return replace(step, released=(), freed=step.released)


MUTANTS: list[tuple[str, str, list[tuple[str, Callable[..., Any]]]]] = [
    ("releasing keeps handing out", "handed-after-release", [("want_release", _leaky_release)]),
    ("release while events are out", "duplicate", [("want_release", _hasty_release)]),
    ("checkpoint behind the data", "late-checkpoint", [("read_call", _checkpoint_behind_the_data)]),
    ("removed reader reads on", "removed-reads", [("read_call", _removed_reads_on)]),
    ("serving before acquired heard", "listener-order", [("adopt", _eager_adopt)]),
    ("release before released heard", "listener-order", [("read_call", _release_unheard)]),
    ("paused segment handed out", "handed-while-paused", [("serving", _serves_paused)]),
]


@contextmanager
def mutated(replacements: list[tuple[str, Callable[..., Any]]]) -> Iterator[None]:
    """The machine with ``replacements`` (method name, function) in place, then restored."""
    saved = [(name, getattr(ReaderMachine, name)) for name, _ in replacements]
    try:
        for name, function in replacements:
            setattr(ReaderMachine, name, function)
        yield
    finally:
        for name, original in saved:
            setattr(ReaderMachine, name, original)
