"""``readergroup acl rules|table`` (least-privilege ACL rules per role) and ``readergroup admin
migrate`` (the one-shot move to per-scope catalogs)."""

from __future__ import annotations

import os

import click

from readergroup.admin import acl as rules_of
from readergroup.admin.migration import migrate_catalog
from readergroup.admin.stream_manager import StreamManager
from readergroup.cli.common import Context, command
from readergroup.core.errors import ReaderGroupError


@click.group("acl")
def acl() -> None:
    """Redis ACL rules for the roles writer, reader, admin (one scope) and operator."""


@acl.command("rules")
@click.option("--role", type=click.Choice([*rules_of.ROLES, rules_of.CONSOLE_ROLE]), required=True)
@click.option("--scope", help="The scope (required except for --role operator and console).")
@click.option("--user", help="ACL user name (default rg-ROLE-SCOPE).")
@click.option(
    "--password-env",
    metavar="VAR",
    help="Environment variable holding the password; only its SHA-256 is printed.",
)
@click.option("--key-prefix", default="rg", show_default=True)
@click.option("--cluster", is_flag=True, help="Also what a Redis Cluster client needs.")
@click.option(
    "--acks",
    default="leader",
    show_default=True,
    help="The clients' acks mode: leader, replicas=N (adds WAIT) or fsync (adds WAITAOF).",
)
def rules(
    role: str,
    scope: str | None,
    user: str | None,
    password_env: str | None,
    key_prefix: str,
    cluster: bool,
    acks: str,
) -> None:
    """Print the ACL SETUSER line giving ROLE exactly the keys and commands it needs."""
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.ClickException(f"environment variable {password_env} is not set")
    try:
        generated = rules_of.rules(role, scope, key_prefix, cluster=cluster, acks=acks)
    except ReaderGroupError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(generated.setuser(user or rules_of.default_user(role, scope), password))


@acl.command("table")
@click.option("--scope", default="S", show_default=True)
@click.option("--key-prefix", default="rg", show_default=True)
def table(scope: str, key_prefix: str) -> None:
    """Print the Markdown table of every role (the one in docs/guides/security.md)."""
    click.echo(rules_of.markdown_table(scope, key_prefix), nl=False)


@click.group("admin")
def admin() -> None:
    """Operator actions (the operator role)."""


@admin.command("migrate")
@click.option("--dry-run", is_flag=True, help="Show what would be migrated; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Migrate even while readers of an older version are online (they lose their group).",
)
@command
def migrate(ctx: Context, dry_run: bool, force: bool) -> None:
    """Move the old shared catalog to per-scope catalogs (once, after upgrading every reader:
    refused while a reader of an older version is online in a group it moves, unless --force)."""
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        result = migrate_catalog(sm, dry_run=dry_run, force=force)
    verb = "would migrate" if dry_run else "migrated"
    rows = [
        [s, n, g, "; ".join(result.cross_scope.get(s, []))] for s, (n, g) in result.scopes.items()
    ]
    ctx.out.emit(
        {
            "found": result.found,
            "dry_run": dry_run,
            "scopes": {s: {"streams": n, "groups": g} for s, (n, g) in result.scopes.items()},
            "cross_scope_reads": result.cross_scope,
            "older_readers_online": result.older_readers,
        },
        (f"{verb} {len(rows)} scopes" if result.found else "nothing to migrate: no old catalog")
        + "".join(
            f"; readers of an older version online in {group}: {', '.join(readers)}"
            for group, readers in result.older_readers.items()
        ),
        ["scope", "streams", "groups", "cross-scope reads (not protected by retention)"]
        if rows
        else (),
        rows,
    )
