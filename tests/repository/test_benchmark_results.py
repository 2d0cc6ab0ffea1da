"""The performance page's generated tables are what the result files render: the block of
``docs/performance/index.md`` between ``<!-- results:begin -->`` and ``<!-- results:end -->`` is
:func:`benchmarks.report.render` of ``benchmarks/results/*.json`` (each run of
``benchmarks.run`` writes one, :mod:`benchmarks.recording`). A page edited by hand, or a run
whose file was added without ``python -m benchmarks.report --write``, fails here."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import recording, report

ROW = {
    "contender": "franz-go",
    "workload": "100B one-way mirror",
    "records": 3_000_000,
    "seconds": 6.0,
    "records_per_second": 500_000,
    "source_mb_per_second": 50.0,
    "peak_rss_mb": 80.5,
    "cpu_seconds_per_million": 1.25,
    "verified": "counted",
    "start_to_first_s": 0.4,
    "own_seconds": 5.9,
    "rounds": [[480_000, 1.3], [500_000, 1.25], [520_000, 1.2]],
}


def test_the_page_shows_what_the_result_files_render() -> None:
    page = report.PAGE.read_text()
    shown = report.block(page)
    assert shown is not None, f"{report.PAGE}: no {report.BEGIN} ... {report.END} block"
    rendered = report.render(recording.load())
    assert shown == rendered, (
        "docs/performance/index.md's generated block differs from benchmarks/results/: run "
        "`.venv/bin/python -m benchmarks.report --write`"
    )


def test_a_run_written_is_rendered_and_a_stale_page_found(tmp_path: Path) -> None:
    figures = {"broker": "test", "throughput": [ROW], "failed_phases": {}}
    settings = {"franz-go": {"flags": {"linger": "5ms"}}}
    moment = datetime(2026, 12, 2, 3, 4, 5, tzinfo=UTC)
    path = recording.write(
        figures, settings, {"quick": True}, {"franz-go": "v1.22.3"}, tmp_path, moment
    )
    assert path.name.startswith("20261202T030405Z-")
    kept = json.loads(path.read_text())
    assert kept["git"]["commit"] and kept["versions"]["franz-go"] == "v1.22.3"
    assert kept["throughput"] == [ROW] and kept["settings"] == settings
    rendered = report.render(recording.load(tmp_path))
    row = "| franz-go | 3,000,000 | 500,000 | 50.0 | 1.25 | 80 | 0.4 | 3: 480,000 to 520,000 "
    row += "| counted |"
    assert row in rendered
    assert "`flags.linger=5ms`" in rendered
    page = f"# Performance\n\n{report.BEGIN}\n{report.render([])}{report.END}\n\nAfter.\n"
    assert report.block(page) != rendered  # the page has not been regenerated: a difference
    regenerated = report.replace(page, rendered)
    assert report.block(regenerated) == rendered
    assert regenerated.endswith(f"{report.END}\n\nAfter.\n")


def test_a_newer_run_replaces_a_contenders_row_only() -> None:
    older = {"throughput": [ROW, {**ROW, "contender": "replicator"}]}
    newer = {"throughput": [{**ROW, "records_per_second": 400_000}]}
    rows = report.newest_rows([("a.json", older), ("b.json", newer)])
    by = rows["100B one-way mirror"]
    assert by["franz-go"] == ("b", {**ROW, "records_per_second": 400_000})
    assert by["replicator"][0] == "a"
