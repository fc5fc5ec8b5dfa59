"""The documentation holds together: the generated references (docs/settings.md, docs/cli.md)
are what the code generates now, every relative link and #anchor of README.md and docs/*.md
resolves (anchors as GitHub makes them from headings), and the README stays a front door."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memory_pipelines import config, docs_reference

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 300

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (code shows links, it does not make them)."""
    lines, fence = [], None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0] * len(opened.group(1))
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text as rendered (code spans, links and emphasis
    reduced to their text), lowercased, every character that is not a letter, digit, space,
    hyphen or underscore removed, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = text.strip().lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(prose_lines(path.read_text(encoding="utf-8")), 1):
        reference = REFERENCE.match(line)
        if reference:
            out.append((number, reference.group(1)))
            continue
        line = CODE_SPAN.sub("code", line)
        out.extend((number, target) for target in LINK.findall(line))
    return out


def test_github_slug_rules():
    assert github_slug("Two commands") == "two-commands"
    assert github_slug("`memory-pipelines run`") == "memory-pipelines-run"
    assert github_slug("conversation_segments") == "conversation_segments"
    assert github_slug("One machine (the default)") == "one-machine-the-default"
    assert github_slug("bench retrieval — evidence turns") == "bench-retrieval--evidence-turns"
    assert github_slug("Schedule, sensor and lineage views") == "schedule-sensor-and-lineage-views"


@pytest.mark.parametrize("path", list(docs_reference.generated()), ids=lambda p: p.name)
def test_generated_reference_is_current(path):
    expected = docs_reference.generated()[path]
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    assert current == expected, (
        f"{path.relative_to(REPO)} is out of date with the code: run "
        f"`{docs_reference.REGENERATE}` and commit the result")


def test_settings_reference_lists_every_setting():
    text = docs_reference.SETTINGS_PATH.read_text(encoding="utf-8")
    missing = [name for name in config.SPECS if f"| `{name}` |" not in text]
    assert not missing, f"not in docs/settings.md: {missing}; run `{docs_reference.REGENERATE}`"


def test_cli_reference_lists_every_command():
    from memory_pipelines.cli import build_parser

    text = docs_reference.CLI_PATH.read_text(encoding="utf-8")
    progs = [parser.prog for parser, _ in docs_reference._walk(build_parser())][1:]
    assert len(progs) > 20
    missing = [prog for prog in progs if f"## `{prog}`" not in text]
    assert not missing, f"not in docs/cli.md: {missing}; run `{docs_reference.REGENERATE}`"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for line, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{page.name}:{line}: {target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{page.name}:{line}: {target} (no heading makes #{anchor})")
    assert not broken, "\n".join(broken)


def test_docs_are_linked_from_the_readme():
    readme = README.read_text(encoding="utf-8")
    unlinked = [doc.name for doc in DOCS if f"(docs/{doc.name}" not in readme]
    assert not unlinked, f"docs the README does not link to: {unlinked}"


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference text to docs/")
