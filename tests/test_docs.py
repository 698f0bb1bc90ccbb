"""The docs a newcomer reads: every command has its section in docs/commands.md, the README links every docs page
(and every page it links exists), every relative link in README.md and docs/ lands on a file (and a heading), and the
README stays a door (at most ~150 lines)."""

import argparse
import re
from pathlib import Path

import pytest

from app.commands.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted([README, *DOCS.glob("*.md")])
README_MAX_LINES = 150
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:


def subcommands() -> list[str]:
    """The subcommands of the real parser, as `python app.py --help` lists them."""
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code, where brackets are code, not links."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        kept.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def headings(text: str) -> list[str]:
    """The heading texts of a markdown page (outside code blocks)."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append(match.group(2))
    return found


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, markup and punctuation dropped, spaces to hyphens,
    `-1`, `-2`, ... after repeats."""
    seen: dict[str, int] = {}
    for heading in headings(text):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def relative_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page.read_text(encoding="utf-8")))
            if not EXTERNAL.match(target)]


def test_the_parser_has_subcommands():
    assert {"serve", "init", "loop", "ppo"} <= set(subcommands())


@pytest.mark.parametrize("name", subcommands())
def test_every_subcommand_has_a_section_in_the_commands_page(name):
    sections = {heading.replace("`", "").strip() for heading in headings((DOCS / "commands.md").read_text())}
    assert name in sections, f"docs/commands.md has no section `## {name}`"


def test_the_readme_links_every_docs_page_and_each_exists():
    linked = {(ROOT / target.split("#")[0]).resolve() for target in relative_links(README)
              if target.startswith("docs/")}
    missing = sorted(str(path.relative_to(ROOT)) for path in linked if not path.is_file())
    assert not missing, f"the README links docs pages that do not exist: {missing}"
    unlinked = sorted(str(page.relative_to(ROOT)) for page in DOCS.glob("*.md") if page.resolve() not in linked)
    assert not unlinked, f"docs pages the README's 'Where to read on' does not link: {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file})")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_readme_is_a_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the detail into docs/"


def test_the_link_and_anchor_readers():
    text = "## `serve`\n## Not verified\n## Audit trail\n## Audit trail\n```\n## code\n[x](nope.md)\n```\n"
    assert anchors(text) == {"serve", "not-verified", "audit-trail", "audit-trail-1"}
    page = "[a](docs/x.md) [b](https://example.org) `[c](y.md)` ![img](z.png) [d](#top)"
    assert [t for t in LINK.findall(prose(page)) if not EXTERNAL.match(t)] == ["docs/x.md", "#top"]
