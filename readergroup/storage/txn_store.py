"""A stream's transactions on Redis: the ``txn_*.lua`` scripts (states and keys:
:mod:`readergroup.core.transactions`) and the records' reads, written once as call steps
(:class:`TxnStoreSteps`, see :mod:`readergroup.core.calls`: what each call sends and what its
reply means, codes mapped to exceptions by :func:`~readergroup.storage.segment_status.check`),
run blocking by :class:`TxnStore` (thread-safe) and awaited by
:class:`~readergroup.storage.aio_txn_store.AsyncTxnStore` on ``redis.asyncio``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgpack
import redis

from readergroup.core.calls import Steps, blocking, call_on
from readergroup.core.errors import ReaderGroupError, TransactionError
from readergroup.core.transactions import (
    MERGE_STEP_BYTES,
    MERGE_STEP_ITEMS,
    CommitPlan,
    TxnRecord,
    TxnStatus,
)
from readergroup.storage import segment_status
from readergroup.storage.keys import KeyLayout
from readergroup.storage.scripts import SCRIPT_NAMES, script_source
from readergroup.storage.staging_store import StagedEvent
from readergroup.storage.translate import as_text, translate_errors

_SCRIPTS = tuple(name for name in SCRIPT_NAMES if name.startswith("txn_"))


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``txn_stage.lua`` needs to decide a commit: the events the plan covers, the plan,
    the consumed positions (JSON, ``""``: none) with the reader group's synchronizer name,
    per input segment (field, fencing token, position), and the group's reset generation
    they were read under, and the completion grace (ms)."""

    covered: int
    plan: CommitPlan
    grace_ms: int
    positions: str = ""
    group_sync: str = ""
    claims: tuple[tuple[str, int, int], ...] = ()
    group_generation: int = 0


@dataclass(frozen=True, slots=True)
class MergeStep:
    """What one ``txn_merge.lua`` step did: the target's state after it (MERGING: more steps
    to go; OPEN: merged), the staging items it moved and the target's events; ``before``:
    the job was merged before (``state`` is the target's, nothing moved)."""

    state: str
    moved: int
    events: int
    before: bool


