"""Spark finds the source from a venv's interpreter run by its path, without activating the venv
(issue 32 item 4): a session built the usual way, and ``python3`` on ``PATH`` another
interpreter, which is what Spark's Python workers run when ``PYSPARK_PYTHON`` is unset.

Each test starts its own Spark JVM in a subprocess (about 10 s): ``make test-long``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from readergroup import EventStreamClientFactory, StreamManager, UTF8StringSerializer

PROGRAM = """
import sys

from pyspark.sql import SparkSession

order, url, scope = sys.argv[1:]
if order == "import-first":
    import readergroup.spark  # the Spark integration, imported before the session
spark = (
    SparkSession.builder.master("local[2]")
    .appName("plain")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
try:
    if order == "session-first":
        from readergroup.spark.session import register

        register(spark)
    frame = (
        spark.read.format("readergroup")
        .option("redis_url", url)
        .option("scope", scope)
        .option("stream", "orders")
        .load()
    )
    print("COUNT", frame.count())
except Exception as exc:
    print("ERROR", type(exc).__name__, exc)
finally:
    spark.stop()
"""

EVENTS = 30


def run_plain_program(
    tmp_path: Path, order: str, redis_url: str, scope: str
) -> subprocess.CompletedProcess[str]:
    """PROGRAM run by this venv's interpreter, by its absolute path, with a ``PATH`` that does
    not contain the venv and whose ``python3`` is the base interpreter (no readergroup)."""
    factory = EventStreamClientFactory.from_url(scope, redis_url)
    with StreamManager.from_url(redis_url) as manager, factory:
        manager.create_stream(scope, "orders")
        with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
            for i in range(EVENTS):
                writer.write_event(f"k{i}", f"e{i}")
    other = tmp_path / "bin"
    other.mkdir()
    (other / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    venv_bin = str(Path(sys.executable).parent)
    path = [str(other), *(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.update(PATH=os.pathsep.join(path))
    env.pop("VIRTUAL_ENV", None)
    script = tmp_path / "plain.py"
    script.write_text(PROGRAM)
    base = subprocess.run(
        [str(other / "python3"), "-c", "import pyspark_readergroup"],
        env=env,
        capture_output=True,
        check=False,
    )
    assert base.returncode != 0, "python3 on PATH must be an interpreter without readergroup"
    return subprocess.run(
        [sys.executable, str(script), order, redis_url, scope],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.long
@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("import-first", f"COUNT {EVENTS}"),  # found: the workers run this interpreter
        ("session-first", "ERROR SparkWorkersError Spark's Python workers run 'python3' ("),
    ],
)
def test_a_plain_session_finds_the_source_from_an_unactivated_venv_or_says_what_to_set(
    tmp_path: Path, redis_url: str, scope: str, order: str, expected: str
) -> None:
    """``import-first``: readergroup.spark imported before the session; ``session-first``:
    the session started before, so its workers run ``python3``: ``register`` says what to
    set instead of Spark failing later in a worker."""
    done = run_plain_program(tmp_path, order, redis_url, scope)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout + done.stderr[-3000:]
    if order == "session-first":
        assert f"Set PYSPARK_PYTHON={sys.executable} " in done.stdout, done.stdout
        # importing readergroup.spark after the session started warned already (stderr)
        assert f"Set PYSPARK_PYTHON={sys.executable} " in done.stderr, done.stderr[-3000:]
