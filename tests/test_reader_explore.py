"""The explorer of the reader's hand-out state machine (tests/support/reader_explorer.py):
every interleaving keeps every rule, and each rule's mutant (the machine with that rule taken
out) is caught, so a green run means something."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import pytest

from readergroup.core.group_state import SegKey
from readergroup.core.reader_machine import (
    CheckpointPhase,
    ReaderMachine,
    ReadStep,
    SegmentPhase,
)
from tests.support.reader_explorer import RuleViolation, explore

DEPTH = 8
DEADLINE_S = 120.0


def test_every_interleaving_keeps_every_rule() -> None:
    report = explore(DEPTH, deadline_s=DEADLINE_S)
    assert report.states > 20_000 and report.transitions > 70_000
    assert report.per_depth[-1] > 0  # the deepest level still found new states
    every_phase = {p.value for p in SegmentPhase}
    every_checkpoint = {f"checkpoint {p.value}" for p in CheckpointPhase}
    assert report.phases == every_phase | every_checkpoint


def test_a_release_that_keeps_handing_out_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaky(
        self: ReaderMachine, keys: Iterable[SegKey], *, moved_past: Collection[SegKey]
    ) -> tuple[list[SegKey], list[SegKey]]:
        held = [k for k in keys if self.segments.get(k) is SegmentPhase.SERVING]
        return held, []  # says held, but the segment goes on serving

    monkeypatch.setattr(ReaderMachine, "want_release", leaky)
    with pytest.raises(RuleViolation, match="handed-after-release"):
        explore(DEPTH, deadline_s=DEADLINE_S)


def test_a_release_sent_while_the_application_holds_events_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def hasty(
        self: ReaderMachine, keys: Iterable[SegKey], *, moved_past: Collection[SegKey]
    ) -> tuple[list[SegKey], list[SegKey]]:
        held = [k for k in keys if self.segments.get(k) is SegmentPhase.SERVING]
        for key in held:  # releasable at once, moved past or not
            self.segments[key] = SegmentPhase.RELEASABLE
        return held, held

    monkeypatch.setattr(ReaderMachine, "want_release", hasty)
    with pytest.raises(RuleViolation, match="duplicate"):
        explore(DEPTH, deadline_s=DEADLINE_S)


def test_a_checkpoint_queued_behind_buffered_events_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = ReaderMachine.read_call

    def behind_the_data(self: ReaderMachine) -> ReadStep:
        step = original(self)
        if step.checkpoint is not None and self.in_phase(SegmentPhase.SERVING):
            return ReadStep(step.lost, step.completed, None, False, step.released, step.acquired)
        return step

    monkeypatch.setattr(ReaderMachine, "read_call", behind_the_data)
    with pytest.raises(RuleViolation, match="late-checkpoint"):
        explore(DEPTH, deadline_s=DEADLINE_S)


def test_a_removed_reader_that_reads_on_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = ReaderMachine.read_call

    def reads_on(self: ReaderMachine) -> ReadStep:
        removed, self.removed = self.removed, None
        try:
            return original(self)
        finally:
            self.removed = removed

    monkeypatch.setattr(ReaderMachine, "read_call", reads_on)
    with pytest.raises(RuleViolation, match="removed-reads"):
        explore(DEPTH, deadline_s=DEADLINE_S)


def test_serving_before_on_segments_acquired_returned_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def eager(self: ReaderMachine, keys: Iterable[SegKey]) -> list[SegKey]:
        serve = [k for k in keys if k not in self.segments]
        for key in serve:
            self.segments[key] = SegmentPhase.SERVING
        return serve

    monkeypatch.setattr(ReaderMachine, "adopt", eager)
    with pytest.raises(RuleViolation, match="listener-order"):
        explore(DEPTH, deadline_s=DEADLINE_S)


def test_handing_out_a_paused_segment_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReaderMachine, "serving", lambda self, key: key in self.in_phase(
        SegmentPhase.SERVING))  # fmt: skip

    with pytest.raises(RuleViolation, match="handed-while-paused"):
        explore(DEPTH, deadline_s=DEADLINE_S)


def test_a_release_sent_before_on_segments_released_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = ReaderMachine.read_call

    def unheard(self: ReaderMachine) -> ReadStep:
        step = original(self)
        for key in step.released:  # releasable without waiting for the listener
            self.segments[key] = SegmentPhase.RELEASABLE
        return ReadStep(
            step.lost, step.completed, step.removed, step.closed, (), step.acquired,
            step.checkpoint, step.ack,
        )  # fmt: skip

    monkeypatch.setattr(ReaderMachine, "read_call", unheard)
    with pytest.raises(RuleViolation, match="listener-order"):
        explore(DEPTH, deadline_s=DEADLINE_S)
