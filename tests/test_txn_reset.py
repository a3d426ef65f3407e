"""A reader group reset in a consume-transform-produce pipeline (issue 31 review): the claims
in the output stream's consumed positions carry the group's reset generation, so after a
reset the bound readers read from the reset's positions (not from where transactions before
the reset left them) and their commits land, while a reader from before the reset is still
refused, whatever its fencing token."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from readergroup import BytesSerializer, EventStreamClientFactory, StreamManager
from readergroup.client.txn_positions import group_of, reset_generation, segment_field
from readergroup.core.errors import TransactionPositionsError
from readergroup.core.transactions import CommitPlan, TxnStatus, encode_positions
from readergroup.storage.txn_store import Decision
from tests.test_txn_review import (
    commit_output,
    create_streams,
    events_of,
    manual_group,
    pipe_writer,
    write_input,
)


def payloads(events: list[Any]) -> list[bytes]:
    return sorted(bytes(e.event or b"") for e in events)


def read_all(reader: Any, count: int, until: threading.Thread | None = None) -> list[Any]:
    """Read until ``count`` events came (and ``until`` ended), within 20 s."""
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while (len(got) < count or (until and until.is_alive())) and time.monotonic() < deadline:
        got += events_of(reader, count, timeout=0.2)
    return got


def test_a_reset_group_reads_again_from_the_reset_cut_and_its_commits_land(
    factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    create_streams(manager, scope, 2, "in", "out")
    events = write_input(factory, "e", 30, keys=5)
    groups = manual_group(factory, scope)
    writer = pipe_writer(factory)
    reader = factory.create_reader("r1", "g", BytesSerializer())
    writer.bind_reader(reader)
    first = read_all(reader, len(events))
    commit_output(writer, reader, first)  # the pipeline's positions: every event consumed
    ends = reader.committed()
    assert payloads(first) == sorted(events)
    before = reset_generation(reader)
    old_tokens = dict(reader.owned_segments())

    group = groups.get_reader_group("g")
    resets: list[Any] = []
    reset = threading.Thread(target=lambda: resets.append(group.reset_reader_group("head")))
    reset.start()
    again = read_all(reader, len(events), until=reset)  # the reader acknowledges meanwhile
    reset.join()
    assert resets and all(p == 0 for p in resets[0].values())
    assert reset_generation(reader) == before + 1
    assert payloads(again) == sorted(events)  # from the head again, not from the old claims
    commit_output(writer, reader, again)  # its claims land
    assert reader.committed() == ends  # the group's positions followed the commit
    out = sorted(e.payload for e in factory.create_batch_client().read_events("out"))
    assert out == sorted(events * 2)  # once per pass over the input
    reader.close()

    # a reader from before the reset (its old generation), even with a higher token: refused
    txn = writer.begin()
    txn.write_event(b"zombie", routing_key="k0")
    txn.flush()
    segment, token = next(iter(old_tokens.items()))
    field = segment_field(segment)
    decision = Decision(
        1,
        CommitPlan.route([0]),
        writer.config.grace_ms,
        encode_positions({segment: 1}, {"group": group_of(reader), "reader": "stale"}),
        group_of(reader),
        ((field, token + 1000, 1),),
        group_generation=before,
    )
    with pytest.raises(TransactionPositionsError):
        writer.store.stage(txn.id, writer.holder, [], writer.config.retention_ms, decision)
    assert writer.store.record(txn.id).status is TxnStatus.ABORTED  # type: ignore[union-attr]
    stale = writer.store.claim(group_of(reader), before, [(field, token + 1000)])
    assert stale == [(-1, stale[0][1])]  # a stale claim moves nobody and changes nothing
    found = writer.store.claim(group_of(reader), before + 1, [(field, 0)])
    assert found[0][0] > 0  # the reset generation's position is still there


def test_claims_stored_before_reset_generations_read_as_generation_zero(
    factory: EventStreamClientFactory, manager: StreamManager, scope: str
) -> None:
    """Format 1 values ("<token> <position> <txn id>", no reset generation) are read as
    generation 0, the generation of a group never reset."""
    create_streams(manager, scope, 1, "out")
    store = pipe_writer(factory).store
    client = store._client
    client.hset(store.consumed_key, "g@1|s/in/0", "5 7 t1")
    assert store.claim("g@1", 0, [("s/in/0", 3)]) == [(7, "t1")]  # a lower token: stale
    assert client.hget(store.consumed_key, "g@1|s/in/0") == b"5 7 t1"  # left as it is
    assert store.claim("g@1", 0, [("s/in/0", 6)]) == [(7, "t1")]  # a later owner resumes
    assert client.hget(store.consumed_key, "g@1|s/in/0") == b"v2 0 6 7 t1"
    assert store.claim("g@1", 1, [("s/in/0", 1)]) == [(-1, "t1")]  # after a reset: from its cut
    assert client.hget(store.consumed_key, "g@1|s/in/0") == b"v2 1 1 -1 t1"
