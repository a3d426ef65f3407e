"""Spark integration (the ``spark`` extra): the ``readergroup`` data source and executor
readers. Importing this package requires pyspark and pyarrow."""
