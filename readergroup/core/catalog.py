"""Per-scope catalogs and the operator's list of scopes, as replicated states. Pure code.

Scopes are the isolation boundary, so nothing one scope's users may write is read by another
scope's logic:

* each scope has its own catalog (synchronizer ``catalog:<scope>``, keys under that scope's
  hash tag): ``{"streams": {stream: created_ms}, "groups": {group: created_ms},
  "group_streams": {group: [stream, ...]}, "closed": bool}``. The streams a group reads are
  recorded so retention finds a stream's subscribers without reading every group's state; a
  group reads streams of its own scope only, so a scope's retention reads only its own scope's
  keys. A scope exists while its catalog exists and is not closed.
* the list of scopes (synchronizer ``scopes``) is written only by the cluster-wide operator
  role (``create_scope``, ``delete_scope``, ``list_scopes``): ``{"scopes": {scope: created_ms}}``.

Updates are appended conditionally; their generators (in
:class:`~readergroup.admin.stream_manager.StreamManager` and
:class:`~readergroup.admin.group_manager.ReaderGroupManager`) check preconditions on the current
state, so ``apply_to`` only ever sees valid updates.

The layout before per-scope catalogs (one shared ``catalog`` synchronizer) is read only by
``readergroup admin migrate``; its update types are kept below for that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from statesync import Update

Catalog = dict[str, Any]
"""One scope's catalog."""


def empty_catalog() -> Catalog:
    return {"streams": {}, "groups": {}, "group_streams": {}, "closed": False}


def streams_of(state: Catalog) -> dict[str, int]:
    streams: dict[str, int] = state.get("streams", {})
    return streams


def groups_of(state: Catalog) -> dict[str, int]:
    groups: dict[str, int] = state.get("groups", {})
    return groups


def is_closed(state: Catalog) -> bool:
    return bool(state.get("closed", False))


def subscribers_of(state: Catalog, stream: str) -> list[str]:
    """Names of the scope's groups that read ``stream`` (a stream of the same scope)."""
    reads: dict[str, list[str]] = state.get("group_streams", {})
    return sorted(g for g, streams in reads.items() if stream in streams and g in groups_of(state))


@dataclass(frozen=True)
class AddStream(Update):
    stream: str
    created_ms: int

    def apply_to(self, state: Catalog) -> Catalog:
        return {**state, "streams": {**streams_of(state), self.stream: self.created_ms}}


@dataclass(frozen=True)
class RemoveStream(Update):
    stream: str

    def apply_to(self, state: Catalog) -> Catalog:
        streams = {s: t for s, t in streams_of(state).items() if s != self.stream}
        return {**state, "streams": streams}


@dataclass(frozen=True)
class AddGroup(Update):
    group: str
    created_ms: int
    streams: tuple[str, ...] = ()
    """Names of the streams (of this scope) the group reads."""

    def apply_to(self, state: Catalog) -> Catalog:
        reads = {**state.get("group_streams", {}), self.group: list(self.streams)}
        groups = {**groups_of(state), self.group: self.created_ms}
        return {**state, "groups": groups, "group_streams": reads}


@dataclass(frozen=True)
class RemoveGroup(Update):
    group: str

    def apply_to(self, state: Catalog) -> Catalog:
        groups = {g: t for g, t in groups_of(state).items() if g != self.group}
        reads = {g: s for g, s in state.get("group_streams", {}).items() if g != self.group}
        return {**state, "groups": groups, "group_streams": reads}


@dataclass(frozen=True)
class CloseScope(Update):
    """The scope is being deleted: nothing may be added any more."""

    def apply_to(self, state: Catalog) -> Catalog:
        return {**state, "closed": True}


UPDATE_TYPES: tuple[type[Update], ...] = (
    AddStream,
    RemoveStream,
    AddGroup,
    RemoveGroup,
    CloseScope,
)

# -- the list of scopes (operator only) -----------------------------------------------------
ScopeList = dict[str, Any]

EMPTY_SCOPE_LIST: ScopeList = {"scopes": {}}


def listed_scopes(state: ScopeList) -> dict[str, int]:
    scopes: dict[str, int] = state.get("scopes", {})
    return scopes


@dataclass(frozen=True)
class ListScope(Update):
    scope: str
    created_ms: int

    def apply_to(self, state: ScopeList) -> ScopeList:
        return {**state, "scopes": {**listed_scopes(state), self.scope: self.created_ms}}


