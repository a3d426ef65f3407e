"""What every CLI command shares: connection options (before or after the subcommand) and
error handling: one line on stderr (JSON under ``--json``), exit 1, usage errors exit 2, and
never a traceback for a user error."""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

import click

from readergroup.cli.output import Output, console_for
from readergroup.core.config import ClientConfig
from readergroup.core.errors import (
    AccessDeniedError,
    InvalidConfigError,
    ReaderGroupError,
    RedisUnavailableError,
)
from readergroup.core.names import split_scoped_stream
from statesync import RetryPolicy
from statesync.redaction import redact, redact_url

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_URL = "redis://localhost:6379/0"
URL_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://")
CLI_WRITER = f"cli:{socket.gethostname().split('.')[0] or 'host'}"
"""The writer label of the CLI's own writes to a group's state (``group history`` shows it as
``cli@HOST``)."""


CLI_RETRY = RetryPolicy(deadline=5.0)
"""An operator waits seconds, not the library's 30 s, before a command reports an outage."""


@dataclass
class Context:
    url: str
    config: ClientConfig
    out: Output


def _options(root: bool) -> list[Callable[[F], F]]:
    """The connection options. On the root command they carry the environment variables and
    defaults; on a subcommand they default to ``None`` (meaning: as given to the root)."""

    def default(value: Any) -> Any:
        return value if root else None

    def env(name: str) -> str | None:
        return name if root else None

    return [
        click.option(
            "--redis-url",
            envvar=env("REDIS_URL"),
            default=default(DEFAULT_URL),
            show_default=root,
            help="redis://, rediss:// (TLS), unix:// or redis+sentinel://HOST:PORT[,HOST:PORT"
            "...]/SERVICE URL (env REDIS_URL); with --cluster, redis://H1:P1,H2:P2/0 (seeds).",
        ),
        click.option(
            "--cluster",
            is_flag=True,
            default=None,
            help="The URL names a Redis Cluster (one or more seed nodes).",
        ),
        click.option(
            "--tls-ca", type=click.Path(exists=True), help="CA certificate file (rediss://)."
        ),
        click.option("--tls-cert", type=click.Path(exists=True), help="Client certificate file."),
        click.option("--tls-key", type=click.Path(exists=True), help="Client private key file."),
        click.option(
            "--username", envvar=env("REDIS_USERNAME"), help="ACL user (env REDIS_USERNAME)."
        ),
        click.option(
            "--password", envvar=env("REDIS_PASSWORD"), help="ACL password (env REDIS_PASSWORD)."
        ),
        click.option(
            "--key-prefix",
            default=default("rg"),
            show_default=root,
            help="Key prefix of the data." + ("" if root else " (default rg)"),
        ),
        click.option(
            "--json", "as_json", is_flag=True, default=None, help="Print JSON for scripts."
        ),
    ]


def connection_options(command: F, *, root: bool = False) -> F:
    """``--redis-url`` (or REDIS_URL), TLS files, ACL user and password, ``--key-prefix``,
    ``--json``: accepted on the root command and on every subcommand."""
    for option in reversed(_options(root)):
        command = option(command)
    return command


def root_options(command: F) -> F:
    """The connection options of the root command (with environment variables and defaults)."""
    return connection_options(command, root=True)


CONNECTION_OPTIONS = (
    "redis_url",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "username",
    "password",
    "key_prefix",
    "as_json",
    "cluster",
)
_REDIS_OPTION_NAMES = {
    "tls_ca": "ssl_ca_certs",
    "tls_cert": "ssl_certfile",
    "tls_key": "ssl_keyfile",
    "username": "username",
    "password": "password",
}


def make_context(options: dict[str, Any]) -> Context:
    """A Context from the values of the connection options (see :func:`connection_options`)."""
    url = options["redis_url"] or DEFAULT_URL
    if not url.startswith(URL_SCHEMES):
        raise click.BadParameter(
            f"{redact_url(url)!r} is not a Redis URL: use redis://HOST:PORT/DB, rediss:// for TLS, "
            "unix://PATH, or redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE",
            param_hint="--redis-url",
        )
    extra = {
        redis_name: options[name]
        for name, redis_name in _REDIS_OPTION_NAMES.items()
        if options.get(name)
    }
    config = ClientConfig(
        key_prefix=options["key_prefix"] or "rg",
        redis_options=extra,
        retry=CLI_RETRY,
        cluster=bool(options.get("cluster")),
    )
    as_json = bool(options["as_json"])
    return Context(url, config, Output(as_json, console_for(as_json)))


def _merged(given: dict[str, Any]) -> dict[str, Any]:
    """Subcommand options over the root's (which hold the environment and defaults)."""
    root = click.get_current_context().find_root().params
    merged = {name: given.get(name) for name in CONNECTION_OPTIONS}
    for name in CONNECTION_OPTIONS:
        if merged[name] is None:
            merged[name] = root.get(name)
    merged["as_json"] = bool(given.get("as_json") or root.get("as_json"))
    merged["cluster"] = bool(given.get("cluster") or root.get("cluster"))
    return merged


