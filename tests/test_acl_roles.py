"""Each role's whole life under its generated ACL rules, on each server of the matrix
(``each_server``: the embedded Valkey 8 and Debian's Redis 7.0).

The users are made from :func:`readergroup.admin.acl.rules` as they are printed; a test fails
on any permission error: raised, logged (any WARNING record naming NOPERM or an access
denial), or recorded by the server (``ACL LOG``, which also holds the denials a client library
swallows, such as redis-py's ``CLIENT SETINFO`` on connect).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    StreamSealedError,
    UTF8StringSerializer,
)
from readergroup.admin import acl
from readergroup.cli import main
from readergroup.client.transactions import TransactionalWriterConfig
from readergroup.storage.keys import KeyLayout
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.waiting import wait_until
from tests.test_key_hygiene import split
from tests.test_layout_migration import old_layout

PASSWORD = "role-pw-7f3a"
FAST = {"heartbeat_interval": 0.2, "session_timeout": 2.0, "group_refresh_time": 0.05}
DENIAL_WORDS = ("NOPERM", "no permissions", "AccessDenied", "access denied", "refused")


@pytest.fixture
def root(each_server: LocalRedisServer) -> Iterator[redis.Redis]:
    """The default user (sets up what the role may not, reads the ACL LOG); the ACL LOG is
    emptied first and must be empty of the roles' denials at the end."""
    client = redis.Redis.from_url(each_server.url)
    client.execute_command("ACL", "LOG", "RESET")
    yield client
    client.close()


@pytest.fixture
def no_denials(root: redis.Redis, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail on a permission error logged at WARNING or above, or recorded by the server."""
    caplog.set_level(logging.WARNING)
    yield
    logged = [
        r.getMessage() + (f" {r.exc_info[1]}" if r.exc_info else "")
        for r in caplog.records
        if r.levelno >= logging.WARNING
    ]
    denials = [line for line in logged if any(w.lower() in line.lower() for w in DENIAL_WORDS)]
    assert not denials, denials
    entries = root.execute_command("ACL", "LOG")
    assert not entries, f"the server denied: {entries}"


def user(root: redis.Redis, role: str, scope: str | None) -> ClientConfig:
    """A user with ``role``'s generated rules (as ``readergroup acl rules`` prints them)."""
    name = f"u-{role}-{uuid.uuid4().hex[:6]}"
    assert root.execute_command(*acl.rules(role, scope).setuser_args(name, PASSWORD)) in (
        b"OK",
        "OK",
    )
    return ClientConfig(redis_options={"username": name, "password": PASSWORD})


def new_scope(url: str, partitions: int = 1) -> str:
    """A scope with stream ``s`` (``partitions`` segments, retention by consumption)."""
    scope = f"r{uuid.uuid4().hex[:8]}"
    config = StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(partitions), retention=RetentionPolicy()
    )
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s", config)
    return scope


def write(url: str, scope: str, texts: list[str], config: ClientConfig | None = None) -> None:
    with (
        EventStreamClientFactory.from_url(scope, url, config) as factory,
        factory.create_event_writer("s", UTF8StringSerializer()) as writer,
    ):
        for i, text in enumerate(texts):
            writer.write_event(text, routing_key=f"k{i}")
        writer.flush()


def read_all(url: str, scope: str) -> list[str]:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        client = factory.create_batch_client()
        return [UTF8StringSerializer().deserialize(e.payload) for e in client.read_events("s")]


class Reading:
    """A reader in a thread, recording the events and checkpoints handed to it."""

    def __init__(self, factory: EventStreamClientFactory, reader_id: str) -> None:
        self.reader = factory.create_reader(reader_id, "g", UTF8StringSerializer())
        self.events: list[str] = []
        self.checkpoints: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            for event in self.reader.read_batch(50, timeout=0.05):
                if event.is_checkpoint:
                    self.checkpoints.append(str(event.checkpoint_name))
                elif event.event is not None:
                    self.events.append(event.event)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.reader.close()


