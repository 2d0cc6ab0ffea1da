"""The steady state of the scale benchmark: every partition assigned, a fixed rate spread over
all of them, the end-to-end latency of each record and what the contender spends meanwhile.

For each layout and contender (:mod:`benchmarks.contenders`: the replicator writing to dc1 and
dc2, MirrorMaker 2 writing to dc2), on fresh clusters:

1. the layout's ``_REPLICA`` topics are created in dc1 with one record in each partition, and the
   contender is started; once every one of those records is in each of its destinations, every
   partition is assigned and copying (**warm-up**, timed from the contender's start);
2. **idle CPU**: after a few seconds of settling, the contender's CPU as a percentage of one core
   over ``idle_seconds`` with no traffic;
3. **steady state**: this process sends ``rate`` records/s in all, spread evenly over every
   partition (round-robin, :class:`RoundRobin`, paced by :class:`Pacer` every 10 ms) for
   ``seconds``, each 100 B value carrying its send time (:func:`stamp`; values are copied byte
   for byte by both contenders); one consumer on dc2 reads the contender's destination topics
   there and takes, for each record, its receive time minus its send time (the same machine
   clock): **p50, p99 and max latency**. The contender's **CPU % of a core** over the window, its
   **peak RSS**, and every record arrived (sent = received, else the run fails).

The producer (one aiokafka producer, ``linger_ms`` 5: up to 5 ms of every latency is the
producer's, the same for both contenders) and the latency consumer (one consumer, ``getmany``)
run in this process and share the machine's 2 cores with the contender and both brokers; neither
walks the partitions per record. Their own CPU over the window (this process's CPU time) is
printed beside the contender's (**bench CPU %**) so that a reader can judge what they took.
"""

from __future__ import annotations

import asyncio
import math
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.table import Table

from benchmarks.brokers import clusters
from benchmarks.contenders import Running, await_copied, start_contender
from benchmarks.layout import VALUE_BYTES, Layout, preload_layout
from benchmarks.shared import console
from replicator.devtools.embedded import LocalBroker

TIMED = b"T"  # the first byte of a value that carries its send time
TICK_SECONDS = 0.01
LINGER_MS = 5
RATE_CAP = 1_000  # records/s: the default rate, 1 per partition per second, stops here
SETTLE_SECONDS = 5.0  # after the warm-up, before the idle window
DRAIN_SECONDS = 60.0  # for the last records of the window to arrive


def default_rate(partitions: int) -> int:
    """One record per partition per second, at most :data:`RATE_CAP` records/s in all (the
    producer and the latency consumer share the machine with the contender)."""
    return max(1, min(partitions, RATE_CAP))


def stamp(sent_ns: int, size: int = VALUE_BYTES, sequence: int = 0) -> bytes:
    """A value of ``size`` bytes carrying its send time (ns since the epoch) and its sequence
    number in the window (each record's own: copies of one record are counted by it)."""
    head = TIMED + sent_ns.to_bytes(8, "big") + sequence.to_bytes(8, "big")
    return head + b"t" * (size - len(head))


def sequence_of(value: bytes) -> int:
    """The sequence number a :func:`stamp` value carries."""
    return int.from_bytes(value[9:17], "big")


def sent_at(value: bytes | None) -> int | None:
    """The send time a :func:`stamp` value carries; ``None`` for any other value."""
    if value is None or len(value) < 9 or value[:1] != TIMED:
        return None
    return int.from_bytes(value[1:9], "big")


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``ordered`` (sorted, not empty)."""
    if not ordered:
        raise ValueError("no samples")
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]


class Pacer:
    """How many records are due at each moment of a window of ``seconds`` at ``rate``
    records/s in all: every call hands out what the elapsed time owes and was not handed out
    yet, so a late tick sends more, and the window's total is exact."""

    def __init__(self, rate: float, seconds: float) -> None:
        self.rate = rate
        self.total = round(rate * seconds)
        self.handed = 0

    def due(self, elapsed: float) -> int:
        owed = min(self.total, int(self.rate * elapsed))
        count = max(0, owed - self.handed)
        self.handed += count
        return count

    @property
    def done(self) -> bool:
        return self.handed >= self.total


