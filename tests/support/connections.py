"""Scopes and client factories on the test's ``connection`` fixture (memory or real Redis), for
modules that run unchanged on both: each re-points its ``scope`` and ``factory`` fixtures here."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from readergroup import EventStreamClientFactory, StreamManager
from readergroup.storage.connection_api import Connection


def new_scope(connection: Connection) -> str:
    """A fresh scope, created on ``connection``, whose name no other test uses."""
    name = f"s{uuid.uuid4().hex[:10]}"
    StreamManager(connection).create_scope(name)
    return name


def scoped_factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    """A client factory for ``scope`` on ``connection`` (which stays open: the fixture owns it)."""
    with EventStreamClientFactory(scope, connection) as factory:
        yield factory
