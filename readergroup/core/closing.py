"""One place for "a client that owns resources": ``close()`` plus the context-manager protocol."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TypeVar

C = TypeVar("C", bound="Closing")


class Closing(ABC):
    """Subclasses implement :meth:`close` (idempotent); ``with`` closes them."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self: C) -> C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
