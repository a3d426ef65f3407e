"""CLI output and errors as an operator meets them: one line on stderr (JSON under --json),
no traceback, hints for connection mistakes, full tables in pipes, a watch that survives an
outage, and honest progress. Subprocesses against a real Redis."""

from __future__ import annotations

import json
import os
import pty
import queue
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest
import redis

from readergroup import ReaderGroupConfig, ReaderGroupManager, StreamManager
from readergroup.admin.group_manager import join_group
from readergroup.storage.connection import RedisConnection
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.cli import ROOT, as_json, cli, refused
from tests.support.waiting import wait_until


def test_user_errors_are_one_line_without_a_traceback(redis_url: str, scope: str) -> None:
    line = refused(redis_url, "--redis-url", "http://localhost:6379", "scope", "list", code=2)
    assert "redis://" in line
    line = refused(redis_url, "group", "history", f"{scope}/missing")
    assert "ReaderGroupNotFoundError" in line
    groups = refused(redis_url, "group", "list", "nosuchscope")
    streams = refused(redis_url, "stream", "list", "nosuchscope")
    assert "ScopeNotFoundError" in groups and "ScopeNotFoundError" in streams
    line = refused(redis_url, "group", "reset", f"{scope}/g", code=2)
    assert "exactly one" in line


def test_errors_are_json_under_json(redis_url: str, scope: str) -> None:
    done = cli(redis_url, "group", "describe", f"{scope}/missing", "--json", ok=False)
    assert done.returncode == 1 and done.stdout == ""
    error = json.loads(done.stderr)
    assert error["exit_code"] == 1 and "ReaderGroupNotFoundError" in error["error"]
    done = cli(redis_url, "--json", "group", "reset", f"{scope}/g", ok=False)
    usage = json.loads(done.stderr)
    assert done.returncode == 2 and usage["kind"] == "usage"


def test_tables_are_printed_in_full_when_stdout_is_not_a_terminal(
    redis_url: str, scope: str
) -> None:
    stream = f"{scope}/orders-of-the-northern-region-warehouse-{'x' * 20}"
    cli(redis_url, "stream", "create", stream)
    cli(
        redis_url, "group", "create", f"{scope}/billing-for-the-northern-region", "--stream", stream
    )
    listed = cli(redis_url, "stream", "list", scope).stdout
    described = cli(redis_url, "group", "describe", f"{scope}/billing-for-the-northern-region")
    assert stream.split("/")[1] in listed and stream in described.stdout
    assert "…" not in listed + described.stdout


@pytest.mark.long  # about 14 s: rediss:// to a plain server waits out two connect timeouts
def test_connection_mistakes_get_a_hint(private_redis: LocalRedisServer) -> None:
    url = private_redis.url
    line = refused(url.replace("redis://", "rediss://"), "scope", "list")
    assert "TLS" in line and "redis://" in line
    redis.Redis.from_url(url).config_set("requirepass", "secret")
    line = refused(url, "scope", "list")
    assert "requires a password" in line and "--password" in line and "HELLO" not in line
    line = refused(url, "--password", "wrong", "scope", "list")
    assert "AccessDeniedError" in line and "--password" in line
    assert "[]" not in cli(url, "--password", "secret", "--json", "scope", "list").stderr


def test_watch_says_redis_is_unavailable_and_carries_on(private_redis: LocalRedisServer) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("w")
        sm.create_stream("w", "orders")
    with ReaderGroupManager.from_url("w", url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=["w/orders"]))
    watch = subprocess.Popen(
        [sys.executable, "-m", "readergroup.cli", "group", "watch", "w/g", "--refresh", "0.2"],
        env={**os.environ, "REDIS_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    assert watch.stdout is not None
    threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout or []], daemon=True).start()

    def saw(text: str) -> bool:
        while not lines.empty():
            seen.append(lines.get())
        return any(text in line for line in seen)

    try:
        wait_until(lambda: saw("w/g"), what="a first view")
        private_redis.stop()
        wait_until(lambda: saw("Redis unavailable, retrying"), what="the outage shown")
        seen.clear()
        private_redis.start()
        wait_until(lambda: saw("w/g"), what="the view back after the outage")
        assert watch.poll() is None, "watch stopped"
    finally:
        watch.send_signal(signal.SIGINT)
        _, stderr = watch.communicate(timeout=30)
    assert "Traceback" not in stderr, stderr


