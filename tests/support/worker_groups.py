"""Which tests of a parallel run (pytest-xdist, ``--dist loadgroup``) share one worker.

Every test is a work unit of its own, handed to the next idle worker, except the tests of
``tests/test_spark*.py``: they are one unit, run by one worker, so that the run starts one
SparkSession (a JVM of 2 GB and its Python workers) instead of one per worker. The biggest unit
goes out first (xdist orders units by size), so the Spark tests never end a run alone.

Why not xdist's own ``xdist_group`` mark: pytest-xdist 3.8 tags a grouped test by rewriting
``item._nodeid``, which pytest 9.2 no longer reads (node ids became structured), so the mark is
silently ignored. The grouping here needs nothing but the node id's path, which the scheduler
(in the controller, which collects nothing) sees. A test of another file that uses the
``spark`` fixture is refused at collection (see ``tests/conftest.py``), so no run starts a
second SparkSession by accident.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from xdist.scheduler import LoadGroupScheduling

SPARK_GROUP = "spark"
SPARK_FILE_PREFIX = "test_spark"


def shared_group(nodeid: str) -> str | None:
    """The group of the test ``nodeid`` (``spark`` for ``tests/test_spark*.py``), or ``None``
    when the test runs wherever a worker is free.

    >>> shared_group("tests/test_spark.py::test_x[a::b]"), shared_group("tests/test_cli.py::t")
    ('spark', None)
    """
    path = PurePosixPath(nodeid.split("::", 1)[0])
    return SPARK_GROUP if path.name.startswith(SPARK_FILE_PREFIX) else None


class SharedWorkerScheduling(LoadGroupScheduling):
    """xdist's ``loadgroup`` scheduling with the groups of :func:`shared_group` added."""

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)  # an ``@group`` suffix, should xdist add one
        if scope != nodeid:
            return scope
        return shared_group(nodeid) or nodeid