class RoundRobin:
    """Partition indexes, each record to the next partition: over any stretch of records every
    partition gets its share within one, and a tick costs what it sends, not the partitions."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.cursor = 0

    def take(self, count: int) -> list[int]:
        first = self.cursor
        self.cursor = (first + count) % self.partitions
        return [(first + i) % self.partitions for i in range(count)]


@dataclass
class SteadyResult:
    contender: str
    layout: str
    partitions: int
    rate: int  # records/s offered, over every partition
    seconds: float
    destinations: list[str]  # the latency is read on dc2
    warm_up_seconds: float | None = None
    idle_cpu_percent: float | None = None  # the contender, no traffic, every partition assigned
    sent: int = 0
    received: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    cpu_percent: float | None = None  # the contender, over the steady window
    bench_cpu_percent: float | None = None  # this process: producer and latency consumer
    peak_rss_mb: float | None = None
    failure: str | None = None
    logs: list[str] = field(default_factory=list)


class Copies:
    """How many copies of each of ``total`` sequence numbers were read (at most 255 each)."""

    def __init__(self, total: int) -> None:
        self.counts = bytearray(total)
        self.read = 0
        self.distinct = 0

    def add(self, sequence: int) -> None:
        copies = self.counts[sequence]
        self.read += 1
        self.distinct += copies == 0
        self.counts[sequence] = min(255, copies + 1)

    @property
    def lost(self) -> int:
        """Sequence numbers not read (yet)."""
        return len(self.counts) - self.distinct

    @property
    def duplicated(self) -> int:
        """Copies read past the first of each."""
        return self.read - self.distinct


class LatencyReader:
    """One consumer over the contender's topics on one destination: the latency of each timed
    record and, given the window's ``sequenced`` total, how many copies of each arrived."""

    def __init__(
        self, broker: LocalBroker, partitions: list[TopicPartition], sequenced: int = 0
    ) -> None:
        self.latencies_ms = array("d")
        self.untimed = 0  # the warm-up records
        self.copies = Copies(sequenced)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        self._partitions = partitions

    async def __aenter__(self) -> LatencyReader:
        await self._consumer.start()
        self._consumer.assign(self._partitions)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._consumer.stop()

    async def read_until(self, timed: int, untimed: int, timeout: float) -> None:
        """Read until ``timed`` timed (distinct ones, when sequenced) and ``untimed`` other
        records arrived; TimeoutError."""
        deadline = time.monotonic() + timeout
        while self._arrived() < timed or self.untimed < untimed:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self._arrived():,} of {timed:,} timed records arrived "
                    f"({self.untimed:,} of {untimed:,} warm-up records)"
                )
            await self._read(100)

    async def read_quiet(self, quiet_seconds: float) -> None:
        """Read until nothing arrived for ``quiet_seconds`` (copies written late included)."""
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_seconds:
            if await self._read(200):
                quiet_since = time.monotonic()

    def _arrived(self) -> int:
        return self.copies.distinct if self.copies.counts else len(self.latencies_ms)

    async def _read(self, timeout_ms: int) -> int:
        fetched = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=10_000)
        now_ns = time.time_ns()
        count = 0
        for records in fetched.values():
            count += len(records)
            for record in records:
                sent = sent_at(record.value)
                if sent is None:
                    self.untimed += 1
                    continue
                self.latencies_ms.append((now_ns - sent) / 1e6)
                if self.copies.counts:
                    self.copies.add(sequence_of(record.value))
        return count


async def steady_run(
    contender: str,
    layout: Layout,
    rate: int,
    seconds: float,
    idle_seconds: float = 10.0,
    settings: dict[str, str] | None = None,
    timeout: float = 900.0,
) -> SteadyResult:
    """One steady-state run (see the module docstring). A failure is in the result."""
    result = SteadyResult(contender, layout.name, layout.partitions, rate, seconds, [])
    try:
        with clusters("dc1", "dc2", partitions=layout.most_held) as brokers:
            await preload_layout(brokers["dc1"], layout, 1)
            with start_contender(contender, brokers, layout, 1, settings) as running:
                result.destinations = list(running.destinations)
                result.logs = [process.log_path for process in running.processes]
                try:
                    await _warm_up_and_idle(running, layout, result, idle_seconds, timeout)
                    await _steady(running, brokers, layout, result)
                finally:
                    running.sample_rss()
                    result.peak_rss_mb = running.peak_rss_mb
    except Exception as exc:
        result.failure = str(exc) or repr(exc)
    return result


async def _warm_up_and_idle(
    running: Running, layout: Layout, result: SteadyResult, idle_seconds: float, timeout: float
) -> None:
    began = running.processes[0].started
    await await_copied(running, layout, layout.partitions, timeout)
    result.warm_up_seconds = round(time.monotonic() - began, 2)
    await asyncio.sleep(SETTLE_SECONDS)
    if idle_seconds > 0:
        before = running.cpu_seconds()
        await asyncio.sleep(idle_seconds)
        result.idle_cpu_percent = round((running.cpu_seconds() - before) / idle_seconds * 100, 1)


async def _steady(
    running: Running, brokers: dict[str, LocalBroker], layout: Layout, result: SteadyResult
) -> None:
    """The steady window, read back on dc2 as it goes: the latencies, every record arrived."""
    pacer = Pacer(result.rate, result.seconds)
    async with LatencyReader(brokers["dc2"], layout.partitions_of(running.topics)) as reader:
        # Positioned on every partition (its warm-up record read) before the window opens.
        await reader.read_until(0, layout.partitions, 120)
        reading = asyncio.create_task(
            reader.read_until(pacer.total, layout.partitions, result.seconds + DRAIN_SECONDS)
        )
        try:
            refused = await _window(running, brokers["dc1"], layout, pacer, result)
            result.sent = pacer.total - sum(refused.values())
            if refused:
                raise RuntimeError(f"the source refused {dict(refused)}")
            await reading
        finally:
            reading.cancel()  # nothing when it is done
            result.received = len(reader.latencies_ms)
            _percentiles(reader.latencies_ms, result)


