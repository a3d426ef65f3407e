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
    "statesync/redaction.py",
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
    allowed = {"statesync/redis_backend.py", "statesync/aio_redis_backend.py"}
    for path in ROOT.glob("statesync/**/*.py"):
        relative = str(path.relative_to(ROOT))
        if "redis" in imported_roots(path):
            assert relative in allowed, relative


# readergroup's layers, bottom first: a module may import its own layer and the ones below.
LAYERS = ["core", "storage", "testing", "admin", "client", "aio", "app"]
APP = {"cli", "console", "spark", "demo", "__init__", "__main__"}


def readergroup_layer(path: Path) -> str:
    part = path.relative_to(ROOT / "readergroup").parts[0].removesuffix(".py")
    return "app" if part in APP else part


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    found: list[ast.AST] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"):
                pending.extend(child.orelse)
            else:
                pending.append(child)
    return found


def readergroup_imports(path: Path) -> set[str]:
    """Modules of readergroup that ``path`` imports, as dotted names."""
    modules: set[str] = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names if a.name.startswith("readergroup.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "readergroup":
                modules |= {f"readergroup.{a.name}" for a in node.names}
            elif node.module.startswith("readergroup."):
                modules.add(node.module)
    return modules


def module_path(dotted: str) -> Path | None:
    base = ROOT / Path(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def test_every_readergroup_module_lives_in_a_layer() -> None:
    for path in (ROOT / "readergroup").glob("**/*.py"):
        assert readergroup_layer(path) in LAYERS, f"{path}: not in a layer folder"


def test_no_import_runs_up_a_layer() -> None:
    for path in (ROOT / "readergroup").glob("**/*.py"):
        rank = LAYERS.index(readergroup_layer(path))
        for dotted in readergroup_imports(path):
            target = module_path(dotted)
            if target is None:  # a name imported from a package, not a module
                continue
            target_rank = LAYERS.index(readergroup_layer(target))
            assert target_rank <= rank, f"{path.relative_to(ROOT)} imports {dotted}: up a layer"


def test_the_asyncio_layer_sits_between_client_and_app() -> None:
    """``readergroup/aio`` may use the clients' pure pieces, never the app layer; nothing below
    it imports it (so the threaded clients never depend on asyncio code), and the app layer
    may."""
    assert LAYERS.index("client") < LAYERS.index("aio") < LAYERS.index("app")
    below = LAYERS[: LAYERS.index("aio")]
    for path in (ROOT / "readergroup").glob("**/*.py"):
        if readergroup_layer(path) in below:
            assert not {d for d in readergroup_imports(path) if d.startswith("readergroup.aio")}, (
                path
            )


def test_the_asyncio_layer_starts_no_thread_and_never_blocks_on_redis() -> None:
    """No thread (its background work is tasks of the caller's loop), no blocking Redis
    client: its Redis I/O is the storage layer's ``redis.asyncio`` code."""
    for path in (ROOT / "readergroup" / "aio").glob("*.py"):
        roots = imported_roots(path)
        assert not roots & {"threading", "concurrent", "redis", "socket", "subprocess"}, path
        source = path.read_text()
        assert "to_thread" not in source and "run_in_executor" not in source, path
        storage = {d for d in readergroup_imports(path) if d.startswith("readergroup.storage.")}
        blocking = {"readergroup.storage.connection", "readergroup.storage.segment_store"}
        assert not storage & blocking, path


def test_the_writers_decisions_do_no_io() -> None:
    """The sender decisions both writers drive (readergroup/client/write_rounds.py) do no I/O
    and take no lock of their own: the thread and the task supply both."""
    path = ROOT / "readergroup" / "client" / "write_rounds.py"
    assert not imported_roots(path) & (FORBIDDEN | {"threading", "asyncio"}), path


def test_pure_core_does_no_io() -> None:
    for path in (ROOT / "readergroup" / "core").glob("*.py"):
        assert not imported_roots(path) & FORBIDDEN, path


def test_only_the_storage_layer_and_tooling_import_redis() -> None:
    for path in (ROOT / "readergroup").glob("**/*.py"):
        if "redis" in imported_roots(path):
            assert readergroup_layer(path) in {"storage", "testing", "app"}, path


def test_no_import_cycle_between_modules() -> None:
    graph: dict[Path, set[Path]] = {}
    for path in (ROOT / "readergroup").glob("**/*.py"):
        targets = {module_path(d) for d in readergroup_imports(path)}
        graph[path] = {t for t in targets if t is not None and t != path}
    state: dict[Path, int] = {}

    def visit(node: Path, stack: list[Path]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt]
                raise AssertionError(
                    "import cycle: " + " -> ".join(str(p.relative_to(ROOT)) for p in cycle)
                )
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


# -- the storage boundary --------------------------------------------------------------------
# Only readergroup/storage (and testing's tooling) talks to Redis clients and knows the key
# layout: elsewhere a key is asked of a KeyLayout or a store, never built.
BOUNDARY_EXEMPT = {"storage", "testing"}
CLIENT_ATTRIBUTES = {"client", "blocking_client"}
CLIENT_OWNERS = ("connection", "log_backend", "backend")


def boundary_violations(source: str, name: str) -> list[str]:
    """What ``path`` does that only the storage layer may: use a connection's or a backend's
    Redis client, ask statesync's backend for a synchronizer's keys, read the key prefix off a
    config, or build a key with a hash tag (``prefix:{...}``) in an f-string."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value)
            if node.attr in CLIENT_ATTRIBUTES and owner.endswith(CLIENT_OWNERS):
                found.append(f"{where}: {owner}.{node.attr}")
            if node.attr == "keys" and owner.endswith("log_backend"):
                found.append(f"{where}: {owner}.keys (a synchronizer's keys)")
            if node.attr == "key_prefix" and owner.endswith("config"):
                found.append(f"{where}: {owner}.key_prefix (building keys)")
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value
                for part in node.values
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            )
            if ":{" in text:
                found.append(f"{where}: f-string builds a key ({ast.unparse(node)[:60]})")
    return found


def test_only_the_storage_layer_uses_redis_clients_and_builds_keys() -> None:
    violations = [
        found
        for path in sorted((ROOT / "readergroup").glob("**/*.py"))
        if readergroup_layer(path) not in BOUNDARY_EXEMPT
        for found in boundary_violations(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not violations, "\n".join(violations)


def test_the_boundary_check_sees_each_kind_of_violation() -> None:
    sample = (
        "connection.client.hset(k, f, v)\n"
        "self._connection.log_backend.keys(name).log\n"
        "p = connection.config.key_prefix\n"
        "k = f'{p}:{{subscribers:{scope}}}'\n"
        "m.client\n"  # a member's host/pid, not a Redis client
    )
    lines = sorted(v.split(":")[1] for v in boundary_violations(sample, "sample.py"))
    assert lines == ["1", "2", "3", "4"]


def test_every_exception_class_lives_in_an_errors_module() -> None:
    """readergroup's in ``readergroup/core/errors.py``, statesync's in ``statesync/errors.py``."""
    errors_modules = {ROOT / "readergroup" / "core" / "errors.py", ROOT / "statesync" / "errors.py"}
    misplaced = []
    for path in [*ROOT.glob("statesync/**/*.py"), *ROOT.glob("readergroup/**/*.py")]:
        if path in errors_modules:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith(("Error", "Exception")) for base in node.bases
            ):
                misplaced.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not misplaced, misplaced
