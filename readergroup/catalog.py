"""The catalog of scopes, their streams and reader groups, as a replicated state. Pure code.

State (synchronizer ``catalog``): ``{"scopes": {scope: {stream: created_ms}}, "groups":
{scope: {group: created_ms}}, "group_streams": {scope: {group: ["scope/stream", ...]}}}``. The
streams a group reads are recorded here so retention can find a stream's subscribers without
reading every group's state. Updates are
appended conditionally; their generators (in :class:`~readergroup.stream_manager.StreamManager`)
check preconditions on the current state, so ``apply_to`` only ever sees valid updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statesync import Update

Catalog = dict[str, Any]

EMPTY_CATALOG: Catalog = {"scopes": {}, "groups": {}}


def scopes_of(catalog: Catalog) -> dict[str, dict[str, int]]:
    scopes: dict[str, dict[str, int]] = catalog["scopes"]
    return scopes


def groups_of(catalog: Catalog, scope: str) -> dict[str, int]:
    groups: dict[str, int] = catalog.get("groups", {}).get(scope, {})
    return groups


def subscribers_of(catalog: Catalog, scoped_stream: str) -> list[tuple[str, str]]:
    """``(scope, group)`` of every group that reads ``scoped_stream``."""
    out = []
    for scope, groups in catalog.get("group_streams", {}).items():
        for group, streams in groups.items():
            if scoped_stream in streams and group in groups_of(catalog, scope):
                out.append((scope, group))
    return sorted(out)


@dataclass(frozen=True)
class AddGroup(Update):
    scope: str
    group: str
    created_ms: int
    streams: tuple[str, ...] = ()

    def apply_to(self, state: Catalog) -> Catalog:
        groups = dict(state.get("groups", {}))
        groups[self.scope] = {**groups.get(self.scope, {}), self.group: self.created_ms}
        reads = dict(state.get("group_streams", {}))
        reads[self.scope] = {**reads.get(self.scope, {}), self.group: list(self.streams)}
        return {**state, "groups": groups, "group_streams": reads}


@dataclass(frozen=True)
class RemoveGroup(Update):
    scope: str
    group: str

    def apply_to(self, state: Catalog) -> Catalog:
        groups = dict(state.get("groups", {}))
        remaining = {g: t for g, t in groups.get(self.scope, {}).items() if g != self.group}
        groups[self.scope] = remaining
        return {**state, "groups": groups}


@dataclass(frozen=True)
class CreateScope(Update):
    scope: str

    def apply_to(self, state: Catalog) -> Catalog:
        return {**state, "scopes": {**scopes_of(state), self.scope: {}}}


@dataclass(frozen=True)
class DeleteScope(Update):
    scope: str

    def apply_to(self, state: Catalog) -> Catalog:
        scopes = dict(scopes_of(state))
        scopes.pop(self.scope, None)
        return {**state, "scopes": scopes}


@dataclass(frozen=True)
class AddStream(Update):
    scope: str
    stream: str
    created_ms: int

    def apply_to(self, state: Catalog) -> Catalog:
        scopes = dict(scopes_of(state))
        scopes[self.scope] = {**scopes[self.scope], self.stream: self.created_ms}
        return {**state, "scopes": scopes}


@dataclass(frozen=True)
class RemoveStream(Update):
    scope: str
    stream: str

    def apply_to(self, state: Catalog) -> Catalog:
        scopes = dict(scopes_of(state))
        streams = dict(scopes.get(self.scope, {}))
        streams.pop(self.stream, None)
        if self.scope in scopes:
            scopes[self.scope] = streams
        return {**state, "scopes": scopes}


UPDATE_TYPES: tuple[type[Update], ...] = (
    CreateScope,
    DeleteScope,
    AddStream,
    RemoveStream,
    AddGroup,
    RemoveGroup,
)
