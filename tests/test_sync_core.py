"""The synchronizer's sans-IO core (:mod:`statesync.core`), driven by hand: its decisions are
requests a test answers, with no backend, no event loop and no thread."""

from __future__ import annotations

import random
from typing import Any

import pytest

from statesync import ManualClock, RetryPolicy, SyncConfig, status
from statesync.backend import AppendOutcome, ReadResult
from statesync.codec import Codec, TypeRegistry
from statesync.core import SynchronizerCore
from statesync.requests import BackendCall, Operation, Sleep
from tests.support.model import ALL_TYPES, Add
from tests.test_architecture import FORBIDDEN, ROOT, imported_roots

PURE = [
    "statesync/core.py",
    "statesync/requests.py",
    "statesync/redis_wire.py",
    "statesync/aio_backend.py",
]


@pytest.mark.parametrize("module", PURE)
def test_the_core_and_the_wire_format_do_no_io(module: str) -> None:
    assert not imported_roots(ROOT / module) & FORBIDDEN


def core(**config: Any) -> SynchronizerCore[Any]:
    return SynchronizerCore(
        "counter",
        update_types=ALL_TYPES,
        state_types=(),
        config=SyncConfig(**config),
        clock=ManualClock(),
        rng=random.Random(4),
        writer_label=None,
        entry_version=None,
    )


def snapshot_page(state: Any, head: int = 0) -> ReadResult:
    blob = Codec(TypeRegistry(ALL_TYPES)).encode_snapshot(0, 0, state)
    return ReadResult(head, "inc", 0, blob, [], "", "inc")


def step(operation: Operation[Any], reply: Any) -> Any:
    try:
        return operation.send(reply)
    except StopIteration as done:
        return ("returned", done.value)


def test_a_conflict_backs_off_on_the_injected_random_then_reads_and_decides_again() -> None:
    sync = core(retry=RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=0.1))
    operation = sync.update_state(lambda s: [Add(1)], None)
    read = next(operation)  # not loaded: read the log first
    assert isinstance(read, BackendCall) and read.method == "read" and read.args[1] == -1
    append = step(operation, snapshot_page({"total": 0}))
    assert append.method == "append" and append.kwargs["expected_revision"] == 0
    assert append.kwargs["sequence"] == 1 and append.kwargs["writer"] == sync.writer_id
    backoff = step(operation, AppendOutcome(status.CONFLICT, 1))
    assert isinstance(backoff, Sleep)
    assert backoff.seconds == random.Random(4).uniform(0.0, 0.1)  # drawn from the injected rng
    assert step(operation, None).method == "read"  # then catch up...
    assert sync.stats.conflicts == 1 and sync.revision == 0


def test_an_operation_abandoned_at_its_append_leaves_the_replica_as_it_was() -> None:
    sync = core()
    operation = sync.update_state(lambda s: [Add(1)], None)
    next(operation)
    append = step(operation, snapshot_page({"total": 0}))
    assert append.method == "append"
    operation.close()  # a cancelled task: its append may or may not land
    assert sync.revision == 0 and sync.loaded().state == {"total": 0}
    again = sync.update_state(lambda s: [Add(1)], 0)
    assert next(again).kwargs["sequence"] == 2  # a new sequence: the old one, if it lands
    # after this one, is refused as a duplicate of a landed later sequence
