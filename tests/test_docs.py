"""The documentation cannot rot: every python block of README.md and docs/ runs against a real
Redis, every link resolves, the site builds with warnings as errors, and the README stays a
landing page.

Each page runs in a Redis database of its own on the suite's server (``DOCS_DB``), emptied first,
so pages can use the names a reader would (scope ``shop``, stream ``orders``) without meeting
another test's data or another page's. Examples read ``REDIS_URL``. Markers for blocks that do
not run here are described in ``tests/support/markdown_docs.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import types
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from readergroup.cli import main as cli_main
from tests.support.markdown_docs import (
    DOCS,
    ROOT,
    CodeBlock,
    anchors,
    code_blocks,
    empty_database,
    links,
    markdown_pages,
)

DOCS_DB = 9  # a database no other test uses: emptied before each page
README_MAX_LINES = 250


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def runnable_pages(*, long: bool) -> list[Path]:
    """Pages with blocks to run: with ``long``, those with a ``long`` block (run whole); without,
    those with a block that is neither ``long`` nor ``not-run``."""
    wanted = {"long"} if long else {None}
    return [
        page
        for page in markdown_pages()
        if any(block.marker in wanted for block in code_blocks(page))
    ]


def run_page(
    page: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, *, long: bool = False
) -> None:
    """Run the page's blocks in order in one namespace, as a reader would, against an empty
    database (``long`` blocks only if ``long``); a failure names the page and the block's line."""
    monkeypatch.setenv("REDIS_URL", empty_database(redis_url, DOCS_DB))
    threads_before = set(threading.enumerate())
    # A module of its own (dataclasses, pickling and the codec's registry look classes up there).
    module = types.ModuleType("docs_page_" + re.sub(r"\W", "_", page_id(page)))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in code_blocks(page):
        if block.marker == "not-run" or (block.marker == "long" and not long):
            continue
        run_block(block, module.__dict__)
    left = [t for t in set(threading.enumerate()) - threads_before if not t.daemon]
    assert not left, f"{page_id(page)} left threads running: {left}"


def run_block(block: CodeBlock, namespace: dict[str, Any]) -> None:
    where = f"{page_id(block.page)}:{block.line}"
    if block.language == "console":
        run_commands(block, where)
        return
    # Line numbers in a traceback are the page's own (the block's source shifted to its place).
    code = compile("\n" * (block.line - 1) + block.source, where, "exec")
    try:
        exec(code, namespace)
    except BaseException as error:
        raise AssertionError(f"the python block at {where} failed: {error!r}") from error


def run_commands(block: CodeBlock, where: str) -> None:
    """Each ``$ readergroup ...`` line of a console block, in process (click's runner, the
    environment's ``REDIS_URL``); any other command is refused."""
    for offset, line in enumerate(block.source.splitlines()):
        if not line.startswith("$ "):
            continue
        argv = shlex.split(line[2:], comments=True)
        assert argv[0] == "readergroup", f"{where}: only readergroup commands run: {line}"
        done = CliRunner().invoke(cli_main, argv[1:], catch_exceptions=False)
        assert done.exit_code == 0, f"{where}+{offset}: {line}\n{done.output}"


@pytest.mark.redis
@pytest.mark.parametrize("page", runnable_pages(long=False), ids=page_id)
def test_every_example_of_the_page_runs(
    page: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_page(page, redis_url, monkeypatch)


@pytest.mark.long
@pytest.mark.redis
@pytest.mark.parametrize("page", runnable_pages(long=True), ids=page_id)
def test_every_example_of_a_page_with_slow_ones_runs(
    page: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_page(page, redis_url, monkeypatch, long=True)


def test_a_failing_command_or_block_fails_its_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```console\n$ readergroup group reset --no-such-option\n```\n")
    with pytest.raises(AssertionError, match="no-such-option"):
        run_block(code_blocks(page)[0], {})
    page.write_text("```python\nassert 1 == 2\n```\n")
    with pytest.raises(AssertionError, match=re.escape("page.md:2")):
        run_block(code_blocks(page)[0], {})


def test_blocks_left_out_say_why_and_are_few() -> None:
    blocks = [block for page in markdown_pages() for block in code_blocks(page)]
    skipped = [block for block in blocks if block.marker == "not-run"]
    assert all(block.reason for block in skipped)
    assert len(skipped) * 5 <= len(blocks), [f"{page_id(b.page)}:{b.line}" for b in skipped]


@pytest.mark.parametrize("page", markdown_pages(), ids=page_id)
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for line, target in links(page):
        problem = link_problem(page, target)
        if problem:
            broken.append(f"{page_id(page)}:{line}: {target}: {problem}")
    assert not broken, "\n".join(broken)


def link_problem(page: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``page``) does not resolve, or None. External links are only
    checked for their form: the tests have no network."""
    parts = urllib.parse.urlsplit(target)
    if parts.scheme in ("http", "https"):
        return None if parts.netloc and "." in parts.netloc else "not a well-formed URL"
    if parts.scheme == "mailto":
        return None if "@" in parts.path else "not a well-formed address"
    if parts.scheme or parts.netloc:
        return f"unexpected scheme {parts.scheme!r}"
    path = urllib.parse.unquote(parts.path)
    if path.startswith("/"):
        return "absolute paths do not resolve on the site or on GitHub: use a relative link"
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return "no such file"
    if page.is_relative_to(DOCS) and not file.is_relative_to(DOCS):
        return "the site has only docs/: link files outside it by their repository path in code"
    if parts.fragment and file.suffix == ".md" and parts.fragment not in anchors(file):
        return f"no heading with the anchor #{parts.fragment} in {page_id(file)}"
    return None


def test_the_link_check_finds_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A title\n\n## `Code` in a heading\n\n## `ack_timeout=...`\n", encoding="utf-8"
    )
    assert link_problem(page, "#a-title") is None
    assert link_problem(page, "#code-in-a-heading") is None
    assert link_problem(page, "#ack_timeout") is None
    assert link_problem(page, "#missing") is not None
    assert link_problem(page, "other.md") == "no such file"
    assert link_problem(page, "page.md#a-title") is None
    assert link_problem(page, "https://example.org/x") is None
    assert link_problem(page, "https://nohost") is not None
    assert link_problem(page, "/abs.md") is not None


def test_the_readme_is_a_landing_page_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert "```\nmake demo\nmake test\n```" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\nmake test\n" in ci  # CI runs the README's test command


@pytest.mark.long  # 3 s of CPU, 6-14 s on a loaded machine; CI also runs `make docs`
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "api" / "clients.html").exists()
