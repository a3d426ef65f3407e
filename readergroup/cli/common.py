"""What every CLI command shares: connection options and error handling."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.console import Console

from readergroup.cli.output import Output
from readergroup.config import ClientConfig
from readergroup.errors import ReaderGroupError
from readergroup.names import split_scoped_stream

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Context:
    url: str
    config: ClientConfig
    out: Output


def connection_options(command: F) -> F:
    """``--redis-url`` (or REDIS_URL), TLS files, ACL user and password, ``--json``."""
    options = [
        click.option(
            "--redis-url",
            envvar="REDIS_URL",
            default="redis://localhost:6379/0",
            show_default=True,
            help="redis:// or rediss:// URL (env REDIS_URL).",
        ),
        click.option(
            "--tls-ca", type=click.Path(exists=True), help="CA certificate file (rediss://)."
        ),
        click.option("--tls-cert", type=click.Path(exists=True), help="Client certificate file."),
        click.option("--tls-key", type=click.Path(exists=True), help="Client private key file."),
        click.option("--username", envvar="REDIS_USERNAME", help="ACL user (env REDIS_USERNAME)."),
        click.option(
            "--password", envvar="REDIS_PASSWORD", help="ACL password (env REDIS_PASSWORD)."
        ),
        click.option(
            "--key-prefix", default="rg", show_default=True, help="Key prefix of the data."
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


CONNECTION_OPTIONS = (
    "redis_url",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "username",
    "password",
    "key_prefix",
    "as_json",
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
    extra = {
        redis_name: options[name]
        for name, redis_name in _REDIS_OPTION_NAMES.items()
        if options.get(name)
    }
    config = ClientConfig(key_prefix=options["key_prefix"], redis_options=extra)
    as_json = bool(options["as_json"])
    console = Console(soft_wrap=True, width=None if not as_json else 200)
    return Context(options["redis_url"], config, Output(as_json, console))


def command(func: F) -> F:
    """Connection options, a Context as first argument, and errors turned into clean exits."""

    @connection_options
    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        ctx = make_context({name: kwargs.pop(name) for name in CONNECTION_OPTIONS})
        try:
            return func(ctx, **kwargs)
        except ReaderGroupError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc

    return wrapper  # type: ignore[return-value]


def scoped(text: str) -> tuple[str, str]:
    """``scope/name`` from the command line, validated."""
    try:
        return split_scoped_stream(text, os.environ.get("READERGROUP_SCOPE"))
    except ReaderGroupError as exc:
        raise click.BadParameter(str(exc)) from exc
