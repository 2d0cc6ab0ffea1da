"""Suite-wide hooks: every test under ``tests/integration/`` marked ``integration`` (so
``pytest -m "not integration"`` runs the unit tests alone), and the fault scenarios' summary,
gathered from every test's report (the tests may run in parallel worker processes, whose memory
the printing process never sees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault_figures import FAULT_FIGURES, FaultFigures, summary_lines

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
    terminalreporter.section("fault scenarios")
    for line in summary_lines(figures):
        terminalreporter.write_line(line)
