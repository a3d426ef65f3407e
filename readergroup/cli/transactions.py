"""``readergroup txn ...``: list and abort a stream's transactions."""

from __future__ import annotations

import click

from readergroup.cli.common import Context, command, scoped
from readergroup.client.txn_admin import TransactionAdmin
from readergroup.storage.connection import RedisConnection


@click.group()
def txn() -> None:
    """Transactions of a stream: what is open or committing, and aborting one."""


@txn.command("list")
@click.argument("name")
@command
def list_transactions(ctx: Context, name: str) -> None:
    """List the open and committing transactions of SCOPE/STREAM, oldest first, with their
    age, size and time left (their lease; past it they are aborted). Listing first aborts
    what outlived its lease and completes commits whose writer vanished."""
    scope, stream = scoped(name)
    connection = RedisConnection.from_url(ctx.url, ctx.config)
    try:
        rows = TransactionAdmin(connection, scope, stream).list()
    finally:
        connection.close()
    ctx.out.emit(
        {
            "stream": f"{scope}/{stream}",
            "transactions": [
                {
                    "id": r.txn_id,
                    "status": r.status.value,
                    "transactional_id": r.transactional_id,
                    "age_seconds": round(r.age_s, 3),
                    "events": r.events,
                    "bytes": r.bytes,
                    "expires_in_seconds": round(r.expires_in_s, 3),
                }
                for r in rows
            ],
        },
        f"transactions of {scope}/{stream}",
        ["id", "status", "transactional id", "age s", "events", "bytes", "expires in s"],
        [
            [
                r.txn_id,
                r.status.value,
                r.transactional_id,
                f"{r.age_s:.1f}",
                r.events,
                r.bytes,
                f"{r.expires_in_s:.1f}",
            ]
            for r in rows
        ],
    )


@txn.command("abort")
@click.argument("name")
@click.argument("txn_id")
@command
def abort(ctx: Context, name: str, txn_id: str) -> None:
    """Abort the open transaction TXN_ID of SCOPE/STREAM, whichever writer holds it: nothing
    of it will be visible, and its writer's next call on it fails. A committing or committed
    transaction cannot be aborted."""
    scope, stream = scoped(name)
    connection = RedisConnection.from_url(ctx.url, ctx.config)
    try:
        status = TransactionAdmin(connection, scope, stream).abort(txn_id)
    finally:
        connection.close()
    ctx.out.emit({"id": txn_id, "status": status.value}, f"{txn_id}: {status.value}")
