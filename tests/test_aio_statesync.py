"""The asyncio synchronizer beside the threaded one: one log, both kinds of client (mixed
contention, every update exactly once), cancellation at any await, the event loop never
blocked, and the async Redis backend's endpoints (ACL user, TLS; a Cluster client refused).

The behavioural suite itself runs on both synchronizers in ``tests/test_synchronizer.py``."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from statesync import (
    Acks,
    AsyncMemoryLogBackend,
    AsyncStateSynchronizer,
    BackendAccessError,
    BackendUnsupportedError,
    MemoryLogBackend,
    RetryPolicy,
    StateSynchronizer,
    SyncConfig,
    Update,
)
from statesync.aio_backend import AsyncLogBackend
from statesync.aio_redis_backend import AsyncRedisLogBackend
from statesync.backend import LogBackend
from statesync.redis_backend import RedisLogBackend
from tests.support.tls import TlsProxy, make_certificates


@dataclass(frozen=True)
class Record(Update):
    """Adds ``token`` to the done list, decided on a state with ``seen`` tokens done: applied
    on any other state it raises (a lost update, or an entry applied on a state its writer
    did not decide on, would poison the log and fail the test)."""

    token: str
    seen: int

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        if len(state["done"]) != self.seen:
            raise ValueError(f"{self.token} decided on {self.seen} done, applied on more")
        return {"done": [*state["done"], self.token]}


TYPES = [Record]
CONTENDED = SyncConfig(retry=RetryPolicy(max_attempts=100_000, deadline=60.0, max_delay=0.01))


def record(token: str) -> Any:
    """An update_state generator: record ``token`` on the state it is given."""

    def decide(state: dict[str, Any]) -> Any:
        return [Record(token, len(state["done"]))], token

    return decide


@dataclass
class Logs:
    """The two faces of one backend's logs: blocking and asyncio (a new async backend per
    event loop: a ``redis.asyncio`` client belongs to the loop it first ran in)."""

    blocking: LogBackend
    url: str | None

    def new_async(self) -> AsyncLogBackend:
        if self.url is None:
            assert isinstance(self.blocking, MemoryLogBackend)
            return AsyncMemoryLogBackend(self.blocking)
        return AsyncRedisLogBackend.from_url(self.url)


@pytest.fixture(params=["memory", "redis"])
def logs(request: pytest.FixtureRequest) -> Iterator[Logs]:
    if request.param == "memory":
        yield Logs(MemoryLogBackend(), None)
        return
    url = request.getfixturevalue("redis_url")
    blocking = RedisLogBackend.from_url(url)
    try:
        yield Logs(blocking, url)
    finally:
        blocking.close()


def final_tokens(logs: Logs, name: str) -> list[str]:
    check = StateSynchronizer(logs.blocking, name, update_types=TYPES)
    check.fetch_updates()
    done: list[str] = check.state["done"]
    assert check.revision == len(done)  # one token per entry, each entry applied once
    return done


def test_sync_and_async_clients_contend_on_one_log_and_every_update_lands_once(
    logs: Logs, unique_name: str
) -> None:
    StateSynchronizer(logs.blocking, unique_name, update_types=TYPES).initialize({"done": []})
    per_writer, threads_n, tasks_n = 12, 2, 6
    results: dict[str, list[str]] = {}

    def threaded(writer: str) -> None:
        sync = StateSynchronizer(logs.blocking, unique_name, update_types=TYPES, config=CONTENDED)
        results[writer] = [sync.update_state(record(f"{writer}-{n}")) for n in range(per_writer)]

    async def asynchronous() -> None:
        backend = logs.new_async()

        async def writer(label: str) -> None:
            sync = AsyncStateSynchronizer(
                backend, unique_name, update_types=TYPES, config=CONTENDED
            )
            results[label] = [
                await sync.update_state(record(f"{label}-{n}")) for n in range(per_writer)
            ]

        try:
            await asyncio.gather(*(writer(f"a{n}") for n in range(tasks_n)))
        finally:
            await backend.close()

    threads = [threading.Thread(target=threaded, args=(f"t{n}",)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    asyncio.run(asynchronous())
    for thread in threads:
        thread.join(60)
    done = final_tokens(logs, unique_name)
    everyone = [token for tokens in results.values() for token in tokens]
    assert len(everyone) == per_writer * (threads_n + tasks_n)
    assert sorted(done) == sorted(everyone)  # every update exactly once, none lost
    for writer, tokens in results.items():  # each writer's own updates in its order
        assert [t for t in done if t.startswith(f"{writer}-")] == tokens


async def _cancel_at_random(
    logs: Logs, name: str, rng: random.Random, rounds: int
) -> dict[str, Any]:
    """``rounds`` updates and waits of several asyncio synchronizers (and one thread's
    synchronizer, contending), each cancelled at a random point or left to finish."""
    backend = logs.new_async()
    syncs = [
        AsyncStateSynchronizer(backend, name, update_types=TYPES, config=CONTENDED)
        for _ in range(4)
    ]
    succeeded: set[str] = set()
    cancelled: set[str] = set()
    seen_states: list[tuple[int, list[str]]] = []
    stop = threading.Event()
    turns = threading.Semaphore(0)  # one rival update per round, at its own pace in it
    rival_tokens: list[str] = []

    def rival() -> None:  # a threaded client contending all along
        sync = StateSynchronizer(logs.blocking, name, update_types=TYPES, config=CONTENDED)
        n = 0
        while not stop.is_set():
            if turns.acquire(timeout=0.05):
                rival_tokens.append(sync.update_state(record(f"rival-{n}")))
                n += 1

    thread = threading.Thread(target=rival)
    thread.start()
    try:
        for n in range(rounds):
            sync = rng.choice(syncs)
            token = f"u{n}"
            if rng.random() < 0.25:
                operation: Any = sync.wait_for_updates(rng.uniform(0, 0.01))
                token = ""
            else:
                operation = sync.update_state(record(token))
            task = asyncio.ensure_future(operation)
            turns.release()
            if rng.random() < 0.5:
                await asyncio.sleep(rng.uniform(0, 0.002))
            else:
                for _ in range(rng.randrange(6)):
                    await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                cancelled.add(token)
            else:
                succeeded.add(token)
            if sync.is_loaded:  # never a torn replica: a state the log had, at its revision
                seen_states.append((sync.revision, list(sync.state["done"])))
        for sync in syncs:  # every one of them still usable
            await sync.fetch_updates()
            token = f"after-{id(sync)}"
            assert await sync.update_state(record(token)) == token
            succeeded.add(token)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 60)
        await backend.close()
    return {
        "succeeded": succeeded - {""},
        "cancelled": cancelled - {""},
        "seen": seen_states,
        "rival": rival_tokens,
        "cancellations": len(cancelled),
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_random_cancellations_never_apply_twice_nor_tear_a_replica(
    logs: Logs, unique_name: str, seed: int
) -> None:
    StateSynchronizer(logs.blocking, unique_name, update_types=TYPES).initialize({"done": []})
    outcome = asyncio.run(_cancel_at_random(logs, unique_name, random.Random(seed), 400))
    done = final_tokens(logs, unique_name)
    assert len(done) == len(set(done))  # never a duplicate application
    assert outcome["succeeded"] <= set(done)  # every reported success landed
    ours = {t for t in done if not t.startswith("rival-")}
    # the rest raced their cancellation: cancelled calls whose append landed anyway
    assert ours - outcome["succeeded"] <= outcome["cancelled"]
    assert [t for t in done if t.startswith("rival-")] == outcome["rival"]
    for revision, state in outcome["seen"]:
        assert state == done[:revision]
    assert outcome["cancellations"] >= 100  # hundreds of rounds, most of them cancelled


def test_a_waiting_task_does_not_block_the_loop_nor_hold_up_its_synchronizer(
    logs: Logs, unique_name: str
) -> None:
    async def scenario() -> None:
        backend = logs.new_async()
        sync = AsyncStateSynchronizer(backend, unique_name, update_types=TYPES)
        try:
            await sync.initialize({"done": []})
            waiters = [asyncio.ensure_future(sync.wait_for_updates(30.0)) for _ in range(50)]
            await asyncio.sleep(0.05)
            assert not any(w.done() for w in waiters)
            # the same instance appends while fifty waits of it are parked
            await asyncio.wait_for(sync.update_state(record("x")), 10)
            other = StateSynchronizer(logs.blocking, unique_name, update_types=TYPES)
            await asyncio.to_thread(other.update_state, record("y"))
            assert await asyncio.wait_for(asyncio.gather(*waiters), 10) == [True] * 50
            assert await sync.fetch_updates() == 1  # "y"
            waiting = asyncio.ensure_future(sync.wait_for_updates(30.0))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            waiting.cancel()  # a cancelled wait leaves nothing behind
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert sync.state == {"done": ["x", "y"]}
            assert not await sync.wait_for_updates(0.01)
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_hundreds_of_followers_wait_in_one_loop_without_a_thread_each(
    logs: Logs, unique_name: str
) -> None:
    writer = StateSynchronizer(logs.blocking, unique_name, update_types=TYPES)
    writer.initialize({"done": []})

    async def scenario() -> None:
        backend = logs.new_async()
        followers = [
            AsyncStateSynchronizer(backend, unique_name, update_types=TYPES) for _ in range(300)
        ]
        try:
            await asyncio.gather(*(f.fetch_updates() for f in followers))
            threads = threading.active_count()
            waits = [asyncio.ensure_future(f.wait_for_updates(30.0)) for f in followers]
            await asyncio.sleep(0.1)  # every wait parked
            assert threading.active_count() == threads  # tasks of this loop, no thread each
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, writer.update_state, record("all"))
            assert await asyncio.wait_for(asyncio.gather(*waits), 20) == [True] * 300
            assert await asyncio.gather(*(f.fetch_updates() for f in followers)) == [1] * 300
            assert all(f.state == {"done": ["all"]} for f in followers)
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_an_async_writers_appends_are_read_by_a_threaded_follower_that_waits(
    logs: Logs, unique_name: str
) -> None:
    follower = StateSynchronizer(logs.blocking, unique_name, update_types=TYPES)

    async def scenario() -> None:
        backend = logs.new_async()
        async with AsyncStateSynchronizer(backend, unique_name, update_types=TYPES) as writer:
            await writer.initialize({"done": []})
            follower.fetch_updates()
            woke = asyncio.ensure_future(asyncio.to_thread(follower.wait_for_updates, 30.0))
            await asyncio.sleep(0.05)
            await writer.update_state(record("a"))
            assert await asyncio.wait_for(woke, 10)
            await writer.update_state_unconditionally([Record("b", 1)])
            assert (await writer.compact()).compacted
        await backend.close()

    asyncio.run(scenario())
    follower.fetch_updates()
    assert follower.state == {"done": ["a", "b"]} and follower.revision == 2


def test_the_async_redis_backend_logs_in_as_an_acl_user(redis_url: str, unique_name: str) -> None:
    root = redis.Redis.from_url(redis_url)
    user = f"u{unique_name[-8:]}"
    root.acl_setuser(user, enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
    host, port = (
        root.connection_pool.connection_kwargs["host"],
        root.connection_pool.connection_kwargs["port"],
    )

    async def scenario() -> None:
        url = f"redis://{user}:s3cret@{host}:{port}/0"
        async with AsyncStateSynchronizer.from_url(url, unique_name, update_types=TYPES) as sync:
            await sync.initialize({"done": []})
            await sync.update_state(record("acl"))
        wrong = AsyncRedisLogBackend.from_url(f"redis://{user}:nope@{host}:{port}/0")
        with pytest.raises(BackendAccessError) as caught:
            await AsyncStateSynchronizer(wrong, unique_name, update_types=TYPES).fetch_updates()
        assert "nope" not in str(caught.value) and "s3cret" not in repr(caught.value)
        await wrong.close()

    try:
        asyncio.run(scenario())
    finally:
        root.acl_deluser(user)
        root.close()
    assert final_tokens(Logs(RedisLogBackend.from_url(redis_url), redis_url), unique_name) == [
        "acl"
    ]


def test_the_async_redis_backend_speaks_tls(
    redis_handle: Any, tmp_path: Path, unique_name: str
) -> None:
    certs = make_certificates(tmp_path)
    port = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs["port"]
    proxy = TlsProxy(certs, ("127.0.0.1", port))

    async def scenario() -> None:
        backend = AsyncRedisLogBackend.from_url(
            f"rediss://127.0.0.1:{proxy.port}/0",
            ssl_ca_certs=certs["ca.crt"],
            ssl_certfile=certs["client.crt"],
            ssl_keyfile=certs["client.key"],
        )
        async with AsyncStateSynchronizer(
            backend, unique_name, update_types=TYPES, close_backend=True
        ) as sync:
            await sync.initialize({"done": []})
            await sync.update_state(record("tls"))
            assert sync.state == {"done": ["tls"]}

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()


def test_a_cluster_client_needs_its_blocking_twin() -> None:
    client = RedisCluster(host="127.0.0.1", port=7000)  # (connects lazily: never here)
    with pytest.raises(BackendUnsupportedError, match="blocking_client"):
        AsyncRedisLogBackend(client)


@pytest.mark.parametrize(
    "replicas",
    [0, pytest.param(1, marks=pytest.mark.long)],  # 1: about 8 s, six nodes started
)
def test_the_async_redis_backend_on_a_cluster(unique_name: str, replicas: int) -> None:
    """On three primaries (``replicas``: each with that many replicas, and appends then
    acknowledged by one of them: an append and its ``WAIT`` on one node's connection)."""
    from readergroup.testing.embedded_redis import local_redis_cluster

    async def scenario(url: str) -> None:
        backend = AsyncRedisLogBackend(
            RedisCluster.from_url(url),
            blocking_client=RedisCluster.from_url(url, socket_timeout=10.0),
            acks=Acks.parse(f"replicas={replicas}" if replicas else "leader"),
        )
        async with AsyncStateSynchronizer(
            backend, unique_name, update_types=TYPES, close_backend=True
        ) as sync:
            await sync.initialize({"done": []})
            follower = AsyncStateSynchronizer(backend, unique_name, update_types=TYPES)
            await follower.fetch_updates()
            waiting = asyncio.ensure_future(follower.wait_for_updates(30.0))
            await sync.update_state(record("c1"))
            assert await asyncio.wait_for(waiting, 10)
            await sync.update_state_unconditionally([Record("c2", 1)])
            assert (await sync.compact()).compacted
            assert await follower.fetch_updates() == 2
            assert follower.state == {"done": ["c1", "c2"]}
            assert await sync.delete()

    with local_redis_cluster(3, replicas=replicas) as cluster:
        asyncio.run(scenario(cluster.url))


def test_the_async_redis_backend_finds_the_primary_through_sentinels(unique_name: str) -> None:
    from readergroup.testing.embedded_redis import local_sentinel_group

    async def scenario(url: str) -> None:
        async with AsyncStateSynchronizer.from_url(url, unique_name, update_types=TYPES) as sync:
            await sync.initialize({"done": []})
            await sync.update_state(record("through-sentinels"))

    with local_sentinel_group(replicas=1, sentinels=3) as group:
        asyncio.run(scenario(group.url))
        primary = redis.Redis(port=group.primary_port())
        with StateSynchronizer(RedisLogBackend(primary), unique_name, update_types=TYPES) as check:
            check.fetch_updates()
            assert check.state == {"done": ["through-sentinels"]}


def test_a_lost_reply_to_an_async_append_is_resent_and_lands_once(
    redis_handle: Any, unique_name: str
) -> None:
    from tests.support.proxy import ReplyDroppingProxy

    target = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs

    async def scenario(proxy: ReplyDroppingProxy) -> AsyncStateSynchronizer[Any]:
        backend = AsyncRedisLogBackend.from_url(proxy.url)
        sync = AsyncStateSynchronizer(backend, unique_name, update_types=TYPES, close_backend=True)
        await sync.initialize({"done": []})
        await sync.update_state(record("first"))  # the append script loaded: no NOSCRIPT below
        for n in range(5):
            proxy.drop_next_reply()  # the server runs the append; its reply never arrives
            assert await sync.update_state(record(f"lost-{n}")) == f"lost-{n}"
        await sync.close()
        return sync

    with ReplyDroppingProxy(target["host"], target["port"]) as proxy:
        sync = asyncio.run(scenario(proxy))
        assert proxy.dropped == 5
    # each append landed once: re-sent with its writer sequence, found a duplicate
    assert sync.stats.duplicates == 5 and sync.stats.appends == 1
    logs = Logs(RedisLogBackend.from_url(redis_handle.url), redis_handle.url)
    assert final_tokens(logs, unique_name) == ["first", *(f"lost-{n}" for n in range(5))]
