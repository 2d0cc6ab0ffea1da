"""One source for each figure the pages quote: the measured figures table of
``docs/guarantees.md`` (between its snippet markers; the performance page includes it). Every
page that gives one of its quantities (the resume's worst case, partitions per instance,
start-up, peak RSS) gives the same figure, in prose or in a table; sections headed as earlier
versions keep their history. The fault scenarios' RSS bound is the one ``test_faults`` asserts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SOURCE = "docs/guarantees.md"
FIGURES = re.compile(
    r"<!-- --8<-- \[start:figures\] -->\n(.*?)<!-- --8<-- \[end:figures\] -->", re.DOTALL
)
# A section that says it is history (figures of earlier versions, before a change) is not
# quoting today's figures.
HISTORY = re.compile(r"earlier versions|\(before ", re.IGNORECASE)


def pages() -> dict[str, str]:
    """README.md and every page of the site, by path from the repository root."""
    paths = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return {str(path.relative_to(ROOT)): path.read_text() for path in paths}


def current(text: str) -> str:
    """``text`` without its sections headed as history (each up to the next heading of its
    level or above)."""
    kept: list[str] = []
    skipping: int | None = None  # the level of the history heading being skipped
    for line in text.splitlines():
        heading = re.match(r"(#+)\s", line)
        if heading and skipping is not None and len(heading.group(1)) <= skipping:
            skipping = None
        if heading and skipping is None and HISTORY.search(line):
            skipping = len(heading.group(1))
        if skipping is None:
            kept.append(line)
    return "\n".join(kept)


def prose(text: str) -> str:
    """One line, single spaces: a figure's words may wrap anywhere."""
    return " ".join(text.split())


