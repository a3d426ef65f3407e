"""Transactions on a real local 3-master Redis Cluster (issue 31): the decision and the
staged events on the stream's transaction slot, the segments spread over the other masters;
a commit interrupted between two segments is completed by another client; a
consume-transform-produce commit; deleting the stream deletes its transactions."""

from __future__ import annotations

import pytest
import redis.cluster

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    TransactionalWriterConfig,
    TxnStatus,
)
from readergroup.core.transactions import PlanEntry
from readergroup.storage.keys import KeyLayout
from readergroup.testing.embedded_redis import LocalRedisCluster
from tests.test_cluster import CLUSTER, cluster  # noqa: F401 (a fixture)


class Crash(BaseException):
    """The committing process dying between two segments."""


def test_transactions_on_the_cluster(cluster: LocalRedisCluster) -> None:  # noqa: F811
    url = cluster.url
    with StreamManager.from_url(url, CLUSTER) as sm:
        sm.create_scope("tx")
        for name in ("in", "out"):
            sm.create_stream("tx", name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(6)))
    root = redis.cluster.RedisCluster.from_url(url)
    layout = KeyLayout("rg")
    slots = {root.keyslot(layout.segment("tx", "out", s).meta) for s in range(6)}
    assert len({root.nodes_manager.get_node_from_slot(s).name for s in slots}) > 1
    with EventStreamClientFactory.from_url("tx", url, CLUSTER) as factory:
        writer = factory.create_transactional_writer(
            "out", BytesSerializer(), TransactionalWriterConfig(transactional_id="c")
        )
        txn = writer.begin()
        written = [(f"k{i % 40}", f"{i}".encode()) for i in range(400)]
        for key, payload in written:
            txn.write_event(payload, routing_key=key)

        def die(entry: PlanEntry) -> None:
            raise Crash

        writer.completer.after_entry = die
        with pytest.raises(Crash):
            txn.commit()
        writer.completer.after_entry = None
        other = factory.create_transactional_writer(
            "out", BytesSerializer(), TransactionalWriterConfig(transactional_id="d")
        )
        assert other.get_txn(txn.id).status() is TxnStatus.COMMITTED
        client = factory.create_batch_client()
        seen = [(e.routing_key, e.payload) for e in client.read_events("out")]
        assert sorted(seen) == sorted(written)

        # consume-transform-produce: the positions with the output
        plain = factory.create_event_writer("in", BytesSerializer())
        for i in range(60):
            plain.write_event(f"o{i}".encode(), routing_key=f"k{i % 9}")
        plain.flush()
        ReaderGroupManager("tx", factory.connection).create_reader_group(
            "g", ReaderGroupConfig(streams=["tx/in"], commit_mode="manual")
        )
        reader = factory.create_reader("r", "g", BytesSerializer())
        other.bind_reader(reader)
        got = 0
        while got < 60:
            batch = [e for e in reader.read_batch(60, timeout=2) if e.is_event]
            assert batch
            step = other.begin()
            for event in batch:
                step.write_event(b"x" + bytes(event.event or b""), routing_key=event.routing_key)
            step.commit(reader=reader)
            got += len(batch)
        assert sum(reader.committed().values()) == 60
        reader.close()
    with StreamManager.from_url(url, CLUSTER) as sm:
        sm.seal_stream("tx", "out")
        assert sm.delete_stream("tx", "out")
    left = list(root.scan_iter(match="rg:{txn:tx/out}*", target_nodes="all"))
    assert left == []
    root.close()


def test_the_spark_sink_steps_on_the_cluster(cluster: LocalRedisCluster) -> None:  # noqa: F811
    """The sink's tasks and driver (without a SparkSession): it used to refuse a cluster (one
    script over every segment); on transactions it commits across slots."""
    from readergroup.spark.options import SourceOptions
    from readergroup.spark.source import _driver_holder, _Stager, commit_job
    from readergroup.spark.txn_sink import sink_id

    url = cluster.url
    with StreamManager.from_url(url, CLUSTER) as sm:
        sm.create_scope("sk")
        sm.create_stream("sk", "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(6)))
    options = SourceOptions.parse(
        {"redis_url": url, "scope": "sk", "stream": "s", "cluster": "true"}
    )
    holder = _driver_holder(options, sink_id("j"), fence=True)
    rows = [{"routing_key": f"k{i % 30}", "event": f"e{i}"} for i in range(120)]
    tasks = [_Stager(options, "j", holder).stage(iter(part)) for part in (rows[:60], rows[60:])]
    assert commit_job(options, "j", tasks) == 120
    with EventStreamClientFactory.from_url("sk", url, CLUSTER) as factory:
        events = list(factory.create_batch_client().read_events("s"))
    assert sorted(e.payload for e in events) == sorted(r["event"].encode() for r in rows)
    assert len({e.segment for e in events}) == 6
