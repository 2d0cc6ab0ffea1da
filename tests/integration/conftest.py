"""Fixtures for integration tests: clusters per test, replicators that are always stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.harness import ReplicatorProcess, Start

pytestmark = pytest.mark.integration


@pytest.fixture
def replicators() -> Iterator[Start]:
    """Start replicator subprocesses; any still running at the end of the test is killed."""
    started: list[ReplicatorProcess] = []

    def start(alias: str, env: dict[str, str]) -> ReplicatorProcess:
        process = ReplicatorProcess(alias, env).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
