"""Instances leaving and joining under the steady load: three replicator instances beside dc1
share a layout's partitions (the same configuration and consumer groups, each its own HTTP port)
while the steady state's fixed rate flows (:mod:`benchmarks.steady`: the same producer, pacing
and stamped values); a quarter into the window one instance is stopped (SIGTERM: its graceful
shutdown), and just past half of it a fresh one is started. Measured:

- **shares**: each instance's partitions (both legs), from its ``replicator_leg_partitions``
  gauge, before, after the leave and after the join;
- **moved in**: from the SIGTERM (the start) until the running instances together hold every
  partition of both legs past ``starting``, exactly once (for the join: the new instance holding
  its share too): the time until every partition is running again;
- the **latency** to dc2 over the window (p50, p99, max: the records of moved partitions wait
  for the move);
- **exactly once in each destination**: every value carries its sequence number in the window;
  one consumer per destination (dc1 and dc2) reads the real topics until each sequence number
  arrived and then until nothing arrives for a while, counting the copies of each: lost = the
  sequence numbers never read, duplicated = every copy past the first (the warm-up records too:
  one per partition). Anything but 0 and 0 is a failure of the run.

    .venv/bin/python -m benchmarks.scale --membership 1200 --no-steady --sizes ""
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
from aiokafka import AIOKafkaProducer
from rich.table import Table

from benchmarks.brokers import clusters
from benchmarks.contenders import Running, add_replicator, await_copied, start_contender
from benchmarks.layout import Layout, preload_layout
from benchmarks.shared import console
from benchmarks.steady import (
    DRAIN_SECONDS,
    LINGER_MS,
    LatencyReader,
    Pacer,
    default_rate,
    offer,
    percentile,
)
from benchmarks.watching import LEGS, STARTING, Observer
from replicator.devtools.embedded import LocalBroker

INSTANCES = 3
LEAVE_AT = 0.25  # of the window: one instance stopped
JOIN_AT = 0.55  # of the window: a fresh one started
QUIET_SECONDS = 5.0  # after every record arrived, for late copies
POLL_SECONDS = 0.5  # each poll costs every instance a /metrics answer
MOMENTS = ("before", "after leave", "after join")


@dataclass
class MembershipResult:
    layout: str
    partitions: int
    rate: int  # records/s offered, over every partition
    seconds: float
    shares: dict[str, list[int]] = field(default_factory=dict)  # moment -> per instance
    leave_seconds: float | None = None  # SIGTERM -> every partition running again
    join_seconds: float | None = None  # start -> every partition running again, its share held
    sent: int = 0
    read: dict[str, int] = field(default_factory=dict)  # destination -> timed records read
    lost: dict[str, int] = field(default_factory=dict)
    duplicated: dict[str, int] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    failure: str | None = None
    logs: list[str] = field(default_factory=list)


def running_again(
    views: Sequence[dict[str, Counter[str]]], partitions: int
) -> tuple[bool, list[int]]:
    """Whether instances whose gauges are ``views`` together run every one of ``partitions``
    on each leg, once, none starting; and each one's partitions (both legs)."""
    shares = [sum(view.get(leg, Counter()).total() for leg in LEGS) for view in views]
    for leg in LEGS:
        counts: Counter[str] = Counter()
        for view in views:
            counts.update(view.get(leg, Counter()))
        if counts[STARTING] or counts.total() != partitions:
            return False, shares
    return True, shares


async def _settled(
    observers: list[Observer], partitions: int, deadline: float, newcomer: Observer | None = None
) -> list[int]:
    """Wait until :func:`running_again` holds (and ``newcomer`` holds partitions); the shares."""
    shares: list[int] = []
    while True:
        views = [await observer.states() for observer in observers]
        if None not in views:
            done, shares = running_again([v for v in views if v is not None], partitions)
            holds = newcomer is None or shares[observers.index(newcomer)] > 0
            if done and holds:
                return shares
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"not every partition running again in time: the instances hold {shares} "
                f"(both legs) of {partitions:,} partitions on each of {len(LEGS)} legs"
            )
        await asyncio.sleep(POLL_SECONDS)


