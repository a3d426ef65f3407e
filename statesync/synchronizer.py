"""The :class:`StateSynchronizer`: a local copy of a replicated state, kept in step with a log.

The thin I/O shell around the pure core (:mod:`~statesync.codec`, :mod:`~statesync.replica`,
:mod:`~statesync.retry`): it moves bytes between a :class:`~statesync.backend.LogBackend`
and the local :class:`~statesync.replica.Replica`.

Transitions of the local copy (``revision`` is ``-1`` until loaded):

* ``initialize(state)``: creates the log with ``state`` at revision 0 unless it exists
  (the first writer wins), then loads the log.
* ``fetch_updates()``: applies every entry after ``revision`` in order; a replica behind the
  truncation point first jumps to the newest snapshot. Stops at the head.
* ``update_state(gen)``: runs ``gen(state)``; appends its updates only if the log is still at
  ``revision``; on conflict fetches, waits a jittered backoff and runs ``gen`` again, within
  ``SyncConfig.retry``. On success the local copy is at the new revision.
* ``compact()``: writes the local state as a snapshot and truncates behind the previous one.
* ``delete()``: removes everything; the local copy is dropped.

Guarantees:

* Every replica applies the same entries in the same order; an entry is applied whole or not
  at all, and never twice (revisions must be consecutive).
* An append lands at most once per ``(writer, sequence)``, even if a reply is lost and the
  append is retried; so a dropped connection never applies an update twice.
* A bad entry (corrupt, unknown type, or raising in ``apply_to``) stops this replica at the
  revision before it with a :class:`~statesync.errors.BadEntryError` naming both revisions;
  the local state is never half-updated.
* Two replicas never both believe different histories: every entry carries the log's chained
  history (:mod:`statesync.backend`), and a replica whose history is not the log's (the log
  was deleted and created again, or Redis lost entries this replica applied, in a failover)
  gets :class:`~statesync.errors.LogRegressedError` on its next fetch, append or compaction;
  nothing is appended from it until :meth:`StateSynchronizer.resync`.

Who may call what: one instance may be shared by threads; its operations are serialized by
an internal lock, except ``wait_for_updates``, which never takes it.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, overload

from statesync import snapshot_cache, status
from statesync.backend import AppendOutcome, CompactOutcome, LogBackend, RawEntry, ReadResult
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
from statesync.retry import RetryBudget
from statesync.system_clock import SYSTEM_CLOCK
from statesync.update import Decision, Update

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger(__name__)


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


class StateSynchronizer(Generic[S]):
    """A replicated state whose history is an append-only log in a backend (Redis).

    Example::

        sync = StateSynchronizer.from_url(url, "demo-counter", update_types=[Add])
        sync.initialize({"total": 0})
        sync.update_state(lambda state: [Add(5)])
        assert sync.state["total"] >= 5

    Args:
        backend: where the log lives (:class:`~statesync.redis_backend.RedisLogBackend`).
        name: the synchronizer's name (see :mod:`statesync.names`).
        update_types: the :class:`Update` dataclasses that may appear in the log.
        state_types: other dataclasses that may appear inside the state or updates.
        config: :class:`SyncConfig` (defaults documented there).
        clock: injected time (backoff only); the default is the real clock.
        rng: injected randomness (backoff jitter only); the default is the real one.
        writer_label: a readable prefix for this client's writer id (audit trails).
        close_backend: close ``backend`` when this synchronizer is closed.
        entry_version: the newest entry format (:data:`statesync.codec.FORMAT_VERSION` or an
            older one) every reader of the log reads, given the state an append's updates were
            decided on; entries are written in no newer format. Default: always
            :data:`~statesync.codec.COMPACT_VERSION` (2), which the versions before format 3
            read too, so a log shared with them stays readable; pass a function saying when
            every reader reads the newest (as reader groups negotiate it).
    """

    def __init__(
        self,
        backend: LogBackend,
        name: str,
        *,
        update_types: Iterable[type[Update]] = (),
        state_types: Iterable[type] = (),
        config: SyncConfig | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        writer_label: str | None = None,
        close_backend: bool = False,
        entry_version: Callable[[S], int] | None = None,
    ) -> None:
        self._name = validate_name(name)
        self._backend = backend
        self._config = config or SyncConfig()
        self._codec = Codec(TypeRegistry([*update_types, *state_types]))
        self._entry_version = entry_version
        self._clock: Clock = clock or SYSTEM_CLOCK
        self._rng = rng or random.Random()  # noqa: S311 (backoff jitter, not secrets)
        unique = uuid.uuid4().hex[:20]
        self._writer_id = (
            f"{validate_name(writer_label, what='writer label')}/{unique}"
            if (writer_label)
            else unique
        )
        self._sequence = 0
        self._replica: Replica[S] | None = None
        self._lock = threading.RLock()
        self._close_backend = close_backend
        self._stats = SyncStats()
        self._fetch_error: BadEntryError | LogRegressedError | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        name: str,
        *,
        update_types: Iterable[type[Update]] = (),
        state_types: Iterable[type] = (),
        config: SyncConfig | None = None,
        **kwargs: Any,
    ) -> StateSynchronizer[Any]:
        """Connect to the Redis at ``url`` with a backend owned by the new synchronizer."""
        from statesync.redis_backend import RedisLogBackend

        config = config or SyncConfig()
        backend = RedisLogBackend.from_url(
            url,
            key_prefix=config.key_prefix,
            socket_timeout=config.socket_timeout,
            acks=config.acks,
        )
        return cls(
            backend,
            name,
            update_types=update_types,
            state_types=state_types,
            config=config,
            close_backend=True,
            **kwargs,
        )

    # -- read-only view ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def writer_id(self) -> str:
        """This client's writer id, recorded in every entry it appends."""
        return self._writer_id

    @property
    def backend(self) -> LogBackend:
        return self._backend

    @property
    def config(self) -> SyncConfig:
        return self._config

    @property
    def stats(self) -> SyncStats:
        """A copy of this client's counters."""
        return replace(self._stats)

    @property
    def is_loaded(self) -> bool:
        return self._replica is not None

    @property
    def state(self) -> S:
        """The local copy as of :attr:`revision`. Treat it as read-only."""
        return self._loaded().state

    @property
    def revision(self) -> int:
        """Revision of the last entry applied locally; ``-1`` before anything is loaded."""
        replica = self._replica
        return -1 if replica is None else replica.revision

    @property
    def fetch_error(self) -> BadEntryError | LogRegressedError | None:
        """The error that stopped this replica's latest fetch (a bad entry, or a log that is
        not this replica's history), or ``None`` once a fetch reached the head.

        The way :meth:`update_state_unconditionally` reports, next to the revision its
        updates landed at, that the replica could not catch up with them."""
        return self._fetch_error

    @property
    def server_time_ms(self) -> int:
        """Server time (ms) at which the entry at :attr:`revision` was appended."""
        return self._loaded().server_time_ms

    def _loaded(self) -> Replica[S]:
        replica = self._replica
        if replica is None:
            raise ReplicaNotLoadedError(self._name)
        return replica

    # -- operations -------------------------------------------------------------------------
    def initialize(self, initial_state: S) -> bool:
        """Create the synchronizer with ``initial_state`` unless it exists, then load it.

        Idempotent: returns ``True`` if this call created it; ``False`` if it existed, in which
        case ``initial_state`` is ignored and the existing state is loaded.
        """
        blob = self._codec.encode_snapshot(0, 0, initial_state)
        with self._lock:
            created = self._backend.initialize(self._name, blob, uuid.uuid4().hex)
            self._fetch_locked()
            return created

    def fetch_updates(self) -> int:
        """Apply every entry newer than :attr:`revision`; return how many were applied.

        Raises :class:`~statesync.errors.BadEntryError` at a bad entry (the state stays at the
        last good revision), :class:`~statesync.errors.SynchronizerNotFoundError` if the
        synchronizer does not exist, :class:`~statesync.errors.BackendUnavailableError`
        (retriable) if Redis cannot be reached.
        """
        with self._lock:
            return self._fetch_locked()

    # a list of updates: no result (listed first: a class may be both an Update and a Sequence)
    @overload
    def update_state(
        self,
        generator: Callable[[S], Sequence[Update] | None],
        *,
        fetched_at: int | None = None,
    ) -> None: ...

    @overload
    def update_state(
        self, generator: Callable[[S], Decision[R]], *, fetched_at: int | None = None
    ) -> R: ...

    def update_state(self, generator: Callable[[S], Any], *, fetched_at: int | None = None) -> Any:
        """Append ``generator(state)``'s updates, conditional on the log not having moved.

        ``generator`` must be pure: it may run several times, each time on a newer state. It
        returns a list of updates, or ``(updates, result)`` (a :data:`~statesync.Decision`);
        an empty list appends nothing. Returns ``result`` (``None`` if none) from the run whose
        updates were appended, typed as the generator's result.

        Every decision is made on fresh state: a run that appends nothing, or raises, counts
        only if its state was fetched during this call; otherwise the log is read first and,
        if it moved, the generator runs again on the newer state (so a stale handle cannot
        silently decide "nothing to do", nor refuse on a state that no longer holds).
        ``fetched_at``: the caller fetched (or appended) this replica at that revision during
        the same step, so a first run on a replica still there counts as fresh (no second
        read of the log just to confirm "nothing to do").

        Raises :class:`~statesync.errors.UpdateRejectedError` if an update's ``apply_to``
        raises on the current state (nothing appended),
        :class:`~statesync.errors.ConflictRetriesExhaustedError` if the retry budget ran out,
        :class:`~statesync.errors.BackendUnavailableError` if Redis stayed unreachable (the
        update may have landed; the state shows whether it did, it never lands twice).
        """
        with self._lock:
            budget = self._config.retry.start(self._clock, self._rng)
            # the replica was fetched during this call (or the caller's step)
            fresh = fetched_at is not None and self.revision == fetched_at
            if self._replica is None:
                self._retrying(budget, self._fetch_locked)
                fresh = True
            while True:
                replica = self._loaded()
                try:
                    updates, result = split_generator_result(generator(replica.state))
                except Exception:
                    if fresh or not self._log_moved(budget):
                        raise
                    fresh = True
                    continue  # decided on a stale replica: decide again on the newer state
                if not updates:
                    if fresh or not self._log_moved(budget):
                        return result
                    fresh = True
                    continue
                new_state = self._check_apply(replica, updates)
                payload = self._encode(updates, replica.state)
                wake = _wakes(updates, new_state)
                outcome = self._append(
                    budget,
                    payload,
                    replica,
                    conditional=True,
                    wake=wake,
                    keys=_conflict_keys(updates),
                )
                if outcome.status == status.OK:
                    if outcome.revision == replica.revision + 1:
                        self._replica = _appended(replica, new_state, outcome)
                        self._share(self._replica)
                    else:  # landed after entries about other keys: apply them, then ours
                        self._stats.disjoint_appends += 1
                        self._retrying(budget, self._fetch_locked)
                        self._wake_again(updates, wake, outcome.revision)
                    self._maybe_compact(outcome.revision)
                    return result
                if outcome.status == status.DUPLICATE:
                    # An earlier try of this very append landed; its reply was lost.
                    self._retrying(budget, self._fetch_locked)
                    self._wake_again(updates, wake, outcome.revision)
                    return result
                self._stats.conflicts += 1
                delay = budget.next_delay()
                if delay is None:
                    raise ConflictRetriesExhaustedError(self._name, budget.attempts, budget.elapsed)
                self._clock.sleep(delay)
                self._retrying(budget, self._fetch_locked)
                fresh = True

    def _log_moved(self, budget: RetryBudget) -> bool:
        """Fetch; whether the log had entries this replica had not applied."""
        before = self._loaded()
        self._retrying(budget, self._fetch_locked)
        after = self._loaded()
        return (after.revision, after.incarnation) != (before.revision, before.incarnation)

    def update_state_unconditionally(self, updates: Sequence[Update]) -> int:
        """Append ``updates`` whatever the log's revision; return the revision they landed at.

        The updates are first applied to the local state and rejected
        (:class:`~statesync.errors.UpdateRejectedError`) if that raises. A replica known to
        be stuck at a bad entry refuses before appending (the :class:`BadEntryError` says
        nothing was appended); one whose history is not the log's gets
        :class:`~statesync.errors.LogRegressedError`, nothing appended. When the updates
        landed but the replica cannot catch up to them (it meets a bad entry on the way), the
        call still returns their revision and :attr:`fetch_error` holds what stopped it.
        """
        with self._lock:
            budget = self._config.retry.start(self._clock, self._rng)
            if self._replica is None or isinstance(self._fetch_error, BadEntryError):
                self._refuse_if_stuck(budget)
            replica = self._loaded()
            update_list = split_generator_result(list(updates))[0]
            new_state = self._check_apply(replica, update_list)
            wake = _wakes(update_list, new_state)
            outcome = self._append(
                budget,
                self._encode(update_list, replica.state),
                replica,
                conditional=False,
                wake=wake,
                keys=_conflict_keys(update_list),
            )
            if outcome.status == status.OK and outcome.revision == replica.revision + 1:
                # the script checked our history at replica.revision, then the head: ours
                self._replica = _appended(replica, new_state, outcome)
                self._share(self._replica)
                return outcome.revision
            try:
                self._retrying(budget, self._fetch_locked)
            except (BadEntryError, LogRegressedError) as exc:
                logger.warning(
                    "synchronizer %r: unconditional append landed at revision %d; this replica "
                    "could not catch up to it",
                    self._name,
                    outcome.revision,
                    exc_info=exc,
                )
            else:
                self._wake_again(update_list, wake, outcome.revision)
            return outcome.revision

    def _wake_again(
        self, updates: Sequence[Any], named: bool | frozenset[str], landed: int
    ) -> None:
        """After an entry of ``updates`` whose wake-ups named followers (``named``, decided on
        a replica the log had moved past) landed at revision ``landed`` and this replica read
        the log since: name them again on the state read (the log's as of now, or newer than
        the entry's own). Whoever the entry woke by its first naming refreshes past it;
        whoever the entries it landed after woke was named on their own writers' states. The
        others the combined state gives something to do are woken here, unless a later
        wake-up (decided on a state as new) already exists. Best effort: a wake-up is a hint
        (followers also refresh on their own), so a failure is logged, never raised: the
        entry has landed."""
        replica = self._loaded()
        if isinstance(named, bool) or replica.revision < landed:
            return
        again = _wakes(updates, replica.state)
        if again is not True:  # those named the first time have refreshed past the entry
            again = again and again - named
            if not again:
                return
        try:
            self._backend.wake(self._name, replica.revision, None if again is True else again)
        except StateSyncError as exc:
            logger.warning(
                "synchronizer %r: the second wake-up at revision %d failed (followers wake on "
                "their own refresh instead)",
                self._name,
                replica.revision,
                exc_info=exc,
            )

    def compact(self, snapshot_fn: Callable[[S], S] | None = None) -> CompactOutcome:
        """Snapshot the state at the current head and truncate the log behind the previous
        snapshot.

        ``snapshot_fn`` may return an equivalent, smaller state to store (for example without
        data no update will read again); this replica then adopts it, like every client that
        loads the snapshot. ``compacted`` is False if a snapshot at this revision or a newer one
        already existed.
        """
        with self._lock:
            self._fetch_locked()
            replica = self._loaded()
            state = snapshot_fn(replica.state) if snapshot_fn else replica.state
            blob = self._codec.encode_snapshot(replica.revision, replica.server_time_ms, state)
            if len(blob) > self._config.max_snapshot_bytes:
                raise EntryTooLargeError(
                    self._name, len(blob), self._config.max_snapshot_bytes, "max_snapshot_bytes"
                )
            outcome = self._backend.compact(
                self._name,
                replica.revision,
                blob,
                incarnation=replica.incarnation,
                history=replica.history,
            )
            if outcome.compacted and snapshot_fn is not None:
                self._replica = replace(replica, state=state)
            return outcome

    def wait_for_updates(
        self, timeout: float, *, wakes_only: bool = False, follower: str | None = None
    ) -> bool:
        """Block until the log has an entry newer than :attr:`revision`, up to ``timeout``
        seconds; ``True`` if there is one. Blocks on the log itself (``XREAD BLOCK``), never
        sleep-polls. Does not apply anything: call :meth:`fetch_updates` next.
        ``wakes_only``: only an entry holding an update that wakes followers
        (:attr:`Update.wakes_followers`) counts: one whose wake-up is for every follower, or
        names ``follower`` (:meth:`Update.wakes`; without a ``follower``, named wake-ups do
        not count).
        """
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        return self._backend.wait(
            self._name, self.revision, timeout, wakes_only=wakes_only, follower=follower
        )

    def resync(self) -> int:
        """Drop the local copy and load the log's state from scratch (after
        :class:`~statesync.errors.LogRegressedError`)."""
        with self._lock:
            self._replica = None
            self._fetch_error = None
            self._stats.resyncs += 1
            return self._fetch_locked()

    def follow(self) -> int:
        """:meth:`fetch_updates` for a client that only follows the log: when the log is not
        this replica's history any more (:class:`~statesync.errors.LogRegressedError`), adopt
        the log's state (:meth:`resync`, logged at WARNING) instead of raising. Returns the
        entries applied."""
        with self._lock:
            try:
                return self._fetch_locked()
            except LogRegressedError as exc:
                logger.warning(
                    "synchronizer %r: adopting the log's state", self._name, exc_info=exc
                )
                return self.resync()

    def delete(self) -> bool:
        """Delete the synchronizer's log, snapshots and writer table for every client."""
        with self._lock:
            self._replica = None
            self._fetch_error = None
            return self._backend.delete(self._name)

    def close(self) -> None:
        """Release the backend if this synchronizer owns it. Idempotent."""
        if self._close_backend:
            self._backend.close()

    def __enter__(self) -> StateSynchronizer[S]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateSynchronizer(name={self._name!r}, revision={self.revision})"

    # -- internals --------------------------------------------------------------------------
    def _maybe_compact(self, revision: int) -> None:
        """Compact after landing a multiple of ``compact_every`` (best effort: an error here
        leaves the log longer, never the state wrong)."""
        every = self._config.compact_every
        if every and revision % every == 0:
            try:
                self.compact()
                self._stats.auto_compactions += 1
            except StateSyncError as exc:
                logger.warning(
                    "synchronizer %r: compaction at revision %d failed, the log stays longer "
                    "until the next one: %s",
                    self._name,
                    revision,
                    exc,
                    exc_info=exc,
                )

    def _retrying(self, budget: RetryBudget, operation: Callable[[], T]) -> T:
        """Run ``operation``, retrying on :class:`BackendUnavailableError` within ``budget``."""
        while True:
            try:
                return operation()
            except BackendUnavailableError as exc:
                delay = budget.next_delay()
                if delay is None:
                    raise
                self._stats.backend_retries += 1
                # the first retry of a loop at WARNING, the rest at DEBUG (an outage would
                # otherwise log every backoff)
                logger.log(
                    logging.WARNING if budget.attempts == 2 else logging.DEBUG,
                    "synchronizer %r: backend unavailable, retry %d within %.1fs: %s",
                    self._name,
                    budget.attempts - 1,
                    budget.remaining,
                    exc,
                    exc_info=exc,
                )
                self._clock.sleep(delay)

    def _refuse_if_stuck(self, budget: RetryBudget) -> None:
        """Catch up before an unconditional append; a bad entry on the way refuses it."""
        try:
            self._retrying(budget, self._fetch_locked)
        except BadEntryError as exc:
            raise type(exc)(
                self._name,
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
        wake: bool | frozenset[str] = True,
        keys: Sequence[str] | None = None,
    ) -> AppendOutcome:
        """Append once, re-sending the *same* sequence number after connection errors.

        The append names ``replica``'s incarnation and its history at its revision, so it is
        refused if the replica is not of the log's history; ``conditional`` makes it land only
        if the log's head is still ``replica.revision``."""
        self._sequence += 1
        sequence = self._sequence
        outcome = self._retrying(
            budget,
            lambda: self._backend.append(
                self._name,
                payload,
                expected_revision=replica.revision if conditional else None,
                writer=self._writer_id,
                sequence=sequence,
                max_bytes=self._config.max_entry_bytes,
                incarnation=replica.incarnation,
                anchor_revision=replica.revision,
                anchor_history=replica.history,
                wake=wake,
                keys=keys,
            ),
        )
        if outcome.status == status.OK:
            self._stats.appends += 1
        elif outcome.status == status.DUPLICATE:
            self._stats.duplicates += 1
        return outcome

    def _check_apply(self, replica: Replica[S], updates: Sequence[Update]) -> S:
        try:
            return apply_updates(replica.state, updates, replica.revision + 1)
        except ApplyError as exc:
            raise UpdateRejectedError(self._name, replica.revision, exc.update) from exc.__cause__

    def _encode(self, updates: Sequence[Update], state: S) -> bytes:
        version = COMPACT_VERSION if self._entry_version is None else self._entry_version(state)
        payload = self._codec.encode_entry(self._writer_id, updates, version=version)
        if len(payload) > self._config.max_entry_bytes:
            raise EntryTooLargeError(self._name, len(payload), self._config.max_entry_bytes)
        return payload

    def _fetch_locked(self) -> int:
        try:
            applied = self._fetch_pages()
        except (BadEntryError, LogRegressedError) as exc:
            self._fetch_error = exc
            raise
        self._fetch_error = None
        return applied

    def _fetch_pages(self) -> int:
        applied = 0
        while True:
            self._stats.reads += 1
            page = self._backend.read(
                self._name,
                self.revision,
                self._config.read_batch,
                max_entry_bytes=self._config.max_entry_bytes,
                max_snapshot_bytes=self._config.max_snapshot_bytes,
            )
            replica = self._replica_for(page)
            start = replica.revision
            try:
                for raw in page.entries:
                    if raw.refused_size:
                        raise CorruptEntryError(
                            self._name,
                            raw.revision,
                            replica.revision,
                            f"entry is {raw.refused_size} bytes, over max_entry_bytes "
                            f"({self._config.max_entry_bytes}); left unread in Redis",
                        )
                    replica = self._apply_raw(replica, raw)
            finally:  # keep the good prefix even when an entry is bad
                self._replica = replica
                applied += replica.revision - start
                self._stats.entries_applied += replica.revision - start
            if replica.revision >= page.head_revision:
                return applied
            if not page.entries:
                raise CorruptEntryError(
                    self._name,
                    replica.revision + 1,
                    replica.revision,
                    f"missing from the log although its head is {page.head_revision}",
                )

    def _replica_for(self, page: ReadResult) -> Replica[S]:
        """The replica the page's entries apply to: ours, or the page's snapshot."""
        current = self._replica
        if current is not None and page.incarnation != current.incarnation:
            raise LogRegressedError(
                self._name,
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
                self._name,
                status.regressed_detail("read", page.head_revision, status.OTHER_HISTORY)
                + f"; at revision {current.revision}",
            )
        if page.snapshot is not None or page.snapshot_refused_size:
            current = self._decode_snapshot(page, current)
            self._stats.snapshots_loaded += 1
        if current is None:
            raise BackendProtocolError(f"synchronizer {self._name!r}: read gave no snapshot")
        if current.revision > page.head_revision:
            raise LogRegressedError(
                self._name,
                f"the log's head is revision {page.head_revision} but this replica already "
                f"applied revision {current.revision} (Redis lost acknowledged writes)",
            )
        return current

    def _decode_snapshot(self, page: ReadResult, current: Replica[S] | None) -> Replica[S]:
        last_good = -1 if current is None else current.revision
        if page.snapshot is None:
            raise CorruptEntryError(
                self._name,
                page.snapshot_revision,
                last_good,
                f"snapshot is {page.snapshot_refused_size} bytes, over max_snapshot_bytes "
                f"({self._config.max_snapshot_bytes}); left unread in Redis",
            )
        try:
            if self._config.share_decoded_snapshots:
                decoded = snapshot_cache.decode_shared(
                    page.snapshot, self._codec.registry.fingerprint, self._codec.decode_snapshot
                )
            else:
                decoded = self._codec.decode_snapshot(page.snapshot)
        except UnknownTypeError as exc:
            raise UnknownUpdateTypeError(
                self._name, page.snapshot_revision, last_good, f"snapshot: {exc}"
            ) from exc
        except DecodeError as exc:
            raise CorruptEntryError(
                self._name, page.snapshot_revision, last_good, f"snapshot: {exc}"
            ) from exc
        if decoded.revision != page.snapshot_revision:
            raise CorruptEntryError(
                self._name,
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
        if self._config.share_applied_states:
            snapshot_cache.remember_state(
                self._name,
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
        share = self._config.share_applied_states and history
        if share and revision == replica.revision + 1:
            shared = snapshot_cache.state_after(
                self._name, revision, history, self._codec.registry.fingerprint
            )
            if shared is not None:
                self._stats.shared_applies += 1
                return Replica(shared, revision, replica.incarnation, server_time_ms, history)
        try:
            entry = self._codec.decode_entry(revision, server_time_ms, payload)
            applied = replace(advance(replica, [entry]), history=history)
            if share:
                self._share(applied)
            return applied
        except UnknownTypeError as exc:
            raise UnknownUpdateTypeError(self._name, revision, replica.revision, str(exc)) from exc
        except (DecodeError, RevisionGapError) as exc:
            raise CorruptEntryError(self._name, revision, replica.revision, str(exc)) from exc
        except ApplyError as exc:
            raise PoisonedEntryError(
                self._name,
                revision,
                replica.revision,
                f"{type(exc.update).__name__}.apply_to raised {exc.__cause__!r}",
            ) from exc.__cause__


def _appended(replica: Replica[S], new_state: S, outcome: AppendOutcome) -> Replica[S]:
    """The replica after our own append landed right after ``replica`` (at its revision + 1)."""
    return Replica(
        new_state, outcome.revision, replica.incarnation, outcome.server_time_ms, outcome.history
    )


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
