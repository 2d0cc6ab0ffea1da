"""Fixtures for integration tests: clusters per test, replicators that are always stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.harness import FAULT_SUMMARY, ReplicatorProcess, Start

pytestmark = pytest.mark.integration


@pytest.fixture
def replicators() -> Iterator[Start]:
    """Start replicator subprocesses; any still running at the end of the test is killed."""
    started: list[ReplicatorProcess] = []

    def start(
        alias: str, env: dict[str, str], args: tuple[str, ...] = ("run",)
    ) -> ReplicatorProcess:
        process = ReplicatorProcess(alias, env, args).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the fault scenarios measured: records, losses, duplicates, memory, recovery."""
    if not FAULT_SUMMARY:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fault scenarios")
    write(f"{'scenario':44} {'records':>8} {'lost':>5} {'dups':>5} {'RSS MB':>7}  recovery")
    for f in FAULT_SUMMARY:
        write(
            f"{f.scenario:44} {f.source_records:>8} {f.lost:>5} {f.duplicates:>5} "
            f"{f.peak_rss_mb:>7.0f}  {f.recovery_s}"
        )
    write(
        f"{len(FAULT_SUMMARY)} scenarios, {sum(f.source_records for f in FAULT_SUMMARY)} records, "
        f"{sum(f.lost for f in FAULT_SUMMARY)} lost, "
        f"{sum(f.duplicates for f in FAULT_SUMMARY)} duplicates, "
        f"max RSS {max(f.peak_rss_mb for f in FAULT_SUMMARY):.0f} MB"
    )
