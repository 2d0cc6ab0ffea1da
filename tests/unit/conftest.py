"""Fixtures shared by the unit tests of several packages."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


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