def test_writer_through_a_scale_and_a_seal(
    each_server: LocalRedisServer, root: redis.Redis, no_denials: None
) -> None:
    url = each_server.url
    scope = new_scope(url)
    config = user(root, "writer", scope)
    with (
        StreamManager.from_url(url) as admin,
        EventStreamClientFactory.from_url(scope, url, config) as factory,
    ):
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        for i in range(10):
            writer.write_event(f"a{i}", routing_key=f"k{i}")
        writer.flush()
        split(admin, scope, "s")
        for i in range(10):
            writer.write_event(f"b{i}", routing_key=f"k{i}")
        writer.flush()
        assert len(admin.get_stream_info(scope, "s").active_segments) == 2
        admin.seal_stream(scope, "s")
        late = writer.write_event("late", routing_key="k")
        with pytest.raises(StreamSealedError):
            late.result(10)
        with pytest.raises(StreamSealedError):
            writer.close()  # what it could not write is reported again, never dropped silently
    written = [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)]
    assert sorted(read_all(url, scope)) == sorted(written)


def test_reader_through_a_split_a_checkpoint_a_reset_and_leaving_last(
    each_server: LocalRedisServer, root: redis.Redis, no_denials: None
) -> None:
    url = each_server.url
    scope = new_scope(url)
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
    first = [f"a{i}" for i in range(20)]
    write(url, scope, first)
    config = user(root, "reader", scope)
    with EventStreamClientFactory.from_url(scope, url, config) as factory:
        readers = [Reading(factory, "r1"), Reading(factory, "r2")]
        seen = lambda: sorted(e for r in readers for e in r.events)  # noqa: E731
        wait_until(lambda: seen() == sorted(first), 20, "the first events read")
        with StreamManager.from_url(url) as admin:
            split(admin, scope, "s")  # the readers seal segment 0 and take its successors
        second = [f"b{i}" for i in range(20)]
        write(url, scope, second)
        wait_until(lambda: seen() == sorted(first + second), 20, "the events after the split")
        with ReaderGroupManager.from_url(scope, url, config) as rgm:
            group = rgm.get_reader_group("g")
            checkpoint = group.initiate_checkpoint("cp", timeout=20)
            assert all(r.checkpoints == ["cp"] for r in readers)
            group.reset_reader_group(checkpoint, timeout=20)
            with StreamManager.from_url(url, config) as sm:
                RetentionManager(sm).publish(
                    scope, "s", "ext", checkpoint.stream_cuts[f"{scope}/s"]
                )
            group.get_metrics()
            group.generate_stream_cuts(timeout=20)
        readers[1].close()
        readers[0].close()  # the last reader leaves: its group's heartbeat hash goes too
    keys = KeyLayout("rg")
    with ReaderGroupManager.from_url(scope, url) as rgm:
        group = rgm.get_reader_group("g")
        assert group.get_online_readers() == []
        assert not root.exists(keys.heartbeats(group.sync.name))


def test_admin_creates_and_deletes(
    each_server: LocalRedisServer, root: redis.Redis, no_denials: None
) -> None:
    url = each_server.url
    scope = f"a{uuid.uuid4().hex[:8]}"
    with StreamManager.from_url(url) as operator:
        operator.create_scope(scope)
    config = user(root, "admin", scope)
    with StreamManager.from_url(url, config) as sm:
        sm.create_scope(scope)  # already there: fine
        sm.create_stream(scope, "s", StreamConfiguration(retention=RetentionPolicy()))
        assert sm.list_streams(scope) == ["s"]
        write(url, scope, [f"e{i}" for i in range(10)], config)
        split(sm, scope, "s")
        with ReaderGroupManager.from_url(scope, url, config) as rgm:
            rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
            assert rgm.list_reader_groups() == ["g"]
            RetentionManager(sm).publish(scope, "s", "ext", sm.head_cut(scope, "s"))
            RetentionManager(sm).apply(scope, "s")
            sm.truncate_stream(scope, "s", sm.head_cut(scope, "s"))
            assert rgm.delete_reader_group("g")
        sm.seal_stream(scope, "s")
        assert sm.delete_stream(scope, "s")
        assert sm.list_streams(scope) == []


