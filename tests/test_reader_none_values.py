"""An event whose deserializer returns ``None`` is delivered with the value ``None``, and told
apart from "no event in time" (issue 35, item 5). On the memory backend and a real Redis."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.client.event_read import NOTHING, EventRead
from readergroup.storage.connection_api import Connection
from tests.support.async_reader_adapter import (
    flavoured,
    flavoured_factory,
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.connections import new_scope
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.1}


class _EmptyIsNone:
    """UTF-8 text; an empty payload (a tombstone, say) is ``None``."""

    def serialize(self, value: str | None) -> bytes:
        return b"" if value is None else value.encode()

    def deserialize(self, data: bytes) -> str | None:
        return bytes(data).decode() or None


@pytest.fixture
def factory(
    connection: Connection, reader_flavour: str, request: pytest.FixtureRequest
) -> Iterator[EventStreamClientFactory]:
    """Threaded readers, or asyncio ones (a flavoured test's ``reader_flavour``)."""
    scope = new_scope(connection)
    StreamManager(connection).create_stream(scope, "s")
    ReaderGroupManager(scope, connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST)
    )
    yield from flavoured_factory(connection, scope, reader_flavour, request)


def _write(factory: EventStreamClientFactory, values: list[str | None]) -> None:
    with factory.create_event_writer("s", _EmptyIsNone()) as writer:
        for value in values:
            writer.write_event(value, routing_key="k")


@flavoured("sync", "async")
def test_iteration_delivers_an_event_whose_value_is_none(
    factory: EventStreamClientFactory,
) -> None:
    """``for event in reader`` yields all three events, the middle one with ``event.event is
    None`` and ``is_event`` true; none is dropped as if nothing had come."""
    _write(factory, ["a", None, "c"])
    reader = factory.create_reader("r", "g", _EmptyIsNone())
    got: list[EventRead[str | None]] = []

    def iterate() -> None:
        for event in reader:
            got.append(event)
            if len(got) == 3:
                return

    thread = threading.Thread(target=iterate, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(got) == 3, timeout=15, what="three events iterated")
    finally:
        thread.join(15)
        reader.close()
    assert [event.event for event in got] == ["a", None, "c"]
    assert all(event.is_event and not event.is_checkpoint for event in got)
    assert [event.offset for event in got] == [0, 1, 2]


@flavoured()
def test_read_next_event_tells_a_none_value_from_a_timeout(
    factory: EventStreamClientFactory,
) -> None:
    """``read_next_event`` hands out the ``None``-valued event (``is_event`` true, with its
    offset); a read that found nothing returns ``NOTHING`` (``is_event`` false)."""
    _write(factory, [None])
    with factory.create_reader("r", "g", UTF8StringSerializer()) as plain:
        assert plain.read_next_event(timeout=5).event == ""  # stored as the empty payload
    with factory.create_reader("r2", "g", _EmptyIsNone()) as reader:
        _write(factory, [None])
        event = reader.read_next_event(timeout=5)
        assert event.is_event and event.event is None and event.offset == 1
        nothing = reader.read_next_event(timeout=0.2)
        assert nothing is NOTHING and not nothing.is_event and not nothing.is_checkpoint
