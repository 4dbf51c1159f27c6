"""Every pointer of the guide leads somewhere: each relative link and ``#anchor`` of
README.md and docs/*.md names a file that exists and a heading it has, and each
named section (``docs/agui.md``, "Frames") that a page or a docstring cites is a
heading of that page. Guards the pages against links left behind when a section
moves or is renamed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = [
    path
    for path in [*sorted((ROOT / "src").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py"))]
    if path != Path(__file__).resolve()
]

FENCE = re.compile(r"^```.*?^```$", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)|<img src=\"([^\"]+)\"")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
NUMBER = re.compile(r"^\d+\. ")
CITED_SECTION = re.compile(r"((?:docs/)?[\w-]+\.md)`{0,2},? \"([^\"]+)\"")


def prose(text: str) -> str:
    """``text`` without its fenced blocks, whose ``#`` lines are comments."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces
    as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> list[str]:
    return HEADING.findall(prose(page.read_text()))


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings; a repeated heading's later ones get
    ``-1``, ``-2``, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(page):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> Iterator[str]:
    """The relative links of ``page`` (markdown's, and an ``<img>``'s source) whose
    file or anchor does not exist."""
    for link, image in LINK.findall(prose(page.read_text())):
        target = link or image
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            yield f"{page.name}: {target} (no such file)"
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            yield f"{page.name}: {target} (no such heading)"


def page_named(name: str) -> Path:
    return ROOT / name if name.startswith("docs/") or name == "README.md" else ROOT / "docs" / name


def broken_citations(source: Path) -> Iterator[str]:
    """The sections ``source`` cites by name (``docs/x.md``, "Title") that its page
    has no heading for (a heading that begins with the name counts, its number
    aside: "Frames" names "4. Frames")."""
    text = " ".join(source.read_text().split())
    for name, section in CITED_SECTION.findall(text):
        page = page_named(name)
        if not page.exists():
            yield f"{source.name}: {name} (no such page)"
        elif not any(NUMBER.sub("", title).startswith(section) for title in headings(page)):
            yield f'{source.name}: {name}, "{section}" (no such section)'


def test_every_relative_link_and_anchor_of_the_pages_resolves() -> None:
    assert [broken for page in PAGES for broken in broken_links(page)] == []


def test_every_section_cited_by_name_is_a_heading_of_its_page() -> None:
    cited = [broken for source in PAGES + SOURCES for broken in broken_citations(source)]
    assert cited == []


def test_the_checks_see_a_broken_link_and_a_missing_section(tmp_path: Path) -> None:
    """Control: a link to a missing file, one to a missing heading and a citation
    of a missing section are each reported."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[there](missing.md) [here](#title) [nowhere](#nowhere)\n"
        '<img src="missing.png" alt="">\n'
        '```sh\n# not a heading\n```\nsee `docs/sdk.md`, "No such section"\n'
    )
    assert list(broken_links(page)) == [
        "page.md: missing.md (no such file)",
        "page.md: #nowhere (no such heading)",
        "page.md: missing.png (no such file)",
    ]
    assert anchors(page) == {"title"}
    assert list(broken_citations(page)) == [
        'page.md: docs/sdk.md, "No such section" (no such section)'
    ]