def explain(url: str, error: ReaderGroupError) -> str:
    """The one-line message for ``error``, with a hint for the connection errors operators meet
    first (TLS mismatch, missing or wrong password)."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, AccessDeniedError) and any(
        word in str(error) for word in ("NOAUTH", "HELLO must be called", "Authentication required")
    ):
        return (
            f"{type(error).__name__}: the Redis server requires a password: give --password (or "
            "REDIS_PASSWORD), and --username (or REDIS_USERNAME) for an ACL user"
        )
    if isinstance(error, AccessDeniedError) and "username-password" in str(error):
        return f"{text} (check --username and --password)"
    if isinstance(error, InvalidConfigError) and "cluster=True" in str(error):
        return f"{text} (pass --cluster for a Redis Cluster's seed nodes)"
    if isinstance(error, RedisUnavailableError) and url.startswith("rediss://"):
        return (
            f"{text} (the URL is rediss://, so the client speaks TLS: is the server listening "
            "with TLS on that port? Use redis:// for a plain server)"
        )
    return text


def command(func: F) -> F:
    """Connection options, a Context as first argument, and errors turned into clean exits."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        ctx = make_context(_merged({name: kwargs.pop(name) for name in CONNECTION_OPTIONS}))
        try:
            return func(ctx, **kwargs)
        except ReaderGroupError as exc:
            raise click.ClickException(explain(ctx.url, exc)) from exc

    return connection_options(wrapper)  # type: ignore[return-value]


def scoped(text: str) -> tuple[str, str]:
    """``scope/name`` from the command line, validated."""
    try:
        return split_scoped_stream(text, os.environ.get("READERGROUP_SCOPE"))
    except ReaderGroupError as exc:
        raise click.BadParameter(str(exc)) from exc


def report_error(
    message: str, code: int, as_json: bool, kind: str = "error", secrets: Sequence[str] = ()
) -> None:
    """One line on stderr: ``Error: message``, or a JSON object under ``--json``; with every
    URL's password and each of ``secrets`` hidden (see :func:`given_secrets`)."""
    line = " ".join(redact(message, secrets).split())
    if as_json:
        click.echo(json.dumps({"error": line, "kind": kind, "exit_code": code}), err=True)
    else:
        click.echo(f"Error: {line}", err=True)


SECRET_OPTIONS = ("--password",)
SECRET_VARIABLES = ("REDIS_PASSWORD",)
URL_SOURCES = ("--redis-url", "REDIS_URL")


def given_secrets(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The passwords given to this run (``--password``, ``REDIS_PASSWORD``, and those inside
    ``--redis-url`` or ``REDIS_URL``), so that nothing printed can show them.

    >>> given_secrets(["--password=a1", "--redis-url", "redis://u:b2@h/0"], {"REDIS_URL": ""})
    ['a1', 'b2']
    """
    found: list[str] = []
    urls = [environ.get("REDIS_URL", "")]
    for i, word in enumerate(argv):
        name, equals, value = word.partition("=")
        if not equals:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if name in SECRET_OPTIONS:
            found.append(value)
        elif name in URL_SOURCES:
            urls.append(value)
    for url in urls:
        netloc = url.partition("://")[2].rpartition("@")[0]
        if netloc:
            found.append(unquote(netloc.partition(":")[2] or netloc))
    found += [environ.get(name, "") for name in SECRET_VARIABLES]
    return [secret for secret in found if secret]


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with URLs' passwords and the run's secrets hidden (the
    CLI's log handler: ``-v`` output and warnings)."""

    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            record.exc_info = None  # the traceback's texts are not redacted: left out
        record.msg, record.args = redact(text, self.secrets), None
        return True


LIBRARY_LOGGERS = ("readergroup", "statesync")


def log_verbosely(verbose: int) -> None:
    """``-v``: the library's records from INFO up go to stderr (the handler
    :class:`CliGroup` installs); ``-vv``: from DEBUG up. Other libraries stay quiet."""
    if verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(level)


class CliGroup(click.Group):
    """The root command: runs a subcommand and renders every error as one line (or JSON)."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = "--json" in argv
        secrets = given_secrets(argv, os.environ)
        logging.basicConfig(  # stderr; the library's warnings are shown by the commands (or -v)
            level=os.environ.get("READERGROUP_LOG_LEVEL", "ERROR").upper(),
            format="%(levelname)s %(name)s: %(message)s",
        )
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:  # the CLI's own (not a host's capture)
                handler.filters = [f for f in handler.filters if not isinstance(f, RedactingFilter)]
                handler.addFilter(RedactingFilter(secrets))
        report = functools.partial(report_error, as_json=as_json, secrets=secrets)
        try:
            result = super().main(
                argv, prog_name=prog_name or "readergroup", standalone_mode=False, **extra
            )
        except click.UsageError as exc:
            report(f"{exc.format_message()} (see --help)", 2, kind="usage")
            sys.exit(2)
        except click.ClickException as exc:
            report(exc.format_message(), exc.exit_code)
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            report("interrupted", 130, kind="interrupted")
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("READERGROUP_DEBUG"):
                raise
            report(
                f"internal error: {type(exc).__name__}: {exc} (set READERGROUP_DEBUG=1 for the "
                "traceback)",
                1,
                kind="internal",
            )
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)