def tables(text: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """Each Markdown table of ``text``: its header cells and its rows' cells."""
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(block) >= 2 and set("".join(block[1])) <= set("-: "):
            yield block[0], block[2:]
        block = []


def source_rows(text: str) -> dict[str, list[str]]:
    """The measured figures table: each row's cells by its quantity (the first cell)."""
    section = FIGURES.search(text)
    assert section, f"{SOURCE} has no measured figures section (snippet markers)"
    ((header, rows),) = list(tables(section.group(1)))
    assert header == ["quantity", "figure", "measured by", "broker"], header
    return {row[0]: row for row in rows}


def number(text: str) -> str:
    return text.replace(",", "")


def whole(pattern: str) -> Callable[[str], str]:
    """A reader of a source cell that is exactly ``pattern``: its one group."""

    def read(cell: str) -> str:
        match = re.fullmatch(pattern, cell)
        assert match, f"{SOURCE}: {cell!r} is not {pattern!r}"
        return number(match.group(1))

    return read


def pairs(text: str, unit: str) -> dict[str, str]:
    """``2.3 s at 24 partitions, 11.9 s at 1,200`` (unit ``s``): partitions -> figure."""
    return {
        number(partitions): number(figure)
        for figure, partitions in re.findall(rf"([\d.,]+) {unit} at ([\d,]+)", text)
    }


def replicator_columns(text: str, column: str) -> dict[str, str]:
    """From each table of contenders by partitions: the replicator's ``column``, by partitions."""
    found = {}
    for header, rows in tables(text):
        if header[:2] != ["partitions", "contender"] or column not in header:
            continue
        at = header.index(column)
        for row in rows:
            figure = re.match(r"[\d.,]+", row[at])
            if row[1] == "replicator" and figure:
                found[number(row[0])] = number(figure.group())
    return found


# Each quantity: the source row it is held in, how to read the source's figure, and how to
# read every mention of it from one page's current text (nothing, or an empty figure, where
# the page gives none). A figure of several values (one per partition count) is compared value
# by value: a page may quote some of them.
Figure = str | dict[str, str]
Reader = Callable[[str], list[Figure]]


def _all(pattern: str) -> Reader:
    return lambda text: [number(m) for m in re.findall(pattern, prose(text))]


def _first_record(text: str) -> list[Figure]:
    found: list[Figure] = [
        number(m) for m in re.findall(r"against ([\d.]+-[\d.]+) s over both runs", prose(text))
    ]
    for header, rows in tables(text):
        if header[:2] == ["", "Replicator"]:
            for row in rows:
                found += re.findall(r"first record ([\d.]+-[\d.]+) s after start", row[1])
    return found


def _started(text: str) -> list[Figure]:
    quoted = re.findall(r"every partition started in ([\d.]+ s at [^()]*)", prose(text))
    found: list[Figure] = [pairs(q, "s") for q in quoted]
    return [*found, replicator_columns(text, "all started")]


def _rss_after_drain(text: str) -> list[Figure]:
    quoted = re.findall(r"after a drain of 120,000 records, both legs: ([^;)]*)", prose(text))
    found: list[Figure] = [pairs(q, "MB") for q in quoted]
    return [*found, replicator_columns(text, "peak RSS")]


QUANTITIES: dict[str, tuple[str, Callable[[str], Figure], Reader]] = {
    "resume worst case": (
        "Resume, worst case",
        whole(r"([\d.]+) s"),
        _all(r"([\d.]+) s in the worst case"),
    ),
    "partitions per instance": (
        "Partitions per instance",
        number,
        _all(r"([\d,]+) partitions per instance"),
    ),
    "start-up, every partition started": (
        "Start-up: every partition started",
        lambda cell: pairs(cell, "s"),
        _started,
    ),
    "start-up, first record": (
        "Start-up: the process's start",
        whole(r"([\d.]+-[\d.]+) s"),
        _first_record,
    ),
    "peak RSS after a drain": (
        "Peak RSS after a drain",
        lambda cell: pairs(cell, "MB"),
        _rss_after_drain,
    ),
    "peak RSS in the fault scenarios": (
        "Peak RSS in the fault scenarios",
        whole(r"under (\d+) MB"),
        _all(r"peak RSS asserted under (\d+) MB"),
    ),
}

# Where each quantity must be quoted (beside the source): a rewording that no reader above
# recognises fails here instead of escaping the comparison.
QUOTED_IN = {
    "resume worst case": {SOURCE, "docs/concepts/exactly-once.md", "docs/performance/index.md"},
    "partitions per instance": {"README.md", "docs/operations/limits.md"},
    "start-up, every partition started": {
        "docs/operations/sizing.md",
        "docs/performance/scale.md",
    },
    "start-up, first record": {"README.md", "docs/performance/index.md"},
    "peak RSS after a drain": {"docs/operations/sizing.md", "docs/performance/scale.md"},
    "peak RSS in the fault scenarios": {SOURCE},
}


def _row(rows: dict[str, list[str]], prefix: str) -> list[str]:
    (row,) = [cells for quantity, cells in rows.items() if quantity.startswith(prefix)]
    return row


def _differs(source: Figure, quoted: Figure) -> bool:
    if isinstance(source, dict) and isinstance(quoted, dict):
        return any(source.get(k) != v for k, v in quoted.items())
    return source != quoted


def disagreements(texts: dict[str, str]) -> list[str]:
    """Each page's mention of a quantity whose figure differs from the source's, and each
    page expected to quote a quantity that does not."""
    rows = source_rows(texts[SOURCE])
    problems = []
    for name, (prefix, read_source, read) in QUANTITIES.items():
        row = _row(rows, prefix)
        assert all(row), f"{SOURCE}: the {name} row lacks a cell: {row}"
        source = read_source(row[1])
        quoting = set()
        for page, text in texts.items():
            body = FIGURES.sub("", current(text)) if page == SOURCE else current(text)
            found = [figure for figure in read(body) if figure]
            quoting |= {page} if found else set()
            problems += [
                f"{page}: {name} {figure}, {SOURCE} {source}"
                for figure in found
                if _differs(source, figure)
            ]
        problems += [
            f"{page}: does not quote {name} ({source})"
            for page in sorted(QUOTED_IN[name] - quoting)
        ]
    return problems


def test_every_page_quotes_the_measured_figures_as_the_guarantees_page_holds_them() -> None:
    assert disagreements(pages()) == []


def test_the_fault_scenarios_rss_bound_is_the_one_asserted() -> None:
    rows = source_rows(pages()[SOURCE])
    bound = whole(r"under (\d+) MB")(_row(rows, "Peak RSS in the fault")[1])
    code = (ROOT / "tests" / "integration" / "test_faults.py").read_text()
    assert re.search(rf"^RSS_LIMIT_MB = {bound}$", code, re.MULTILINE), (
        "test_faults asserts another"
    )


def test_the_performance_page_includes_the_figures() -> None:
    """One copy of the table: the performance page includes it (pymdownx.snippets)."""
    assert '--8<-- "docs/guarantees.md:figures"' in pages()["docs/performance/index.md"]


def test_every_guarantee_names_its_broker() -> None:
    text = pages()[SOURCE]
    ((header, rows), *_) = [t for t in tables(text) if t[0][:2] == ["promise", "shown by"]]
    assert header == ["promise", "shown by", "broker"], header
    assert rows and all(len(row) == 3 and row[2] for row in rows), "a guarantee without a broker"


def test_a_disagreement_is_found() -> None:
    texts = pages()
    changed = {
        "docs/concepts/exactly-once.md": ("2.9 s in the worst", "3.9 s in the worst"),
        "README.md": ("10,002 partitions per", "6,000 partitions per"),
        "docs/operations/sizing.md": ("217.9 s", "218 s"),
        "docs/performance/scale.md": (
            "| 6,000 | replicator | 39.8 s | 2,882 | 85.5 | 305 MB",
            "| 6,000 | replicator | 39.8 s | 2,882 | 85.5 | 306 MB",
        ),
    }
    for page, (before, after) in changed.items():
        assert before in texts[page], (page, before)
        texts[page] = texts[page].replace(before, after)
    found = disagreements(texts)
    assert sorted({p.split(":")[0] for p in found}) == sorted(changed), found
    history = "## On the embedded broker (earlier versions)\n\n3.9 s in the worst case.\n\n## Now\n"
    assert current(history) == "## Now"
