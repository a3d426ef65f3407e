"""No password in any error, log line or repr (issue 34 item 5): a password fed through URLs,
options and the environment into every error path of the CLI and the API never comes out."""

from __future__ import annotations

import logging
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupError,
    ReaderGroupManager,
    StreamManager,
)
from readergroup.admin import acl
from readergroup.cli import main
from readergroup.cli.common import RedactingFilter
from readergroup.spark.options import SourceOptions
from readergroup.storage.connection import RedisConnection
from statesync import RetryPolicy
from statesync.redis_backend import RedisLogBackend
from tests.support.cli import cli

SECRET = "Pw-7q!x@Secret/42"  # '@' and '/' too: URL parsers split at them
ENCODED = "Pw-7q%21x%40Secret%2F42"  # as it goes into a URL
SHORT = "Pw-7q"  # a leak of the part before '@' or '/' counts too


def leaked(text: str) -> bool:
    return SHORT in text or ENCODED in text


def bad_urls(port: int) -> dict[str, str]:
    """URLs with the password that fail in every way a URL can."""
    return {
        "bad port": f"redis://app:{ENCODED}@127.0.0.1:notaport/0",
        "unknown scheme": f"redsi://app:{ENCODED}@127.0.0.1:{port}/0",
        "nobody listening": f"redis://app:{ENCODED}@127.0.0.1:1/0",
        "wrong password": f"redis://app:{ENCODED}@127.0.0.1:{port}/0",
        "password only": f"redis://:{ENCODED}@127.0.0.1:{port}/0",
        "bad database": f"redis://app:{ENCODED}@127.0.0.1:{port}/notadb",
        "query password": f"redis://127.0.0.1:{port}/0?password={ENCODED}&username=app",
        "bad cluster seed": f"redis://app:{ENCODED}@127.0.0.1:{port},127.0.0.1:x/0",
        "two hosts no cluster": f"redis://app:{ENCODED}@127.0.0.1:{port},127.0.0.1:1/0",
        "sentinel bad port": f"redis+sentinel://app:{ENCODED}@127.0.0.1:x/svc",
        "sentinel bad db": f"redis+sentinel://app:{ENCODED}@127.0.0.1:1/svc/notadb",
        "sentinel no service": f"redis+sentinel://app:{ENCODED}@127.0.0.1:1",
        "unix no socket": f"unix://app:{ENCODED}@/nonexistent/redis.sock",
    }


SENTINEL_DOWN = f"redis+sentinel://app:{ENCODED}@127.0.0.1:1/svc"
"""No Sentinel answers: redis-py retries for seconds, so tried once only."""
QUICK = RetryPolicy(deadline=0.3)


@pytest.fixture(scope="module")
def secured(redis_handle: Any) -> Iterator[tuple[str, int]]:
    """The suite's server with an ACL user ``limited`` whose password is :data:`SECRET`
    (reader of scope ``sec`` only: its other calls are denied)."""
    url = redis_handle.url
    root = redis.Redis.from_url(url)
    root.execute_command(*acl.rules("reader", "sec").setuser_args("limited", SECRET))
    port = root.connection_pool.connection_kwargs["port"]
    yield url, int(port)
    root.execute_command("ACL", "DELUSER", "limited")
    root.close()


CLI_COMMANDS = [
    ["scope", "list"],
    ["stream", "create", "sec/s"],
    ["stream", "list", "sec"],
    ["stream", "describe", "sec/s"],
    ["stream", "write", "sec/s", "--count", "3"],
    ["stream", "scale", "sec/s", "--split", "0", "--into", "2"],
    ["stream", "seal", "sec/s"],
    ["stream", "truncate", "sec/s", "--to-tail"],
    ["stream", "delete", "sec/s"],
    ["group", "create", "sec/g", "--stream", "sec/s"],
    ["group", "list", "sec"],
    ["group", "describe", "sec/g"],
    ["group", "reset", "sec/g", "--to-earliest", "--execute"],
    ["group", "checkpoint", "sec/g", "cp"],
    ["group", "reader-offline", "sec/g", "r1"],
    ["group", "history", "sec/g"],
    ["group", "delete", "sec/g"],
    ["admin", "migrate"],
]


def run_cli(args: list[str], env: dict[str, str] | None = None) -> str:
    done = CliRunner().invoke(main, args, env=env, catch_exceptions=True)
    text = done.output
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        text += "".join(traceback.format_exception(done.exception))
    return text


