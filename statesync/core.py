"""The decisions of a State Synchronizer, with no I/O: one core under the threaded
:class:`~statesync.synchronizer.StateSynchronizer` and the asyncio
:class:`~statesync.aio_synchronizer.AsyncStateSynchronizer`.

Each operation (:meth:`SynchronizerCore.initialize`, ``fetch``, ``update_state``, ...) is a
generator that yields :mod:`statesync.requests` (a backend call, a backoff sleep) and receives
their replies; a driver (:func:`statesync.requests.run`,
:func:`statesync.aio_synchronizer.run_async`) answers them. So what to read, how a page is
applied, when a conflict re-runs the generator, the backoff drawn from the injected clock and
random source, the second wake-up, the automatic compaction and what each error means are
written once, here.

The core changes its state (the replica, the writer sequence, the counters) only between two
yields: an operation abandoned at a ``yield`` (a thread's call raising, a task cancelled while
its request is in flight) leaves a consistent replica, and the writer sequence makes a re-sent
or a landed-but-unanswered append count once (see :mod:`statesync.backend`).

Not thread-safe: the shells serialize operations (a lock, an ``asyncio.Lock``).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from statesync import snapshot_cache, status
from statesync.backend import AppendOutcome, CompactOutcome, RawEntry, ReadResult
from statesync.clock import Clock
from statesync.codec import COMPACT_VERSION, Codec, TypeRegistry
from statesync.config import SyncConfig
from statesync.errors import (
    ApplyError,
    BackendProtocolError,
    BackendUnavailableError,
    BadEntryError,
    ConflictRetriesExhaustedError,
    CorruptEntryError,
    DecodeError,
    EntryTooLargeError,
    LogRegressedError,
    PoisonedEntryError,
    ReplicaNotLoadedError,
    RevisionGapError,
    StateSyncError,
    UnknownTypeError,
    UnknownUpdateTypeError,
    UpdateRejectedError,
)
from statesync.names import validate_name
from statesync.replica import Replica, advance, apply_updates, split_generator_result
from statesync.requests import BackendCall, Operation, Sleep
from statesync.retry import RetryBudget
from statesync.update import Update

S = TypeVar("S")
T = TypeVar("T")

# the name users configure and the guide documents, whichever shell runs the core
logger = logging.getLogger("statesync.synchronizer")


@dataclass
class SyncStats:
    """Counters of one synchronizer client since it was created (read :attr:`stats`)."""

    appends: int = 0
    """Entries this client appended."""
    conflicts: int = 0
    """Conditional appends that found the log moved (each caused a fetch and a re-run)."""
    duplicates: int = 0
    """Appends found already landed after a lost reply (each would have been a double)."""
    backend_retries: int = 0
    """Operations re-tried after the backend was unavailable."""
    entries_applied: int = 0
    """Log entries applied by fetching (own appends are applied without a fetch)."""
    snapshots_loaded: int = 0
    """Times the local copy was replaced by a snapshot (fresh start or behind truncation)."""
    auto_compactions: int = 0
    """Compactions this client ran because of ``SyncConfig.compact_every``."""
    resyncs: int = 0
    """Times the local copy was dropped to adopt the log (:meth:`StateSynchronizer.resync`)."""
    reads: int = 0
    """Reads of the log (one per page fetched, including fetches that found nothing new)."""
    disjoint_appends: int = 0
    """Conditional appends that landed past entries concerning other keys (no conflict; see
    :meth:`Update.conflict_keys`)."""
    shared_applies: int = 0
    """Log entries not decoded nor applied here: another synchronizer of this process had
    the state after them (``SyncConfig.share_applied_states``)."""


class SynchronizerCore(Generic[S]):
    """The local copy of one log and every decision about it (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        update_types: Iterable[type[Update]],
        state_types: Iterable[type],
        config: SyncConfig,
        clock: Clock,
        rng: random.Random,
        writer_label: str | None,
        entry_version: Callable[[S], int] | None,
    ) -> None:
        self.name = validate_name(name)
        self.config = config
        self.clock = clock
        self._rng = rng
        self._codec = Codec(TypeRegistry([*update_types, *state_types]))
        self._entry_version = entry_version
        unique = uuid.uuid4().hex[:20]
        self.writer_id = (
            f"{validate_name(writer_label, what='writer label')}/{unique}"
            if writer_label
            else unique
        )
        self._sequence = 0
        self.replica: Replica[S] | None = None
        self.stats = SyncStats()
        self.fetch_error: BadEntryError | LogRegressedError | None = None

    # -- read-only view ---------------------------------------------------------------------
    @property
    def revision(self) -> int:
        replica = self.replica
        return -1 if replica is None else replica.revision

    def loaded(self) -> Replica[S]:
        replica = self.replica
        if replica is None:
            raise ReplicaNotLoadedError(self.name)
        return replica

    # -- operations -------------------------------------------------------------------------
    def initialize(self, initial_state: S) -> Operation[bool]:
        blob = self._codec.encode_snapshot(0, 0, initial_state)
        created = yield BackendCall("initialize", (self.name, blob, uuid.uuid4().hex))
        yield from self.fetch()
        return bool(created)

    def fetch(self) -> Operation[int]:
        """Apply every entry after the replica's revision; remembers what stopped it."""
        try:
            applied = yield from self._fetch_pages()
        except (BadEntryError, LogRegressedError) as exc:
            self.fetch_error = exc
            raise
        self.fetch_error = None
        return applied

    def update_state(self, generator: Callable[[S], Any], fetched_at: int | None) -> Operation[Any]:
        budget = self.config.retry.start(self.clock, self._rng)
        # the replica was fetched during this call (or the caller's step)
        fresh = fetched_at is not None and self.revision == fetched_at
        if self.replica is None:
            yield from self._retrying(budget, self.fetch)
            fresh = True
        while True:
            replica = self.loaded()
            try:
                updates, result = split_generator_result(generator(replica.state))
            except Exception:
                if fresh or not (yield from self._log_moved(budget)):
                    raise
                fresh = True
                continue  # decided on a stale replica: decide again on the newer state
            if not updates:
                if fresh or not (yield from self._log_moved(budget)):
                    return result
                fresh = True
                continue
            new_state = self._check_apply(replica, updates)
            payload = self._encode(updates, replica.state)
            wake = _wakes(updates, new_state)
            outcome = yield from self._append(
                budget, payload, replica, conditional=True, wake=wake, keys=_conflict_keys(updates)
            )
            if outcome.status == status.OK:
                if outcome.revision == replica.revision + 1:
                    self._appended(replica, new_state, outcome)
                else:  # landed after entries about other keys: apply them, then ours
                    self.stats.disjoint_appends += 1
                    yield from self._retrying(budget, self.fetch)
                    yield from self._wake_again(updates, wake, outcome.revision)
                yield from self._maybe_compact(outcome.revision)
                return result
            if outcome.status == status.DUPLICATE:
                # An earlier try of this very append landed; its reply was lost.
                yield from self._retrying(budget, self.fetch)
                yield from self._wake_again(updates, wake, outcome.revision)
                return result
            self.stats.conflicts += 1
            delay = budget.next_delay()
            if delay is None:
                raise ConflictRetriesExhaustedError(self.name, budget.attempts, budget.elapsed)
            yield Sleep(delay)
            yield from self._retrying(budget, self.fetch)
            fresh = True

    def update_unconditionally(self, updates: Sequence[Update]) -> Operation[int]:
        budget = self.config.retry.start(self.clock, self._rng)
        if self.replica is None or isinstance(self.fetch_error, BadEntryError):
            yield from self._refuse_if_stuck(budget)
        replica = self.loaded()
        update_list = split_generator_result(list(updates))[0]
        new_state = self._check_apply(replica, update_list)
        wake = _wakes(update_list, new_state)
        outcome = yield from self._append(
            budget,
            self._encode(update_list, replica.state),
            replica,
            conditional=False,
            wake=wake,
            keys=_conflict_keys(update_list),
        )
        if outcome.status == status.OK and outcome.revision == replica.revision + 1:
            # the script checked our history at replica.revision, then the head: ours
            self._appended(replica, new_state, outcome)
            return outcome.revision
        try:
            yield from self._retrying(budget, self.fetch)
        except (BadEntryError, LogRegressedError) as exc:
            logger.warning(
                "synchronizer %r: unconditional append landed at revision %d; this replica "
                "could not catch up to it",
                self.name,
                outcome.revision,
                exc_info=exc,
            )
        else:
            yield from self._wake_again(update_list, wake, outcome.revision)
        return outcome.revision

    def compact(self, snapshot_fn: Callable[[S], S] | None) -> Operation[CompactOutcome]:
        yield from self.fetch()
        replica = self.loaded()
        state = snapshot_fn(replica.state) if snapshot_fn else replica.state
        blob = self._codec.encode_snapshot(replica.revision, replica.server_time_ms, state)
        if len(blob) > self.config.max_snapshot_bytes:
            raise EntryTooLargeError(
                self.name, len(blob), self.config.max_snapshot_bytes, "max_snapshot_bytes"
            )
        outcome: CompactOutcome = yield BackendCall(
            "compact",
            (self.name, replica.revision, blob),
            {"incarnation": replica.incarnation, "history": replica.history},
        )
        if outcome.compacted and snapshot_fn is not None:
            self.replica = replace(replica, state=state)
        return outcome

    def wait(self, timeout: float, wakes_only: bool, follower: str | None) -> Operation[bool]:
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        woke = yield BackendCall(
            "wait",
            (self.name, self.revision, timeout),
            {"wakes_only": wakes_only, "follower": follower},
        )
        return bool(woke)

    def resync(self) -> Operation[int]:
        self.replica = None
        self.fetch_error = None
        self.stats.resyncs += 1
        return (yield from self.fetch())

    def follow(self) -> Operation[int]:
        try:
            return (yield from self.fetch())
        except LogRegressedError as exc:
            logger.warning("synchronizer %r: adopting the log's state", self.name, exc_info=exc)
        return (yield from self.resync())

    def delete(self) -> Operation[bool]:
        self.replica = None
        self.fetch_error = None
        deleted = yield BackendCall("delete", (self.name,))
        return bool(deleted)

    # -- internals --------------------------------------------------------------------------
    def _appended(self, replica: Replica[S], new_state: S, outcome: AppendOutcome) -> None:
        """Our own append landed right after ``replica`` (at its revision + 1)."""
        self.replica = Replica(
            new_state,
            outcome.revision,
            replica.incarnation,
            outcome.server_time_ms,
            outcome.history,
        )
        self._share(self.replica)

    def _log_moved(self, budget: RetryBudget) -> Operation[bool]:
        """Fetch; whether the log had entries this replica had not applied."""
        before = self.loaded()
        yield from self._retrying(budget, self.fetch)
        after = self.loaded()
        return (after.revision, after.incarnation) != (before.revision, before.incarnation)

    def _wake_again(
        self, updates: Sequence[Any], named: bool | frozenset[str], landed: int
    ) -> Operation[None]:
        """After an entry of ``updates`` whose wake-ups named followers (``named``, decided on
        a replica the log had moved past) landed at revision ``landed`` and this replica read
        the log since: name them again on the state read (the log's as of now, or newer than
        the entry's own). Whoever the entry woke by its first naming refreshes past it;
        whoever the entries it landed after woke was named on their own writers' states. The
        others the combined state gives something to do are woken here, unless a later
        wake-up (decided on a state as new) already exists. Best effort: a wake-up is a hint
        (followers also refresh on their own), so a failure is logged, never raised: the
        entry has landed."""
        replica = self.loaded()
        if isinstance(named, bool) or replica.revision < landed:
            return
        again = _wakes(updates, replica.state)
        if again is not True:  # those named the first time have refreshed past the entry
            again = again and again - named
            if not again:
                return
        try:
            yield BackendCall(
                "wake", (self.name, replica.revision, None if again is True else again)
            )
        except StateSyncError as exc:
            logger.warning(
                "synchronizer %r: the second wake-up at revision %d failed (followers wake on "
                "their own refresh instead)",
                self.name,
                replica.revision,
                exc_info=exc,
            )

    def _maybe_compact(self, revision: int) -> Operation[None]:
        """Compact after landing a multiple of ``compact_every`` (best effort: an error here
        leaves the log longer, never the state wrong)."""
        every = self.config.compact_every
        if every and revision % every == 0:
            try:
                yield from self.compact(None)
                self.stats.auto_compactions += 1
            except StateSyncError as exc:
                logger.warning(
                    "synchronizer %r: compaction at revision %d failed, the log stays longer "
                    "until the next one: %s",
                    self.name,
                    revision,
                    exc,
                    exc_info=exc,
                )

    def _retrying(self, budget: RetryBudget, operation: Callable[[], Operation[T]]) -> Operation[T]:
        """Run ``operation``, retrying on :class:`BackendUnavailableError` within ``budget``."""
        while True:
            try:
                return (yield from operation())
            except BackendUnavailableError as exc:
                delay = budget.next_delay()
                if delay is None:
                    raise
                self.stats.backend_retries += 1
                # the first retry of a loop at WARNING, the rest at DEBUG (an outage would
                # otherwise log every backoff)
                logger.log(
                    logging.WARNING if budget.attempts == 2 else logging.DEBUG,
                    "synchronizer %r: backend unavailable, retry %d within %.1fs: %s",
                    self.name,
                    budget.attempts - 1,
                    budget.remaining,
                    exc,
                    exc_info=exc,
                )
                yield Sleep(delay)

    def _refuse_if_stuck(self, budget: RetryBudget) -> Operation[None]:
        """Catch up before an unconditional append; a bad entry on the way refuses it."""
        try:
            yield from self._retrying(budget, self.fetch)
        except BadEntryError as exc:
            raise type(exc)(
                self.name,
                exc.revision,
                exc.last_good_revision,
                f"{exc.reason}; nothing was appended",
            ) from exc

    def _append(
        self,
        budget: RetryBudget,
        payload: bytes,
        replica: Replica[S],
        *,
        conditional: bool,
        wake: bool | frozenset[str],
        keys: Sequence[str] | None,
    ) -> Operation[AppendOutcome]:
        """Append once, re-sending the *same* sequence number after connection errors.

        The append names ``replica``'s incarnation and its history at its revision, so it is
        refused if the replica is not of the log's history; ``conditional`` makes it land only
        if the log's head is still ``replica.revision``."""
        self._sequence += 1
        call = BackendCall(
            "append",
            (self.name, payload),
            {
                "expected_revision": replica.revision if conditional else None,
                "writer": self.writer_id,
                "sequence": self._sequence,
                "max_bytes": self.config.max_entry_bytes,
                "incarnation": replica.incarnation,
                "anchor_revision": replica.revision,
                "anchor_history": replica.history,
                "wake": wake,
                "keys": keys,
            },
        )
        outcome: AppendOutcome = yield from self._retrying(budget, lambda: _ask(call))
        if outcome.status == status.OK:
            self.stats.appends += 1
        elif outcome.status == status.DUPLICATE:
            self.stats.duplicates += 1
        return outcome

    def _check_apply(self, replica: Replica[S], updates: Sequence[Update]) -> S:
        try:
            return apply_updates(replica.state, updates, replica.revision + 1)
        except ApplyError as exc:
            raise UpdateRejectedError(self.name, replica.revision, exc.update) from exc.__cause__

    def _encode(self, updates: Sequence[Update], state: S) -> bytes:
        version = COMPACT_VERSION if self._entry_version is None else self._entry_version(state)
        payload = self._codec.encode_entry(self.writer_id, updates, version=version)
        if len(payload) > self.config.max_entry_bytes:
            raise EntryTooLargeError(self.name, len(payload), self.config.max_entry_bytes)
        return payload

    def _fetch_pages(self) -> Operation[int]:
        applied = 0
        while True:
            self.stats.reads += 1
            page: ReadResult = yield BackendCall(
                "read",
                (self.name, self.revision, self.config.read_batch),
                {
                    "max_entry_bytes": self.config.max_entry_bytes,
                    "max_snapshot_bytes": self.config.max_snapshot_bytes,
                },
            )
            replica = self._replica_for(page)
            start = replica.revision
            try:
                for raw in page.entries:
                    if raw.refused_size:
                        raise CorruptEntryError(
                            self.name,
                            raw.revision,
                            replica.revision,
                            f"entry is {raw.refused_size} bytes, over max_entry_bytes "
                            f"({self.config.max_entry_bytes}); left unread in Redis",
                        )
                    replica = self._apply_raw(replica, raw)
            finally:  # keep the good prefix even when an entry is bad
                self.replica = replica
                applied += replica.revision - start
                self.stats.entries_applied += replica.revision - start
            if replica.revision >= page.head_revision:
                return applied
            if not page.entries:
                raise CorruptEntryError(
                    self.name,
                    replica.revision + 1,
                    replica.revision,
                    f"missing from the log although its head is {page.head_revision}",
                )

    def _replica_for(self, page: ReadResult) -> Replica[S]:
        """The replica the page's entries apply to: ours, or the page's snapshot."""
        current = self.replica
        if current is not None and page.incarnation != current.incarnation:
            raise LogRegressedError(
                self.name,
                status.regressed_detail("read", page.head_revision, status.OTHER_INCARNATION),
            )
        if (
            current is not None
            and page.snapshot is None
            and page.anchor
            and current.history
            and page.anchor != current.history
        ):
            raise LogRegressedError(
                self.name,
                status.regressed_detail("read", page.head_revision, status.OTHER_HISTORY)
                + f"; at revision {current.revision}",
            )
        if page.snapshot is not None or page.snapshot_refused_size:
            current = self._decode_snapshot(page, current)
            self.stats.snapshots_loaded += 1
        if current is None:
            raise BackendProtocolError(f"synchronizer {self.name!r}: read gave no snapshot")
        if current.revision > page.head_revision:
            raise LogRegressedError(
                self.name,
                f"the log's head is revision {page.head_revision} but this replica already "
                f"applied revision {current.revision} (Redis lost acknowledged writes)",
            )
        return current

    def _decode_snapshot(self, page: ReadResult, current: Replica[S] | None) -> Replica[S]:
        last_good = -1 if current is None else current.revision
        if page.snapshot is None:
            raise CorruptEntryError(
                self.name,
                page.snapshot_revision,
                last_good,
                f"snapshot is {page.snapshot_refused_size} bytes, over max_snapshot_bytes "
                f"({self.config.max_snapshot_bytes}); left unread in Redis",
            )
        try:
            if self.config.share_decoded_snapshots:
                decoded = snapshot_cache.decode_shared(
                    page.snapshot, self._codec.registry.fingerprint, self._codec.decode_snapshot
                )
            else:
                decoded = self._codec.decode_snapshot(page.snapshot)
        except UnknownTypeError as exc:
            raise UnknownUpdateTypeError(
                self.name, page.snapshot_revision, last_good, f"snapshot: {exc}"
            ) from exc
        except DecodeError as exc:
            raise CorruptEntryError(
                self.name, page.snapshot_revision, last_good, f"snapshot: {exc}"
            ) from exc
        if decoded.revision != page.snapshot_revision:
            raise CorruptEntryError(
                self.name,
                page.snapshot_revision,
                last_good,
                f"snapshot says it is revision {decoded.revision}",
            )
        return Replica(
            decoded.state,
            decoded.revision,
            page.incarnation,
            decoded.server_time_ms,
            page.snapshot_history,
        )

    def _share(self, replica: Replica[S]) -> None:
        """Offer ``replica``'s state to this process's synchronizers of the same log (see
        :mod:`statesync.snapshot_cache`)."""
        if self.config.share_applied_states:
            snapshot_cache.remember_state(
                self.name,
                replica.revision,
                replica.history,
                self._codec.registry.fingerprint,
                replica.state,
            )

    def _apply_raw(self, replica: Replica[S], raw: RawEntry) -> Replica[S]:
        revision, server_time_ms, payload, history = (
            raw.revision,
            raw.server_time_ms,
            raw.payload,
            raw.history,
        )
        share = self.config.share_applied_states and history
        if share and revision == replica.revision + 1:
            shared = snapshot_cache.state_after(
                self.name, revision, history, self._codec.registry.fingerprint
            )
            if shared is not None:
                self.stats.shared_applies += 1
                return Replica(shared, revision, replica.incarnation, server_time_ms, history)
        try:
            entry = self._codec.decode_entry(revision, server_time_ms, payload)
            applied = replace(advance(replica, [entry]), history=history)
            if share:
                self._share(applied)
            return applied
        except UnknownTypeError as exc:
            raise UnknownUpdateTypeError(self.name, revision, replica.revision, str(exc)) from exc
        except (DecodeError, RevisionGapError) as exc:
            raise CorruptEntryError(self.name, revision, replica.revision, str(exc)) from exc
        except ApplyError as exc:
            raise PoisonedEntryError(
                self.name,
                revision,
                replica.revision,
                f"{type(exc.update).__name__}.apply_to raised {exc.__cause__!r}",
            ) from exc.__cause__


