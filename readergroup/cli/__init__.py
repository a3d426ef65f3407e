"""The ``readergroup`` operator CLI (click + rich). ``readergroup --help`` lists the commands."""

from __future__ import annotations

import click

from readergroup import __version__
from readergroup.cli.acl import acl, admin
from readergroup.cli.groups import group
from readergroup.cli.streams import stream


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="readergroup")
def main() -> None:
    """Operate readergroup streams and reader groups on Redis.

    Every command takes --redis-url (or REDIS_URL), TLS and ACL options, and --json.
    Names are SCOPE/NAME (or NAME with READERGROUP_SCOPE set).
    """


main.add_command(stream)
main.add_command(group)
main.add_command(acl)
main.add_command(admin)