class TxnStoreSteps:
    """The transactions of one stream ``scope/stream``, as call steps on ``client`` (a
    ``redis.Redis`` or a ``redis.asyncio.Redis``: the same commands, one awaited)."""

    def __init__(self, client: Any, keys: KeyLayout, scope: str, stream: str) -> None:
        self._client = client
        self._keys = keys
        self.scope = scope
        self.stream = stream
        self._scripts: dict[str, Any] = {
            name: client.register_script(script_source(name)) for name in _SCRIPTS
        }
        self.open_key = keys.txn_open(scope, stream)
        self.all_key = keys.txn_all(scope, stream)
        self.epochs_key = keys.txn_epochs(scope, stream)
        self.consumed_key = keys.txn_consumed(scope, stream)
        self.landed_key = keys.txn_landed(scope, stream)

    def record_key(self, txn_id: str) -> str:
        return self._keys.txn_record(self.scope, self.stream, txn_id)

    def staged_key(self, txn_id: str) -> str:
        return self._keys.txn_staged(self.scope, self.stream, txn_id)

    def subject(self, txn_id: str) -> str:
        return f"transaction {txn_id} of {self.scope}/{self.stream}"

    def _redis(self, method: str, *args: Any, **kwargs: Any) -> Steps[Any]:
        """One command on the client."""
        return (yield call_on(self._client, method, *args, **kwargs))

    def _script(self, script: str, keys: list[str], args: list[Any]) -> Steps[list[Any]]:
        """One script run (``EVALSHA``, ``SCRIPT LOAD`` on ``NOSCRIPT``)."""
        reply = yield call_on(self._scripts[script], "__call__", keys=keys, args=args)
        return cast(list[Any], reply)

    def pipelined(self, commands: Sequence[tuple[Any, ...]]) -> Any:
        """``commands`` (name, args...) in one round trip: their replies (awaitable on
        ``redis.asyncio``: its pipeline's ``execute`` is a coroutine, its queueing is not)."""
        pipe = self._client.pipeline(transaction=False)
        for name, *args in commands:
            getattr(pipe, name)(*args)
        return pipe.execute()

    def run_steps(self, script: str, txn_id: str, keys: list[str], args: list[Any]) -> Steps[Any]:
        with translate_errors(f"{script} of {self.subject(txn_id)}"):
            reply = yield from self._script(script, keys, args)
        try:
            segment_status.check(script, self.subject(txn_id), reply)
        except TransactionError as exc:
            exc.txn_id = txn_id
            if int(reply[0]) == segment_status.TXN_CLOSED:
                exc.status = as_text(reply[1])
            raise
        return reply

    # -- transactional ids ------------------------------------------------------------------
    def next_epoch_steps(self, transactional_id: str) -> Steps[int]:
        """Bump ``transactional_id``'s epoch (a new writer instance): fences the older ones."""
        with translate_errors(f"epoch of transactional id {transactional_id!r}"):
            epoch = yield from self._redis("hincrby", self.epochs_key, transactional_id, 1)
        return int(epoch)

    def epoch_steps(self, transactional_id: str) -> Steps[int]:
        """``transactional_id``'s current epoch (0: no instance yet)."""
        with translate_errors(f"epoch of transactional id {transactional_id!r}"):
            value = yield from self._redis("hget", self.epochs_key, transactional_id)
        return int(value or 0)

    # -- steps ------------------------------------------------------------------------------
    def begin_steps(
        self, txn_id: str, transactional_id: str, epoch: int, lease_ms: int, retention_ms: int
    ) -> Steps[tuple[int, int]]:
        """Begin an OPEN transaction; returns (created, deadline) server ms."""
        keys = [self.record_key(txn_id), self.open_key, self.epochs_key, self.all_key]
        args = [txn_id, transactional_id, epoch, lease_ms, retention_ms]
        reply = yield from self.run_steps("txn_begin", txn_id, keys, args)
        return int(reply[1]), int(reply[2])

    def stage_steps(
        self,
        txn_id: str,
        caller: str,
        events: Sequence[StagedEvent],
        retention_ms: int,
        decide: Decision | None = None,
    ) -> Steps[tuple[int, int, int]]:
        """Stage ``events`` (renewing the lease) as ``caller`` (``"<epoch>:<transactional
        id>"``), and with ``decide`` = (events covered, plan,
        positions JSON, completion grace ms) decide the commit after them. Returns (status,
        events staged in all, deadline or decision server ms); status ``CONFLICT``: the plan
        does not cover the staged events, nothing was written."""
        size = sum(len(event[1]) for event in events)
        args: list[Any] = [txn_id, caller, retention_ms, len(events), size, pack_events(events)]
        keys = [self.record_key(txn_id), self.staged_key(txn_id), self.open_key, self.epochs_key]
        keys.append(self.all_key)
        if decide is None:
            args.append("")
        else:
            args += ("decide", decide.covered, decide.plan.to_json(), decide.positions)
            args += (decide.grace_ms, len(decide.claims))
            if decide.claims:
                args.append(decide.group_generation)
            for field, token, position in decide.claims:
                args += (consumed_field(decide.group_sync, field), token, position)
            if decide.claims:
                keys.append(self.consumed_key)
        reply = yield from self.run_steps("txn_stage", txn_id, keys, args)
        return int(reply[0]), int(reply[1]), int(reply[2]) if len(reply) > 2 else 0

    def claim_steps(
        self, group_sync: str, generation: int, claims: Sequence[tuple[str, int]]
    ) -> Steps[list[tuple[int, str]]]:
        """Claim input segments (field, fencing token) for a reader of ``group_sync`` reading
        under the group's reset ``generation``; returns per segment where decided transactions
        of that generation left it: (position or -1, txn id or "")."""
        args: list[Any] = [len(claims), generation]
        for field, token in claims:
            args += (consumed_field(group_sync, field), token)
        with translate_errors(f"claim consumed segments in {self.scope}/{self.stream}"):
            reply = yield from self._script("txn_claim", [self.consumed_key], args)
        segment_status.check("txn_claim", f"{self.scope}/{self.stream}", reply)
        values = reply[1:]
        return [(int(values[i]), as_text(values[i + 1])) for i in range(0, len(values), 2)]

    def replan_steps(self, txn_id: str, version: int, plan: CommitPlan) -> Steps[bool]:
        """Compare-and-set a committing transaction's plan; False: it changed meanwhile."""
        keys, args = [self.record_key(txn_id)], [version, plan.to_json()]
        reply = yield from self.run_steps("txn_replan", txn_id, keys, args)
        return int(reply[0]) == segment_status.OK

    def finish_steps(
        self,
        txn_id: str,
        mode: str,
        retention_ms: int,
        caller: str = "",
        landed: Sequence[tuple[int, str]] = (),
    ) -> Steps[bool]:
        """End it (``mode``: commit, abort, force, expire: see ``txn_finish.lua``; ``caller``:
        ``"<epoch>:<transactional id>"`` for abort; ``landed``: a commit's plan entries as
        (segment, writer id)); False: it had ended so before."""
        keys = [self.record_key(txn_id), self.staged_key(txn_id), self.open_key, self.all_key]
        args: list[Any] = [txn_id, mode, retention_ms, caller]
        if landed:
            keys.append(self.landed_key)
            args += (f"{segment}|{writer}" for segment, writer in landed)
        reply = yield from self.run_steps("txn_finish", txn_id, keys, args)
        return int(reply[0]) == segment_status.OK

    def adopt_steps(self, txn_id: str, transactional_id: str, epoch: int) -> Steps[None]:
        """Take an open transaction over for ``transactional_id`` at ``epoch``."""
        keys = [self.record_key(txn_id), self.epochs_key]
        yield from self.run_steps("txn_adopt", txn_id, keys, [transactional_id, epoch])

    # -- reads ------------------------------------------------------------------------------
    def record_steps(self, txn_id: str) -> Steps[TxnRecord | None]:
        """The record, or None if there is none."""
        with translate_errors(f"read {self.subject(txn_id)}"):
            fields = yield from self._redis("hgetall", self.record_key(txn_id))
        return TxnRecord.from_hash(txn_id, fields) if fields else None

    def staged_steps(self, txn_id: str) -> Steps[list[StagedEvent]]:
        """A transaction's staged events, in write order."""
        with translate_errors(f"read the staged events of {self.subject(txn_id)}"):
            chunks = yield from self._redis("lrange", self.staged_key(txn_id), 0, -1)
        return [event for chunk in chunks for event in unpack_events(chunk)]

    def records_steps(self, txn_ids: Sequence[str]) -> Steps[list[TxnRecord]]:
        """The records of ``txn_ids`` that exist, in one round trip."""
        commands = [("hgetall", self.record_key(txn_id)) for txn_id in txn_ids]
        with translate_errors(f"read transactions of {self.scope}/{self.stream}"):
            replies = yield call_on(self, "pipelined", commands)
        return [TxnRecord.from_hash(t, f) for t, f in zip(txn_ids, replies, strict=True) if f]

    def unfinished_steps(self, until_ms: float = float("inf")) -> Steps[list[tuple[str, int]]]:
        """Unfinished transactions (id, deadline ms) with a deadline at or before ``until_ms``,
        earliest first."""
        top = "+inf" if until_ms == float("inf") else int(until_ms)
        with translate_errors(f"list transactions of {self.scope}/{self.stream}"):
            rows = yield from self._redis(
                "zrangebyscore", self.open_key, "-inf", top, withscores=True
            )
        return [(as_text(member), int(score)) for member, score in rows]

    def applied_steps(self, segment: int, writer: str) -> Steps[int]:
        """The last sequence a segment's writer table records for ``writer`` (how many
        chunks of a plan entry landed there; 0: none)."""
        key = self._keys.segment(self.scope, self.stream, segment).writers
        with translate_errors(f"read {key}"):
            value = yield from self._redis("hget", key, writer)
        return int(value or 0)

    def forget_finished_steps(self, before_ms: int, limit: int = 1000) -> Steps[int]:
        """Drop from the index of every transaction those finished before ``before_ms`` (their
        records expired: kept ``retention`` after they finished), and delete the writer table
        fields of plan entries committed before it (at most ``limit``); returns how many
        fields went."""
        with translate_errors(f"trim transactions of {self.scope}/{self.stream}"):
            yield from self._redis("zremrangebyscore", self.all_key, "-inf", f"({before_ms}")
            old = yield from self._redis(
                "zrangebyscore", self.landed_key, "-inf", f"({before_ms}", start=0, num=limit
            )
            if not old:
                return 0
            fields: dict[int, list[str]] = {}
            for member in map(as_text, old):
                number, _, writer = member.partition("|")
                fields.setdefault(int(number), []).append(writer)
            commands = [
                ("hdel", self._keys.segment(self.scope, self.stream, segment).writers, *writers)
                for segment, writers in fields.items()
            ]
            yield call_on(self, "pipelined", commands)
            yield from self._redis("zrem", self.landed_key, *old)
        return len(old)

    def delete_all_steps(self) -> Steps[int]:
        """Delete every transaction key of the stream (it is being deleted), found through
        its indexes (no keyspace scan); returns how many keys went."""
        deleted = 0
        with translate_errors(f"delete transactions of {self.scope}/{self.stream}"):
            members = yield from self._redis("zrange", self.all_key, 0, -1)
            unfinished = yield from self.unfinished_steps()
            ids = {as_text(m) for m in members} | {txn_id for txn_id, _ in unfinished}
            keys = [self.open_key, self.all_key, self.epochs_key, self.consumed_key]
            keys.append(self.landed_key)
            for txn_id in sorted(ids):
                keys += (self.record_key(txn_id), self.staged_key(txn_id))
            for start in range(0, len(keys), 500):
                deleted += int((yield from self._redis("delete", *keys[start : start + 500])))
        return deleted