class SynchronizerView(Generic[S]):
    """The read-only view both shells give of their core (a base class, no I/O)."""

    _core: SynchronizerCore[S]

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def writer_id(self) -> str:
        """This client's writer id, recorded in every entry it appends."""
        return self._core.writer_id

    @property
    def config(self) -> SyncConfig:
        return self._core.config

    @property
    def stats(self) -> SyncStats:
        """A copy of this client's counters."""
        return replace(self._core.stats)

    @property
    def is_loaded(self) -> bool:
        return self._core.replica is not None

    @property
    def state(self) -> S:
        """The local copy as of :attr:`revision`. Treat it as read-only."""
        return self._core.loaded().state

    @property
    def revision(self) -> int:
        """Revision of the last entry applied locally; ``-1`` before anything is loaded."""
        return self._core.revision

    @property
    def fetch_error(self) -> BadEntryError | LogRegressedError | None:
        """The error that stopped this replica's latest fetch (a bad entry, or a log that is
        not this replica's history), or ``None`` once a fetch reached the head.

        The way ``update_state_unconditionally`` reports, next to the revision its updates
        landed at, that the replica could not catch up with them."""
        return self._core.fetch_error

    @property
    def server_time_ms(self) -> int:
        """Server time (ms) at which the entry at :attr:`revision` was appended."""
        return self._core.loaded().server_time_ms

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, revision={self.revision})"


def _ask(call: BackendCall) -> Operation[Any]:
    """One backend call as an operation (for :meth:`SynchronizerCore._retrying`)."""
    return (yield call)


def _wakes(updates: Sequence[Update], state: Any) -> bool | frozenset[str]:
    """Whom an entry of ``updates`` leaving the log at ``state`` wakes: nobody (``False``) if
    none of them wakes followers; every follower (``True``) if one of those that do names no
    followers; else the followers they name (see :meth:`Update.wakes`)."""
    named: set[str] = set()
    waking = False
    for update in updates:
        if not getattr(update, "wakes_followers", True):
            continue
        waking = True
        followers = update.wakes(state) if isinstance(update, Update) else None
        if followers is None:
            return True
        named.update(followers)
    return frozenset(named) if waking else False


def _conflict_keys(updates: Sequence[Update]) -> tuple[str, ...] | None:
    """What an entry of ``updates`` concerns: the union of their keys; ``None`` (the whole
    state) if any of them concerns the whole state."""
    keys: set[str] = set()
    for update in updates:
        concern = update.conflict_keys() if isinstance(update, Update) else None
        if concern is None:
            return None
        keys.update(concern)
    return tuple(sorted(keys)) or None
