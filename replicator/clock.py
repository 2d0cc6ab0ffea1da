"""The product's clocks: every duration and deadline is read here, never from :mod:`time`.

- :func:`monotonic`: seconds on the running event loop's clock (``loop.time()``), which is what
  every ``asyncio`` timeout, sleep and ``call_later`` counts on; outside a loop,
  :func:`time.monotonic`. Under a loop on fake time (the unit tests run on ``looptime``), stall
  detection, detach-after, commit intervals and backoffs follow the fake time exactly, so their
  tests assert durations instead of racing the wall clock.
- :func:`wall`: seconds since the epoch, for what is compared with record timestamps
  (end-to-end latency, a partition's age) or shown to people; a test replaces it where it
  must.
"""

from __future__ import annotations

import asyncio
import time


def monotonic() -> float:
    """Seconds on the event loop's clock (a monotonic clock; fake under a fake-time loop)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:  # no loop running: a synchronous caller
        return time.monotonic()


def wall() -> float:
    """Seconds since the epoch (the clock record timestamps are on)."""
    return time.time()