def test_operator_migrates_and_manages_scopes(
    each_server: LocalRedisServer, root: redis.Redis, no_denials: None
) -> None:
    url = each_server.url
    tag = uuid.uuid4().hex[:6]
    old_layout(url, f"m{tag}", f"n{tag}")
    config = user(root, "operator", None)
    name = config.redis_options["username"]
    done = CliRunner().invoke(
        main,
        ["admin", "migrate", "--redis-url", url, "--username", name, "--password", PASSWORD],
    )
    assert done.exit_code == 0, done.output
    assert "migrated 2 scopes" in done.output
    with StreamManager.from_url(url, config) as sm:
        assert {f"m{tag}", f"n{tag}"} <= set(sm.list_scopes())
        assert sm.list_streams(f"m{tag}") == ["s"]
        sm.create_scope(f"o{tag}")
        sm.create_stream(f"o{tag}", "s")
        sm.seal_stream(f"o{tag}", "s")
        sm.delete_stream(f"o{tag}", "s")
        assert sm.delete_scope(f"o{tag}")
        assert f"o{tag}" not in sm.list_scopes()


def test_transactions_under_the_writer_role_and_their_deletion_under_the_admin_role(
    each_server: LocalRedisServer, root: redis.Redis, no_denials: None
) -> None:
    """Issue 31: a transactional writer's whole life (begin, stage, commit, abort, resume,
    fencing, the sweep of an expired one, consume-transform-produce claims) as the writer
    role; listing and aborting as the admin, who then deletes the stream and its
    transactions."""
    url = each_server.url
    scope = new_scope(url, partitions=2)
    config = user(root, "writer", scope)
    fast = TransactionalWriterConfig(transactional_id="w", lease=0.2, sweep_every=0)
    with EventStreamClientFactory.from_url(scope, url, config) as factory:
        writer = factory.create_transactional_writer("s", UTF8StringSerializer(), fast)
        done = writer.begin()
        for i in range(20):
            done.write_event(f"t{i}", routing_key=f"k{i}")
        done.flush()
        done.commit()
        writer.begin().abort()
        left = writer.begin()
        left.write_event("never", routing_key="k")
        left.flush()
        wait_until(lambda: writer.get_txn(left.id).status().value == "ABORTED", what="expiry")
        writer.sweep()
        kept = writer.begin()
        kept.write_event("open", routing_key="k")
        kept.flush()
        resumed = factory.create_transactional_writer(
            "s", UTF8StringSerializer(), TransactionalWriterConfig(transactional_id="other")
        ).get_txn(kept.id)
        assert resumed.status().value == "OPEN"
        writer.store.claim("g", 0, [(f"{scope}/in/0", 3)])
    assert sorted(read_all(url, scope)) == sorted(f"t{i}" for i in range(20))
    admin = user(root, "admin", scope)
    login = ["--redis-url", url, "--username", admin.redis_options["username"]]
    login += ["--password", PASSWORD, "--json"]
    listed = CliRunner().invoke(main, [*login, "txn", "list", f"{scope}/s"])
    assert listed.exit_code == 0, listed.output
    assert [t["id"] for t in json.loads(listed.output)["transactions"]] == [kept.id]
    aborted = CliRunner().invoke(main, [*login, "txn", "abort", f"{scope}/s", kept.id])
    assert aborted.exit_code == 0, aborted.output
    with StreamManager.from_url(url, admin) as sm:
        sm.seal_stream(scope, "s")
        assert sm.delete_stream(scope, "s")
    left_keys = list(root.scan_iter(match=f"rg:{{txn:{scope}/*", count=1000))
    assert left_keys == []
