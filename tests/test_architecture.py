"""The pure core imports no I/O: no redis, pyspark, threading, time, socket or subprocess."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE_MODULES = [
    "statesync/backend.py",
    "statesync/clock.py",
    "statesync/codec.py",
    "statesync/config.py",
    "statesync/errors.py",
    "statesync/names.py",
    "statesync/replica.py",
    "statesync/retry.py",
    "statesync/status.py",
    "statesync/update.py",
]
FORBIDDEN = {"redis", "pyspark", "threading", "time", "socket", "subprocess", "asyncio", "pickle"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_do_no_io(module: str) -> None:
    assert not imported_roots(ROOT / module) & FORBIDDEN


def test_no_pickle_anywhere() -> None:
    for path in [*ROOT.glob("statesync/**/*.py"), *ROOT.glob("readergroup/**/*.py")]:
        assert "pickle" not in imported_roots(path), path


def test_only_backend_modules_import_redis() -> None:
    allowed = {"statesync/redis_backend.py"}
    for path in ROOT.glob("statesync/**/*.py"):
        relative = str(path.relative_to(ROOT))
        if "redis" in imported_roots(path):
            assert relative in allowed, relative
