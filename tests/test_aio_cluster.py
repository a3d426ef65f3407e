"""The asyncio API on a real local 3-master Redis Cluster (issue 29): readers over segments on
every master (one ``XREAD`` per slot, the slots of a node in one round trip), a group of
threaded and asyncio readers, the asyncio writer (appends per node), scaling, deleting a
stream, transactions; a slot moved under the client (``MOVED``) and one being migrated
(``ASK``)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import redis
import redis.cluster

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    TransactionalWriterConfig,
    TxnStatus,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory, AsyncStreamManager
from readergroup.core.errors import (
    EmbeddedRedisError,
    InvalidConfigError,
    RedisFailoverError,
    RedisUnavailableError,
    UnsafeServerConfigError,
)
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.keys import KeyLayout
from readergroup.storage.segment_records import LAST_EPOCH, AppendBatch
from readergroup.testing.embedded_redis import LocalRedisCluster, local_redis_cluster
from tests.support.model import ALL_TYPES, Add
from tests.test_cluster import CLUSTER, cluster  # noqa: F401 (a fixture)

GROUP = {"heartbeat_interval": 0.3, "session_timeout": 3.0, "group_refresh_time": 0.1}
SERIALIZER = UTF8StringSerializer()
FAILOVER_SESSION = 10.0
"""The session timeout of the group that rides out a failover: longer than a SIGKILLed
primary's replacement takes (node timeout 1 s, then the election), so its readers keep their
segments and read each event once. With 3 s, a slow promotion on a loaded CI machine fenced
both readers; they rejoined and read again from their committed positions (918 duplicates of
3,750: at least once, as the group promises, but not this test's exactly once)."""


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def masters_of(url: str, keys: Sequence[str]) -> set[str]:
    """The primaries serving ``keys`` now."""
    with redis.cluster.RedisCluster.from_url(url) as root:
        return {root.get_node_from_key(key).name for key in keys}


async def set_up(url: str, scope: str, segments: int, *streams: str) -> None:
    async with AsyncStreamManager.from_url(url, CLUSTER) as manager:
        await manager.create_scope(scope)
        fixed = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        for stream in streams:
            await manager.create_stream(scope, stream, fixed)


async def write(factory: AsyncEventStreamClientFactory, stream: str, numbers: range) -> None:
    writer = await factory.create_event_writer(stream, SERIALIZER)
    for n in numbers:
        await writer.send(f"k{n % 30}:{n}", routing_key=f"k{n % 30}")
    await writer.close()


async def read_until(readers: list[Any], got: dict[str, list[Any]], total: int) -> None:
    """Read with every asyncio reader at once until ``total`` events arrived (30 s at most)."""
    deadline = time.monotonic() + 30

    async def read(reader: Any) -> None:
        while sum(map(len, got.values())) < total and time.monotonic() < deadline:
            got[reader.reader_id] += await reader.read_batch(200, timeout=0.1)

    await asyncio.gather(*map(read, readers))


async def group_reads(
    url: str,
    scope: str,
    segments: int,
    readers: int,
    produce: Callable[[AsyncEventStreamClientFactory], Awaitable[None]],
    total: int,
) -> dict[str, list[Any]]:
    """Stream ``scope/s`` of ``segments``, group ``g`` of ``readers`` asyncio readers reading
    while ``produce(factory)`` writes ``total`` events: what each reader read."""
    await set_up(url, scope, segments, "s")
    async with AsyncEventStreamClientFactory.from_url(scope, url, CLUSTER) as factory:
        await factory.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **GROUP))
        members = [await factory.create_reader(f"r{i}", "g", SERIALIZER) for i in range(readers)]
        got: dict[str, list[Any]] = {r.reader_id: [] for r in members}
        await asyncio.gather(produce(factory), read_until(members, got, total))
        for reader in members:
            await reader.close()
        return got


def assert_once_in_order(got: dict[str, list[Any]], total: int) -> None:
    """Every event read exactly once; each reader saw each routing key's events in order."""
    events = [e for reads in got.values() for e in reads]
    assert sorted(int(e.event.split(":")[1]) for e in events) == list(range(total))
    for name, reads in got.items():
        mine: dict[str, list[int]] = defaultdict(list)
        for e in reads:
            mine[e.routing_key].append(int(e.event.split(":")[1]))
        assert all(seq == sorted(seq) for seq in mine.values()), name