async def membership_run(
    layout: Layout,
    rate: int,
    seconds: float,
    settings: dict[str, str] | None = None,
    timeout: float = 900.0,
) -> MembershipResult:
    """One run (see the module docstring). A failure is in the result, not raised."""
    result = MembershipResult(layout.name, layout.partitions, rate, seconds)
    try:
        with clusters("dc1", "dc2", partitions=layout.most_held) as brokers:
            await preload_layout(brokers["dc1"], layout, 1)
            with start_contender("replicator", brokers, layout, INSTANCES, settings) as running:
                try:
                    async with aiohttp.ClientSession(
                        timeout=aiohttp.ClientTimeout(total=10)
                    ) as session:
                        await await_copied(running, layout, layout.partitions, timeout)
                        observers = [Observer(session, port) for port in running.ports]
                        deadline = time.monotonic() + timeout
                        result.shares["before"] = await _settled(
                            observers, layout.partitions, deadline
                        )
                        moving = Moving(running, brokers, layout, session, observers, result)
                        await _window(moving)
                finally:
                    result.logs = [p.log_path for p in [*running.processes, *running.left]]
    except Exception as exc:
        result.failure = reason(exc)
    return result


def reason(exc: BaseException) -> str:
    """What went wrong, the errors of a task group included."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(reason(each) for each in exc.exceptions)
    return str(exc) or repr(exc)


@dataclass
class Moving:
    """One run's parts, as the window, the offer and the moves share them."""

    running: Running
    brokers: dict[str, LocalBroker]
    layout: Layout
    session: aiohttp.ClientSession
    observers: list[Observer]
    result: MembershipResult


async def _window(run: Moving) -> None:
    """The steady window with the leave and the join in it; every record read back from both
    destinations and counted."""
    pacer = Pacer(run.result.rate, run.result.seconds)
    partitions = run.layout.partitions_of(run.running.topics)
    readers = {
        alias: LatencyReader(broker, partitions, pacer.total)
        for alias, broker in run.brokers.items()
    }
    async with contextlib.AsyncExitStack() as stack:
        for reader in readers.values():
            await stack.enter_async_context(reader)
        try:
            await _offered(run, pacer, readers)
        finally:
            _tally(readers, run.layout.partitions, run.result)


async def _offered(run: Moving, pacer: Pacer, readers: dict[str, LatencyReader]) -> None:
    """Offer the window's records while the moves happen, until every one was read back."""
    layout, result = run.layout, run.result
    producer = AIOKafkaProducer(
        bootstrap_servers=run.brokers["dc1"].bootstrap_servers, acks="all", linger_ms=LINGER_MS
    )
    await producer.start()
    try:
        for reader in readers.values():  # positioned past each warm-up record
            await reader.read_until(0, layout.partitions, 120)
        targets = layout.partitions_of(layout.source_topics())
        async with asyncio.TaskGroup() as group:
            offered = group.create_task(offer(producer, targets, pacer, run.running))
            group.create_task(_moves(run))
            for reader in readers.values():
                group.create_task(
                    reader.read_until(pacer.total, 0, result.seconds * 2 + DRAIN_SECONDS)
                )
        await producer.flush()
        refused = offered.result()
        result.sent = pacer.total - sum(refused.values())
        if refused:
            raise RuntimeError(f"the source refused {dict(refused)}")
        for reader in readers.values():
            await reader.read_quiet(QUIET_SECONDS)
    finally:
        await producer.stop()


async def _moves(run: Moving) -> None:
    """Stop the last instance at :data:`LEAVE_AT` of the window and start a fresh one at
    :data:`JOIN_AT`, each timed until every partition runs again."""
    running, observers, result = run.running, run.observers, run.result
    began = time.monotonic()
    held = run.layout.partitions
    limit = result.seconds + DRAIN_SECONDS
    await asyncio.sleep(result.seconds * LEAVE_AT)
    leaving = running.leave(len(running.processes) - 1)
    observers.pop()
    left_at = time.monotonic()
    await asyncio.to_thread(leaving.stop)
    result.shares["after leave"] = await _settled(observers, held, left_at + limit)
    result.leave_seconds = round(time.monotonic() - left_at, 2)
    await asyncio.sleep(max(0.0, began + result.seconds * JOIN_AT - time.monotonic()))
    add_replicator(running, run.brokers)
    joined_at = time.monotonic()
    newcomer = Observer(run.session, running.ports[-1])
    observers.append(newcomer)
    result.shares["after join"] = await _settled(observers, held, joined_at + limit, newcomer)
    result.join_seconds = round(time.monotonic() - joined_at, 2)


