"""What each fault scenario measured, for the summary the suite prints at the end.

A test appends its figures to :data:`FAULT_SUMMARY`; ``tests/integration/conftest.py`` moves
them into the test's report (user property :data:`FAULT_FIGURES`), and ``tests/conftest.py``
prints them from the reports, which reach it from parallel workers too.

Every figure is what the test read back from the destinations (the record-level oracle of
``tests/integration/harness.py``), never a number written into the test: a scenario that does
not measure losses or duplicates says so (``None``, printed :data:`NOT_MEASURED`), and the
totals count only the scenarios that measured them. ``tests/repository/test_fault_figures.py``
fails when a row is built from literals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

NOT_MEASURED = "n/m"


class Measured(Protocol):
    """What a record-level comparison of a source with one destination read back."""

    @property
    def source_records(self) -> int: ...

    @property
    def missing(self) -> list[tuple[int, int]]: ...

    @property
    def duplicates(self) -> int: ...


@dataclass
class FaultFigures:
    """One fault scenario's outcome. ``lost`` and ``duplicates`` are ``None`` where the test
    does not measure them."""

    scenario: str
    source_records: int
    lost: int | None
    duplicates: int | None
    peak_rss_mb: float
    recovery_s: str

    @classmethod
    def measured(
        cls, scenario: str, reports: Sequence[Measured], peak_rss_mb: float, recovery: str
    ) -> FaultFigures:
        """The figures of one source compared with each of its destinations (``reports``):
        the source's records, and the losses and duplicates over every destination."""
        assert reports, "a scenario measured on no destination"
        return cls(
            scenario,
            reports[0].source_records,
            sum(len(r.missing) for r in reports),
            sum(r.duplicates for r in reports),
            peak_rss_mb,
            recovery,
        )


def shown(figure: int | None) -> str:
    """A figure as the summary prints it."""
    return NOT_MEASURED if figure is None else str(figure)


def summary_lines(figures: Sequence[FaultFigures]) -> list[str]:
    """The summary's table, then its totals, each over the scenarios that measured it."""
    lines = [f"{'scenario':44} {'records':>8} {'lost':>5} {'dups':>5} {'RSS MB':>7}  recovery"]
    lines += [
        f"{f.scenario:44} {f.source_records:>8} {shown(f.lost):>5} {shown(f.duplicates):>5} "
        f"{f.peak_rss_mb:>7.0f}  {f.recovery_s}"
        for f in figures
    ]
    lost = [f.lost for f in figures if f.lost is not None]
    duplicates = [f.duplicates for f in figures if f.duplicates is not None]
    lines.append(
        f"{len(figures)} scenarios, {sum(f.source_records for f in figures)} records, "
        f"{sum(lost)} lost ({len(lost)} measured), "
        f"{sum(duplicates)} duplicates ({len(duplicates)} measured), "
        f"max RSS {max(f.peak_rss_mb for f in figures):.0f} MB"
    )
    return lines


FAULT_SUMMARY: list[FaultFigures] = []  # this process's, until moved into a report
FAULT_FIGURES = "fault_figures"  # the name of a report's user property that carries them