async def _window(
    running: Running, source: LocalBroker, layout: Layout, pacer: Pacer, result: SteadyResult
) -> Counter[str]:
    """Offer the window's records; the contender's and this process's CPU meanwhile; the
    records the source refused, by error."""
    producer = AIOKafkaProducer(
        bootstrap_servers=source.bootstrap_servers, acks="all", linger_ms=LINGER_MS
    )
    await producer.start()
    try:
        cpu, own, began = running.cpu_seconds(), time.process_time(), time.monotonic()
        targets = layout.partitions_of(layout.source_topics())
        refused = await offer(producer, targets, pacer, running)
        window = time.monotonic() - began
        result.cpu_percent = round((running.cpu_seconds() - cpu) / window * 100, 1)
        result.bench_cpu_percent = round((time.process_time() - own) / window * 100, 1)
        await producer.flush()
    finally:
        await producer.stop()
    return refused


async def offer(
    producer: AIOKafkaProducer, targets: list[TopicPartition], pacer: Pacer, running: Running
) -> Counter[str]:
    """Send what ``pacer`` says is due every tick, each record to the next partition; the
    records the source refused, by error."""
    spread, refused, sequence = RoundRobin(len(targets)), Counter[str](), 0

    def answered(future: asyncio.Future[Any]) -> None:
        if future.exception() is not None:
            refused[repr(future.exception())] += 1

    began = next_sample = time.monotonic()
    while not pacer.done:
        now = time.monotonic()
        for index in spread.take(pacer.due(now - began)):
            tp = targets[index]
            value = stamp(time.time_ns(), sequence=sequence)
            sent = await producer.send(tp.topic, value, partition=tp.partition)
            sent.add_done_callback(answered)
            sequence += 1
        if now >= next_sample:
            running.sample_rss()
            next_sample = now + 1.0
        await asyncio.sleep(TICK_SECONDS)
    return refused


def _percentiles(latencies: array[float], result: SteadyResult) -> None:
    if not latencies:
        return
    ordered = sorted(latencies)
    result.p50_ms = round(percentile(ordered, 0.50), 1)
    result.p99_ms = round(percentile(ordered, 0.99), 1)
    result.max_ms = round(ordered[-1], 1)


async def steady_comparison(
    layouts: Sequence[Layout],
    contenders: Sequence[str],
    rate: int | None,
    seconds: float,
    idle_seconds: float = 10.0,
    settings: dict[str, str] | None = None,
) -> list[SteadyResult]:
    """Each layout with each contender; ``rate`` ``None``: :func:`default_rate`."""
    results = []
    for layout in layouts:
        offered = rate or default_rate(layout.partitions)
        for contender in contenders:
            console.print(
                f"[bold]steady[/] {contender}, {layout.name} = {layout.partitions:,} partitions, "
                f"{offered:,} records/s for {seconds:g} s ..."
            )
            result = await steady_run(contender, layout, offered, seconds, idle_seconds, settings)
            console.print(f"  {steady_summary(result)}")
            results.append(result)
    return results


def steady_summary(result: SteadyResult) -> str:
    if result.failure is not None:
        return f"[red]FAILED:[/] {result.failure}"
    return (
        f"p50 {result.p50_ms} ms, p99 {result.p99_ms} ms, CPU {result.cpu_percent}% of a core, "
        f"{result.received:,} of {result.sent:,} records"
    )


def steady_table(results: list[SteadyResult]) -> Table:
    table = Table(title="Steady state: a fixed rate over every partition, latency to dc2")
    for column in ("contender", "layout", "partitions", "writes to", "records/s", "warm-up s",
                   "idle CPU %", "CPU %", "p50 ms", "p99 ms", "max ms", "peak RSS MB",
                   "bench CPU %", "output"):  # fmt: skip
        left = column in ("contender", "layout", "writes to", "output")
        table.add_column(column, justify="left" if left else "right")
    for r in results:
        output = r.failure or f"{r.received:,} of {r.sent:,} arrived"
        table.add_row(
            r.contender, r.layout, f"{r.partitions:,}", ", ".join(r.destinations),
            f"{r.rate:,}", _figure(r.warm_up_seconds), _figure(r.idle_cpu_percent),
            _figure(r.cpu_percent), _figure(r.p50_ms), _figure(r.p99_ms), _figure(r.max_ms),
            _figure(r.peak_rss_mb), _figure(r.bench_cpu_percent), output,
        )  # fmt: skip
    return table


def steady_figures(results: list[SteadyResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:,}"
