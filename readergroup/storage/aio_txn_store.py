"""A stream's transactions on ``redis.asyncio``: :class:`AsyncTxnStore` runs the same
``txn_*.lua`` scripts and reads as the threaded :class:`~readergroup.storage.txn_store.TxnStore`
(each method awaits :class:`~readergroup.storage.txn_store.TxnStoreSteps`' steps of its name:
the same requests, reply parsing and status-code mapping)."""

from __future__ import annotations

from readergroup.storage.aio_calls import awaited
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.txn_store import TxnStoreSteps


class AsyncTxnStore(TxnStoreSteps):
    """The transactions of one stream, awaited. Use it from one event loop."""

    next_epoch = awaited(TxnStoreSteps.next_epoch_steps)
    epoch = awaited(TxnStoreSteps.epoch_steps)
    begin = awaited(TxnStoreSteps.begin_steps)
    stage = awaited(TxnStoreSteps.stage_steps)
    claim = awaited(TxnStoreSteps.claim_steps)
    replan = awaited(TxnStoreSteps.replan_steps)
    finish = awaited(TxnStoreSteps.finish_steps)
    adopt = awaited(TxnStoreSteps.adopt_steps)
    record = awaited(TxnStoreSteps.record_steps)
    staged = awaited(TxnStoreSteps.staged_steps)
    records = awaited(TxnStoreSteps.records_steps)
    unfinished = awaited(TxnStoreSteps.unfinished_steps)
    applied = awaited(TxnStoreSteps.applied_steps)
    forget_finished = awaited(TxnStoreSteps.forget_finished_steps)
    delete_all = awaited(TxnStoreSteps.delete_all_steps)


def async_transactions(connection: AsyncConnection, scope: str, stream: str) -> AsyncTxnStore:
    """The transactions of ``scope/stream`` on ``connection``'s client."""
    return AsyncTxnStore(connection.client, connection.keys, scope, stream)
