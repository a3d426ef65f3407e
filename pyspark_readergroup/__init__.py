"""Registers the ``readergroup`` Spark data source by short name.

PySpark 4 imports every installed top-level package whose name starts with ``pyspark_`` and
registers its ``DefaultSource``; nothing else is needed in user code.
"""

from readergroup.spark.source import ReaderGroupDataSource as DefaultSource

__all__ = ["DefaultSource"]
