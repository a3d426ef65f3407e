"""What the threaded and the asyncio synchronizers have in common: a core
(:class:`~statesync.core.SynchronizerCore`) built with the documented defaults, the backend it
runs on, and the read-only view (:class:`~statesync.core.SynchronizerView`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any, Generic, Self, TypeVar

from statesync.clock import Clock
from statesync.config import SyncConfig
from statesync.core import SynchronizerCore, SynchronizerView
from statesync.system_clock import SYSTEM_CLOCK
from statesync.update import Update

S = TypeVar("S")
B = TypeVar("B")


class SynchronizerShell(SynchronizerView[S], Generic[S, B]):
    """A core and the backend ``B`` its requests go to (see the subclasses for the
    arguments)."""

    def __init__(
        self,
        backend: B,
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
        self._core = SynchronizerCore(
            name,
            update_types=update_types,
            state_types=state_types,
            config=config or SyncConfig(),
            clock=clock or SYSTEM_CLOCK,
            rng=rng or random.Random(),  # noqa: S311 (backoff jitter, not secrets)
            writer_label=writer_label,
            entry_version=entry_version,
        )
        self._backend = backend
        self._close_backend = close_backend
        self._lock = self._new_lock()

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
    ) -> Self:
        """Connect to the Redis at ``url`` with a backend owned by the new synchronizer (the
        config's key prefix, socket timeout and acks; ``kwargs`` as the constructor's)."""
        return cls(
            cls._backend_from_url(url, backend_options(config)),
            name,
            update_types=update_types,
            state_types=state_types,
            config=config,
            close_backend=True,
            **kwargs,
        )

    @classmethod
    def _backend_from_url(cls, url: str, options: dict[str, Any]) -> B:
        """A Redis backend of this shell's kind for ``url``."""
        raise NotImplementedError

    def _new_lock(self) -> Any:
        """The lock serializing this instance's operations (a thread's, or a task's)."""
        raise NotImplementedError

    @property
    def backend(self) -> B:
        return self._backend


def backend_options(config: SyncConfig | None) -> dict[str, Any]:
    """What a Redis backend's ``from_url`` takes from a synchronizer's config."""
    config = config or SyncConfig()
    return {
        "key_prefix": config.key_prefix,
        "socket_timeout": config.socket_timeout,
        "acks": config.acks,
    }