def test_an_asyncio_group_reads_segments_on_every_master_once_and_in_order(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    scope = unique("ag")
    layout = KeyLayout("rg")
    assert len(masters_of(cluster.url, [layout.segment(scope, "s", s).meta for s in range(9)])) == 3

    async def produce(factory: AsyncEventStreamClientFactory) -> None:
        await write(factory, "s", range(1500))

    got = asyncio.run(group_reads(cluster.url, scope, 9, 3, produce, 1500))
    assert_once_in_order(got, 1500)
    assert sum(1 for reads in got.values() if reads) >= 2  # the segments were shared


def test_async_for_on_a_cluster_waits_and_wakes(cluster: LocalRedisCluster) -> None:  # noqa: F811
    """A reader idle on the cluster (its log and its segments on different slots) gets an
    event written later through ``async for``."""
    scope = unique("af")

    async def scenario() -> list[str]:
        await set_up(cluster.url, scope, 3, "s")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            await factory.create_reader_group(
                "g", ReaderGroupConfig(streams=[f"{scope}/s"], **GROUP)
            )
            seen: list[str] = []
            async with await factory.create_reader("r", "g", SERIALIZER) as reader:

                async def consume() -> None:
                    async for event in reader:
                        if not event.is_checkpoint and event.event is not None:
                            seen.append(event.event)
                            if len(seen) == 3:
                                return

                consuming = asyncio.ensure_future(consume())
                await asyncio.sleep(0.3)  # (the reader parks with nothing to read)
                assert not consuming.done()
                await write(factory, "s", range(3))
                await asyncio.wait_for(consuming, 15)
            return seen

    assert sorted(asyncio.run(scenario())) == ["k0:0", "k1:1", "k2:2"]


def test_an_idle_reader_after_full_batches_does_not_spin(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    """A reader that read full batches (more was waiting) then finds nothing: as the threaded
    reader on a cluster, it reads no further ahead (a read ahead cannot block across slots)
    and waits in blocking reads, a few per second, not in a loop of non-blocking ones."""
    scope = unique("sp")
    counted: dict[str, int] = defaultdict(int)

    async def scenario() -> None:
        await set_up(cluster.url, scope, 6, "s")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            await factory.create_reader_group(
                "g", ReaderGroupConfig(streams=[f"{scope}/s"], **GROUP)
            )
            await write(factory, "s", range(20_000))
            reader = await factory.create_reader("r", "g", SERIALIZER)
            await read_until([reader], {"r": []}, 20_000)
            reads = reader._fetcher._reads  # (the reader's segment reads: counted)
            xread = reads.xread

            async def counting(positions: Any, limit: int, block: float | None = None) -> Any:
                counted["blocking" if block else "not blocking"] += 1
                return await xread(positions, limit, block)

            reads.xread = counting
            async with asyncio.timeout(10):
                for _ in range(5):  # (about 1 s: group_refresh_time each)
                    assert await reader.read_batch(100, timeout=0.2) == []
            await reader.close()

    asyncio.run(scenario())
    assert counted["not blocking"] <= 10 and counted["blocking"] <= 40, dict(counted)


def test_a_group_of_threaded_and_asyncio_readers_on_a_cluster(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    scope = unique("mx")
    total = 1200
    got: dict[str, list[Any]] = defaultdict(list)
    stop = threading.Event()

    def threaded() -> None:
        with EventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            reader = factory.create_reader("threaded", "g", SERIALIZER)
            while not stop.is_set():
                got["threaded"] += reader.read_batch(200, timeout=0.1)
            reader.close()

    async def scenario() -> None:
        await set_up(cluster.url, scope, 6, "s")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            await factory.create_reader_group(
                "g", ReaderGroupConfig(streams=[f"{scope}/s"], **GROUP)
            )
            thread = threading.Thread(target=threaded)
            thread.start()
            try:
                reader = await factory.create_reader("asyncio", "g", SERIALIZER)
                got["asyncio"] = []
                await asyncio.gather(
                    write(factory, "s", range(total)), read_until([reader], got, total)
                )
                await reader.close()
            finally:
                stop.set()
                await asyncio.to_thread(thread.join, 30)

    asyncio.run(scenario())
    assert_once_in_order(got, total)


def test_the_asyncio_writer_appends_on_every_master(cluster: LocalRedisCluster) -> None:  # noqa: F811
    scope = unique("aw")
    layout = KeyLayout("rg")

    async def scenario() -> list[Any]:
        await set_up(cluster.url, scope, 6, "s")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            writer = await factory.create_event_writer("s", SERIALIZER)
            futures = [await writer.send(f"e{n}", routing_key=f"k{n}") for n in range(600)]
            pointers = [await future for future in futures]
            pointers.append(await writer.write_event("last", routing_key="k0"))
            await writer.close()
            return pointers

    pointers = asyncio.run(scenario())
    per_segment: dict[int, int] = defaultdict(int)
    for pointer in pointers:
        per_segment[pointer.segment] += 1
    with redis.cluster.RedisCluster.from_url(cluster.url) as root:
        for segment, count in per_segment.items():
            assert root.xlen(layout.segment(scope, "s", segment).events) == count
    metas = [layout.segment(scope, "s", segment).meta for segment in per_segment]
    assert len(masters_of(cluster.url, metas)) == 3
    with EventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as threaded:
        assert threaded.connection.segments.segment_states(scope, "s", list(per_segment))


def test_asyncio_readers_through_a_split_and_a_merge_on_a_cluster(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    scope = unique("sc")

    async def write_and_scale(factory: AsyncEventStreamClientFactory) -> None:
        streams = factory.stream_manager()
        await write(factory, "s", range(400))
        split = await streams.scale_stream(scope, "s", [0], [(0.0, 0.25), (0.25, 0.5)])
        await write(factory, "s", range(400, 800))
        await streams.scale_stream(scope, "s", split, [(0.0, 0.5)])
        await write(factory, "s", range(800, 1200))

    got = asyncio.run(group_reads(cluster.url, scope, 2, 2, write_and_scale, 1200))
    assert_once_in_order(got, 1200)


def test_deleting_a_stream_leaves_no_key_on_any_node(cluster: LocalRedisCluster) -> None:  # noqa: F811
    scope = unique("dl")

    async def scenario() -> None:
        await set_up(cluster.url, scope, 6, "s", "kept")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            await factory.create_reader_group(
                "g", ReaderGroupConfig(streams=[f"{scope}/s"], **GROUP)
            )
            await write(factory, "s", range(120))
            await write(factory, "kept", range(10))
            transactional = await factory.create_transactional_writer(
                "s", SERIALIZER, TransactionalWriterConfig(transactional_id="t")
            )
            async with transactional.begin() as txn:
                await txn.write_event("in a transaction", routing_key="k1")
            left_open = await transactional.begin()
            await left_open.write_event("never committed", routing_key="k2")
            reader = await factory.create_reader("r", "g", SERIALIZER)
            await read_until([reader], {"r": []}, 1)
            await reader.close()
            assert await factory.reader_group_manager().delete_reader_group("g")
            streams = factory.stream_manager()
            assert await streams.seal_stream(scope, "s")
            assert await streams.delete_stream(scope, "s")

    asyncio.run(scenario())
    left = []
    for node in cluster.nodes:
        with redis.Redis(port=node.port) as client:
            left += [key.decode() for key in client.scan_iter(match=f"*{scope}*")]
    assert left and not [key for key in left if f"{scope}/s" in key or f"{scope}/g" in key], left


def test_asyncio_transactions_on_a_cluster(cluster: LocalRedisCluster) -> None:  # noqa: F811
    scope = unique("tx")
    layout = KeyLayout("rg")

    async def scenario() -> tuple[Any, int]:
        await set_up(cluster.url, scope, 6, "out")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            writer = await factory.create_transactional_writer(
                "out", SERIALIZER, TransactionalWriterConfig(transactional_id="c")
            )
            async with writer.begin() as txn:
                for n in range(300):
                    await txn.write_event(f"k{n % 40}:{n}", routing_key=f"k{n % 40}")
            status = await txn.status()
            aborted = await writer.begin()
            await aborted.write_event("never", routing_key="k1")
            await aborted.abort()
            await writer.close()
            return status, 300

    status, total = asyncio.run(scenario())
    assert status == TxnStatus.COMMITTED
    with redis.cluster.RedisCluster.from_url(cluster.url) as root:
        events = [
            fields[b"p"].decode()
            for segment in range(6)
            for _, fields in root.xrange(layout.segment(scope, "out", segment).events)
        ]
    assert sorted(events, key=lambda e: int(e.split(":")[1])) == [
        f"k{n % 40}:{n}" for n in range(total)
    ]


def test_asyncio_administration_on_a_cluster(cluster: LocalRedisCluster) -> None:  # noqa: F811
    """Cuts, time lookups (``EVALSHA_RO`` on the segment's node), truncation and a group's
    lag (one probe round trip per node) on segments spread over every master."""
    scope = unique("ad")

    async def scenario() -> None:
        await set_up(cluster.url, scope, 6, "s")
        async with AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER) as factory:
            await factory.create_reader_group(
                "g", ReaderGroupConfig(streams=[f"{scope}/s"], **GROUP)
            )
            streams = factory.stream_manager()
            await write(factory, "s", range(300))
            tail = await streams.tail_cut(scope, "s")
            assert sum(tail.positions.values()) == 300
            metrics = await (
                await factory.reader_group_manager().get_reader_group("g")
            ).get_metrics()
            assert metrics.total.events == 300
            assert await streams.cut_at_time(scope, "s", 0) == await streams.head_cut(scope, "s")
            later = await streams.cut_at_time(scope, "s", await factory_time(streams) + 60_000)
            assert later == tail
            half = StreamCut(scope, "s", {s: p // 2 for s, p in tail.positions.items()})
            await streams.truncate_stream(scope, "s", half)
            assert await streams.head_cut(scope, "s") == half

    asyncio.run(scenario())


async def factory_time(streams: Any) -> int:
    """The server's clock (ms), through the stream manager's connection."""
    server_ms: int = await streams.connection.server_time_ms()
    return server_ms


def one_event(scope: str, sequence: int, payload: bytes, segment: int = 0) -> AppendBatch:
    """Writer ``w``'s batch ``sequence`` of one event to ``segment`` of ``scope/s``."""
    return AppendBatch(scope, "s", segment, "w", sequence, 1, ["", payload, 0, b""], 1 << 20)


def segment_reads(connection: AsyncConnection) -> AsyncSegmentReads:
    """Segment reads on ``connection`` (a cluster's: per slot, per node), as a reader's."""
    return AsyncSegmentReads(
        connection.client,
        connection.keys,
        connection.cluster_blocking,
        nodes=connection.nodes,
        blocking_nodes=connection.blocking_nodes,
    )


def on_one_segment(
    url: str, scope: str, body: Callable[[AsyncConnection, AsyncSegmentReads], Awaitable[None]]
) -> None:
    """``body`` on a new asyncio connection to the cluster and its segment reads, stream
    ``scope/s`` of one segment created first."""

    async def scenario() -> None:
        await set_up(url, scope, 1, "s")
        connection = AsyncConnection.from_url(url, CLUSTER)
        reads = segment_reads(connection)
        try:
            await body(connection, reads)
        finally:
            await connection.close()

    asyncio.run(scenario())


def test_a_slot_moved_under_the_client_is_followed(cluster: LocalRedisCluster) -> None:  # noqa: F811
    """A segment's slot moves to another master after the asyncio client learnt the slot
    table: its read, append and state meet ``MOVED`` on the old master, refresh the table and
    go to the new one (nothing lost, nothing twice). Each move counts as a primary switch of
    the connection (as the threaded cluster client counts it), which a reader holding
    positions there takes as the sign to check its logs."""
    scope = unique("mv")
    keys = KeyLayout("rg").segment(scope, "s", 0)

    async def body(connection: AsyncConnection, reads: AsyncSegmentReads) -> None:
        [reply] = await connection.segments.append([one_event(scope, 1, b"first")])
        assert reply.error is None
        switches = connection.primary_switches()
        move_slot(cluster, keys.meta, [*keys])  # (the connection's table is stale now)
        read = await reads.xread({keys.events: "0-0"}, 10, block=0.05)
        assert [fields[1] for _, fields in read[keys.events]] == [b"first"]
        assert connection.primary_switches() > switches
        switches = connection.primary_switches()
        move_slot(cluster, keys.meta, [*keys])  # (and again)
        [reply] = await connection.segments.append([one_event(scope, 2, b"second")])
        assert reply.error is None and reply.first_offset == 1
        assert connection.primary_switches() > switches
        move_slot(cluster, keys.meta, [*keys])
        assert (await connection.segments.segment_states(scope, "s", [0]))[0].tail == 2

    on_one_segment(cluster.url, scope, body)
    with redis.cluster.RedisCluster.from_url(cluster.url) as root:
        assert [f[b"p"] for _, f in root.xrange(keys.events)] == [b"first", b"second"]


def test_heartbeats_renewed_together_on_a_cluster(cluster: LocalRedisCluster) -> None:  # noqa: F811
    """Several readers' heartbeats made in one turn of the loop (coalesced into one batch, as
    idle readers' beats are) each land on a cluster: redis-py's cluster pipeline refuses
    ``EVALSHA``, so the batch must not be one of its pipelines."""
    scope = unique("hb")

    async def body(connection: AsyncConnection, reads: AsyncSegmentReads) -> None:
        heartbeats = AsyncAdminConnection(connection).heartbeat_store(f"group:{scope}/g")
        beats = await asyncio.gather(*(heartbeats.beat(f"r{n}", 1) for n in range(5)))
        assert len(beats) == 5
        _, alive = await heartbeats.beat("r0", 1)  # (after every one of them landed)
        assert set(alive) == {f"r{n}" for n in range(5)}

    on_one_segment(cluster.url, scope, body)


def test_a_slot_being_migrated_is_followed_with_asking(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    """A segment's slot half-migrated (its keys already on the target, the slot still the
    source's, which answers ``ASK``): appends, state reads and reads go to the target after
    ``ASKING``, as redis-py's cluster client follows ``ASK`` for the threaded reads."""
    scope = unique("ask")
    keys = KeyLayout("rg").segment(scope, "s", 0)

    async def body(connection: AsyncConnection, reads: AsyncSegmentReads) -> None:
        await connection.segments.append([one_event(scope, 1, b"e0")])
        with migrating(cluster, keys.meta, [*keys]):
            [reply] = await connection.segments.append([one_event(scope, 2, b"e1")])
            assert reply.error is None and reply.first_offset == 1
            assert (await connection.segments.segment_states(scope, "s", [0]))[0].tail == 2
            read = await reads.xread({keys.events: "0-0"}, 10, 0.05)
            assert [fields[1] for _, fields in read[keys.events]] == [b"e0", b"e1"]
            raw = await reads.read_raw(scope, "s", 0, 0, -1, 10)
            assert [fields[1] for _, fields in raw] == [b"e0", b"e1"]

    on_one_segment(cluster.url, scope, body)


def test_a_slot_that_keeps_moving_raises_a_retriable_error_naming_the_key(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    """Two masters sending a slot to each other (``MOVED`` on every attempt, whatever the
    slot table says; a slot holding no key, as Redis moves only those by hand): the append
    raises :class:`RedisFailoverError` (retriable) naming the segment's key."""
    scope = unique("pp")
    layout = KeyLayout("rg")

    async def body(connection: AsyncConnection, reads: AsyncSegmentReads) -> None:
        await connection.segments.segment_states(scope, "s", [0])  # (the table learnt)
        for segment in range(1, 200):  # (a segment never created, alone in its slot)
            meta = layout.segment(scope, "s", segment).meta
            src, dst, slot, src_id, dst_id = _ids(cluster, meta)
            if src.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0:
                break
            src.close()
            dst.close()
        src.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)  # (dst says: src's)
        try:
            with pytest.raises(RedisFailoverError, match=re.escape(meta)) as raised:
                await connection.segments.append([one_event(scope, 1, b"e", segment)])
            assert raised.value.retriable
        finally:
            src.execute_command("CLUSTER SETSLOT", slot, "NODE", src_id)
            src.close()
            dst.close()

    on_one_segment(cluster.url, scope, body)


def test_a_blocking_read_cancelled_mid_wait_closes_its_node_connection(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    """A cluster's ``XREAD BLOCK`` (on a plain client of the node) cancelled while parked:
    its connection is closed, so the reply the server sends when an event arrives is never
    read as the answer to the next command on that node's pool."""
    scope = unique("cx")
    keys = KeyLayout("rg").segment(scope, "s", 0)
    seen: dict[str, Any] = {}

    async def body(connection: AsyncConnection, reads: AsyncSegmentReads) -> None:
        await connection.segments.append([one_event(scope, 1, b"e0")])
        await connection.blocking_nodes.ready()
        node = connection.blocking_nodes.for_key(keys.events)
        for round_ in range(3):
            after = {keys.events: f"{round_ + 1}-{LAST_EPOCH}"}  # (offset round_ read)
            blocked = asyncio.ensure_future(reads.xread(after, 10, 1.0))
            await asyncio.wait((blocked,), timeout=0.03)  # (parked on the server by now)
            blocked.cancel()
            await asyncio.wait((blocked,))
            payload = f"e{round_ + 1}".encode()
            await connection.segments.append([one_event(scope, round_ + 2, payload)])
            seen[f"in use {round_}"] = len(node.connection_pool._in_use_connections)
            seen[f"get {round_}"] = await node.get(f"{{{scope}/s/0}}:nothing")
            read = await reads.xread(after, 10, 0.1)
            seen[f"read {round_}"] = [fields[1] for _, fields in read[keys.events]]

    on_one_segment(cluster.url, scope, body)
    for round_ in range(3):
        assert seen[f"in use {round_}"] == 0
        assert seen[f"get {round_}"] is None  # not the cancelled XREAD's reply
        assert seen[f"read {round_}"] == [f"e{round_ + 1}".encode()]


def test_every_node_an_asyncio_client_reaches_is_checked_for_an_evicting_policy(
    cluster: LocalRedisCluster,  # noqa: F811
) -> None:
    """As the threaded client's: a node whose ``maxmemory-policy`` may evict keys is refused
    on the first socket to it, whichever client opens it (the cluster's or a node's own)."""
    scope = unique("ev")

    async def scenario() -> None:
        factory = AsyncEventStreamClientFactory.from_url(scope, cluster.url, CLUSTER)
        try:
            with pytest.raises(UnsafeServerConfigError, match="allkeys-lru"):
                writer = await factory.create_event_writer("s", SERIALIZER)
                for n in range(60):  # (every segment, so every master)
                    await writer.write_event(f"e{n}", routing_key=f"k{n}")
        finally:
            with contextlib.suppress(UnsafeServerConfigError):  # (the writer's flush says it)
                await factory.close()

    asyncio.run(set_up(cluster.url, scope, 6, "s"))
    raw = redis.cluster.RedisCluster.from_url(cluster.url)
    last = raw.get_primaries()[-1]
    raw.config_set("maxmemory-policy", "allkeys-lru", target_nodes=last)
    try:
        asyncio.run(scenario())
    finally:
        raw.config_set("maxmemory-policy", "noeviction", target_nodes=last)
        raw.close()


def test_a_dead_master_is_a_retriable_error_naming_its_node_and_key() -> None:
    """A master that is gone (no replica to promote): an append to a segment it held raises
    :class:`RedisUnavailableError` (retriable) naming the node and the segment's key; the
    segments of the other masters are still written."""
    scope = unique("dd")
    keys = KeyLayout("rg")
    try:
        started = local_redis_cluster(3)
        local = started.__enter__()
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Redis Cluster is required: {exc}", pytrace=False)

    def event(segment: int) -> AppendBatch:
        return AppendBatch(scope, "s", segment, "w", 1, 1, ["", b"e", 0, b""], 1 << 20)

    async def scenario() -> None:
        await set_up(local.url, scope, 6, "s")
        victim = local.primary_for(keys.segment(scope, "s", 0).meta)
        mine = [
            s for s in range(6) if local.primary_for(keys.segment(scope, "s", s).meta) is victim
        ]
        others = [s for s in range(6) if s not in mine]
        survivor = next(node for node in local.nodes if node is not victim)
        connection = AsyncConnection.from_url(survivor.url, CLUSTER)
        try:
            await connection.segments.segment_states(scope, "s", list(range(6)))
            victim.kill()
            meta = keys.segment(scope, "s", mine[0]).meta
            with pytest.raises(RedisUnavailableError, match=re.escape(meta)) as raised:
                await connection.segments.append([event(s) for s in mine])
            assert f":{victim.port}" in str(raised.value) and raised.value.retriable
            replies = await connection.segments.append([event(s) for s in others])
            assert [reply.first_offset for reply in replies] == [0] * len(others)
        finally:
            await connection.close()

    try:
        asyncio.run(scenario())
    finally:
        started.__exit__(None, None, None)


def test_several_seeds_need_cluster_true_and_cluster_true_connects() -> None:
    with pytest.raises(InvalidConfigError, match="several seeds need ClientConfig"):
        AsyncConnection.from_url("redis://127.0.0.1:1,127.0.0.1:2/0")
    AsyncConnection.from_url("redis://127.0.0.1:1,127.0.0.1:2/0", ClientConfig(cluster=True))


# -- moving a slot by hand -----------------------------------------------------------------------
def _ids(local: LocalRedisCluster, key: str) -> tuple[Any, Any, int, str, str]:
    source = local.primary_for(key)
    target = next(
        node
        for node in local.nodes
        if node.port != source.port
        and b"master" in redis.Redis(port=node.port).execute_command("ROLE")[0]
    )
    src, dst = redis.Redis(port=source.port), redis.Redis(port=target.port)
    slot = int(src.execute_command("CLUSTER KEYSLOT", key))
    return (
        src,
        dst,
        slot,
        src.execute_command("CLUSTER MYID").decode(),
        dst.execute_command("CLUSTER MYID").decode(),
    )


class migrating:
    """The slot of ``key`` half-migrated to another master (its ``keys`` moved there, the
    slot still the source's: the source answers ``ASK``) for the block; then the migration
    is finished."""

    def __init__(self, local: LocalRedisCluster, key: str, keys: list[str]) -> None:
        self.src, self.dst, self.slot, self.src_id, self.dst_id = _ids(local, key)
        self.keys = [key for key in keys if self.src.exists(key)]

    def __enter__(self) -> None:
        self.dst.execute_command("CLUSTER SETSLOT", self.slot, "IMPORTING", self.src_id)
        self.src.execute_command("CLUSTER SETSLOT", self.slot, "MIGRATING", self.dst_id)
        _migrate(self.src, self.dst, self.keys)

    def __exit__(self, *exc: object) -> None:
        for client in (self.dst, self.src):  # the migration finished
            client.execute_command("CLUSTER SETSLOT", self.slot, "NODE", self.dst_id)
            client.close()


def move_slot(local: LocalRedisCluster, key: str, keys: list[str]) -> None:
    """Move the slot of ``key`` (holding ``keys``) to another master for good."""
    src, dst, slot, src_id, dst_id = _ids(local, key)
    keys = [key for key in keys if src.exists(key)]
    dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
    _migrate(src, dst, keys)
    for client in (dst, src):
        client.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # every node agrees
        if all(_owner(node.port, slot) == dst_id for node in local.nodes):
            break
        time.sleep(0.05)
    src.close()
    dst.close()


def _owner(port: int, slot: int) -> str | None:
    """The id of the node ``port``'s node says serves ``slot``."""
    with redis.Redis(port=port) as client:
        for info in client.execute_command("CLUSTER NODES").values():
            for span in info["slots"]:
                if int(span[0]) <= slot <= int(span[-1]):
                    return str(info["node_id"])
    return None


def _migrate(src: redis.Redis, dst: redis.Redis, keys: list[str]) -> None:
    """MIGRATE ``keys`` (those that exist) from ``src`` to ``dst``."""
    port = dst.connection_pool.connection_kwargs["port"]
    src.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", *keys)


@pytest.mark.long  # 8-20 s: six nodes started, a failover waited for
@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.parametrize("kill", [False, True], ids=["graceful", "killed"])
def test_asyncio_clients_ride_out_a_cluster_failover(kill: bool) -> None:
    """A 3x2 cluster; an asyncio writer (``acks=replicas=1``) and an asyncio group of two
    ``async for`` readers while the primary holding the group's log and some of its segments
    fails over (``CLUSTER FAILOVER``, or a SIGKILL: its replica promoted after the node
    timeout; it comes back as a replica of its successor): no write fails, every acknowledged
    event is read, each once, in order per routing key for each reader."""
    scope = unique("fo")
    config = ClientConfig(cluster=True, acks="replicas=1", ack_timeout=1.0)
    try:
        started = local_redis_cluster(3, replicas=1, node_timeout_ms=1000)
        local = started.__enter__()
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local 3x2 Redis Cluster is required: {exc}", pytrace=False)
    acknowledged: list[int] = []
    got: dict[str, list[Any]] = defaultdict(list)

    async def scenario() -> None:
        await set_up(local.url, scope, 6, "s")
        async with AsyncEventStreamClientFactory.from_url(scope, local.url, config) as factory:
            riding_out = {**GROUP, "session_timeout": FAILOVER_SESSION}
            await factory.create_reader_group(
                "g", ReaderGroupConfig(streams=[f"{scope}/s"], **riding_out)
            )
            writer = await factory.create_event_writer("s", SERIALIZER)
            readers = [await factory.create_reader(f"r{i}", "g", SERIALIZER) for i in range(2)]

            async def consume(reader: Any) -> None:
                async for event in reader:
                    if not event.is_checkpoint and event.event is not None:
                        got[reader.reader_id].append(event)

            async def produce(numbers: range) -> None:
                for first in range(numbers.start, numbers.stop, 50):
                    block = range(first, min(first + 50, numbers.stop))
                    futures = [
                        await writer.send(f"k{n % 30}:{n}", routing_key=f"k{n % 30}") for n in block
                    ]
                    for n, future in zip(block, futures, strict=True):
                        await future
                        acknowledged.append(n)

            consumers = [asyncio.ensure_future(consume(r)) for r in readers]
            await produce(range(500))
            victim = local.primary_for(f"{{group:{scope}/g}}")

            def fail_over() -> None:
                local.failover(victim, kill=kill)
                if kill:
                    victim.start()
                    local.wait_replicated()

            failing_over = asyncio.ensure_future(asyncio.to_thread(fail_over))
            while not failing_over.done():
                await produce(range(len(acknowledged), len(acknowledged) + 50))
            await failing_over
            await produce(range(len(acknowledged), len(acknowledged) + 500))
            await writer.close()
            deadline = time.monotonic() + 60
            while sum(map(len, got.values())) < len(acknowledged) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            for reader in readers:
                reader.stop_iteration()
            await asyncio.wait_for(asyncio.gather(*consumers), 30)
            for reader in readers:
                await reader.close()

    try:
        asyncio.run(scenario())
    finally:
        started.__exit__(None, None, None)
    read = {int(e.event.split(":")[1]) for reads in got.values() for e in reads}
    missing = sorted(set(acknowledged) - read)
    assert not missing, (len(missing), missing[:20], {r: len(v) for r, v in got.items()})
    assert_once_in_order(got, len(acknowledged))
    assert acknowledged == list(range(len(acknowledged)))


@pytest.mark.long  # about 10 s: six nodes started, one SIGKILLed and its replica promoted
@pytest.mark.slow
@pytest.mark.redis
def test_an_asyncio_client_seeded_with_one_node_outlives_that_node() -> None:
    """Issue 35 item 8 for asyncio: the seed (the primary of slot 0, redis-py's default node)
    dies; a synchronizer (``EVALSHA_RO`` reads), appends and ``XREAD`` on the other slots carry
    on once its replica is promoted (the keys of ``XREAD``/``EVALSHA_RO`` are read from their
    arguments, not asked of the dead default node)."""
    scope = unique("sd")
    keys = KeyLayout("rg").segment(scope, "s", 0)
    try:
        started = local_redis_cluster(3, replicas=1, node_timeout_ms=1000)
        local = started.__enter__()
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local 3x2 Redis Cluster is required: {exc}", pytrace=False)

    async def scenario() -> None:
        await set_up(local.url, scope, 1, "s")
        seed = local.nodes[0]
        connection = AsyncConnection.from_url(seed.url, CLUSTER)
        admin = AsyncAdminConnection(connection)
        reads = segment_reads(connection)
        try:
            sync = admin.synchronizer("counter-seed", ALL_TYPES)
            await sync.initialize({"total": 0})
            await sync.update_state(lambda state: [Add(1)])
            await connection.segments.append([one_event(scope, 1, b"before")])
            await asyncio.to_thread(local.failover, seed, kill=True)
            follower = admin.synchronizer("counter-seed", ALL_TYPES)
            await follower.fetch_updates()  # a read-only script: EVALSHA_RO
            assert follower.state == {"total": 1}
            assert await connection.server_time_ms() > 0  # keyless: any node
            [reply] = await connection.segments.append([one_event(scope, 2, b"after")])
            assert reply.error is None
            read = await reads.xread({keys.events: "0-0"}, 10, 0.1)
            assert [fields[1] for _, fields in read[keys.events]] == [b"before", b"after"]
        finally:
            await admin.close()
            await connection.close()

    try:
        asyncio.run(scenario())
    finally:
        started.__exit__(None, None, None)


@pytest.mark.redis  # about 2 s: a cluster of its own started, then every node killed
def test_an_asyncio_cluster_with_no_node_left_is_an_outage() -> None:
    """Every node down: appends, reads and heartbeats raise the retriable
    :class:`RedisUnavailableError` (the slot-table refresh finding no node is an outage, not
    a ``RedisClusterException`` escaping), again on the next call."""
    scope = unique("nd")
    keys = KeyLayout("rg").segment(scope, "s", 0)
    try:
        started = local_redis_cluster(3)
        local = started.__enter__()
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Redis Cluster is required: {exc}", pytrace=False)

    async def body(connection: AsyncConnection, reads: AsyncSegmentReads) -> None:
        heartbeats = AsyncAdminConnection(connection).heartbeat_store("group:x/g")
        await heartbeats.beat("r", 1)
        await connection.segments.append([one_event(scope, 1, b"e")])
        for node in local.nodes:
            node.kill()
        for _ in range(2):
            with pytest.raises(RedisUnavailableError):
                await connection.segments.append([one_event(scope, 2, b"f")])
            with pytest.raises(RedisUnavailableError):
                await reads.xread({keys.events: "0-0"}, 10, 0.1)
            with pytest.raises(RedisUnavailableError):
                await heartbeats.beat("r", 1)

    try:
        on_one_segment(local.url, scope, body)
    finally:
        started.__exit__(None, None, None)
