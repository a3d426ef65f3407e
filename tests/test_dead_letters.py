"""Dead letters (issue 30 item 8): a handler that fails forever on one event of 10,000: the
other 9,999 are handled, the one is parked in the dead-letter stream with its error, attempts
and place, the group commits past it, nothing else is skipped; without a policy the run stops
and raises (the default)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup import (
    BytesSerializer,
    DeadLetter,
    DeadLetterPolicy,
    EventRead,
    EventStreamClientFactory,
    InvalidConfigError,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.storage.connection_api import Connection
from statesync import ManualClock
from tests.support.connections import new_scope, scoped_factory
from tests.support.waiting import wait_until

EVENTS = 10_000
POISON = "e4242"


@pytest.fixture
def scope(connection: Connection) -> str:
    return new_scope(connection)


@pytest.fixture
def factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    yield from scoped_factory(connection, scope)


def _setup(connection: Connection, scope: str, factory: EventStreamClientFactory) -> None:
    with StreamManager(connection) as sm:
        for name in ("orders", "orders-dlq"):
            sm.create_stream(
                scope, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
            )
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(EVENTS):
            headers = {"trace-id": b"t%d" % i} if f"e{i}" == POISON else None
            writer.write_event(f"e{i}", routing_key=f"k{i % 64}", headers=headers)
    with ReaderGroupManager(scope, connection) as rgm:
        rgm.create_reader_group(
            "g", ReaderGroupConfig(streams=[f"{scope}/orders"], commit_mode="manual")
        )


def test_a_poison_event_is_parked_and_everything_else_is_handled(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    _setup(connection, scope, factory)
    handled: set[str] = set()
    attempts: list[str] = []
    lock = threading.Lock()

    def handle(event: EventRead[str]) -> None:
        assert event.event is not None
        if event.event == POISON:
            attempts.append(event.event)
            raise RuntimeError("cannot price this order")
        with lock:
            handled.add(event.event)

    dlq = factory.create_event_writer("orders-dlq", BytesSerializer())
    policy: DeadLetterPolicy[str] = DeadLetterPolicy(
        writer=dlq, max_attempts=3, clock=ManualClock()
    )
    stop = threading.Event()
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        runner = threading.Thread(
            target=reader.run,
            args=(policy.wrap(handle),),
            kwargs={"stop": stop, "handle_signals": False},
        )
        runner.start()
        wait_until(lambda: len(handled) == EVENTS - 1 and len(attempts) == 3, 60, "handled")
        stop.set()
        runner.join(30)
        assert not runner.is_alive()
        committed = reader.committed()
    dlq.close()
    assert handled == {f"e{i}" for i in range(EVENTS)} - {POISON}  # nothing else skipped
    with ReaderGroupManager(scope, connection) as rgm:
        group = rgm.get_reader_group("g")
        tails = group.get_metrics()
    assert tails.total.events == 0  # committed past every event, the parked one included
    assert sum(committed.values()) == EVENTS
    parked = list(factory.create_batch_client().read_events("orders-dlq"))
    letters = [DeadLetter.from_bytes(e.payload) for e in parked]
    assert len(letters) == 1
    assert parked[0].headers == {"trace-id": b"t4242"}  # the letter keeps the event's headers
    letter = letters[0]
    assert (letter.attempts, letter.error_type, letter.payload) == (3, "RuntimeError", b"e4242")
    assert letter.error == "cannot price this order" and letter.routing_key == "k18"
    assert letter.stream == f"{scope}/orders" and letter.offset >= 0


def test_without_a_policy_the_run_stops_and_raises(
    connection: Connection, scope: str, factory: EventStreamClientFactory
) -> None:
    _setup(connection, scope, factory)

    def handle(event: EventRead[str]) -> None:
        if event.event == POISON:
            raise RuntimeError("cannot price this order")

    with (
        factory.create_reader("r", "g", UTF8StringSerializer()) as reader,
        pytest.raises(RuntimeError, match="cannot price"),
    ):
        reader.run(handle, handle_signals=False)


def test_policy_settings_are_validated(factory: EventStreamClientFactory) -> None:
    writer: Any = None
    with pytest.raises(InvalidConfigError):
        DeadLetterPolicy(writer=writer, max_attempts=0)
    with pytest.raises(InvalidConfigError):
        DeadLetterPolicy(writer=writer, backoff=10, max_backoff=1)
    with pytest.raises(ValueError, match="not a dead letter"):
        DeadLetter.from_bytes(b"{}")
