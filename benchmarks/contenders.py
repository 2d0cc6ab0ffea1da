"""The contenders of the scale benchmark, started the same way for the drain
(:mod:`benchmarks.scale`) and the steady state (:mod:`benchmarks.steady`) on the same brokers:

- ``replicator``: the replicator in the ``_REPLICA`` mode beside dc1 (one or more instances,
  each its own HTTP port), reading the layout's ``<topic>_REPLICA`` topics and writing each
  record to ``<topic>`` on **two** destinations, dc1 and dc2 (it creates those topics itself);
- ``mm2``: MirrorMaker 2 in dedicated mode copying the same ``<topic>_REPLICA`` topics from dc1
  to dc2 (**one** destination) under the identity replication policy, so dc2 gets topics of the
  same names (it creates them itself), with one task per core
  (:func:`benchmarks.peers.mm2_tasks`) and otherwise the settings of
  :data:`benchmarks.peers.MM2_SETTINGS`.

Each is measured the same way, from ``/proc`` of its process (the Python process, or the JVM):
CPU time and peak RSS (:class:`benchmarks.shared.Monitored`). Since the replicator writes each
record twice and MirrorMaker 2 once, CPU is reported per million records read from the source
and per million records written (:func:`per_million`).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.layout import Layout
from benchmarks.peers import mm2_scale_properties, mm2_tasks
from benchmarks.shared import Monitored, child_env
from benchmarks.watching import PausedWatermarks, missing_topics
from replicator.devtools.embedded import LocalBroker, free_port, replicator_environment
from replicator.devtools.mirror_makers import start_mm2

CONTENDERS = ("replicator", "mm2")
MM2_HEAP_MB = 1024


@dataclass
class Running:
    """A started contender: its processes, the HTTP ports of its replicators (none for
    MirrorMaker 2), the clusters it writes to and the topics it writes there."""

    name: str
    processes: list[Monitored]
    destinations: dict[str, LocalBroker]
    topics: list[str]
    ports: list[int] = field(default_factory=list)
    left: list[Monitored] = field(default_factory=list)  # instances stopped while it ran
    settings: dict[str, str] = field(default_factory=dict)  # the replicators' own, if any

    def leave(self, index: int) -> Monitored:
        """Take the ``index``-th process (and its port) out of the running ones, for the caller
        to stop (:meth:`Monitored.stop`: SIGTERM, its graceful shutdown)."""
        process = self.processes.pop(index)
        if self.ports:
            self.ports.pop(index)
        self.left.append(process)
        return process

    def cpu_seconds(self) -> float:
        return sum(process.cpu_seconds() for process in self.processes)

    def sample_rss(self) -> None:
        for process in self.processes:
            process.sample_rss()

    @property
    def peak_rss_mb(self) -> float:
        """The largest peak RSS of its processes."""
        return round(max(process.peak_rss_mb for process in self.processes), 1)

    def exited(self) -> str | None:
        """Why a process of it is gone, if one is."""
        for process in self.processes:
            if process.process.poll() is not None:
                code = process.process.returncode
                return f"{self.name} exited with status {code}; see {process.log_path}"
        return None


def per_million(cpu_seconds: float, records: int) -> float | None:
    """CPU seconds per million ``records`` (read, or written: the caller says which)."""
    if records <= 0:
        return None
    return round(cpu_seconds / records * 1e6, 2)


def written(records: int, destinations: int) -> int:
    """Records written when ``records`` are each copied to ``destinations`` clusters (the
    replicator: 2, dc1 and dc2; MirrorMaker 2: 1, dc2)."""
    return records * destinations


@contextmanager
def start_contender(
    name: str,
    brokers: dict[str, LocalBroker],
    layout: Layout,
    instances: int = 1,
    settings: dict[str, str] | None = None,
) -> Iterator[Running]:
    """Start ``name`` (``replicator`` or ``mm2``) over ``layout``; stopped on exit."""
    if name == "mm2":
        processes = [_start_mm2(brokers, layout)]
        running = Running(name, processes, {"dc2": brokers["dc2"]}, layout.source_topics())
    else:
        running = Running(name, [], brokers, layout.real_topics(), settings=settings or {})
    try:
        if name != "mm2":
            for _ in range(instances):
                add_replicator(running, brokers)
        yield running
    finally:
        for process in [*running.processes, *running.left]:
            process.stop()


def add_replicator(running: Running, brokers: dict[str, LocalBroker]) -> Monitored:
    """One more replicator instance of ``running`` beside dc1 (its settings and consumer
    groups, its own HTTP port); stopped with the others."""
    port = free_port()
    env = replicator_environment("dc1", brokers, port, log_format="json", **running.settings)
    args = [sys.executable, "-m", "replicator", "run"]
    name = f"scale-replicator-{len(running.processes) + len(running.left) + 1}"
    process = Monitored(args, child_env(env), name)
    running.processes.append(process)
    running.ports.append(port)
    return process


def _start_mm2(brokers: dict[str, LocalBroker], layout: Layout) -> Monitored:
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-mm2-"))
    config = workdir / "mm2.properties"
    config.write_text(mm2_scale_properties(brokers, layout.source_pattern(), mm2_tasks()))
    peer = start_mm2(config, workdir, heap_mb=MM2_HEAP_MB)
    return Monitored.adopt(peer.process, str(peer.log_path))


async def await_copied(running: Running, layout: Layout, expected: int, timeout: float) -> None:
    """Until each destination of ``running`` holds ``expected`` records in its topics (which
    it creates itself: waited for first); RuntimeError if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while any(
        (
            await missing_topics(running.destinations, running.topics, layout.partitions_per_topic)
        ).values()
    ):
        _check(running, deadline, "its topics were not all created")
        await asyncio.sleep(1.0)
    partitions = layout.partitions_of(running.topics)
    async with PausedWatermarks(running.destinations, partitions) as marks:
        while True:
            totals = await marks.totals()
            if all(total >= expected for total in totals.values()):
                return
            _check(running, deadline, f"copied {totals} of {expected:,} each")
            await asyncio.sleep(1.0)


def _check(running: Running, deadline: float, state: str) -> None:
    running.sample_rss()
    gone = running.exited()
    if gone is not None:
        raise RuntimeError(gone)
    if time.monotonic() > deadline:
        raise RuntimeError(f"{running.name} timed out: {state}")
