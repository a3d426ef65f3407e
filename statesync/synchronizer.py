"""The :class:`StateSynchronizer`: a local copy of a replicated state, kept in step with a log.

The threaded shell around the synchronizer's core (:mod:`statesync.core`, which decides
everything and does no I/O): it answers the core's requests on a
:class:`~statesync.backend.LogBackend` (:func:`statesync.requests.run`) and serializes the
operations of its threads. :class:`~statesync.aio_synchronizer.AsyncStateSynchronizer` is the
asyncio shell around the same core.

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

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

from statesync.backend import CompactOutcome, LogBackend
from statesync.core import SyncStats
from statesync.requests import Operation, run
from statesync.shell import SynchronizerShell
from statesync.update import Decision, Update

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

__all__ = ["StateSynchronizer", "SyncStats"]


class StateSynchronizer(SynchronizerShell[S, LogBackend]):
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

    def _new_lock(self) -> threading.RLock:
        return threading.RLock()

    @classmethod
    def _backend_from_url(cls, url: str, options: dict[str, Any]) -> LogBackend:
        from statesync.redis_backend import RedisLogBackend

        return RedisLogBackend.from_url(url, **options)

    def _run(self, operation: Operation[T]) -> T:
        """Drive one of the core's operations, serialized with this instance's others."""
        with self._lock:
            return run(operation, self._backend, self._core.clock)

    # -- operations -------------------------------------------------------------------------
    def initialize(self, initial_state: S) -> bool:
        """Create the synchronizer with ``initial_state`` unless it exists, then load it.

        Idempotent: returns ``True`` if this call created it; ``False`` if it existed, in which
        case ``initial_state`` is ignored and the existing state is loaded.
        """
        return self._run(self._core.initialize(initial_state))

    def fetch_updates(self) -> int:
        """Apply every entry newer than :attr:`revision`; return how many were applied.

        Raises :class:`~statesync.errors.BadEntryError` at a bad entry (the state stays at the
        last good revision), :class:`~statesync.errors.SynchronizerNotFoundError` if the
        synchronizer does not exist, :class:`~statesync.errors.BackendUnavailableError`
        (retriable) if Redis cannot be reached.
        """
        return self._run(self._core.fetch())

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
        return self._run(self._core.update_state(generator, fetched_at))

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
        return self._run(self._core.update_unconditionally(updates))

    def compact(self, snapshot_fn: Callable[[S], S] | None = None) -> CompactOutcome:
        """Snapshot the state at the current head and truncate the log behind the previous
        snapshot.

        ``snapshot_fn`` may return an equivalent, smaller state to store (for example without
        data no update will read again); this replica then adopts it, like every client that
        loads the snapshot. ``compacted`` is False if a snapshot at this revision or a newer one
        already existed.
        """
        return self._run(self._core.compact(snapshot_fn))

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
        # not serialized: a wait must not hold up this instance's appends and fetches
        return run(self._core.wait(timeout, wakes_only, follower), self._backend, self._core.clock)

    def resync(self) -> int:
        """Drop the local copy and load the log's state from scratch (after
        :class:`~statesync.errors.LogRegressedError`)."""
        return self._run(self._core.resync())

    def follow(self) -> int:
        """:meth:`fetch_updates` for a client that only follows the log: when the log is not
        this replica's history any more (:class:`~statesync.errors.LogRegressedError`), adopt
        the log's state (:meth:`resync`, logged at WARNING) instead of raising. Returns the
        entries applied."""
        return self._run(self._core.follow())

    def delete(self) -> bool:
        """Delete the synchronizer's log, snapshots and writer table for every client."""
        return self._run(self._core.delete())

    def close(self) -> None:
        """Release the backend if this synchronizer owns it. Idempotent."""
        if self._close_backend:
            self._backend.close()

    def __enter__(self) -> StateSynchronizer[S]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
