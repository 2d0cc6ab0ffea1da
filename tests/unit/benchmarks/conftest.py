"""The benchmarks' unit tests share: the broker a parsed command line chooses, put back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks import brokers


@pytest.fixture
def chosen_broker() -> Iterator[None]:
    """Whatever a test's ``parse`` chose for every cluster, undone after it."""
    before = dict(brokers._chosen)
    yield
    brokers._chosen.update(before)
