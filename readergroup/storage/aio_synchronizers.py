"""Opening asyncio state synchronizers: :class:`AsyncSynchronizers`, the one
:meth:`~AsyncSynchronizers.synchronizer` of every asyncio connection (the managers' and the
readers', on Redis and in memory), and :func:`sync_config_of`, the synchronizer configuration
of a client configuration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from readergroup.core.config import ClientConfig
from statesync import AsyncStateSynchronizer, SyncConfig, Update
from statesync.aio_backend import AsyncLogBackend


def sync_config_of(config: ClientConfig) -> SyncConfig:
    """The synchronizer configuration a connection with ``config`` opens synchronizers with."""
    return SyncConfig(
        key_prefix=config.key_prefix,
        retry=config.retry,
        socket_timeout=config.socket_timeout,
        compact_every=config.compact_every,
        acks=config.durability,
    )


class AsyncSynchronizers:
    """Opens asyncio synchronizers on ``log_backend`` with ``sync_config``; an entry version
    not given is :meth:`entry_version_of` the log (none here: a subclass may choose one)."""

    log_backend: AsyncLogBackend
    sync_config: SyncConfig

    def entry_version_of(self, name: str) -> Any:
        """The entry version of a synchronizer of ``name`` opened without one."""
        return None

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        writer_label: str | None = None,
        *,
        entry_version: Any = None,
    ) -> AsyncStateSynchronizer[Any]:
        """An asyncio state synchronizer of ``name`` on this connection's logs."""
        return AsyncStateSynchronizer(
            self.log_backend,
            name,
            update_types=update_types,
            state_types=state_types,
            config=self.sync_config,
            writer_label=writer_label,
            entry_version=self.entry_version_of(name) if entry_version is None else entry_version,
        )
