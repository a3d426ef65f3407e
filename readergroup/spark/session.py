"""A local SparkSession for tests, examples and demos, whose Python workers run the same
interpreter (and so see the same installed packages) as the driver."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def local_session(cores: int = 2, app_name: str = "readergroup") -> SparkSession:
    """``local[cores]`` with the UI off and few shuffle partitions (small, quiet, quick)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, cores)))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.execution.pyspark.python", sys.executable)
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
