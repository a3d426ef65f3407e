"""Faults and hostile input: garbage in the logs, Redis outages, clock skew, ACL users, TLS."""

from __future__ import annotations

import itertools
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readergroup import (
    AccessDeniedError,
    ClientConfig,
    CoordinationError,
    EventStreamClientFactory,
    InvalidRoutingKeyError,
    ReaderGroupConfig,
    ReaderGroupManager,
    SerializationError,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin import acl
from readergroup.core.names import group_sync_name
from readergroup.core.routing import MAX_ROUTING_KEY_BYTES
from statesync import CorruptEntryError
from statesync.clock import Clock
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.tls import TlsProxy, make_certificates

FAST = {"heartbeat_interval": 0.3, "session_timeout": 3.0, "group_refresh_time": 0.05}
_names = itertools.count()


def setup_group(url: str, scope: str, stream: str = "s", **config: Any) -> None:
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, stream)
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group(
            "g", ReaderGroupConfig(streams=[f"{scope}/{stream}"], **{**FAST, **config})
        )


def drain(reader: Any, until: int, timeout: float = 20.0) -> list[Any]:
    got: list[Any] = []
    errors: list[Exception] = []
    deadline = time.monotonic() + timeout
    while len(got) + len(errors) < until and time.monotonic() < deadline:
        try:
            got += reader.read_batch(100, timeout=0.2)
        except SerializationError as exc:
            errors.append(exc)
    return got + errors


fields = st.dictionaries(
    st.binary(min_size=1, max_size=6), st.binary(max_size=20), min_size=1, max_size=5
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(fields, min_size=1, max_size=4))
def test_garbage_segment_entries_give_specific_errors_and_reading_goes_on(
    redis_url: str, garbage: list[dict[bytes, bytes]]
) -> None:
    scope = f"fz{next(_names)}{uuid.uuid4().hex[:6]}"
    setup_group(redis_url, scope)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("before", routing_key="k").result(5)
        meta, events, _ = factory.connection.keys.segment(scope, "s", 0)
        client = redis.Redis.from_url(redis_url)
        for entry in garbage:  # a rogue client writes entries, consecutive ids, no script
            tail = int(client.hget(meta, "events") or 0)
            client.xadd(events, entry, id=f"{tail + 1}-0")
            client.hset(meta, "events", tail + 1)
        writer.write_event("after", routing_key="k").result(5)
        writer.close()
        with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
            results = drain(reader, 2 + len(garbage))
    values = [r.event for r in results if not isinstance(r, Exception)]
    assert values[0] == "before" and values[-1] == "after"  # nothing after the garbage is lost
    assert len(results) == 2 + len(garbage)  # each garbage entry: an event or a specific error
    assert all(isinstance(r, SerializationError) for r in results if isinstance(r, Exception))


