"""readergroup: Pravega-style streams and reader groups on Redis, built on :mod:`statesync`."""

from readergroup.errors import EmbeddedRedisError, ReaderGroupError

__version__ = "0.1.0"

__all__ = ["EmbeddedRedisError", "ReaderGroupError", "__version__"]
