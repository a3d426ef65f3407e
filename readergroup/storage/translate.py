"""Translating redis-py and statesync errors into readergroup's (:mod:`readergroup.core.errors`):
:func:`translate_errors` around every Redis call, :func:`missing_as` and :func:`fetch_state`
for synchronizers that may not exist; and :func:`as_text` for a reply's bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from readergroup.core.errors import (
    AccessDeniedError,
    AckTimeoutError,
    AckUnsupportedError,
    CoordinationError,
    ReaderGroupError,
    RedisFailoverError,
    RedisUnavailableError,
)
from statesync import StateSynchronizer, SynchronizerNotFoundError
from statesync import errors as sync_errors
from statesync.errors import (
    BackendAccessError,
    BackendFailoverError,
    BackendUnavailableError,
    StateSyncError,
)
from statesync.redis_backend import cluster_unreachable, failover_reply, is_access_denied


def as_text(value: bytes | str) -> str:
    """A reply's bytes as text (bytes that are not UTF-8 replaced)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@contextmanager
def translate_errors(operation: str) -> Iterator[None]:
    """Re-raise redis-py and statesync errors from the block as :class:`ReaderGroupError`."""
    try:
        yield
    except ReaderGroupError:
        raise
    except BackendFailoverError as exc:
        raise RedisFailoverError(f"{operation}: {exc}", exc.reply) from exc
    except RedisClusterException as exc:  # (not a RedisError)
        if cluster_unreachable(exc):
            raise RedisUnavailableError(f"Redis unavailable during {operation}: {exc}") from exc
        raise ReaderGroupError(f"Redis Cluster error during {operation}: {exc}") from exc
    except redis.RedisError as exc:
        reply = failover_reply(exc)
        if reply is None:
            raise _translated(operation, exc) from exc
        raise RedisFailoverError(
            f"Redis is failing over ({reply}) during {operation}: {exc}", reply
        ) from exc
    except StateSyncError as exc:
        raise _translated(operation, exc) from exc


def _translated(operation: str, exc: Exception) -> ReaderGroupError:
    # checked first: redis-py's AuthenticationError is a ConnectionError
    if is_access_denied(exc) or isinstance(exc, BackendAccessError):
        return AccessDeniedError(f"Redis refused {operation}: {exc}")
    if isinstance(exc, sync_errors.AckTimeoutError):
        return AckTimeoutError(str(exc))
    if isinstance(exc, sync_errors.AckUnsupportedError):
        return AckUnsupportedError(str(exc))
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, BackendUnavailableError)):
        return RedisUnavailableError(f"Redis unavailable during {operation}: {exc}")
    if isinstance(exc, StateSyncError):
        error = CoordinationError(f"{operation}: {exc}")
        error.retriable = exc.retriable
        return error
    return ReaderGroupError(f"Redis error during {operation}: {exc}")


@contextmanager
def missing_as(missing: Callable[[], ReaderGroupError], operation: str) -> Iterator[None]:
    """Like :func:`translate_errors`, but a synchronizer that does not exist becomes the domain
    error ``missing()`` (stream or group not found)."""
    try:
        with translate_errors(operation):
            yield
    except ReaderGroupError as exc:
        if is_not_found(exc):
            raise missing() from exc
        raise


def is_not_found(exc: ReaderGroupError) -> bool:
    """Whether ``exc`` (from :func:`translate_errors`) says a synchronizer does not exist."""
    return isinstance(exc.__cause__, SynchronizerNotFoundError)


def fetch_state(
    sync: StateSynchronizer[Any], missing: Callable[[], ReaderGroupError], operation: str
) -> Any:
    """Fetch ``sync`` and return its state (see :func:`missing_as`). A log that lost writes
    this client had seen (a lossy failover) is adopted (:meth:`StateSynchronizer.follow`)."""
    with missing_as(missing, operation):
        sync.follow()
    return sync.state
