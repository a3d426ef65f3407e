"""Spark integration (the ``spark`` extra): the ``readergroup`` data source and executor
readers. Importing this package requires pyspark and pyarrow.

Importing it also gives Spark's Python workers this interpreter when ``PYSPARK_PYTHON`` is
unset and no Spark session runs yet (:func:`readergroup.spark.workers.use_this_interpreter`),
so ``spark.read.format("readergroup")`` works from a venv's interpreter run by its path
without activating the venv.
"""

from readergroup.spark.workers import use_this_interpreter

use_this_interpreter()
