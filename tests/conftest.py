"""Suite-wide hooks: every test under ``tests/integration/`` marked ``integration`` (so
``pytest -m "not integration"`` runs the unit tests alone), the longest run first, and the
fault scenarios' summary, gathered from every test's report (the tests may run in parallel
worker processes, whose memory the printing process never sees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault_figures import FAULT_FIGURES, FaultFigures, summary_lines

INTEGRATION = Path(__file__).parent / "integration"

# The modules whose tests take minutes each (a Spark JVM, an image build, long fault
# scenarios), run first: the workers take tests in collection order and steal from each other,
# so one of these left for last is minutes of the run with a worker idle.
LONGEST_FIRST = (
    "test_spark_jobs.py",
    "test_images.py",
    "test_crashes.py",
    "test_mirror_maker.py",
    "test_runbooks.py",
    "test_isolation.py",
    "test_takeover.py",
    "test_broker_faults.py",
    "test_mm2_contract.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need real brokers (a ``pytestmark`` in a conftest marks nothing),
    and put the longest first (the same order in every worker: the sort is stable)."""
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
    terminalreporter.section("fault scenarios")
    for line in summary_lines(figures):
        terminalreporter.write_line(line)
