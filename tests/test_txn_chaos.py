"""The consume-transform-produce example (issue 31), plain and in chaos mode: three worker
processes read ``orders`` and write ``invoices`` in transactions with their positions, under
SIGKILLs of workers (some in the middle of a commit), a split of each stream and a Redis
restart; ``invoices`` ends with exactly one invoice per order, in per-customer order."""

from __future__ import annotations

import pytest

from tests.test_examples import run_example

pytestmark = pytest.mark.long


def test_txn_pipeline_example(redis_url: str) -> None:
    out = run_example("txn_pipeline.py", redis_url, "--orders", "1500")
    assert "exact=True per_customer_order=True" in out and "VERIFIED" in out
    assert "killed_mid_commit=0" in out


def test_txn_pipeline_under_chaos(redis_url: str) -> None:
    out = run_example("txn_pipeline.py", redis_url, "--orders", "3000", "--chaos")
    assert "exact=True per_customer_order=True" in out and "VERIFIED" in out
    starts = int(out.split("worker_starts=")[1].split()[0])
    assert starts > 3, "no worker was killed"
    assert int(out.split("killed_mid_commit=")[1].split()[0]) >= 1, out
