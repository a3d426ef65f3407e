"""Which Python interpreter Spark's Python workers run, so that they find this library.

Spark looks up Python data sources (``spark.read.format("readergroup")``) in a Python worker the
JVM starts with ``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else ``python3`` on ``PATH``;
executors' Python workers use ``spark.pyspark.python`` or ``PYSPARK_PYTHON``. A program run
with a venv's interpreter by its path, without activating the venv, has none of them pointing
at the venv: ``python3`` is another interpreter without this library, and the source is not
found (``[DATA_SOURCE_NOT_FOUND]``).

Importing :mod:`readergroup.spark` therefore calls :func:`use_this_interpreter`: while
``PYSPARK_PYTHON`` is unset and no Spark JVM runs yet, it becomes this interpreter, so a
session built afterwards the usual way (``SparkSession.builder...getOrCreate()``) finds the
source. Where that is too late (a session already runs), the import logs a WARNING saying
exactly what to set, and :func:`check_workers` (called by
:func:`readergroup.spark.session.register`) raises :class:`SparkWorkersError` saying it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

from readergroup.core.errors import SparkWorkersError

logger = logging.getLogger(__name__)

PACKAGE = "pyspark_readergroup"
"""The package Spark's data source lookup imports (it registers the ``readergroup`` source)."""

CHECK_SECONDS = 60.0
"""Longest wait for an interpreter to say whether it can import :data:`PACKAGE`."""


def _active_context() -> Any:
    """This process's live SparkContext, or ``None``."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def use_this_interpreter() -> bool:
    """Set ``PYSPARK_PYTHON`` to this interpreter when it is unset and no Spark JVM runs yet
    (then every session this process builds gives its Python workers the interpreter that has
    this library). ``True`` if it was set; an explicit ``PYSPARK_PYTHON`` is never changed, nor
    the choice of ``spark-submit`` or the ``pyspark`` shell (their JVM runs already). A session
    already running whose workers cannot import this library is logged at WARNING with what to
    set (Spark would not find the source)."""
    if "PYSPARK_PYTHON" in os.environ:
        return False
    context = _active_context()
    if context is not None:
        problem = workers_problem(str(context.pythonExec))
        if problem is not None:
            logger.warning("%s", problem)
        return False
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    os.environ["PYSPARK_PYTHON"] = sys.executable
    logger.info(
        "PYSPARK_PYTHON was unset: Spark's Python workers will run %s (this interpreter, which "
        "has readergroup); set PYSPARK_PYTHON to choose another",
        sys.executable,
    )
    return True


def can_import_source(python: str) -> bool:
    """Whether interpreter ``python`` (a path or a name on ``PATH``) can import the source's
    package. Its own output is not kept: only whether it succeeded."""
    found = shutil.which(python)
    if found is None:
        return False
    if os.path.abspath(found) == sys.executable:  # not resolved: a venv's python is a link
        return True
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({PACKAGE!r}) is None)"
    try:
        done = subprocess.run(  # noqa: S603 (the interpreter Spark itself would run)
            [found, "-c", probe], capture_output=True, timeout=CHECK_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("cannot run %s to check for %s: %s", found, PACKAGE, exc)
        return False
    return done.returncode == 0


def workers_problem(python: str) -> str | None:
    """``None`` if Python workers running ``python`` can import this library, else what is
    wrong and exactly what to set instead."""
    if can_import_source(python):
        return None
    where = shutil.which(python)
    found = f" ({where})" if where and where != python else " (not found)" if not where else ""
    return (
        f"Spark's Python workers run {python!r}{found}, which cannot import {PACKAGE}, so they "
        f"cannot run the 'readergroup' data source (PYSPARK_PYTHON was "
        f"{'unset' if python == 'python3' else repr(python)} when the session started). Set "
        f"PYSPARK_PYTHON={sys.executable} in the environment before the first SparkSession "
        "of the program starts (or import readergroup.spark before building it), or install "
        f"readergroup into {python}"
    )


def check_workers(spark: Any) -> None:
    """Raise :class:`SparkWorkersError` if ``spark``'s Python workers (the interpreter its
    SparkContext runs Python functions and registered data sources with) cannot import this
    library, naming what to set instead."""
    problem = workers_problem(str(spark.sparkContext.pythonExec))
    if problem is not None:
        raise SparkWorkersError(problem)
