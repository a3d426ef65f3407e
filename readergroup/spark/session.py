"""A local SparkSession for tests, examples and demos, whose Python workers run the same
interpreter (and so see the same installed packages) as the driver; and the pieces that make
the ``readergroup`` source available to any session (:func:`register`, :func:`py_files_zip`).

How Spark finds the source: PySpark 4 scans ``sys.path`` of a Python worker for top-level
``pyspark_*`` packages and registers their ``DefaultSource``. That works with a wheel (the
package sits in ``site-packages``), an editable install (its ``.pth`` puts the checkout on
``sys.path``), and a zip from :func:`py_files_zip` shipped with ``--py-files``. Anywhere else,
:func:`register` (``spark.dataSource.register(ReaderGroupDataSource)``) is explicit and always
works.

The lookup runs in a Python worker, whose interpreter is ``PYSPARK_PYTHON`` (``python3`` on
``PATH`` when unset): importing :mod:`readergroup.spark` before the first session starts sets it
to this interpreter when it is unset (:mod:`readergroup.spark.workers`); :func:`register` says
what to set when the session's workers cannot import this library.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from readergroup.spark.workers import check_workers

PACKAGES = ("pyspark_readergroup", "readergroup", "statesync")


def local_session(
    cores: int = 2, app_name: str = "readergroup", max_failures: int = 4
) -> SparkSession:
    """``local[cores, max_failures]`` (failed tasks are retried, as on a cluster) with the UI off
    and few shuffle partitions (small, quiet, quick)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(f"local[{cores},{max_failures}]")
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


def register(spark: SparkSession) -> None:
    """Register the ``readergroup`` source with ``spark`` explicitly (needed only where the
    ``pyspark_readergroup`` package is not on the Python workers' ``sys.path``).

    Raises :class:`~readergroup.core.errors.SparkWorkersError`, saying what to set, when the
    session's Python workers run an interpreter that cannot import this library (as when the
    session started before anything set ``PYSPARK_PYTHON`` in a program run with a venv's
    interpreter without activating the venv): they could not run the source either.
    """
    from readergroup.spark.source import ReaderGroupDataSource

    check_workers(spark)
    spark.dataSource.register(ReaderGroupDataSource)


def py_files_zip(path: str | Path) -> Path:
    """Write this library's packages (``pyspark_readergroup``, ``readergroup``,
    ``statesync``) into a zip for ``spark-submit --py-files`` or ``SparkContext.addPyFile``.

    The packages sit at the top of the zip, so the executors' and the source lookup's
    ``sys.path`` scan finds ``pyspark_readergroup``. Third-party dependencies (redis, msgpack,
    cachetools, pyarrow) are not included: install them on the executors, or ship a packed
    environment with ``--archives``.
    """
    target = Path(path)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in PACKAGES:
            package = Path(__import__(name).__file__ or "").parent
            for file in sorted(package.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts:
                    archive.write(file, Path(name, file.relative_to(package)).as_posix())
    return target
