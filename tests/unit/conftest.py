"""Fixtures shared by the unit tests of several packages."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every unit test runs on fake loop time (``looptime``): the event loop's clock, which the
    product reads through :mod:`replicator.clock`, moves only when nothing else can run, and
    jumps straight to the next timer. A wait of seconds takes none, and a duration is asserted
    exactly instead of raced against the wall clock."""
    for item in items:
        if "tests/unit/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("unit/"):
            item.add_marker(pytest.mark.looptime)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The process's logging as it was before the test (``configure_logging`` changes it)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    aiokafka_level = logging.getLogger("aiokafka").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("aiokafka").setLevel(aiokafka_level)
    structlog.reset_defaults()