@dataclass(frozen=True)
class UnlistScope(Update):
    scope: str

    def apply_to(self, state: ScopeList) -> ScopeList:
        scopes = {s: t for s, t in listed_scopes(state).items() if s != self.scope}
        return {**state, "scopes": scopes}


SCOPE_LIST_UPDATE_TYPES: tuple[type[Update], ...] = (ListScope, UnlistScope)


# -- the shared catalog of the old layout (read only by ``readergroup admin migrate``) --------
@dataclass(frozen=True)
class _V1CreateScope(Update):
    type_name: ClassVar[str] = "CreateScope"
    scope: str

    def apply_to(self, state: Catalog) -> Catalog:
        return {**state, "scopes": {**state.get("scopes", {}), self.scope: {}}}


@dataclass(frozen=True)
class _V1DeleteScope(Update):
    type_name: ClassVar[str] = "DeleteScope"
    scope: str

    def apply_to(self, state: Catalog) -> Catalog:
        scopes = {s: v for s, v in state.get("scopes", {}).items() if s != self.scope}
        return {**state, "scopes": scopes}


@dataclass(frozen=True)
class _V1AddStream(Update):
    type_name: ClassVar[str] = "AddStream"
    scope: str
    stream: str
    created_ms: int

    def apply_to(self, state: Catalog) -> Catalog:
        scopes = dict(state.get("scopes", {}))
        scopes[self.scope] = {**scopes.get(self.scope, {}), self.stream: self.created_ms}
        return {**state, "scopes": scopes}


@dataclass(frozen=True)
class _V1RemoveStream(Update):
    type_name: ClassVar[str] = "RemoveStream"
    scope: str
    stream: str

    def apply_to(self, state: Catalog) -> Catalog:
        scopes = dict(state.get("scopes", {}))
        if self.scope in scopes:
            scopes[self.scope] = {s: t for s, t in scopes[self.scope].items() if s != self.stream}
        return {**state, "scopes": scopes}


@dataclass(frozen=True)
class _V1AddGroup(Update):
    type_name: ClassVar[str] = "AddGroup"
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
class _V1RemoveGroup(Update):
    type_name: ClassVar[str] = "RemoveGroup"
    scope: str
    group: str

    def apply_to(self, state: Catalog) -> Catalog:
        groups = dict(state.get("groups", {}))
        groups[self.scope] = {
            g: t for g, t in groups.get(self.scope, {}).items() if g != self.group
        }
        return {**state, "groups": groups}


LEGACY_UPDATE_TYPES: tuple[type[Update], ...] = (
    _V1CreateScope,
    _V1DeleteScope,
    _V1AddStream,
    _V1RemoveStream,
    _V1AddGroup,
    _V1RemoveGroup,
)
EMPTY_LEGACY_CATALOG: Catalog = {"scopes": {}, "groups": {}}


def split_legacy(state: Catalog) -> dict[str, tuple[Catalog, list[str]]]:
    """The old shared catalog as one catalog per scope, with the groups that read streams of
    another scope (``"group -> scope/stream"``), which the new layout does not allow.

    >>> old = _V1AddGroup("a", "g", 5, ("a/s", "b/t")).apply_to(
    ...     _V1AddStream("a", "s", 1).apply_to(_V1CreateScope("a").apply_to(EMPTY_LEGACY_CATALOG)))
    >>> new, cross = split_legacy(old)["a"]
    >>> new["streams"], new["group_streams"], cross
    ({'s': 1}, {'g': ['s']}, ['g -> b/t'])
    """
    out: dict[str, tuple[Catalog, list[str]]] = {}
    for scope, streams in state.get("scopes", {}).items():
        groups = dict(state.get("groups", {}).get(scope, {}))
        reads: dict[str, list[str]] = {}
        cross: list[str] = []
        for group, scoped in state.get("group_streams", {}).get(scope, {}).items():
            if group not in groups:
                continue
            reads[group] = []
            for text in scoped:
                owner, _, stream = str(text).partition("/")
                if owner == scope:
                    reads[group].append(stream)
                else:
                    cross.append(f"{group} -> {text}")
        catalog = {**empty_catalog(), "streams": dict(streams), "groups": groups}
        out[scope] = ({**catalog, "group_streams": reads}, cross)
    return out
