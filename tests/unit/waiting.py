"""Waiting in a unit test: on fake loop time (``looptime``), a wait costs no wall-clock time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Let the event loop run (on its fake clock) until ``condition`` holds; fail after
    ``timeout`` seconds of loop time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition never held"
        await asyncio.sleep(0.001)
