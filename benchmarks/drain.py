"""The drain of the scale benchmark: one contender copying records preloaded over a layout,
timed from its start until every record is in each of its destinations, then left idle.

On fresh clusters, the layout's ``_REPLICA`` topics are preloaded in dc1 and the contender
(:mod:`benchmarks.contenders`) started. Measured from its start: **ready** and **started**
(the replicator only: ``/readyz``, and every partition past ``starting`` on both legs from its
``/metrics`` gauge or ``/status``), the **first record** and **drained** (every record in each
destination's topics: sums of watermarks, :class:`benchmarks.watching.PausedWatermarks`), the
drain rate, its CPU (whole process, start-up included, until drained) per million records read
and per million written, peak RSS, and then idle CPU over two windows with no traffic
(**settling**, what the drain leaves behind; **idle**, the steady cost). The run ends with an
exact count of each destination's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp

from benchmarks.brokers import clusters
from benchmarks.contenders import Running, per_million, start_contender, written
from benchmarks.layout import Layout, preload_layout
from benchmarks.shared import console
from benchmarks.watching import (
    LEGS,
    Observer,
    PausedWatermarks,
    missing_topics,
    started_per_leg,
)


@dataclass
class ScaleResult:
    layout: str
    topics: int
    partitions: int
    instances: int
    records: int  # read from the source; each destination gets them all
    contender: str = "replicator"
    destinations: list[str] = field(default_factory=list)
    records_written: int | None = None  # records x destinations
    ready_seconds: float | None = None
    started_seconds: float | None = None
    started_from: str = "unknown"  # "the metrics gauge" or "/status"
    first_record_seconds: float | None = None
    drain_seconds: float | None = None
    records_per_second: float | None = None  # records read / drain time
    cpu_seconds: float | None = None
    cpu_seconds_per_million: float | None = None  # per million records read
    cpu_seconds_per_million_written: float | None = None  # per million records written
    peak_rss_mb: float | None = None
    idle_cpu_percent: float | None = None  # steady: after the first idle window
    idle_settling_cpu_percent: float | None = None  # the first idle window after the drain
    final_states: dict[str, dict[str, int]] = field(default_factory=dict)
    copied: dict[str, int] = field(default_factory=dict)  # records held, per destination
    verified: str = "not run"
    failure: str | None = None
    logs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.verified == "exact"


def since(start: float) -> float:
    return round(time.monotonic() - start, 2)


async def scale_run(
    layout: Layout,
    records: int,
    instances: int = 1,
    timeout: float = 900.0,
    idle_seconds: float = 10.0,
    settings: dict[str, str] | None = None,
    contender: str = "replicator",
) -> ScaleResult:
    """Preload ``records`` over ``layout`` in dc1, start ``contender`` (``instances``
    replicators, or MirrorMaker 2) and measure (see the module docstring). A failure is in the
    result, not raised."""
    per_partition = records // layout.partitions
    expected = per_partition * layout.partitions
    result = ScaleResult(layout.name, layout.topics, layout.partitions, instances, expected)
    result.contender = contender
    if per_partition == 0:
        result.failure = f"{records} records cannot cover {layout.partitions} partitions"
        return result
    with clusters("dc1", "dc2", partitions=layout.most_held) as brokers:
        began = time.monotonic()
        await preload_layout(brokers["dc1"], layout, per_partition)
        source = layout.partitions_of(layout.source_topics())
        async with PausedWatermarks({"dc1": brokers["dc1"]}, source) as marks:
            held = (await marks.totals())["dc1"]
        console.print(f"  preloaded {held:,} records in {since(began)} s")
        if held != expected:
            result.failure = f"the source holds {held:,} records, not the {expected:,} written"
            return result
        with start_contender(contender, brokers, layout, instances, settings) as running:
            result.destinations = list(running.destinations)
            result.records_written = written(expected, len(running.destinations))
            result.logs = [process.log_path for process in running.processes]
            try:
                async with aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=30)
                ) as session:
                    observers = [Observer(session, port) for port in running.ports]
                    await Drain(running, layout, expected, observers, result).watch(timeout)
                    if result.failure is None:
                        await idle_and_verify(running, layout, observers, result, idle_seconds)
            finally:
                running.sample_rss()
                result.peak_rss_mb = running.peak_rss_mb
    return result


class Drain:
    """From the contender's start until every record arrived (and, for the replicator, every
    partition started), polling each thing no more often than its cost allows."""

    def __init__(
        self,
        running: Running,
        layout: Layout,
        expected: int,
        observers: list[Observer],
        result: ScaleResult,
    ) -> None:
        self.running, self.layout, self.expected = running, layout, expected
        self.observers, self.result = observers, result
        self.start = running.processes[0].started
        self.totals = dict.fromkeys(running.destinations, 0)
        self.missing = {alias: running.topics for alias in running.destinations}
        self.started: dict[str, tuple[int, int]] = dict.fromkeys(LEGS, (0, 0))
        self.marks: PausedWatermarks | None = None
        self.next_states = self.next_topics = self.next_marks = self.done_at = self.start

    async def watch(self, timeout: float) -> None:
        deadline = self.start + timeout
        async with contextlib.AsyncExitStack() as stack:
            while not await self._round(stack):
                if time.monotonic() > deadline:
                    self.result.failure = self._timed_out(timeout)
                    return
                await asyncio.sleep(0.1)

    async def _round(self, stack: contextlib.AsyncExitStack) -> bool:
        """One round of polls; whether the watch is over (``result.failure`` says if badly)."""
        now = time.monotonic()
        gone = self.running.exited()
        self.running.sample_rss()
        if gone is not None:
            self.result.failure = f"{gone} (after {since(self.start)} s)"
            return True
        result = self.result
        unknown = None in (result.ready_seconds, result.started_seconds)
        if self.observers and unknown and now >= self.next_states:
            await self._poll_states(now)
        if self.marks is None and now >= self.next_topics and not await self._find_topics(stack):
            return True
        if self.marks is not None and result.drain_seconds is None and now >= self.next_marks:
            await self._poll_marks()
        return self._finished(now)

    def _finished(self, now: float) -> bool:
        result = self.result
        started = not self.observers or result.started_seconds is not None
        if result.drain_seconds is None or not started:
            self.done_at = now
            return False
        # Readiness is only reported: a replicator that drained but stays unready (a leg it
        # judges stalled, say) still gets its figures.
        return not self.observers or result.ready_seconds is not None or now > self.done_at + 30

    async def _poll_states(self, now: float) -> None:
        """Whether the replicators are ready and how many partitions each leg started."""
        result, observers = self.result, self.observers
        if result.ready_seconds is None and all(
            await asyncio.gather(*(o.ready() for o in observers))
        ):
            result.ready_seconds = since(self.start)
        if result.started_seconds is None:
            views = await asyncio.gather(*(o.states() for o in observers))
            result.started_from = observers[0].source or "unknown"
            self.started = started_per_leg([v for v in views if v is not None])
            if all(n >= self.layout.partitions and not s for n, s in self.started.values()):
                result.started_seconds = since(self.start)
        # Each poll costs the replicator a /metrics or /status answer: at most about a
        # twentieth of its time, however large the answer grows (and at least one poll every
        # 2 s: a slow first answer must not hide the moment all started).
        self.next_states = time.monotonic() + min(2.0, max(0.5, 20 * (time.monotonic() - now)))

    async def _find_topics(self, stack: contextlib.AsyncExitStack) -> bool:
        """Once the contender created every destination topic, watch their watermarks until
        ``stack`` closes; false when a topic has the wrong partition count (a failure)."""
        running, layout = self.running, self.layout
        try:
            self.missing = await missing_topics(
                running.destinations, running.topics, layout.partitions_per_topic
            )
        except RuntimeError as exc:
            self.result.failure = str(exc)
            return False
        self.next_topics = time.monotonic() + 1.0
        if not any(self.missing.values()):
            marks = PausedWatermarks(running.destinations, layout.partitions_of(running.topics))
            self.marks = await stack.enter_async_context(marks)
        return True

    async def _poll_marks(self) -> None:
        """The records each destination holds (the first-record and drain figures set when
        they are reached)."""
        assert self.marks is not None
        polled = time.monotonic()
        self.totals = await self.marks.totals()
        result, expected = self.result, self.expected
        if result.first_record_seconds is None and all(self.totals.values()):
            result.first_record_seconds = since(self.start)
        if all(total >= expected for total in self.totals.values()):
            result.drain_seconds = since(self.start)
            result.records_per_second = round(expected / result.drain_seconds)
            cpu = self.running.cpu_seconds()
            result.cpu_seconds = round(cpu, 2)
            result.cpu_seconds_per_million = per_million(cpu, expected)
            result.cpu_seconds_per_million_written = per_million(
                cpu, written(expected, len(self.totals))
            )
        # Watching costs this process and the brokers: at most a tenth of the time, and a poll
        # every 2 s at least (the first, on topics just created, may wait for their leaders
        # for many seconds: it must not push the next one minutes away).
        self.next_marks = time.monotonic() + min(2.0, max(0.25, 10 * (time.monotonic() - polled)))

    def _timed_out(self, timeout: float) -> str:
        """Why the watch gave up: the records held, the partitions started (the replicator)
        and, when the destinations were not watched yet, the topics not created."""
        held = ", ".join(f"{total:,} on {alias}" for alias, total in self.totals.items())
        failure = (
            f"timed out after {timeout:g} s at {min(self.totals.values()):,} of "
            f"{self.expected:,} records ({held})"
        )
        if self.observers:
            partitions = self.layout.partitions
            legs = ", ".join(f"{leg} {n:,}/{partitions:,}" for leg, (n, _) in self.started.items())
            failure += f"; partitions started: {legs}"
        if self.marks is None:
            absent = ", ".join(f"{len(t):,} on {a}" for a, t in self.missing.items() if t)
            failure += f"; topics not created yet: {absent}"
        return failure


async def idle_and_verify(
    running: Running,
    layout: Layout,
    observers: list[Observer],
    result: ScaleResult,
    idle_seconds: float,
) -> None:
    """Idle CPU with every partition assigned and no traffic, then the exact count."""
    await asyncio.sleep(2.0)  # the last commits and acknowledgements settle first
    if idle_seconds > 0:
        # Two windows: the first holds what a drain leaves behind (the last commits and
        # destination marks, the fetch's wait growing back to its idle length); the second is
        # the steady cost of partitions assigned with no traffic.
        for window in ("settling", "steady"):
            cpu_before = running.cpu_seconds()
            await asyncio.sleep(idle_seconds)
            cpu = running.cpu_seconds() - cpu_before
            percent = round(cpu / idle_seconds * 100, 1)
            if window == "settling":
                result.idle_settling_cpu_percent = percent
            else:
                result.idle_cpu_percent = percent
    views = await asyncio.gather(*(o.states() for o in observers))
    for view in views:
        for leg, counts in (view or {}).items():
            merged = result.final_states.setdefault(leg, {})
            for state, n in counts.items():
                merged[state] = merged.get(state, 0) + n
    partitions = layout.partitions_of(running.topics)
    async with PausedWatermarks(running.destinations, partitions) as marks:
        result.copied = await marks.totals()
    wrong = {alias: total for alias, total in result.copied.items() if total != result.records}
    if wrong:
        held = ", ".join(f"{alias} holds {total:,}" for alias, total in wrong.items())
        result.verified = f"FAILED: expected {result.records:,} records in each destination; {held}"
    else:
        result.verified = "exact"


async def attempt(
    layout: Layout,
    records: int,
    instances: int,
    timeout: float,
    idle_seconds: float,
    settings: dict[str, str] | None,
    contender: str = "replicator",
) -> ScaleResult:
    """:func:`scale_run`, with an unexpected error reported in its result (the next run
    still runs)."""
    try:
        return await scale_run(
            layout, records, instances, timeout, idle_seconds, settings, contender
        )
    except Exception as exc:
        result = ScaleResult(layout.name, layout.topics, layout.partitions, instances, records)
        result.contender = contender
        result.failure = repr(exc)
        return result


def summary(result: ScaleResult) -> str:
    if result.failure is not None:
        return f"[red]FAILED:[/] {result.failure}"
    started = "" if result.started_seconds is None else f"started in {result.started_seconds} s, "
    return (
        f"{started}drained in {result.drain_seconds} s "
        f"({result.records_per_second:,} records/s read), {result.verified}"
    )
