"""The fetch planning benchmark: what a source consumer's fetcher costs per wake and when idle,
with aiokafka's walk of every partition and with the fetch planner. No broker.

aiokafka's own fetcher runs its loop over a client that answers each fetch after the fetch wait
with nothing new (:class:`replicator.kafka.testing.IdleFetcher`), for two shapes of consumer:
**feed** (the shared feed's group consumer: every partition fetched) and **leg** (a leg's source
consumer: every partition paused but ``--unpaused`` catching up alone). For each size, shape, and
without/with the planner:

- **per wake**: CPU of one wake's decisions and of the wait on its futures, as the loop makes them
  (mean of ``--wakes``), with no request in flight: every node is fetched (the loop stopped);
- **idle**: the consumer's CPU while every answer comes back empty after ``--wait-ms`` (one wake
  per answer, one answer per node and fetch wait), over ``--seconds``.

    .venv/bin/python -m benchmarks.fetch_planning                      # 2000 and 10000
    .venv/bin/python -m benchmarks.fetch_planning --sizes 2000 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass

from benchmarks.shared import console, rows_table
from replicator.kafka.testing import IdleFetcher


@dataclass
class Figures:
    """One consumer shape at one size, without or with the planner."""

    partitions: int
    shape: str
    unpaused: int
    planner: bool
    wake_ms: float = 0.0
    idle_cpu_percent: float = 0.0
    idle_wakes_per_s: float = 0.0


async def per_wake(figures: Figures, wakes: int) -> None:
    fetcher = IdleFetcher(figures.partitions, figures.unpaused, 0, figures.planner)
    await fetcher.start()
    await fetcher.close()  # its loop stopped: no request in flight
    await fetcher.wake()  # the first wake of an assignment visits every partition
    started = time.process_time()
    for _ in range(wakes):
        await fetcher.wake()
    figures.wake_ms = round(1000 * (time.process_time() - started) / wakes, 3)


async def idle(figures: Figures, wait_ms: int, seconds: float) -> None:
    fetcher = IdleFetcher(figures.partitions, figures.unpaused, wait_ms, figures.planner)
    await fetcher.start()
    try:
        await asyncio.sleep(2 * wait_ms / 1000)  # past the first wakes of the assignment
        fetches, cpu, wall = fetcher.fetches, time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        wall = time.monotonic() - wall
        figures.idle_cpu_percent = round(100 * (time.process_time() - cpu) / wall, 2)
        figures.idle_wakes_per_s = round((fetcher.fetches - fetches) / wall, 1)
    finally:
        await fetcher.close()


async def measure(sizes: list[int], unpaused: int, args: argparse.Namespace) -> list[Figures]:
    results: list[Figures] = []
    for size in sizes:
        for shape, fetched in (("feed", size), ("leg", min(unpaused, size))):
            for planner in (False, True):
                figures = Figures(size, shape, fetched, planner)
                await per_wake(figures, args.wakes)
                await idle(figures, args.wait_ms, args.seconds)
                results.append(figures)
                console.print(figures)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,10000", help="partition counts, comma-separated")
    parser.add_argument("--unpaused", type=int, default=20, help="a leg's partitions fetched")
    parser.add_argument("--wakes", type=int, default=20, help="wakes measured per consumer")
    parser.add_argument("--wait-ms", type=int, default=500, help="the fetch wait when idle")
    parser.add_argument("--seconds", type=float, default=5.0, help="idle time measured")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    results = asyncio.run(measure(sizes, args.unpaused, args))
    rows = [asdict(figures) for figures in results]
    console.print(
        rows_table(f"A fetcher's wakes (3 nodes, idle answers every {args.wait_ms} ms)", rows)
    )
    print(json.dumps({"wait_ms": args.wait_ms, "runs": rows}))


if __name__ == "__main__":
    main()
