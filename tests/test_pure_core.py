"""Pure parts: retry maths, replica transitions, names and configuration."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statesync import InvalidConfigError, InvalidNameError, ManualClock, RetryPolicy, SyncConfig
from statesync.codec import DecodedEntry
from statesync.errors import ApplyError, RevisionGapError
from statesync.names import KeyLayout, validate_name
from statesync.replica import Replica, advance, split_generator_result
from statesync.update import Update
from tests.support.model import Add, Explode


@given(
    st.integers(1, 200),
    st.floats(0.01, 100),
    st.floats(0, 0.5),
    st.floats(0.5, 5),
    st.integers(0, 2**32),
)
def test_retry_budget_respects_attempts_deadline_and_caps(
    attempts: int, deadline: float, base: float, cap: float, seed: int
) -> None:
    policy = RetryPolicy(max_attempts=attempts, deadline=deadline, base_delay=base, max_delay=cap)
    clock = ManualClock()
    budget = policy.start(clock, random.Random(seed))
    waited = 0.0
    while (delay := budget.next_delay()) is not None:
        assert 0 <= delay <= policy.delay_cap(budget.attempts - 1) <= cap
        clock.sleep(delay)
        waited += delay
    assert budget.attempts <= attempts
    assert waited < deadline  # a granted delay never carries an attempt past the deadline


def test_same_seed_gives_same_delays() -> None:
    policy = RetryPolicy()
    first = policy.start(ManualClock(), random.Random(3))
    second = policy.start(ManualClock(), random.Random(3))
    assert [first.next_delay() for _ in range(10)] == [second.next_delay() for _ in range(10)]


def test_delay_cap_doubles_then_saturates() -> None:
    policy = RetryPolicy(base_delay=0.01, max_delay=0.05)
    assert [policy.delay_cap(n) for n in (1, 2, 3, 4)] == [0.01, 0.02, 0.04, 0.05]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"deadline": 0}, {"base_delay": -1}, {"base_delay": 2, "max_delay": 1}],
)
def test_invalid_retry_policies_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_entry_bytes": 0},
        {"max_entry_bytes": 65 * 1024 * 1024},
        {"read_batch": 0},
        {"socket_timeout": 0},
        {"key_prefix": "bad{prefix}"},
        {"retry": "fast"},
    ],
)
def test_invalid_sync_configs_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises((InvalidConfigError, InvalidNameError)):
        SyncConfig(**kwargs)


def test_configs_are_frozen_and_keyword_only() -> None:
    config = SyncConfig()
    with pytest.raises(AttributeError):
        config.read_batch = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        SyncConfig("prefix")  # type: ignore[misc]


@pytest.mark.parametrize("name", ["a", "orders", "shop/orders.v2", "rg:billing_1-x", "9" * 200])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "-x", "a b", "a{b}", "ü", "x" * 201, None, 3])
def test_invalid_names(name: object) -> None:
    with pytest.raises(InvalidNameError):
        validate_name(name)


def test_every_key_of_a_synchronizer_shares_one_hash_tag() -> None:
    layout = KeyLayout("pfx", "shop/orders")
    assert all("{shop/orders}" in key and key.startswith("pfx:") for key in layout.all)
    assert len(set(layout.all)) == 6 and "{shop/orders}" in layout.follower_wake("r1")


def entry(revision: int, *updates: Update) -> DecodedEntry:
    return DecodedEntry(revision, revision * 10, "w", updates)


def test_advance_applies_consecutive_entries() -> None:
    replica = Replica({"total": 0}, 0, "inc", 0)
    moved = advance(replica, [entry(1, Add(2)), entry(2, Add(3), Add(4))])
    assert (moved.state, moved.revision, moved.server_time_ms) == ({"total": 9}, 2, 20)
    assert replica.state == {"total": 0}  # immutable


def test_advance_refuses_gaps_and_replays() -> None:
    replica = Replica({"total": 0}, 5, "inc", 0)
    with pytest.raises(RevisionGapError):
        advance(replica, [entry(7, Add(1))])
    with pytest.raises(RevisionGapError):
        advance(replica, [entry(5, Add(1))])


def test_an_entry_is_applied_whole_or_not_at_all() -> None:
    replica = Replica({"total": 0}, 0, "inc", 0)
    with pytest.raises(ApplyError) as caught:
        advance(replica, [entry(1, Add(1), Explode())])
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert replica.state == {"total": 0} and replica.revision == 0


@dataclass(frozen=True)
class Noop(Update):
    def apply_to(self, state: Any) -> Any:
        return state


def test_generator_results_are_normalised() -> None:
    assert split_generator_result([Noop()]) == ([Noop()], None)
    assert split_generator_result(([Noop()], 5)) == ([Noop()], 5)
    assert split_generator_result((Noop(), Noop())) == ([Noop(), Noop()], None)
    with pytest.raises(TypeError):
        split_generator_result("nope")
    with pytest.raises(TypeError):
        split_generator_result([1])
