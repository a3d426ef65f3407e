"""Prometheus metrics of reader groups from asyncio code: :class:`AsyncReaderGroupCollector`.

The same metric families as :class:`~readergroup.admin.metrics.ReaderGroupCollector`, read by
the same scrape (:func:`~readergroup.admin.metrics.scrape`, awaited). A Prometheus collector's
``collect`` is called without an event loop, so the reading is split from it: ``await
collector.refresh()`` reads Redis (call it before serving a scrape, or from a task every few
seconds), and ``collect`` returns what the last refresh read, never touching Redis::

    collector = factory.metrics_collector()
    registry.register(collector)
    await collector.refresh()
    body = prometheus_client.generate_latest(registry)

On Redis it reports the streams' unfinished transactions too
(``readergroup_stream_transactions``, ``readergroup_stream_oldest_transaction_seconds``), read
through :class:`~readergroup.storage.aio_txn_store.AsyncTxnStore` by the same steps.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from readergroup.admin.metrics import ReaderGroupCollector, scrape
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_calls import drive_async
from readergroup.storage.aio_txn_store import async_transactions


class AsyncReaderGroupCollector(ReaderGroupCollector):
    """The reader-group metrics of ``scopes`` (all if ``None``) on ``connection`` (an asyncio
    managers' connection, e.g. from :meth:`~readergroup.aio.factory.
    AsyncEventStreamClientFactory.metrics_collector`), as of the last :meth:`refresh`."""

    def __init__(self, connection: Any, scopes: Sequence[str] | None = None) -> None:
        super().__init__(connection, scopes)
        self._last: list[Any] = []

    async def refresh(self) -> None:
        """Read every group now (a scope or group that cannot be read is counted in
        ``readergroup_scrape_errors_total`` and left out, as in the threaded collector)."""
        began = time.monotonic()
        stores: Callable[[str, str], Any] | None = None  # the memory backend has none
        if isinstance(self._connection, AsyncAdminConnection):
            stores = functools.partial(async_transactions, self._connection.connection)
        steps = scrape(self._connection, self._scopes, self._error, stores)
        families, up = await drive_async(steps)
        seconds = time.monotonic() - began
        self._last = [*families.all(), *self._scrape_families(up, seconds)]

    def collect(self) -> Iterator[Any]:
        """What the last :meth:`refresh` read (nothing before the first: ``readergroup_up``
        is then absent)."""
        yield from self._last
