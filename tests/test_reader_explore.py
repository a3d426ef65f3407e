"""The explorer of the reader's hand-out state machine (tests/support/reader_explorer.py):
every interleaving keeps every rule, and each rule's mutant (the machine with that rule taken
out, tests/support/reader_mutants.py) is caught, so a green run means something."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from readergroup.core.reader_machine import CheckpointPhase, SegmentPhase
from tests.support.reader_explorer import RuleViolation, explore
from tests.support.reader_mutants import MUTANTS, mutated

DEPTH = 8
DEADLINE_S = 120.0


def test_every_interleaving_keeps_every_rule() -> None:
    report = explore(DEPTH, deadline_s=DEADLINE_S)
    assert report.states > 20_000 and report.transitions > 70_000
    assert report.per_depth[-1] > 0  # the deepest level still found new states
    every_phase = {p.value for p in SegmentPhase}
    every_checkpoint = {f"checkpoint {p.value}" for p in CheckpointPhase}
    assert report.phases == every_phase | every_checkpoint


@pytest.mark.parametrize(("name", "rule", "replacements"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_the_explorer_catches_each_rules_mutant(
    name: str, rule: str, replacements: list[tuple[str, Callable[..., Any]]]
) -> None:
    with mutated(replacements), pytest.raises(RuleViolation, match=rule):
        explore(DEPTH, deadline_s=DEADLINE_S)
