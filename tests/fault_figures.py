"""What each fault scenario measured, for the summary the suite prints at the end.

A test appends its figures to :data:`FAULT_SUMMARY`; ``tests/integration/conftest.py`` moves
them into the test's report (user property :data:`FAULT_FIGURES`), and ``tests/conftest.py``
prints them from the reports, which reach it from parallel workers too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FaultFigures:
    """One fault scenario's outcome."""

    scenario: str
    source_records: int
    lost: int
    duplicates: int
    peak_rss_mb: float
    recovery_s: str


FAULT_SUMMARY: list[FaultFigures] = []  # this process's, until moved into a report
FAULT_FIGURES = "fault_figures"  # the name of a report's user property that carries them
