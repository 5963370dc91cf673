"""README.md is a front door and docs/ holds the rest: every relative link in README.md and
docs/*.md reaches a file (and, with `#anchor`, a heading of it, by GitHub's slug rules), README
stays short, and its test-command marker is followed by the one-line block .ci/run runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def unfenced(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation other than '-' and '_'
    dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in unfenced(path.read_text("utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    """Link targets outside code (fenced blocks and inline spans), other than web and mail ones."""
    prose = "\n".join(INLINE_CODE.sub("", line) for line in unfenced(path.read_text("utf-8")))
    targets = [m.group(1) for m in LINK.finditer(prose)]
    return [t for t in targets if not re.match(r"(https?|mailto):", t)]


def test_slugs_follow_githubs_rules() -> None:
    assert slug("Codex CLI and Claude Code: `toolserve launch`") == "codex-cli-and-claude-code-toolserve-launch"
    assert slug("The model's own sampling settings") == "the-models-own-sampling-settings"
    assert slug("core_shares.py: two local models busy at once") == "core_sharespy-two-local-models-busy-at-once"
    assert slug("Code completion (fill-in-the-middle)") == "code-completion-fill-in-the-middle"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading '#{anchor}' in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def linked_files(page: Path) -> set[Path]:
    return {(page.parent / t.partition("#")[0]).resolve() for t in relative_links(page) if t.partition("#")[0]}


def test_every_docs_page_is_reached_from_readme() -> None:
    """Each docs/*.md is linked from README.md or from a page that README.md links to."""
    reached = linked_files(README)
    for page in PAGES[1:]:
        if page.resolve() in reached:
            reached |= linked_files(page)
    missing = [p.name for p in PAGES[1:] if p.resolve() not in reached]
    assert not missing, f"docs pages that README.md does not lead to: {missing}"


def test_readme_is_a_front_door() -> None:
    n = len(README.read_text("utf-8").splitlines())
    assert n <= 220, f"README.md has {n} lines; move detail into docs/"


def test_readme_test_command_is_one_line_after_its_marker() -> None:
    """The rule of .ci/run's awk: after the marker line, the first fence opens a block; the lines up
    to the next fence are the command; there must be exactly one, and it must be a sh block."""
    lines = README.read_text("utf-8").splitlines()
    markers = [i for i, line in enumerate(lines) if "<!-- test-command" in line]
    assert len(markers) == 1, "README.md needs exactly one test-command marker"
    fences = [i for i in range(markers[0] + 1, len(lines)) if lines[i].startswith("```")][:2]
    assert len(fences) == 2, "no closed code block after the test-command marker"
    opening, closing = fences
    assert lines[opening] == "```sh", f"the block after the marker is {lines[opening]!r}, not ```sh"
    assert all(not line.strip() for line in lines[markers[0] + 1:opening]), "text between the marker and its block"
    command = lines[opening + 1:closing]
    assert len(command) == 1 and command[0].strip(), f"the test command must be one line, not {command}"
    assert command[0] == ".venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
