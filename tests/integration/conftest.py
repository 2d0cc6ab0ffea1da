"""Fixtures for integration tests: clusters per test, replicators that are always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.fault_figures import FAULT_FIGURES, FAULT_SUMMARY
from tests.integration.harness import ReplicatorProcess, Start


@pytest.fixture
def replicators() -> Iterator[Start]:
    """Start replicator subprocesses; any still running at the end of the test is killed."""
    started: list[ReplicatorProcess] = []

    def start(
        alias: str,
        env: dict[str, str],
        args: tuple[str, ...] = ("run",),
        source: Path | None = None,
    ) -> ReplicatorProcess:
        process = ReplicatorProcess(alias, env, args, source).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Hand the fault figures a test recorded to its report, which reaches the process that
    prints the summary (``tests/conftest.py``) also when the tests run in parallel workers."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    while FAULT_SUMMARY:
        report.user_properties.append((FAULT_FIGURES, asdict(FAULT_SUMMARY.pop(0))))