def _tally(readers: dict[str, LatencyReader], partitions: int, result: MembershipResult) -> None:
    """Each destination's counts into ``result``; the latencies are dc2's."""
    for alias, reader in readers.items():
        result.read[alias] = len(reader.latencies_ms)
        result.lost[alias] = reader.copies.lost
        # Each warm-up record was read once before the window: any more are copies.
        result.duplicated[alias] = reader.copies.duplicated + max(0, reader.untimed - partitions)
    far = sorted(readers["dc2"].latencies_ms)
    if far:
        result.p50_ms = round(percentile(far, 0.50), 1)
        result.p99_ms = round(percentile(far, 0.99), 1)
        result.max_ms = round(far[-1], 1)
    wrong = {
        alias: f"{result.lost[alias]:,} lost, {result.duplicated[alias]:,} duplicated"
        for alias in readers
        if result.lost[alias] or result.duplicated[alias]
    }
    if wrong and result.failure is None:
        result.failure = "; ".join(f"{alias}: {text}" for alias, text in wrong.items())


async def membership_comparison(
    layouts: Sequence[Layout],
    rate: int | None,
    seconds: float,
    settings: dict[str, str] | None = None,
    timeout: float = 900.0,
) -> list[MembershipResult]:
    """:func:`membership_run` for each layout; ``rate`` ``None``: the steady state's default."""
    results = []
    for layout in layouts:
        offered = rate or default_rate(layout.partitions)
        console.print(
            f"[bold]membership[/] {INSTANCES} instances, {layout.name} = {layout.partitions:,} "
            f"partitions, {offered:,} records/s for {seconds:g} s, one leaves, one joins ..."
        )
        result = await membership_run(layout, offered, seconds, settings, timeout)
        console.print(f"  {membership_summary(result)}")
        results.append(result)
    return results


def membership_summary(result: MembershipResult) -> str:
    if result.failure is not None:
        return f"[red]FAILED:[/] {result.failure}"
    return (
        f"running again {result.leave_seconds} s after the leave, {result.join_seconds} s "
        f"after the join; p99 {result.p99_ms} ms; {result.sent:,} sent, each once in "
        f"{', '.join(result.read)}"
    )


def membership_table(results: list[MembershipResult]) -> Table:
    table = Table(title="Instances leaving and joining under the steady load (dc1: 3 instances)")
    for column in ("layout", "partitions", "records/s", "partitions per instance (both legs)",
                   "running again s", "p50 / p99 / max ms", "sent", "lost, duplicated",
                   "output"):  # fmt: skip
        left = column in ("layout", "output", "lost, duplicated") or column.startswith("part")
        table.add_column(column, justify="left" if left else "right")
    for r in results:
        output = r.failure or "each record once in " + ", ".join(r.read)
        shares = "\n".join(f"{moment}: {_shares(r, moment)}" for moment in MOMENTS)
        again = f"leave {_figure(r.leave_seconds)}\njoin {_figure(r.join_seconds)}"
        latency = " / ".join(_figure(v) for v in (r.p50_ms, r.p99_ms, r.max_ms))
        counts = "\n".join(
            f"{alias}: {r.lost[alias]:,}, {r.duplicated.get(alias, 0):,}" for alias in r.lost
        )
        table.add_row(
            r.layout, f"{r.partitions:,}", f"{r.rate:,}", shares, again, latency,
            f"{r.sent:,}", counts or "-", output,
        )  # fmt: skip
    return table


def _shares(result: MembershipResult, moment: str) -> str:
    shares = result.shares.get(moment)
    return "/".join(f"{n:,}" for n in shares) if shares else "-"


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:,}"