def test_the_cli_never_prints_the_password(
    secured: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, port = secured
    runs = 0
    for how, bad in bad_urls(port).items():
        for extra in (["--json"], ["--cluster"], ["--cluster", "--json"]):
            output = run_cli(["-vv", "scope", "list", "--redis-url", bad, *extra])
            assert not leaked(output), (how, extra, output)
    for command in CLI_COMMANDS:
        for how, bad in bad_urls(port).items():
            output = run_cli(["-vv", *command, "--redis-url", bad])
            assert not leaked(output), (how, command, output)
            runs += 1
        good = f"redis://127.0.0.1:{port}/0"
        for options, env in (
            (["--username", "limited", "--password", SECRET], None),  # allowed or denied
            (["--username", "app", "--password", SECRET], None),  # wrong user
            (["--username", "limited", f"--password={SECRET}x"], None),  # wrong password
            ([], {"REDIS_USERNAME": "limited", "REDIS_PASSWORD": SECRET}),
            ([], {"REDIS_URL": f"redis://limited:{ENCODED}@127.0.0.1:{port}/0"}),
            ([], {"REDIS_URL": f"redis://limited:{ENCODED}@127.0.0.1:notaport/0"}),
        ):
            args = [*command, *(["--redis-url", good] if options else []), *options]
            output = run_cli(args, env)
            assert not leaked(output), (command, options, env, output)
            runs += 1
    assert runs > 300
    assert not leaked(caplog.text)


@pytest.mark.long  # redis-py's Sentinel connection retries for 3-4 s, twice
def test_no_sentinel_answering(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    output = run_cli(["-vv", "scope", "list", "--redis-url", SENTINEL_DOWN])
    assert "RedisUnavailableError" in output and not leaked(output)
    config = ClientConfig(retry=QUICK, redis_options={"username": "u", "password": SECRET})
    with pytest.raises(ReaderGroupError) as raised:
        StreamManager.from_url(SENTINEL_DOWN, config).list_scopes()
    assert not leaked("".join(traceback.format_exception(raised.value)))
    assert not leaked(caplog.text)


API_CALLS: dict[str, Callable[[str, ClientConfig], Any]] = {
    "StreamManager": lambda url, c: StreamManager.from_url(url, c).list_scopes(),
    "ReaderGroupManager": lambda url, c: (
        ReaderGroupManager.from_url("sec", url, c).get_reader_group("g").refresh()
    ),
    "EventStreamClientFactory": lambda url, c: EventStreamClientFactory.from_url(
        "sec", url, c
    ).create_batch_client(),
    "RedisConnection": lambda url, c: RedisConnection.from_url(url, c).server_time_ms(),
}


def test_the_api_never_shows_the_password(
    secured: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, port = secured
    configs = [
        ClientConfig(retry=QUICK),
        ClientConfig(retry=QUICK, redis_options={"username": "limited", "password": SECRET}),
        ClientConfig(retry=QUICK, redis_options={"username": "nobody", "password": SECRET}),
        ClientConfig(
            retry=QUICK, sentinel_options={"password": SECRET}, redis_options={"password": SECRET}
        ),
        ClientConfig(retry=QUICK, cluster=True, redis_options={"password": SECRET}),
    ]
    failures = 0
    for name, call in API_CALLS.items():
        for bad in [*bad_urls(port).values(), f"redis://127.0.0.1:{port}/0"]:
            for config in configs:
                assert not leaked(repr(config))
                try:
                    call(bad, config)
                except ReaderGroupError as exc:  # typed, whatever went wrong
                    shown = "".join(traceback.format_exception(exc)) + repr(exc)
                    assert not leaked(shown), (name, bad, shown)
                    failures += 1
    assert failures > 200
    assert not leaked(caplog.text)


def test_reprs_hide_the_password(secured: tuple[str, int]) -> None:
    url, port = secured
    login = f"redis://limited:{ENCODED}@127.0.0.1:{port}/0"
    config = ClientConfig(redis_options={"password": SECRET, "ssl_password": SECRET})
    options = SourceOptions.parse({"redis_url": login, "scope": "sec", "stream": "s"})
    scope = f"x{uuid.uuid4().hex[:6]}"
    with (
        StreamManager.from_url(login) as sm,
        EventStreamClientFactory.from_url(scope, url, config) as factory,
    ):
        objects = [config, options, sm, sm.connection, sm.connection.client, factory]
        objects += [factory.connection, RedisLogBackend.from_url(login)]
        for shown in objects:
            assert not leaked(repr(shown)) and not leaked(str(shown)), repr(shown)
    assert "'password': '***'" in repr(config) and "limited:***@" in repr(options)


def test_the_cli_process_redacts_its_log_lines(secured: tuple[str, int]) -> None:
    _, port = secured
    for url in (f"redis://limited:{ENCODED}x@127.0.0.1:{port}/0", bad_urls(port)["bad port"]):
        done = cli(url, "-vv", "scope", "list", "--password", SECRET, ok=False)
        assert done.returncode == 1 and "Error: " in done.stderr
        assert not leaked(done.stdout + done.stderr), done.stderr
    record = logging.LogRecord(
        "readergroup.x",
        logging.WARNING,
        __file__,
        1,
        "reached %s",
        (f"redis://u:{ENCODED}@h",),
        None,
    )
    try:
        raise ConnectionError(f"refused with {SECRET}")
    except ConnectionError:
        record.exc_info = sys.exc_info()
    assert RedactingFilter([SECRET]).filter(record)
    assert record.getMessage() == "reached redis://u:***@h: ConnectionError: refused with ***"
    assert record.exc_info is None
