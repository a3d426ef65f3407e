"""The package one can install: the wheel ``make dist`` builds, installed into a fresh venv
outside the checkout, runs the getting-started producer and consumer (and, in
``make test-long``, the Spark data source), and reports its version.

How the fresh venv gets its dependencies, and why: the venv is made without pip and without the
checkout on its path; the wheel is installed with ``pip --no-index`` (nothing fetched); its
dependencies are the *declared* ones only: the transitive closure of the wheel's
``Requires-Dist`` (with the ``spark`` extra), linked file by top-level entry from this test
venv's site-packages into a directory the fresh venv reads through a ``.pth``. So the test is
offline-safe and takes seconds (no 300 MB PySpark download), yet a dependency the package uses
but does not declare is missing there and fails it, and the readergroup it imports is the
wheel's (asserted), never the editable checkout.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.markdown_docs import DOCS, ROOT, code_blocks, empty_database, markdown_pages

EXTRAS = ("spark",)
OWN = ("readergroup", "statesync", "pyspark_readergroup")
DB = 10  # a database no other test uses
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@dataclass(frozen=True)
class FreshVenv:
    root: Path
    python: Path
    work: Path  # a directory outside the checkout to run from


def declared_closure(name: str, extras: tuple[str, ...]) -> set[str]:
    """Distributions ``name`` (with ``extras``) needs, transitively, by its metadata."""
    needed: set[str] = set()
    pending = [(name, extras)]
    while pending:
        dist_name, dist_extras = pending.pop()
        for text in importlib.metadata.distribution(dist_name).requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({"extra": extra}) for extra in (*dist_extras, "")
            ):
                continue
            key = canonical(requirement.name)
            if key not in needed:
                needed.add(key)
                pending.append((requirement.name, tuple(requirement.extras)))
    return needed


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def link_dependencies(target: Path, needed: set[str]) -> None:
    """Symlink into ``target`` every top-level entry of the needed distributions' files."""
    target.mkdir()
    for dist in importlib.metadata.distributions():
        if canonical(dist.metadata["Name"]) not in needed:
            continue
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            if top == ".." or top.endswith(".pth") or top == "__pycache__":
                continue
            if not (target / top).exists() and (base / top).exists():
                (target / top).symlink_to(base / top)


NOT_SOURCE = (".git", ".venv", "build", "dist", "site", ".artifacts", "*.egg-info", "*_cache")
NOT_SOURCE += (".hypothesis", "node_modules", "__pycache__")


def build(outdir: Path, *what: str, source: Path = ROOT) -> Path:
    """``python -m build`` of ``source`` as ``make dist`` runs it (this venv's setuptools, no
    index); the wheel's path."""
    run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            *what,
            "--outdir",
            str(outdir),
            str(source),
        ]
    )
    (wheel,) = outdir.glob("readergroup-*.whl")
    return wheel


def run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshVenv]:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build(tmp / "dist", "--wheel")
    root = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    python = root / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run([str(python), "-c", purelib]).stdout.strip())
    deps = tmp / "deps"
    link_dependencies(deps, declared_closure("readergroup", EXTRAS))
    (site / "declared-dependencies.pth").write_text(f"{deps}\n")
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-index", "--no-deps", f"{wheel}[{','.join(EXTRAS)}]"],
    )  # fmt: skip
    work = tmp / "work"
    work.mkdir()
    yield FreshVenv(root, python, work)


def run_in_venv(venv: FreshVenv, script: str, redis_url: str) -> str:
    """Run ``script`` with the fresh venv's python, from outside the checkout, on an empty DB."""
    (venv.work / "script.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["REDIS_URL"] = empty_database(redis_url, DB)
    return run([str(venv.python), "script.py"], cwd=venv.work, env=env).stdout


def page_script(page: Path, *, long: bool) -> str:
    """The page's python blocks as one program, preceded by a check of where readergroup
    comes from."""
    where = (
        "import readergroup, sys\n"
        f"assert readergroup.__file__.startswith(sys.prefix), readergroup.__file__\n"
        f"assert not readergroup.__file__.startswith({str(ROOT)!r})\n"
        f"assert readergroup.__version__ == {VERSION!r}, readergroup.__version__\n"
    )
    blocks = [
        b.source
        for b in code_blocks(page)
        if b.language == "python" and (b.marker is None or (long and b.marker == "long"))
    ]
    return where + "\n".join(blocks) + "\nprint('DONE')\n"


def run_getting_started(venv: FreshVenv, redis_url: str, *, long: bool) -> str:
    """The getting-started page's examples (its Spark one if ``long``) in the fresh venv."""
    script = page_script(DOCS / "getting-started.md", long=long)
    out = run_in_venv(venv, script, redis_url)
    assert out.rstrip().endswith("DONE")
    return out


@pytest.mark.redis
def test_the_wheel_in_a_fresh_venv_runs_the_getting_started_producer_and_consumer(
    fresh_venv: FreshVenv, redis_url: str
) -> None:
    out = run_getting_started(fresh_venv, redis_url, long=False)
    assert "shop/orders" in out  # the consumer printed what it read
    cli = run([str(fresh_venv.root / "bin" / "readergroup"), "--version"], cwd=fresh_venv.work)
    assert cli.stdout.strip() == f"readergroup, version {VERSION}"


@pytest.mark.long
@pytest.mark.redis
def test_the_wheel_in_a_fresh_venv_runs_the_spark_data_source(
    fresh_venv: FreshVenv, redis_url: str
) -> None:
    out = run_getting_started(fresh_venv, redis_url, long=True)
    assert "shop/orders" in out  # the producer and consumer ran before the Spark job


@pytest.mark.long
def test_the_sdist_builds_the_same_wheel(tmp_path: Path) -> None:
    """``make dist``'s path: the sdist, then the wheel built from it, holds every file of the
    wheel built from the checkout (Lua scripts and ``py.typed`` included)."""
    # (from a copy without ``build/``: setuptools reuses a checkout's ``build/lib``, so a
    # wheel built in a working tree holds modules deleted since its last build)
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    direct = build(tmp_path / "direct", "--wheel", source=tree)
    from_sdist = build(tmp_path / "dist")  # sdist, then the wheel from the unpacked sdist
    (sdist,) = (tmp_path / "dist").glob("readergroup-*.tar.gz")
    with zipfile.ZipFile(direct) as a, zipfile.ZipFile(from_sdist) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        names = a.namelist()
    assert "readergroup/storage/scripts/append_events.lua" in names
    assert "statesync/py.typed" in names and "pyspark_readergroup/__init__.py" in names
    with tarfile.open(sdist) as archive:
        assert any(n.endswith("statesync/scripts/append.lua") for n in archive.getnames())


def test_the_version_has_one_source() -> None:
    import readergroup

    assert readergroup.__version__ == VERSION == importlib.metadata.version("readergroup")
    # The install commands of README.md and docs/ name the current wheel.
    for page in markdown_pages():
        for named in re.findall(r"readergroup-(\d+\.\d+\.\d+\S*?)-py3", page.read_text()):
            assert named == VERSION, f"{page} names readergroup-{named}, pyproject says {VERSION}"