def test_history_labels_the_cli_writes(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    cli(redis_url, "group", "create", f"{scope}/g", "--stream", f"{scope}/orders")
    cli(redis_url, "group", "reset", f"{scope}/g", "--to-latest", "--execute")
    entries = as_json(redis_url, "group", "history", f"{scope}/g")["entries"]
    host = socket.gethostname().split(".")[0]
    assert [e["by"] for e in entries if "ResetGroup" in e["what"]] == [f"cli@{host}"]


def test_stream_write_counts_acknowledged_events_and_says_it_reads_stdin(
    redis_url: str, scope: str
) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    done = cli(redis_url, "stream", "write", f"{scope}/orders", stdin="a\nb\nc\n")
    assert "wrote 3 events (acknowledged)" in done.stdout
    primary, secondary = pty.openpty()
    writer = subprocess.Popen(
        [sys.executable, "-m", "readergroup.cli", "stream", "write", f"{scope}/orders", "--json"],
        env={**os.environ, "REDIS_URL": redis_url},
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    os.close(secondary)
    os.write(primary, b"x\ny\n\x04")
    out, err = writer.communicate(timeout=60)
    os.close(primary)
    assert "reading events from stdin" in err and json.loads(out)["written"] == 2
    cli(redis_url, "stream", "seal", f"{scope}/orders")
    line = refused(redis_url, "stream", "write", f"{scope}/orders", "--count", "5")
    assert "StreamSealedError" in line
    info = as_json(redis_url, "stream", "describe", f"{scope}/orders")
    assert sum(s["tail"] for s in info["segments"]) == 5


def test_stream_scale_validates_before_it_writes(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    for into in ("1", "10001", "100000"):
        line = refused(
            redis_url, "stream", "scale", f"{scope}/orders", "--split", "0", "--into", into, code=2
        )
        assert "2..10000" in line
    line = refused(redis_url, "stream", "scale", f"{scope}/orders", "--split", "9", code=2)
    assert "not an active segment" in line
    assert as_json(redis_url, "stream", "describe", f"{scope}/orders")["epoch"] == 0


def test_describe_marks_stale_readers(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    config = ReaderGroupConfig(
        streams=[f"{scope}/orders"], heartbeat_interval=0.1, session_timeout=0.3
    )
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", config)
    connection = RedisConnection.from_url(redis_url)
    try:
        join_group(connection, scope, "g", "ghost")  # joins, then never beats again

        def stale() -> Any:
            return as_json(redis_url, "group", "describe", f"{scope}/g")["stale_readers"]

        wait_until(lambda: stale() == ["ghost"], what="the ghost marked stale")
        members = as_json(redis_url, "group", "describe", f"{scope}/g", "--members")["members"]
        assert [(m["reader"], m["stale"]) for m in members] == [("ghost", True)]
        assert "STALE" in cli(redis_url, "group", "describe", f"{scope}/g").stdout
    finally:
        connection.close()


def test_group_list_shows_an_unreadable_group_and_the_others(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    for name in ("a", "b"):
        cli(redis_url, "group", "create", f"{scope}/{name}", "--stream", f"{scope}/orders")
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        sync: Any = rgm.get_reader_group("a").sync
        poisoned = sync.backend.append(
            sync.name, b"\xc1", expected_revision=None, writer="rogue", sequence=1, max_bytes=99
        )
        assert poisoned.status == 0
    listed = {g["group"]: g for g in as_json(redis_url, "group", "list", scope)["groups"]}
    assert listed["a"]["state"] == "unreadable" and "revision" in listed["a"]["error"]
    assert listed["b"]["state"] == "empty"
    table = cli(redis_url, "group", "list", scope).stdout
    assert "unreadable" in table and "CoordinationError" in table
