"""``CloseFailures``: how a client that made others closes them all, threaded or asyncio.

Every one is closed even when an earlier close raises; the first failure is raised once all are
closed, each later one logged at WARNING with its exception (nothing caught is dropped)::

    failures = CloseFailures(logger)
    for item in made:
        with failures.closing(item):
            item.close()            # or: await item.close()
    failures.raise_first()
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class CloseFailures:
    """The failures of closing several objects (see the module docstring)."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self.first: Exception | None = None

    @contextmanager
    def closing(self, item: object) -> Iterator[None]:
        """Run the close of ``item`` in this block: an exception it raises is kept (the
        first) or logged (a later one), not propagated."""
        try:
            yield
        except Exception as exc:
            if self.first is None:
                self.first = exc
            else:
                self._logger.warning("closing %r failed too", item, exc_info=exc)

    def raise_first(self) -> None:
        """Raise the first failure, if any."""
        if self.first is not None:
            raise self.first
