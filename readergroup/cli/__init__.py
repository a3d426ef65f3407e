"""The ``readergroup`` operator CLI (click + rich). ``readergroup --help`` lists the commands."""

from __future__ import annotations

from typing import Any

import click

from readergroup import __version__
from readergroup.cli.acl import acl, admin
from readergroup.cli.common import CliGroup, log_verbosely, root_options
from readergroup.cli.console import console
from readergroup.cli.groups import group
from readergroup.cli.metrics import metrics
from readergroup.cli.scopes import scope
from readergroup.cli.streams import stream
from readergroup.cli.transactions import txn


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="readergroup")
@root_options
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what the library does to stderr: -v at INFO (membership, ownership, "
    "checkpoints, scaling; warnings), -vv at DEBUG.",
)
def main(verbose: int, **options: Any) -> None:
    """Operate readergroup streams and reader groups on Redis.

    Connection options (--redis-url or REDIS_URL, TLS, ACL, --key-prefix, --json) go before
    the subcommand or after it. Names are SCOPE/NAME (or NAME with READERGROUP_SCOPE set).
    Errors print one line on stderr (JSON under --json) and exit 1; usage errors exit 2.
    -v/-vv (before the subcommand) log the library's records to stderr; stdout is unchanged.
    """
    log_verbosely(verbose)


main.add_command(scope)
main.add_command(stream)
main.add_command(group)
main.add_command(metrics)
main.add_command(acl)
main.add_command(admin)
main.add_command(console)
main.add_command(txn)
