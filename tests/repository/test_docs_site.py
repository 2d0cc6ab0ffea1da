"""The documentation site builds: ``mkdocs build --strict`` exits 0 (a broken link, a missing
page or a bad anchor fails), every page under ``docs/`` is in the navigation, README's links
into ``docs/`` name pages that exist, the comparison with MirrorMaker has one copy (README's,
which the site's home page includes), the changelog page includes CHANGELOG.md, and the
glossary names code that exists, and no page ships prose it can tell is broken."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _nav_pages(entries: Any) -> list[str]:
    """Every page file named in a (nested) mkdocs nav."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in _nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in _nav_pages(value)]
    return []


def _config() -> dict[str, Any]:
    # mkdocs.yml uses no custom YAML tags, so the safe loader reads it
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return config


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    # Not a skip: make test installs the docs extra, and a suite that silently built no site
    # would pass with broken links.
    assert MKDOCS.is_file(), (
        f"mkdocs is not installed beside {sys.executable}: pip install -e '.[docs]'"
    )
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(MKDOCS.parent)},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_config_is_strict_material() -> None:
    config = _config()
    assert config["strict"] is True
    assert config["theme"]["name"] == "material"


def test_every_page_is_in_the_nav_once() -> None:
    """Strict mode only logs a page left out of the nav (at INFO): checked here."""
    nav = _nav_pages(_config()["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == sorted(nav), "a page is in the nav twice"
    assert sorted(nav) == pages, (
        f"not in the nav: {sorted(set(pages) - set(nav))}; "
        f"in the nav but missing: {sorted(set(nav) - set(pages))}"
    )


def test_readme_links_into_docs_name_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", readme)
    links += re.findall(r"^\[[^\]]+\]:\s*(docs/[^#\s]+)", readme, flags=re.MULTILINE)
    assert links, "README links to no docs page"
    missing = sorted(link for link in set(links) if not (ROOT / link).is_file())
    assert not missing, f"README links to missing docs pages: {missing}"


COMPARISON_HEADER = "| | Replicator | MirrorMaker 1 | MirrorMaker 2 |"
SECTION = re.compile(
    r"<!-- --8<-- \[start:comparison\] -->\n(.*?)<!-- --8<-- \[end:comparison\] -->", re.DOTALL
)


def _reference_definitions(text: str) -> set[str]:
    return set(re.findall(r"^\[([^\]]+)\]:\s*\S+", text, flags=re.MULTILINE))


def test_the_comparison_table_has_one_copy() -> None:
    """README.md holds the table between snippet markers; docs/index.md includes that section."""
    readme = (ROOT / "README.md").read_text()
    section = SECTION.search(readme)
    assert section, "README.md has no comparison section (snippet markers)"
    assert COMPARISON_HEADER in section.group(1)
    copies = [
        str(path.relative_to(ROOT))
        for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
        if COMPARISON_HEADER in path.read_text()
    ]
    assert copies == ["README.md"], f"the comparison table is written out in {copies}"
    assert '--8<-- "README.md:comparison"' in (DOCS / "index.md").read_text()
    assert "pymdownx.snippets" in str(_config()["markdown_extensions"])


def test_the_comparison_links_resolve_in_both_places() -> None:
    """A relative link resolves differently from README.md and docs/index.md: the section's links
    are reference-style, each defined in both files with the path right for that file."""
    readme = (ROOT / "README.md").read_text()
    section = SECTION.search(readme)
    assert section
    inline = re.findall(r"\]\((?!https?://)[^)]*\)", section.group(1))
    assert not inline, f"relative inline links in the comparison section: {inline}"
    references = set(re.findall(r"\]\[([^\]]+)\]", section.group(1)))
    index = (DOCS / "index.md").read_text()
    for name, text in (("README.md", readme), ("docs/index.md", index)):
        missing = references - _reference_definitions(text)
        assert not missing, f"{name} does not define the comparison's links {sorted(missing)}"


def test_the_glossary_names_code_that_exists() -> None:
    """Each term is defined as the code uses it, naming the class, function or module that owns
    it: a rename that leaves the glossary behind fails here."""
    glossary = (DOCS / "glossary.md").read_text()
    paths = set(re.findall(r"`(replicator/[\w/]+\.py)`", glossary))
    assert paths, "the glossary names no module"
    assert not sorted(p for p in paths if not (ROOT / p).is_file())
    code = "\n".join(p.read_text() for p in (ROOT / "replicator").rglob("*.py"))
    names = {
        name
        for mention in re.findall(r"`([A-Za-z_][\w.]*)`", glossary)
        for name in mention.split(".")
        if re.fullmatch(r"[A-Z][a-z]\w*|[a-z]+_[a-z_]+", name)
    }
    assert names, "the glossary names no class or function"
    # Classes and functions are defined in the code; other names (states, attributes, metrics)
    # appear in it or in the reference pages generated from it.
    reference = "\n".join(p.read_text() for p in (DOCS / "reference").glob("*.md"))
    missing = sorted(
        n
        for n in names
        if not re.search(rf"\b(class|def) {n}\b|\b{n}\b =", code)
        and (n[0].isupper() or not re.search(rf"\b{n}\b", code + reference))
    )
    assert not missing, f"the glossary names what the code does not define: {missing}"


def test_the_changelog_page_includes_the_changelog() -> None:
    """CHANGELOG.md is the one copy; the site's page includes it whole."""
    assert (DOCS / "changelog.md").read_text().strip() == '--8<-- "CHANGELOG.md"'
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog\n")


_NOT_PROSE = re.compile(r"^(\s|[|#>*+<{!=-]|\d+\.\s|\[|---|```|\$|\.\.\.)")
_ENDS = (".", ":", "!", "?", ")", "`", "*", '"', "|")


_BELOW = re.compile(r"\(below\)|\b(see|shown|listed|described|given|follows?) below\b|\bbelow:")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_CODE = "```code```"  # a code block's place among the blocks (it is not prose)


def _blocks(text: str) -> list[str]:
    """The page's blocks (separated by blank lines, HTML comments removed), each code block
    kept as a placeholder: a sentence before it is not the page's last."""
    blocks: list[str] = []
    current: list[str] = []
    fenced = False
    for line in _COMMENT.sub("", text).splitlines():
        if line.lstrip().startswith("```"):
            if current:
                blocks.append("\n".join(current))
                current = []
            if not fenced:
                blocks.append(_CODE)
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def prose_problems(name: str, text: str) -> list[str]:
    """What a reader sees as broken prose: a paragraph that stops without punctuation, a
    "below" in the page's last block (nothing is below it), a heading repeated as bold text."""
    problems = []
    blocks = _blocks(text)
    for block in blocks:
        if not _NOT_PROSE.match(block) and not block.rstrip().endswith(_ENDS):
            problems.append(f"{name}: a paragraph ends without punctuation: ...{block[-60:]!r}")
    if blocks and _BELOW.search(blocks[-1]):
        problems.append(f"{name}: the last block says 'below': {blocks[-1][-80:]!r}")
    heading = None
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith("#"):
            heading = first.lstrip("#").strip().lower()
        elif (
            heading
            and first.startswith("**")
            and first.strip().strip("*").strip().rstrip(".:").lower() == heading
        ):
            problems.append(f"{name}: the heading {heading!r} is repeated as bold text")
            heading = None
        else:
            heading = None
    return problems


def test_no_page_ships_broken_prose() -> None:
    pages = sorted(DOCS.rglob("*.md"))
    problems = [
        p for page in pages for p in prose_problems(str(page.relative_to(ROOT)), page.read_text())
    ]
    for name in ("README.md", "CHANGELOG.md"):  # the site includes both
        problems += prose_problems(name, (ROOT / name).read_text())
    assert not problems, "\n".join(problems)


def test_the_prose_check_finds_what_it_looks_for() -> None:
    broken = (
        "# Exactly once\n\n**Exactly once**\n\nThe resume reads the tail and then\n\n"
        "See the table (below).\n"
    )
    found = prose_problems("page.md", broken)
    assert len(found) == 3, found
    assert prose_problems("page.md", "# Title\n\nA sentence.\n\n- a list item\n") == []
    # Not broken: a sentence introducing a code block at the page's end, a comment spanning a
    # blank line, a paragraph that only shares the heading's words without being bold.
    fine = "# Run\n\nRun the command below:\n\n```sh\nreplicator run\n```\n"
    assert prose_problems("page.md", fine) == []
    assert prose_problems("page.md", "A sentence.\n\n<!-- a\n\nnote -->\n") == []
    assert prose_problems("page.md", "# Scale\n\nScale.\n") == []
    # A paragraph running straight into a code block is still checked.
    assert len(prose_problems("page.md", "Then the\n```sh\nx\n```\n")) == 1
