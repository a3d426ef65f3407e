"""Sharp edges of the writer (issue 35, items 1-4): a writer used after ``fork()``, a serializer
returning something other than bytes, ``delivery_timeout`` per event, and the server commands
each append costs. On the memory backend and a real Redis where both apply."""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from readergroup import (
    EventStreamClientFactory,
    EventWriterConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.client.writer import EventStreamWriter, WriteFuture
from readergroup.core.errors import (
    SerializationError,
    StreamSealedError,
    WriteFailedError,
    WriterClosedError,
    WriterForkedError,
)
from readergroup.storage.connection_api import Connection
from readergroup.testing.memory_connection import MemoryConnection
from statesync.clock import ManualClock
from tests.support.connections import new_scope, scoped_factory
from tests.support.waiting import wait_until

FOUR = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))


@pytest.fixture
def scope(connection: Connection) -> str:
    scope = new_scope(connection)
    StreamManager(connection).create_stream(scope, "s", FOUR)
    return scope


@pytest.fixture
def factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    yield from scoped_factory(connection, scope)


def _payloads(factory: EventStreamClientFactory) -> list[bytes]:
    return [event.payload for event in factory.create_batch_client().read_events("s")]


# -- item 1: a writer used after fork() ----------------------------------------------------
def _in_child(work: Callable[[], list[str]], timeout: float = 30.0) -> list[str]:
    """Run ``work`` in a forked child; return what it reports through a pipe. A child that
    does not answer within ``timeout`` (it hung) is killed and the test fails."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's clean-ups
        code = 0
        try:
            os.close(read_end)
            os.write(write_end, json.dumps(work()).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the forked child hung for {timeout}s")
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    report: list[str] = json.loads(b"".join(chunks) or b"null")
    return report


def _outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def test_a_writer_used_after_fork_raises_in_the_child_and_a_new_one_works(
    connection: Connection, factory: EventStreamClientFactory
) -> None:
    """Item 1: in a forked child, the parent's writer refuses ``write_event`` and ``flush``
    with :class:`WriterForkedError` naming the fix, ``close()`` returns at once (it has nothing
    of the child's to send), and a writer created in the child works. The parent's writer is
    unaffected."""
    writer = factory.create_event_writer("s", UTF8StringSerializer())
    writer.write_event("parent 1", routing_key="k").result(10)

    def child() -> list[str]:
        fresh = factory.create_event_writer("s", UTF8StringSerializer())
        return [
            _outcome(lambda: writer.write_event("child via parent's writer")),
            _outcome(lambda: writer.flush(timeout=5)),
            _outcome(writer.close),
            _outcome(lambda: fresh.write_event("child", routing_key="k").result(10)),
            _outcome(fresh.close),
        ]

    write, flush, close, fresh_write, fresh_close = _in_child(child)
    for refused in (write, flush):
        assert refused.startswith(WriterForkedError.__name__) and "in the child" in refused, refused
    assert (close, fresh_write, fresh_close) == ("ok", "ok", "ok")
    writer.write_event("parent 2", routing_key="k").result(10)
    writer.close()
    payloads = _payloads(factory)
    assert b"child via parent's writer" not in payloads
    assert payloads[0] == b"parent 1" and payloads[-1] == b"parent 2"
    if not isinstance(connection, MemoryConnection):  # one Redis for both processes
        assert payloads == [b"parent 1", b"child", b"parent 2"]


# -- item 2: a serializer returning something other than bytes -------------------------------
class _Passthrough:
    """Returns what it is given (a serializer bug for anything but bytes)."""

    def serialize(self, value: Any) -> Any:
        return value

    def deserialize(self, data: bytes) -> bytes:
        return data


@pytest.mark.parametrize("bad", [["a", "list"], 7, None, "a str"], ids=repr)
def test_one_bad_serialized_value_fails_alone_at_write_event(
    factory: EventStreamClientFactory, bad: object
) -> None:
    """Item 2: a serializer returning a list, an int, None or a str for one event of a round of
    1,000 raises :class:`SerializationError` from that ``write_event`` (naming the serializer
    and the event's routing key), queues nothing; the other 999 events land."""
    writer: EventStreamWriter[Any] = factory.create_event_writer(
        "s", _Passthrough(), EventWriterConfig(linger=0.2)
    )
    futures = []
    for i in range(1000):
        if i == 500:
            with pytest.raises(SerializationError) as raised:
                writer.write_event(bad, routing_key="bad key")
            message = str(raised.value)
            assert "_Passthrough" in message and "'bad key'" in message, message
            assert type(bad).__name__ in message, message
            continue
        futures.append(writer.write_event(b"e%d" % i, routing_key=f"k{i}"))
    writer.close(timeout=30)
    assert all(future.exception() is None for future in futures)
    assert sorted(_payloads(factory)) == sorted(b"e%d" % i for i in range(1000) if i != 500)


def test_bytes_like_serialized_values_are_stored_as_bytes(
    factory: EventStreamClientFactory,
) -> None:
    """Item 2: a ``bytearray`` or a ``memoryview`` (of any item size) is stored as its bytes."""
    writer: EventStreamWriter[Any] = factory.create_event_writer("s", _Passthrough())
    wide = memoryview(bytearray(b"\x01\x00\x02\x00")).cast("H")  # 2 items, 4 bytes
    for value in (bytearray(b"array"), memoryview(b"view"), wide):
        writer.write_event(value, routing_key="k")
    writer.close(timeout=30)
    assert _payloads(factory) == [b"array", b"view", b"\x01\x00\x02\x00"]


# -- item 3: delivery_timeout per event ------------------------------------------------------
class _RecordingClock(ManualClock):
    """A manual clock several threads share (the sender sleeps on it; sleeping advances it)."""

    def __init__(self) -> None:
        super().__init__(1000.0)
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return super().monotonic()

    def advance(self, seconds: float) -> None:
        with self._lock:
            super().advance(seconds)
        time.sleep(0)  # let the writing thread in


def test_each_event_fails_by_its_own_deadline_while_redis_is_down(private_redis: Any) -> None:
    """Item 3: with Redis stopped and rounds of 16 events, every event fails at its own
    deadline (its write time + delivery_timeout on the writer's clock), not when the round it
    waited behind gave up; each failure carries that deadline, and events fail in write
    order."""
    with StreamManager.from_url(private_redis.url) as manager:
        manager.create_scope("x")
        manager.create_stream("x", "s", FOUR)
    clock = _RecordingClock()
    config = EventWriterConfig(delivery_timeout=5.0, max_batch_events=1)
    with EventStreamClientFactory.from_url("x", private_redis.url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer(), config, clock=clock)
        writer.write_event("warm", routing_key="k").result(10)  # metadata cached
        private_redis.stop()
        failed_at: dict[int, float] = {}

        def record(index: int) -> Callable[[WriteFuture], None]:
            return lambda _: failed_at.__setitem__(index, clock.monotonic())

        windows = []
        futures: list[WriteFuture] = []
        for group in range(3):  # 3 groups of 100 (7 rounds each), written as the clock moves
            before = clock.monotonic()
            for _ in range(100):
                future = writer.write_event(f"g{group}", routing_key=f"k{len(futures)}")
                future.add_done_callback(record(len(futures)))
                futures.append(future)
            windows.append((before + 5.0, clock.monotonic() + 5.0))
            wait_until(lambda b=before: clock.monotonic() >= b + 2.0, timeout=20)
        wait_until(lambda: all(f.done() for f in futures), timeout=60)
        with pytest.raises(WriteFailedError):
            writer.flush(timeout=10)
        writer.close(timeout=10)
    deadlines = []
    for index, future in enumerate(futures):
        error = future.exception()
        assert isinstance(error, WriteFailedError), error
        low, high = windows[index // 100]
        assert error.deadline is not None and low <= error.deadline <= high, (index, error)
        assert error.deadline <= failed_at[index] <= error.deadline + 0.5, (index, error)
        deadlines.append(error.deadline)
    assert deadlines == sorted(deadlines)
    assert sorted(failed_at, key=failed_at.__getitem__) == sorted(failed_at)


def test_an_orphaned_writer_flushes_and_closes_by_the_deadlines(private_redis: Any) -> None:
    """Item 3: a writer whose Redis is gone for good returns from ``flush()`` (no timeout)
    once every event passed its own deadline, however many rounds are queued: here 20,000
    events in rounds of 160, each failing with ``delivery_timeout=1``; ``close()`` then
    returns at once."""
    with StreamManager.from_url(private_redis.url) as manager:
        manager.create_scope("x")
        manager.create_stream("x", "s", FOUR)
    config = EventWriterConfig(delivery_timeout=1.0, max_batch_events=10)
    with EventStreamClientFactory.from_url("x", private_redis.url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer(), config)
        writer.write_event("warm", routing_key="k").result(10)
        private_redis.stop()
        futures = [writer.write_event(f"e{i}", routing_key=f"k{i}") for i in range(20_000)]
        flushed: list[BaseException] = []
        flusher = threading.Thread(target=lambda: flushed.append(_flush_error(writer)))
        flusher.start()
        flusher.join(30)  # 125 rounds of 1 s each if the timeout were per round
        assert not flusher.is_alive(), "flush() outlived every event's deadline by far"
        writer.close()
    assert isinstance(flushed[0], WriteFailedError)
    assert all(isinstance(f.exception(), WriteFailedError) for f in futures)


def _flush_error(writer: EventStreamWriter[str]) -> BaseException:
    try:
        writer.flush()
    except BaseException as exc:  # what flush raised is what the test checks
        return exc
    return AssertionError("flush() raised nothing")


# -- item 4: the server work of each append --------------------------------------------------
def _command_calls(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()}


def _epochs(client: redis.Redis, factory: EventStreamClientFactory) -> list[list[int]]:
    """The epochs of the entries of each segment of stream ``s``."""
    found = []
    for segment in range(4):
        _, key, _ = factory.connection.keys.segment(factory.scope, "s", segment)
        found.append(sorted({int(entry_id.split(b"-")[1]) for entry_id, _ in client.xrange(key)}))
    return found


def test_a_small_append_sends_the_append_only(private_redis: Any) -> None:
    """Item 4: 200 appends of one event each cost the server one ``EVALSHA`` each and the
    commands the script runs for it: no ``INFO`` (the server's run_id is passed in, learnt once
    per connection) and no ``SCRIPT EXISTS`` (run by SHA). A server without the script
    (``SCRIPT FLUSH``) has it loaded once; a restart (a new server process) is asked again and
    begins a new epoch."""
    with StreamManager.from_url(private_redis.url) as manager:
        manager.create_scope("x")
        manager.create_stream("x", "s", FOUR)
    client = redis.Redis.from_url(private_redis.url)
    with EventStreamClientFactory.from_url("x", private_redis.url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("warm", routing_key="k0").result(10)  # connects, learns the server
        client.config_resetstat()
        for i in range(200):
            writer.write_event(f"e{i}", routing_key=f"k{i}").result(10)
        counted = _command_calls(client)
        assert counted.get("info", 0) == 0 and counted.get("script|exists", 0) == 0, counted
        assert counted["evalsha"] == 200 and counted["xadd"] == 200, counted
        # the script's own commands: HMGET, HGET, TIME, XADD, 2 HSET (and a few of others)
        assert sum(counted.values()) <= 7 * 200 + 20, counted

        client.script_flush()
        client.config_resetstat()
        for i in range(10):
            writer.write_event(f"f{i}", routing_key=f"k{i}").result(10)
        counted = _command_calls(client)
        assert counted["script|load"] == 1 and counted["evalsha"] == 11, counted
        assert counted.get("info", 0) == 0, counted

        before = _epochs(client, factory)
        assert all(len(epochs) == 1 for epochs in before), before
        private_redis.restart()
        client = redis.Redis.from_url(private_redis.url)
        client.config_resetstat()  # (the harness's own start-up probe is not the writer's)
        factory.connection.client.connection_pool.disconnect()  # its sockets died with it
        for i in range(20):  # (keys k0..k19 reach all four segments)
            writer.write_event(f"g{i}", routing_key=f"k{i}").result(30)
        counted = _command_calls(client)
        assert counted["info"] == 2, counted  # the eviction-policy check, the run_id: once each
        after = _epochs(client, factory)
        for old, new in zip(before, after, strict=True):  # the restart began a new epoch
            assert len(new) == 2 and new[0] == old[0], (before, after)
        writer.close()
        assert len(_payloads(factory)) == 231


# -- the factory's close ------------------------------------------------------------------
def test_closing_the_factory_closes_every_writer_though_one_flush_raises(
    connection: Connection, scope: str
) -> None:
    """The first writer's flush raises (its stream was sealed under it): the factory still
    flushes and closes the writers after it (their events land, later writes are refused),
    then raises that first failure."""
    manager = StreamManager(connection)
    manager.create_stream(scope, "other", FOUR)
    made = EventStreamClientFactory(scope, connection)
    doomed = made.create_event_writer("s", UTF8StringSerializer())
    doomed.write_event("one").result(10)
    manager.seal_stream(scope, "s")
    doomed.write_event("two")
    writer = made.create_event_writer("other", UTF8StringSerializer())
    for i in range(50):
        writer.write_event(f"e{i}", routing_key=f"k{i}")
    with pytest.raises(StreamSealedError):
        made.close()
    with pytest.raises(WriterClosedError):
        writer.write_event("late")
    events = list(
        EventStreamClientFactory(scope, connection).create_batch_client().read_events("other")
    )
    assert sorted(event.payload for event in events) == sorted(f"e{i}".encode() for i in range(50))