class TxnStore(TxnStoreSteps):
    """The transactions of one stream ``scope/stream`` on a ``redis.Redis`` (blocking; each
    method runs :class:`TxnStoreSteps`' steps of its name)."""

    def __init__(self, client: redis.Redis, keys: KeyLayout, scope: str, stream: str) -> None:
        super().__init__(client, keys, scope, stream)

    _run = blocking(TxnStoreSteps.run_steps)
    next_epoch = blocking(TxnStoreSteps.next_epoch_steps)
    epoch = blocking(TxnStoreSteps.epoch_steps)
    begin = blocking(TxnStoreSteps.begin_steps)
    stage = blocking(TxnStoreSteps.stage_steps)
    claim = blocking(TxnStoreSteps.claim_steps)
    replan = blocking(TxnStoreSteps.replan_steps)
    finish = blocking(TxnStoreSteps.finish_steps)
    adopt = blocking(TxnStoreSteps.adopt_steps)
    record = blocking(TxnStoreSteps.record_steps)
    staged = blocking(TxnStoreSteps.staged_steps)
    records = blocking(TxnStoreSteps.records_steps)
    unfinished = blocking(TxnStoreSteps.unfinished_steps)
    applied = blocking(TxnStoreSteps.applied_steps)
    forget_finished = blocking(TxnStoreSteps.forget_finished_steps)
    delete_all = blocking(TxnStoreSteps.delete_all_steps)

    def merge(
        self,
        target: str,
        sources: Sequence[str],
        transactional_id: str,
        epoch: int,
        lease_ms: int,
        retention_ms: int,
    ) -> str:
        """Begin ``target`` holding the staged events of the open ``sources`` (ending them),
        once, in steps of bounded work (:func:`merge_step`); a ``target`` found MERGING (a
        merge interrupted between steps) is resumed with the sources it stored. Returns ``""``
        when merged now, else the state ``target`` was in (merged before)."""
        stored: Any = None
        with translate_errors(f"read {self.subject(target)}"):
            stored = self._client.hget(self.record_key(target), "sources")
        if stored:
            sources = [str(s) for s in json.loads(as_text(stored))]
        holder = (transactional_id, epoch, lease_ms, retention_ms)
        step = self.merge_step(target, sources, *holder)
        if step.before:
            return step.state
        # each step moves at least one staging item (at most one per event) or passes one
        # source list, so this many steps always finish it
        for _ in range(step.events + len(sources) + 1):
            if step.state == TxnStatus.OPEN.value:
                return ""
            step = self.merge_step(target, sources, *holder)
        raise ReaderGroupError(f"{self.subject(target)}: still MERGING after every step")

    def merge_step(
        self,
        target: str,
        sources: Sequence[str],
        transactional_id: str,
        epoch: int,
        lease_ms: int,
        retention_ms: int,
        most_items: int = MERGE_STEP_ITEMS,
        most_bytes: int = MERGE_STEP_BYTES,
    ) -> MergeStep:
        """One ``txn_merge.lua`` step of at most ``most_items`` staging items and about
        ``most_bytes`` bytes."""
        keys = [self.record_key(target), self.staged_key(target), self.open_key]
        keys += (self.epochs_key, self.all_key)
        for source in sources:
            keys += (self.record_key(source), self.staged_key(source))
        args = [target, transactional_id, epoch, lease_ms, retention_ms, most_items, most_bytes]
        reply = self._run("txn_merge", target, keys, [*args, *sources])
        if int(reply[0]) != segment_status.OK:
            return MergeStep(as_text(reply[1]), 0, 0, before=True)
        return MergeStep(as_text(reply[1]), int(reply[2]), int(reply[3]), before=False)


def consumed_field(group_sync: str, segment_field: str) -> str:
    """A consumed-positions field: the reader group, then the input segment."""
    return f"{group_sync}|{segment_field}"


def pack_events(events: Sequence[StagedEvent]) -> bytes:
    """Staged events as one staging list item (``b""``: none): a msgpack array of
    ``[routing key or nil, payload, writer ms, packed headers]`` per event."""
    if not events:
        return b""
    return bytes(msgpack.packb([list(event) for event in events], use_bin_type=True))


def unpack_events(chunk: bytes) -> list[StagedEvent]:
    """The events of one staging list item (see :func:`pack_events`)."""
    try:
        rows = msgpack.unpackb(chunk, raw=False)
        return [
            (key, bytes(payload), int(ms), bytes(headers)) for key, payload, ms, headers in rows
        ]
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ReaderGroupError(f"unreadable staged events ({len(chunk)} bytes): {exc!r}") from exc
