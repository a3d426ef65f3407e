"""Exceptions raised by :mod:`readergroup`. Every one derives from :class:`ReaderGroupError`."""

from __future__ import annotations


class ReaderGroupError(Exception):
    """Root of every error raised by readergroup; ``retriable`` says if a retry can succeed."""

    retriable: bool = False


class EmbeddedRedisError(ReaderGroupError):
    """No Redis could be had: no ``REDIS_URL``, no container engine, no server binary, or the
    server binary failed to start (its log is quoted)."""
