"""Suite-wide hooks: every test under ``tests/integration/`` marked ``integration`` (so
``pytest -m "not integration"`` runs the unit tests alone), and the fault scenarios' summary,
gathered from every test's report (the tests may run in parallel worker processes, whose memory
the printing process never sees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault_figures import FAULT_FIGURES, FaultFigures

INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need real brokers (a ``pytestmark`` in a conftest marks nothing)."""
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the fault scenarios measured: records, losses, duplicates, memory, recovery."""
    figures = [
        FaultFigures(**value)
        for reports in terminalreporter.stats.values()
        for report in reports
        if isinstance(report, pytest.TestReport)
        for name, value in report.user_properties
        if name == FAULT_FIGURES and isinstance(value, dict)
    ]
    if not figures:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fault scenarios")
    write(f"{'scenario':44} {'records':>8} {'lost':>5} {'dups':>5} {'RSS MB':>7}  recovery")
    for f in figures:
        write(
            f"{f.scenario:44} {f.source_records:>8} {f.lost:>5} {f.duplicates:>5} "
            f"{f.peak_rss_mb:>7.0f}  {f.recovery_s}"
        )
    write(
        f"{len(figures)} scenarios, {sum(f.source_records for f in figures)} records, "
        f"{sum(f.lost for f in figures)} lost, "
        f"{sum(f.duplicates for f in figures)} duplicates, "
        f"max RSS {max(f.peak_rss_mb for f in figures):.0f} MB"
    )
