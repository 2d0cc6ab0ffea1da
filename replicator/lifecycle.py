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
