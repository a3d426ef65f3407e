"""Reading the project's markdown (README.md and docs/) for the documentation tests: fenced
python blocks with their run markers, links, and the anchors headings get.

Markers: an HTML comment on the last non-blank line before a fence.

* ``<!-- not-run: REASON -->``: the block is a fragment (it names things it does not define);
  it is not executed. Use sparingly: prefer a block that runs.
* ``<!-- long: REASON -->``: the block is slow (a Spark session): ``make test`` runs the page
  without it, ``make test-long`` runs the whole page with it.

Every other ``python`` block runs, in page order, in one namespace per page, so a later block
may use what an earlier one defined (as a reader reading the page would). ``console`` blocks run
too, in the same order: each ``$ readergroup ...`` line is a CLI command that must succeed (the
lines without ``$`` are output, not compared).
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^<!--\s*(not-run|long):\s*(\S.*?)\s*-->$")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*([^)\s]+)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ID = re.compile(r"\{\s*#([\w-]+)[^}]*\}\s*$")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced python or console block: where it is, its source, and its marker (if any)."""

    page: Path
    line: int  # 1-based line of the first source line
    language: str  # "python" or "console"
    source: str
    marker: str | None  # "not-run", "long" or None
    reason: str | None


def markdown_pages() -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def code_blocks(page: Path) -> list[CodeBlock]:
    """The fenced ``python`` and ``console`` blocks of ``page`` with the marker before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, language = opened.group(2), opened.group(3).lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if language in ("python", "py", "console"):
            marker = reason = None
            before = i - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            if before >= 0 and (found := MARKER.match(lines[before].strip())):
                marker, reason = found.group(1), found.group(2)
            indent = len(opened.group(1))
            source = "\n".join(line[indent:] for line in lines[i + 1 : end])
            kind = "console" if language == "console" else "python"
            blocks.append(CodeBlock(page, i + 2, kind, source + "\n", marker, reason))
        i = end + 1
    return blocks


def prose_lines(page: Path, *, keep_code: bool = False) -> list[tuple[int, str]]:
    """The page's lines outside fenced blocks (1-based numbers); inline code removed unless
    ``keep_code`` (headings may hold code)."""
    kept: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(2)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        kept.append((number, line if keep_code else re.sub(r"`+[^`]*`+", "", line)))
    return kept


def links(page: Path) -> list[tuple[int, str]]:
    """Every link and image target in the page's prose, with its line."""
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(page):
        found.extend((number, target) for target in LINK.findall(line))
        found.extend((number, target) for target in IMAGE.findall(line))
    return found


def slugify(text: str) -> str:
    """The id Python-Markdown's ``toc`` extension (MkDocs) gives a heading."""
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[`*]", "", text)  # code and emphasis marks (underscores stay: code has them)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """The ids of the page's headings (duplicates numbered ``_1``, ``_2`` as ``toc`` does)."""
    seen: set[str] = set()
    for _, line in prose_lines(page, keep_code=True):
        heading = HEADING.match(line)
        if not heading:
            continue
        title = heading.group(2)
        explicit = EXPLICIT_ID.search(title)
        slug = explicit.group(1) if explicit else slugify(title)
        unique, n = slug, 0
        while unique in seen:
            n += 1
            unique = f"{slug}_{n}"
        seen.add(unique)
    return seen


def empty_database(redis_url: str, db: int) -> str:
    """The URL of database ``db`` on ``redis_url``'s server, emptied: examples run there with
    the names a reader would use, away from other tests' data."""
    url = urllib.parse.urlunsplit(urllib.parse.urlsplit(redis_url)._replace(path=f"/{db}"))
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url