@flavoured_on_redis("sync", "async")
def test_garbage_in_the_group_log_is_a_specific_error_naming_the_revision(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    scope = scope + "x"
    setup_group(redis_url, scope)
    with open_factory(scope, redis_url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        reader.read_next_event(timeout=0.2)
        backend = factory.connection.log_backend
        name = group_sync_name(scope, "g")
        bad = backend.append(
            name,
            b"\xc1garbage",
            expected_revision=None,
            writer="rogue",
            sequence=1,
            max_bytes=1 << 20,
        ).revision
        for _ in range(2):  # stays a clear error, never a crash
            with pytest.raises(CoordinationError) as caught:
                for _ in range(40):
                    reader.read_next_event(timeout=0.05)
            cause = caught.value.__cause__
            assert isinstance(cause, CorruptEntryError) and cause.revision == bad
            assert name in str(cause)
        reader._stop.set()


@flavoured_on_redis("sync", "async")
def test_a_reader_rides_out_a_redis_outage(private_redis: Any, open_factory: Any) -> None:
    url = private_redis.url
    setup_group(url, "out", session_timeout=6.0)
    with open_factory("out", url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("one", routing_key="k").result(5)
        assert [e.event for e in drain(reader, 1)] == ["one"]
        private_redis.stop()
        outage_ends = time.monotonic() + 1.5
        while time.monotonic() < outage_ends:
            try:
                reader.read_batch(10, timeout=0.1)
            except Exception as exc:
                assert getattr(exc, "retriable", False), exc
        private_redis.start()
        writer.write_event("two", routing_key="k").result(30)  # the writer backed off and recovered
        assert [e.event for e in drain(reader, 1)] == ["two"]  # so did the reader: still a member
        writer.close()
        reader.close()


class SkewedClock:
    """This client's clock is an hour ahead of everyone else's."""

    def monotonic(self) -> float:
        return time.monotonic() + 3600.0

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@flavoured_on_redis(long=("mixed",))  # 4 s each
def test_clock_skew_between_clients_does_not_break_liveness(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    scope = scope + "k"
    setup_group(redis_url, scope)
    skewed: Clock = SkewedClock()
    with open_factory(scope, redis_url) as factory:
        normal = factory.create_reader("normal", "g", UTF8StringSerializer())
        ahead = factory.create_reader("ahead", "g", UTF8StringSerializer(), clock=skewed)
        group = ReaderGroupManager.from_url(scope, redis_url).get_reader_group("g")
        deadline = time.monotonic() + 4.0  # longer than the session timeout
        while time.monotonic() < deadline:
            normal.read_next_event(timeout=0.05)
            ahead.read_next_event(timeout=0.05)
        assert group.get_online_readers() == ["ahead", "normal"]  # judged on the Redis clock
        normal.close()
        ahead.close()


def acl_user(client: redis.Redis, name: str, scope: str) -> None:
    """A user with the generated admin rules of one scope (``readergroup acl rules``)."""
    client.execute_command(*acl.rules("admin", scope).setuser_args(name, "secret"))


def test_an_acl_user_cannot_touch_another_scope(private_redis: Any) -> None:
    url = private_redis.url
    setup_group(url, "mine")
    setup_group(url, "theirs")
    admin = redis.Redis.from_url(url)
    acl_user(admin, "scoped", "mine")
    config = ClientConfig(redis_options={"username": "scoped", "password": "secret"})
    with EventStreamClientFactory.from_url("mine", url, config) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("allowed", routing_key="k").result(5)
        writer.close()
        with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
            assert [e.event for e in drain(reader, 1)] == ["allowed"]
    with EventStreamClientFactory.from_url("theirs", url, config) as factory:
        with pytest.raises(AccessDeniedError):
            factory.create_event_writer("s", UTF8StringSerializer())
        with pytest.raises(AccessDeniedError):
            factory.create_reader("r", "g", UTF8StringSerializer())
    wrong = ClientConfig(redis_options={"username": "scoped", "password": "nope"})
    with pytest.raises(AccessDeniedError):
        StreamManager.from_url(url, wrong).list_scopes()


def test_tls_with_ca_and_client_certificates(private_redis: Any, tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    proxy = TlsProxy(certs, ("127.0.0.1", private_redis.port))
    try:
        url = f"rediss://127.0.0.1:{proxy.port}/0"
        options = {
            "ssl_ca_certs": certs["ca.crt"],
            "ssl_certfile": certs["client.crt"],
            "ssl_keyfile": certs["client.key"],
        }
        config = ClientConfig(redis_options=options)
        setup_group(private_redis.url, "tls")
        with EventStreamClientFactory.from_url("tls", url, config) as factory:
            factory.create_event_writer("s", UTF8StringSerializer()).write_event("secret").result(5)
            with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
                assert [e.event for e in drain(reader, 1)] == ["secret"]
        no_client_cert = ClientConfig(redis_options={"ssl_ca_certs": certs["ca.crt"]})
        with pytest.raises(Exception):  # refused by the TLS endpoint
            StreamManager.from_url(url, no_client_cert).list_scopes()
    finally:
        proxy.close()


def test_routing_keys_must_be_valid_utf8_and_at_most_the_documented_size(
    factory: Any, scope: str
) -> None:
    StreamManager(factory.connection).create_stream(scope, "s")
    writer = factory.create_event_writer("s", UTF8StringSerializer())
    with pytest.raises(InvalidRoutingKeyError, match="not valid UTF-8"):
        writer.write_event("x", routing_key="a\ud800b")  # a lone surrogate
    too_long = "é" * (MAX_ROUTING_KEY_BYTES // 2 + 1)  # 2 bytes each in UTF-8
    with pytest.raises(InvalidRoutingKeyError, match="longer than 1024 bytes"):
        writer.write_event("x", routing_key=too_long)
    longest = "é" * (MAX_ROUTING_KEY_BYTES // 2)
    writer.write_event("fits", routing_key=longest).result(5)  # the writer is still fine
    writer.close()
    events = list(factory.create_batch_client().read_events("s"))
    assert [e.routing_key for e in events] == [longest]
