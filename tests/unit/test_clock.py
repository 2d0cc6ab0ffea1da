"""The clock seam: the product reads durations on the event loop's clock, and the unit suite
runs that clock on fake time (``looptime``, enabled for every unit test in ``conftest.py``)."""

from __future__ import annotations

import asyncio
import time

from replicator import clock
from replicator.lifecycle import sleep_unless_stopped


async def test_the_unit_suite_runs_on_fake_loop_time_and_the_product_reads_it() -> None:
    loop = asyncio.get_running_loop()
    began, wall = clock.monotonic(), time.monotonic()
    assert began == loop.time()
    await sleep_unless_stopped(asyncio.Event(), 3600.0)  # an hour's wait, on fake time
    assert clock.monotonic() - began == 3600.0  # exactly: nothing raced the wall clock
    assert time.monotonic() - wall < 60, "an hour of loop time took no hour of wall time"


def test_outside_a_loop_the_clock_is_the_monotonic_clock() -> None:
    before = time.monotonic()
    assert before <= clock.monotonic() <= time.monotonic()
    assert abs(clock.wall() - time.time()) < 60
