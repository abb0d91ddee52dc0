"""The docs hold: generated pages are current, runnable blocks run, links resolve.

A fenced block right after a ``<!-- runnable -->`` line runs (``python`` in the test's interpreter,
``bash`` with that interpreter's scripts first on PATH); after ``<!-- runnable: write NAME -->`` its
text is saved as NAME instead. A page's blocks run in order in one empty folder, so a later block
sees what an earlier one wrote.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from search import docs_gen

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Pages whose links and blocks are checked: the README and every page of docs/ but the engineers' notes.
PAGES = sorted([ROOT / "README.md", *(p for p in DOCS.rglob("*.md") if "notes" not in p.relative_to(DOCS).parts)])
_MARKER = re.compile(r"^<!-- runnable(?::\s*write\s+(?P<name>\S+))?\s*-->\s*$")
_FENCE = re.compile(r"^```(?P<lang>\w*)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
BLOCK_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int
    write_to: str | None


def runnable_blocks(text: str) -> list[Block]:
    """The fenced blocks that follow a runnable marker, in page order."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        marker = _MARKER.match(lines[i])
        fence = _FENCE.match(lines[i + 1]) if marker and i + 1 < len(lines) else None
        if marker and fence:
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            body = "\n".join(lines[i + 2 : end]) + "\n"
            blocks.append(Block(fence["lang"], body, i + 2, marker["name"]))
            i = end
        i += 1
    return blocks


def _run_block(block: Block, folder: Path, page: Path) -> None:
    if block.write_to:
        (folder / block.write_to).write_text(block.text)
        return
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if block.lang == "python":
        command = [sys.executable, "-c", block.text]
    elif block.lang == "bash":
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    else:
        raise AssertionError(f"{page.name}:{block.line}: a runnable block must be python or bash, not {block.lang!r}")
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, (
        f"{page.name}:{block.line} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)  # a '#' in a code block is no heading
    return {slug(m[1]) for m in re.finditer(r"^#+\s+(.+)$", text, flags=re.M)}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor}")
    return broken


def test_the_generated_reference_pages_are_current() -> None:
    stale = [str(p.relative_to(ROOT)) for p in docs_gen.stale_pages()]
    assert stale == [], "regenerate with: python -m search.docs_gen"


def test_every_spec_field_has_an_attribute_docstring() -> None:
    missing = [
        f"{cls.__name__}.{f.name}" for _, cls in docs_gen.SECTIONS for f in docs_gen.field_docs(cls) if not f.doc
    ]
    assert missing == []


@dataclasses.dataclass(frozen=True)
class _Sample:
    size: int
    """How many."""
    name: str = "a"
    tags: tuple[str, ...] = ("x", "y")
    """Which
    tags."""


def test_field_docs_reads_types_defaults_and_docstrings() -> None:
    assert docs_gen.field_docs(_Sample) == [
        docs_gen.FieldDoc("size", "int", "required", "How many."),
        docs_gen.FieldDoc("name", "str", '`"a"`', ""),
        docs_gen.FieldDoc("tags", "tuple[str, ...]", '`["x", "y"]`', "Which tags."),
    ]


def test_the_cli_reference_lists_every_command_and_flag() -> None:
    page = docs_gen.cli_reference()
    for command in ("run", "resume", "status", "check", "report", "reproduce", "worker", "cluster-script", "scaling"):
        assert f"## `hypersweep {command}`" in page
    assert "`--allow-changes`" in page and "`--tls CA CERT KEY`" in page


def test_runnable_blocks_are_found_and_only_after_a_marker() -> None:
    text = "```python\nskipped()\n```\n<!-- runnable -->\n```python\nran()\n```\n<!-- runnable: write a.toml -->\n```toml\nx = 1\n```\n"
    assert runnable_blocks(text) == [Block("python", "ran()\n", 5, None), Block("toml", "x = 1\n", 9, "a.toml")]
    assert sum(len(runnable_blocks(p.read_text())) for p in PAGES) >= 10  # the tutorial's and the README's


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the tutorial starts two campaigns and six commands: minutes on a loaded machine
@pytest.mark.parametrize("page", [p for p in PAGES if runnable_blocks(p.read_text())], ids=lambda p: p.name)
def test_runnable_blocks_run(page: Path, tmp_path: Path) -> None:
    for block in runnable_blocks(page.read_text()):
        _run_block(block, tmp_path, page)


def test_links_in_the_readme_and_the_docs_resolve() -> None:
    assert {p: broken_links(p) for p in PAGES if broken_links(p)} == {}


def test_the_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [bad](b.md#nope) [web](https://example.org)\n")
    assert broken_links(page) == ["c.md: no such file", "b.md#nope: no heading #nope"]
