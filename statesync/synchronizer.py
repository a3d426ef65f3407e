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

Who may call what: one instance may be shared by threads; its operations are serialized by
an internal lock, except ``wait_for_updates``, which never takes it.
"""

from __future__ import annotations

import contextlib
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from statesync import snapshot_cache, status
from statesync.backend import AppendOutcome, CompactOutcome, LogBackend, ReadResult
from statesync.clock import Clock
from statesync.codec import Codec, DecodeError, TypeRegistry, UnknownTypeError
from statesync.config import SyncConfig
from statesync.errors import (
    BackendProtocolError,
    BackendUnavailableError,
    ConflictRetriesExhaustedError,
    CorruptEntryError,
    EntryTooLargeError,
    LogRegressedError,
    PoisonedEntryError,
    ReplicaNotLoadedError,
    StateSyncError,
    UnknownUpdateTypeError,
    UpdateRejectedError,
)
from statesync.names import validate_name
from statesync.replica import (
    ApplyError,
    Replica,
    RevisionGapError,
    advance,
    apply_updates,
    split_generator_result,
)
from statesync.retry import RetryBudget
from statesync.system_clock import SYSTEM_CLOCK
from statesync.update import Update

S = TypeVar("S")
T = TypeVar("T")


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
        clock, rng: injected time and randomness (backoff only); defaults are the real ones.
        writer_label: a readable prefix for this client's writer id (audit trails).
        close_backend: close ``backend`` when this synchronizer is closed.
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
    ) -> None:
        self._name = validate_name(name)
        self._backend = backend
        self._config = config or SyncConfig()
        self._codec = Codec(TypeRegistry([*update_types, *state_types]))
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
            url, key_prefix=config.key_prefix, socket_timeout=config.socket_timeout
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

    def update_state(self, generator: Callable[[S], Any]) -> Any:
        """Append ``generator(state)``'s updates, conditional on the log not having moved.

        ``generator`` must be pure: it may run several times, each time on a newer state. It
        returns a list of updates, or ``(updates, result)``; an empty list appends nothing.
        Returns ``result`` (``None`` if none) from the run whose updates were appended.

        Raises :class:`~statesync.errors.UpdateRejectedError` if an update's ``apply_to``
        raises on the current state (nothing appended),
        :class:`~statesync.errors.ConflictRetriesExhaustedError` if the retry budget ran out,
        :class:`~statesync.errors.BackendUnavailableError` if Redis stayed unreachable (the
        update may have landed; the state shows whether it did, it never lands twice).
        """
        with self._lock:
            budget = self._config.retry.start(self._clock, self._rng)
            if self._replica is None:
                self._retrying(budget, self._fetch_locked)
            while True:
                replica = self._loaded()
                updates, result = split_generator_result(generator(replica.state))
                if not updates:
                    return result
                new_state = self._check_apply(replica, updates)
                payload = self._encode(updates)
                outcome = self._append(budget, payload, replica.revision)
                if outcome.status == status.OK:
                    self._replica = Replica(
                        new_state, outcome.revision, replica.incarnation, outcome.server_time_ms
                    )
                    self._maybe_compact(outcome.revision)
                    return result
                if outcome.status == status.DUPLICATE:
                    # An earlier try of this very append landed; its reply was lost.
                    self._retrying(budget, self._fetch_locked)
                    return result
                self._stats.conflicts += 1
                delay = budget.next_delay()
                if delay is None:
                    raise ConflictRetriesExhaustedError(self._name, budget.attempts, budget.elapsed)
                self._clock.sleep(delay)
                self._retrying(budget, self._fetch_locked)

    def update_state_unconditionally(self, updates: Sequence[Update]) -> int:
        """Append ``updates`` whatever the log's revision; return the revision they landed at.

        The updates are first applied to the local state and rejected
        (:class:`~statesync.errors.UpdateRejectedError`) if that raises.
        """
        with self._lock:
            budget = self._config.retry.start(self._clock, self._rng)
            if self._replica is None:
                self._retrying(budget, self._fetch_locked)
            replica = self._loaded()
            update_list = split_generator_result(list(updates))[0]
            new_state = self._check_apply(replica, update_list)
            outcome = self._append(budget, self._encode(update_list), None)
            if outcome.status == status.OK and outcome.revision == replica.revision + 1:
                self._replica = Replica(
                    new_state, outcome.revision, replica.incarnation, outcome.server_time_ms
                )
            else:
                self._retrying(budget, self._fetch_locked)
            return outcome.revision

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
            outcome = self._backend.compact(self._name, replica.revision, blob)
            if outcome.compacted and snapshot_fn is not None:
                self._replica = replace(replica, state=state)
            return outcome

    def wait_for_updates(self, timeout: float) -> bool:
        """Block until the log has an entry newer than :attr:`revision`, up to ``timeout``
        seconds; ``True`` if there is one. Blocks on the log itself (``XREAD BLOCK``), never
        sleep-polls. Does not apply anything: call :meth:`fetch_updates` next.
        """
        if timeout < 0:
            raise ValueError("timeout must be >= 0")
        return self._backend.wait(self._name, self.revision, timeout)

    def resync(self) -> int:
        """Drop the local copy and load the log's state from scratch (after
        :class:`~statesync.errors.LogRegressedError`)."""
        with self._lock:
            self._replica = None
            return self._fetch_locked()

    def delete(self) -> bool:
        """Delete the synchronizer's log, snapshots and writer table for every client."""
        with self._lock:
            self._replica = None
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
            with contextlib.suppress(StateSyncError):
                self.compact()
                self._stats.auto_compactions += 1

    def _retrying(self, budget: RetryBudget, operation: Callable[[], T]) -> T:
        """Run ``operation``, retrying on :class:`BackendUnavailableError` within ``budget``."""
        while True:
            try:
                return operation()
            except BackendUnavailableError:
                delay = budget.next_delay()
                if delay is None:
                    raise
                self._stats.backend_retries += 1
                self._clock.sleep(delay)

    def _append(
        self, budget: RetryBudget, payload: bytes, expected_revision: int | None
    ) -> AppendOutcome:
        """Append once, re-sending the *same* sequence number after connection errors."""
        self._sequence += 1
        sequence = self._sequence
        outcome = self._retrying(
            budget,
            lambda: self._backend.append(
                self._name,
                payload,
                expected_revision=expected_revision,
                writer=self._writer_id,
                sequence=sequence,
                max_bytes=self._config.max_entry_bytes,
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

    def _encode(self, updates: Sequence[Update]) -> bytes:
        payload = self._codec.encode_entry(self._writer_id, updates)
        if len(payload) > self._config.max_entry_bytes:
            raise EntryTooLargeError(self._name, len(payload), self._config.max_entry_bytes)
        return payload

    def _fetch_locked(self) -> int:
        applied = 0
        while True:
            page = self._backend.read(self._name, self.revision, self._config.read_batch)
            replica = self._replica_for(page)
            start = replica.revision
            try:
                for raw in page.entries:
                    replica = self._apply_raw(
                        replica, raw.revision, raw.server_time_ms, raw.payload
                    )
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
            raise LogRegressedError(self._name, "the synchronizer was deleted and created again")
        if page.snapshot is not None:
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
        assert page.snapshot is not None
        last_good = -1 if current is None else current.revision
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
        return Replica(decoded.state, decoded.revision, page.incarnation, decoded.server_time_ms)

    def _apply_raw(
        self, replica: Replica[S], revision: int, server_time_ms: int, payload: bytes
    ) -> Replica[S]:
        try:
            entry = self._codec.decode_entry(revision, server_time_ms, payload)
            return advance(replica, [entry])
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
