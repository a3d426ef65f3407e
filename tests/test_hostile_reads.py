"""Hostile bytes and shapes planted in Redis with raw redis-py: every reader, admin and CLI
ends in a typed error naming the key and revision or offsets, never a crash or a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from readergroup import (
    CoordinationError,
    EventStreamClientFactory,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.names import CATALOG_SYNC_NAME, group_sync_name
from statesync import CorruptEntryError
from tests.support.hostile import hostile_entry
from tests.support.waiting import wait_until
from tests.test_faults_security import setup_group

ROOT = Path(__file__).resolve().parent.parent


def plant(connection: Any, sync_name: str, payload: bytes) -> int:
    """Append ``payload`` to a synchronizer's log as a rogue client would; its revision."""
    outcome = connection.log_backend.append(
        sync_name, payload, expected_revision=None, writer="rogue", sequence=1, max_bytes=1 << 27
    )
    return int(outcome.revision)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "readergroup.cli", *args],
        env={**os.environ, "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


def test_a_deeply_nested_group_log_entry_is_a_typed_error_for_readers_and_the_cli(
    redis_url: str, scope: str
) -> None:
    setup_group(redis_url, scope)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        reader.read_next_event(timeout=0.2)
        name = group_sync_name(scope, "g")
        bad = plant(factory.connection, name, hostile_entry(200))
        errors: list[CoordinationError] = []

        def failed() -> bool:
            try:
                reader.read_next_event(timeout=0.05)
            except CoordinationError as exc:
                errors.append(exc)
            return bool(errors)

        wait_until(failed, 20, "the corrupt entry reported")
        cause = errors[0].__cause__
        assert isinstance(cause, CorruptEntryError) and cause.revision == bad
        assert name in str(cause) and "nested more than" in str(cause)
        reader._stop.set()
    done = cli(redis_url, "group", "describe", f"{scope}/g")
    assert done.returncode not in (-11, 0), done  # a clear error, not a crash
    assert "revision" in done.stdout + done.stderr
    restarted = subprocess.run(  # a fresh process reading the group does not crash either
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from readergroup import EventStreamClientFactory, UTF8StringSerializer, "
            "ReaderGroupError\n"
            "with EventStreamClientFactory.from_url(sys.argv[1], sys.argv[2]) as f:\n"
            "    try:\n"
            "        f.create_reader('r2', 'g', UTF8StringSerializer()).read_next_event(1)\n"
            "    except ReaderGroupError as exc:\n"
            "        print(type(exc.__cause__).__name__)\n",
            scope,
            redis_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert restarted.returncode == 0, restarted.stderr[-2000:]
    assert "CorruptEntryError" in restarted.stdout


def test_a_deeply_nested_catalog_entry_is_a_typed_error_for_admins(private_redis: Any) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as manager:
        manager.create_scope("a")
        bad = plant(manager.connection, CATALOG_SYNC_NAME, hostile_entry(200))
    with StreamManager.from_url(url) as manager, pytest.raises(CoordinationError) as caught:
        manager.list_scopes()
    assert isinstance(caught.value.__cause__, CorruptEntryError)
    assert caught.value.__cause__.revision == bad
    done = cli(url, "scope", "list")
    assert done.returncode not in (-11, 0), done
