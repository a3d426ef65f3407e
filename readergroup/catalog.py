"""The catalog of scopes and their streams, as a replicated state. Pure code.

State (synchronizer ``catalog``): ``{"scopes": {scope: {stream: created_ms}}}``. Updates are
appended conditionally; their generators (in :class:`~readergroup.stream_manager.StreamManager`)
check preconditions on the current state, so ``apply_to`` only ever sees valid updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statesync import Update

Catalog = dict[str, Any]

EMPTY_CATALOG: Catalog = {"scopes": {}}


def scopes_of(catalog: Catalog) -> dict[str, dict[str, int]]:
    scopes: dict[str, dict[str, int]] = catalog["scopes"]
    return scopes


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


UPDATE_TYPES: tuple[type[Update], ...] = (CreateScope, DeleteScope, AddStream, RemoveStream)
