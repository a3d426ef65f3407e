"""Update types shared by the tests (importable by worker processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statesync import Update


@dataclass(frozen=True)
class Add(Update):
    amount: int

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "total": state["total"] + self.amount}


@dataclass(frozen=True)
class Put(Update):
    key: str
    value: Any

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, self.key: self.value}


@dataclass(frozen=True)
class Progress(Update):
    """Like :class:`Put`, but wakes no follower (progress nobody else acts on)."""

    wakes_followers = False

    key: str
    value: Any

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, self.key: self.value}


@dataclass(frozen=True)
class Claim(Update):
    """Set ``key`` to ``owner`` if nobody holds it: concerns only ``key`` (conflict keys)."""

    key: str
    owner: str

    def conflict_keys(self) -> tuple[str, ...]:
        return (self.key,)

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        if state.get(self.key):
            raise ValueError(f"{self.key} is held by {state[self.key]}")
        return {**state, self.key: self.owner}


@dataclass(frozen=True)
class FailIfNegative(Update):
    """Rejects itself when the total would go negative (a writer-side check)."""

    amount: int

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        if state["total"] + self.amount < 0:
            raise ValueError("total would go negative")
        return {**state, "total": state["total"] + self.amount}


@dataclass(frozen=True)
class Explode(Update):
    """Always raises: used to build poisoned entries that bypass the writer's check."""

    type_name = "Explode"

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("boom")


@dataclass(frozen=True)
class Notify(Update):
    """Set ``key`` to ``value`` (concerns only ``key``), waking only the followers named."""

    key: str
    value: Any
    followers: tuple[str, ...]

    def conflict_keys(self) -> tuple[str, ...]:
        return (self.key,)

    def wakes(self, state: dict[str, Any]) -> frozenset[str]:
        return frozenset(self.followers)

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, self.key: self.value}


@dataclass(frozen=True)
class NotifyWatchers(Update):
    """Set ``key`` to ``value`` (concerns only ``key``), waking the followers the state lists
    under ``"watchers"`` (whom it wakes depends on the state it leaves)."""

    key: str
    value: Any

    def conflict_keys(self) -> tuple[str, ...]:
        return (self.key,)

    def wakes(self, state: dict[str, Any]) -> frozenset[str]:
        return frozenset(state.get("watchers", ()))

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, self.key: self.value}


ALL_TYPES = [Add, Put, FailIfNegative, Progress, Claim, Notify, NotifyWatchers]
