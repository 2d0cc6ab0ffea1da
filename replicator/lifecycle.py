"""Waiting and closing in long-lived tasks: sleep until the stop event, close clients quietly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def close_quietly(closing: Awaitable[None], timeout: float = 5.0) -> None:
    """Close a client within ``timeout``; its own errors add nothing to the one reported."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(closing, timeout=timeout)


class Backoff:
    """Delays between attempts to connect to a cluster.

    Steady while the cluster is unreachable (it may come back any moment); doubling up to
    ``ceiling`` while it refuses for good (wrong credentials, missing permissions), since
    retrying cannot help until an operator changes something: a wrong password costs a handful
    of attempts a minute, not a retry storm.
    """

    def __init__(self, base: float = 2.0, ceiling: float = 60.0) -> None:
        self._base = base
        self._ceiling = ceiling
        self._next = base

    def delay(self, retriable: bool) -> float:
        """Seconds to wait after a failed attempt."""
        if retriable:
            self._next = self._base
            return self._base
        current = self._next
        self._next = min(self._ceiling, current * 2)
        return current
