"""The replicator benchmark: throughput, latency, memory and CPU, side by side in one run.

For each record size (100 B and 1 KiB) the same preloaded ``bench_REPLICA`` topic is replicated to
``bench`` on two clusters by three contenders, each a separate process on fresh local brokers:
the naive per-record ``send()`` mirror, the minimal batch-copy loop (the machine's ceiling), and
the replicator itself, and a franz-go copy loop (a Go program, :mod:`benchmarks.franz_go`: the
reference a compiled client sets). The *one-way mirror* workload copies ``bench`` of dc1 to
``bench`` of dc2 (MirrorMaker's job: the replicator runs one identity flow, the others copy to dc2
alone), at 100 B and 1 KiB, where MirrorMaker 2 (with its settings, and tuned as its high-volume
guides say: ``mm2-tuned``) and MirrorMaker 1 themselves run too (:mod:`benchmarks.peers`);
the *two-way* workload copies both clusters' records to the other at once (the ``_REPLICA``
mode, identity flows, MirrorMaker 2's default policy), and a one-way latency phase times each of
them at a fixed rate.
Completion is measured by reading the destinations back (high watermarks
from fetch responses, never ListOffsets) and the replicator's output is verified record by record.
Then the replicator's end-to-end latency is measured at a fixed offered rate, the cost of resuming
from the destination (:mod:`benchmarks.resume`), the time to translate a consumer group's positions
to another cluster (:mod:`benchmarks.failover`), and its peak memory with a destination that
disappears mid-run. The last line printed is one JSON object; the same figures, with the commit,
the versions and the settings of every contender, are kept in a file of ``benchmarks/results/``
(:mod:`benchmarks.recording`), from which :mod:`benchmarks.report` renders the performance page's
tables.

    make bench                      # the full benchmark
    .venv/bin/python -m benchmarks.run --quick     # a smaller run
    .venv/bin/python -m benchmarks.run --quick --contenders ceiling replicator franz-go
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import uvloop
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.table import Table

from benchmarks import franz_go, recording
from benchmarks.brokers import add_broker_option, broker_name, choose, clusters, lists_offsets
from benchmarks.failover import failover_cost
from benchmarks.layout import Layout
from benchmarks.mirrors import CONSUMER_SETTINGS, PRODUCER_SETTINGS
from benchmarks.peers import (
    JVMS,
    MM1_SETTINGS,
    MM2_SETTINGS,
    MM2_TUNED_SETTINGS,
    PEERS,
    choose_jvm,
    mm2_jvm,
    mm2_two_way_properties,
    start_peer,
)
from benchmarks.resume import create_topics, resume_cost
from benchmarks.scale import scale_comparison
from benchmarks.shared import (
    TOPIC,
    Monitored,
    Watermarks,
    add_setting_option,
    child_env,
    console,
    value_of,
)
from replicator.devtools.apache_kafka import ApacheKafkaCluster
from replicator.devtools.embedded import (
    LocalBroker,
    free_port,
    replicator_environment,
    wait_until_ready,
)
from replicator.devtools.mirror_makers import start_mm2
from replicator.devtools.wan import Link
from replicator.kafka.readers import read_topic

T = TypeVar("T")
SOURCE = f"{TOPIC}_REPLICA"
CONTENDERS = ("naive", "ceiling", "franz-go", "replicator", *PEERS)
# Extra replicator settings for every run (--setting KEY=VALUE), to compare tunings.
SETTINGS: dict[str, str] = {}


@dataclass(frozen=True)
class Workload:
    name: str
    value_bytes: int
    records: int
    partitions: int = 8
    one_way: bool = False  # bench of dc1 to bench of dc2 (an identity flow), not the _REPLICA mode
    wan_ms: float = 0.0  # round trip added between the datacenters (a relay, one-way only)

    @property
    def source_topic(self) -> str:
        return TOPIC if self.one_way else SOURCE


@dataclass
class RunResult:
    contender: str
    workload: str
    records: int
    seconds: float
    records_per_second: float
    source_mb_per_second: float
    peak_rss_mb: float
    cpu_seconds_per_million: float
    verified: str = "counted"
    start_to_first_s: float = 0.0  # from the process's start to the first record copied
    own_seconds: float | None = None  # the franz-go loop's own clock: first fetch to last ack
    # Every round's records/s and CPU seconds per million, in the order run (the median's
    # figures are above; a target "in each run" is read from these).
    rounds: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class LatencyResult:
    offered_per_second: int
    seconds: float
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    by_destination: dict[str, dict[str, float]] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    batches_acknowledged_within_50ms: float | None = None
    samples: dict[str, int] = field(default_factory=dict)
    acknowledged_but_lost_by_source_broker: int = 0


# -- processes ----------------------------------------------------------------------------------


def start_contender(name: str, brokers: dict[str, LocalBroker], workload: Workload) -> Monitored:
    if name in PEERS:
        assert workload.one_way, f"{name} copies one way only"
        workdir = tempfile.mkdtemp(prefix=f"bench-{name}-")
        peer = start_peer(name, brokers, TOPIC, workload.partitions, Path(workdir))
        return Monitored.adopt(peer.process, str(peer.log_path))
    if name == "replicator":
        env = replicator_environment("dc1", brokers, free_port(), log_format="json", **SETTINGS)
        if workload.one_way:
            env |= {
                "REPLICATOR_REPLICA_MODE": "false",
                "REPLICATOR_FLOWS__MIRROR__SOURCE": "dc1",
                "REPLICATOR_FLOWS__MIRROR__TARGET": "dc2",
            }
        return Monitored([sys.executable, "-m", "replicator", "run"], child_env(env), name)
    targets = [b for alias, b in brokers.items() if alias != "dc1" or not workload.one_way]
    if name == "franz-go":
        source = brokers["dc1"]
        return franz_go.start(source, workload.source_topic, targets, TOPIC, workload.records)
    destinations = ",".join(b.bootstrap_servers for b in targets)
    args = [sys.executable, "-m", "benchmarks.mirrors", name, "--source"]
    args += [brokers["dc1"].bootstrap_servers, "--destinations", destinations, "--topic", TOPIC]
    args += ["--source-topic", workload.source_topic]
    return Monitored(args, child_env(), name)


# -- data ---------------------------------------------------------------------------------------


async def preload(broker: LocalBroker, workload: Workload) -> None:
    """Write ``workload.records`` keyed records to the source topic, evenly over partitions."""
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, acks="all", max_batch_size=512 * 1024
    )
    await producer.start()
    try:
        pending = []
        per_call = max(1, 256 * 1024 // (workload.value_bytes + 40))
        now = int(time.time() * 1000)
        for start in range(0, workload.records, per_call * workload.partitions):
            for partition in range(workload.partitions):
                batch = producer.create_batch()
                first = start + partition * per_call
                for i in range(first, min(first + per_call, workload.records)):
                    appended = batch.append(
                        timestamp=now,
                        key=f"key-{i % 1000}".encode(),
                        value=value_of(i, workload.value_bytes),
                        headers=[("bench", b"1")],
                    )
                    if appended is None:
                        raise RuntimeError(f"{per_call} records do not fit one batch")
                if batch.record_count():
                    topic = workload.source_topic
                    pending.append(await producer.send_batch(batch, topic, partition=partition))
            if len(pending) > 64:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def verify_replica(brokers: dict[str, LocalBroker], expected: int) -> str:
    """Read every destination back; each source record exactly once, with provenance."""
    for alias, broker in brokers.items():
        records = await read_topic(broker.bootstrap_servers, TOPIC, timeout=300)
        origins = {(p.partition, p.offset) for r in records if (p := r.provenance) is not None}
        if len(records) != expected or len(origins) != expected:
            return f"FAILED on {alias}: {len(records)} records, {len(origins)} distinct"
    return "exact"


# -- phases -------------------------------------------------------------------------------------


class _AcrossTheWan:
    """A cluster as a process in the other datacenter reaches it: through its WAN listener."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers

    def stop(self) -> None:
        """The cluster itself is stopped by its owner."""


@contextmanager
def as_seen_by(
    contender: str, brokers: dict[str, LocalBroker], workload: Workload
) -> Iterator[dict[str, LocalBroker]]:
    """The clusters as ``contender`` reaches them: with ``workload.wan_ms``, the remote one
    across a relay adding that round trip. Each runs where its documentation places it: the
    replicator beside the source (it produces across the link), MirrorMaker beside the target
    (it consumes across the link, "remote consume, local produce")."""
    if not workload.wan_ms:
        yield brokers
        return
    remote = "dc2" if contender == "replicator" else "dc1"
    cluster = brokers[remote]
    if not isinstance(cluster, ApacheKafkaCluster) or not cluster.wan_port:
        raise RuntimeError("a WAN workload needs Apache Kafka clusters with a WAN listener")
    node_port = cluster.nodes[0].wan_port
    assert node_port is not None
    with Link(cluster.wan_port, node_port, workload.wan_ms / 2):
        yield {**brokers, remote: _AcrossTheWan(cluster.listener("WAN"))}


async def throughput(contender: str, workload: Workload) -> RunResult:
    with clusters("dc1", "dc2", wan=bool(workload.wan_ms)) as brokers:
        await create_topics(brokers["dc1"], workload.partitions, SOURCE, TOPIC)
        await create_topics(brokers["dc2"], workload.partitions, TOPIC)
        await preload(brokers["dc1"], workload)
        expected = workload.records
        destinations = {"dc2": brokers["dc2"]} if workload.one_way else brokers
        with as_seen_by(contender, brokers, workload) as seen:
            result = await _copy(contender, workload, seen, destinations)
        if contender == "replicator":
            result.verified = await verify_replica(destinations, expected)
    return result


async def _copy(
    contender: str,
    workload: Workload,
    seen: dict[str, LocalBroker],
    destinations: dict[str, LocalBroker],
) -> RunResult:
    """Start ``contender`` on the clusters as it sees them (``seen``) and time it until every
    destination holds the workload's records."""
    expected = workload.records
    process = start_contender(contender, seen, workload)
    try:
        async with Watermarks(destinations, workload.partitions) as marks:
            first = cpu_first = to_first = 0.0
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if process.process.poll() is not None:
                    raise RuntimeError(f"{contender} exited; see {process.log_path}")
                totals = await marks.totals()
                process.sample_rss()
                now = time.monotonic()
                if not first and any(totals.values()):
                    first, cpu_first = now, process.cpu_seconds()
                    to_first = now - process.started
                if all(t >= expected for t in totals.values()):
                    break
            else:
                raise TimeoutError(f"{contender} did not finish; see {process.log_path}")
            seconds = max(now - first, 1e-3)
            cpu = process.cpu_seconds() - cpu_first
        own = await _own_seconds(process) if contender == "franz-go" else None
    finally:
        process.stop()
    mb = expected * workload.value_bytes / 1e6
    return RunResult(
        contender,
        workload.name,
        expected,
        round(seconds, 3),
        round(expected / seconds),
        round(mb / seconds, 1),
        round(process.peak_rss_mb, 1),
        round(cpu / expected * 1e6, 2),
        "counted",
        round(to_first, 2),
        own,
    )


async def _own_seconds(process: Monitored, timeout: float = 10.0) -> float | None:
    """The seconds the franz-go loop timed itself (its line of JSON: from its first record
    fetched to the last acknowledged), waited for: the destination's log end can show the
    last records before their acknowledgements have reached the loop (None if it never says)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seconds = _printed_seconds(Path(process.log_path))
        if seconds is not None:
            return seconds
        await asyncio.sleep(0.05)
    return None


def _printed_seconds(log: Path) -> float | None:
    """The ``seconds`` of the first line of JSON in ``log``, if it has one yet (a small file)."""
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    return round(float(json.loads(line)["seconds"]), 3)
    return None


@contextmanager
def replicator_beside_dc1(
    brokers: dict[str, LocalBroker], start: bool = True
) -> Iterator[tuple[Monitored | None, int]]:
    port = free_port()
    if not start:
        yield None, port
        return
    env = replicator_environment("dc1", brokers, port, log_format="json", **SETTINGS)
    process = Monitored([sys.executable, "-m", "replicator", "run"], child_env(env), "replicator")
    try:
        yield process, port
    finally:
        process.stop()


@dataclass
class _LatencyRun:
    """What a :func:`latency` run's offer and its tails share: the samples read on each
    cluster, the records the source acknowledged (then, once ``held_known`` is set, those it
    holds: what must arrive)."""

    samples: dict[str, array[float]]
    produced: int = 0
    held_known: asyncio.Event = field(default_factory=asyncio.Event)


async def latency(
    rate: int, seconds: float, replicated: bool = True, partitions: int = 8
) -> LatencyResult:
    """Offer ``rate`` records/s of 100 B for ``seconds``; time each record to its destinations.

    With ``replicated`` false, records are written straight to the real topic and read back on
    the same broker: the floor of this measurement (broker and client costs, no replicator).
    """
    with clusters("dc1", "dc2") as brokers:
        await create_topics(brokers["dc1"], partitions, SOURCE, TOPIC)
        await create_topics(brokers["dc2"], partitions, TOPIC)
        with replicator_beside_dc1(brokers, start=replicated) as (process, port):
            if process is not None:
                await wait_until_ready(port, process.process, process.log_path)
            readers = brokers if replicated else {"dc1": brokers["dc1"]}
            run = _LatencyRun({alias: array("d") for alias in readers})
            samples = run.samples
            tails = [
                asyncio.create_task(_latency_tail(run, a, b, partitions))
                for a, b in readers.items()
            ]
            await _latency_offer(run, brokers, process, rate, seconds, replicated, partitions)
            # What the source holds is what must arrive: the test broker can lose acknowledged
            # records under concurrent fetch load (measured; see docs/performance/index.md), never
            # replicated.
            source = SOURCE if replicated else TOPIC
            async with Watermarks({"dc1": brokers["dc1"]}, partitions, source) as marks:
                held = (await marks.totals())["dc1"]
            lost_by_broker, run.produced = run.produced - held, held
            produced = held
            run.held_known.set()
            try:
                await asyncio.wait_for(asyncio.gather(*tails), timeout=120)
            except TimeoutError:
                got = {a: len(s) for a, s in samples.items()}
                raise TimeoutError(f"offered {produced}, read back {got}") from None
            acked = await acknowledged_within(port, 0.05) if process is not None else None
            rss = process.peak_rss_mb if process is not None else 0.0
    every = sorted(x for s in samples.values() for x in s)
    result = LatencyResult(rate, seconds, produced, *_percentiles(every), peak_rss_mb=round(rss, 1))
    result.samples = {alias: len(values) for alias, values in samples.items()}
    result.acknowledged_but_lost_by_source_broker = lost_by_broker
    result.batches_acknowledged_within_50ms = acked
    for alias, values in samples.items():
        p50, p99, peak = _percentiles(sorted(values))
        result.by_destination[alias] = {"p50_ms": p50, "p99_ms": p99, "max_ms": peak}
    return result


async def _latency_tail(run: _LatencyRun, alias: str, broker: LocalBroker, partitions: int) -> None:
    """Read ``bench`` of one cluster from its beginning, sampling each record's latency, until
    it holds what the source held."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        enable_auto_commit=False,
        fetch_max_wait_ms=5,
    )
    await consumer.start()
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    consumer.assign(tps)
    for tp in tps:
        # The topic is new and empty: offset 0 is its beginning.
        consumer.seek(tp, 0)
    try:
        while True:
            fetched = await consumer.getmany(timeout_ms=50)
            now_ms = time.time() * 1000
            for records in fetched.values():
                run.samples[alias].extend(now_ms - r.timestamp for r in records)
            if run.held_known.is_set() and await caught_up(consumer, tps, run.produced):
                return
    finally:
        await consumer.stop()


async def _latency_offer(
    run: _LatencyRun,
    brokers: dict[str, LocalBroker],
    process: Monitored | None,
    rate: int,
    seconds: float,
    replicated: bool,
    partitions: int,
) -> None:
    """Offer ``rate`` records/s to dc1 for ``seconds``, in a batch per partition every tick;
    ``run.produced`` counts those acknowledged."""
    producer = AIOKafkaProducer(
        bootstrap_servers=brokers["dc1"].bootstrap_servers, acks="all", linger_ms=0
    )
    await producer.start()
    tick, start, reported = 0.005, time.monotonic(), 0.0
    offered = 0
    refused: Counter[str] = Counter()

    def acknowledged(n: int, future: asyncio.Future[Any]) -> None:
        if future.exception() is None:
            run.produced += n
        else:
            refused[repr(future.exception())] += n

    value = b"x" * 100
    topic = SOURCE if replicated else TOPIC
    try:
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(rate * elapsed) - offered
            now_ms = int(time.time() * 1000)
            for p in range(partitions):
                n = due // partitions + (1 if p < due % partitions else 0)
                if n <= 0:
                    continue
                await _send_due(producer, topic, p, n, now_ms, value, acknowledged)
                offered += n
            if process is not None:
                process.sample_rss()
            if elapsed >= reported + 10:
                reported += 10
                got = {a: len(s) for a, s in run.samples.items()}
                console.print(f"  {elapsed:.0f}s: offered {offered:,}, read {got}")
            await asyncio.sleep(tick)
        await asyncio.wait_for(producer.flush(), timeout=60)
        if refused:
            console.print(f"  the source refused {dict(refused)} (not counted)")
    finally:
        await asyncio.wait_for(producer.stop(), timeout=30)


async def _send_due(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int,
    n: int,
    now_ms: int,
    value: bytes,
    acknowledged: Callable[[int, asyncio.Future[Any]], None],
) -> None:
    """Send ``n`` records to ``partition``: a batch holds what fits (16 KiB), so a tick behind
    offers more; ``acknowledged`` is called with each batch's count once it is answered."""
    batch, held = producer.create_batch(), 0
    for i in range(n):
        key = b"k%d" % i
        if batch.append(timestamp=now_ms, key=key, value=value) is None:
            sent = await producer.send_batch(batch, topic, partition=partition)
            sent.add_done_callback(partial(acknowledged, held))
            batch, held = producer.create_batch(), 0
            batch.append(timestamp=now_ms, key=key, value=value)
        held += 1
    sent = await producer.send_batch(batch, topic, partition=partition)
    sent.add_done_callback(partial(acknowledged, held))


TWO_WAY = ("replicator", "identity flows", "mm2")
"""The two-way contenders: the ``_REPLICA`` mode (a replicator beside each cluster), identity
flows both ways (one each), MirrorMaker 2's default policy both ways (one process)."""


async def two_way(contender: str, records: int, partitions: int = 8) -> RunResult:
    """``records`` 100 B records preloaded in each cluster, copied to the other both ways at
    once; records/s counts the records that crossed (2 x ``records``), CPU every process's."""
    workload = Workload("100B two-way", 100, records, partitions, one_way=True)
    with clusters("dc1", "dc2") as brokers:
        source = SOURCE if contender == "replicator" else TOPIC
        for broker in brokers.values():
            await create_topics(broker, partitions, *dict.fromkeys((source, TOPIC)))
            await preload(
                broker, Workload("two-way", 100, records, partitions, contender != "replicator")
            )
        processes, wanted = _start_two_way(contender, brokers, records, partitions)
        try:
            # Identity flows copy into topics preloaded already: the clock starts at the first
            # record copied, as for the others.
            preloaded = records if contender == "identity flows" else 0
            before = dict.fromkeys(wanted, preloaded)
            first, cpu_first, now = await _watch_two_way(
                contender, brokers, processes, wanted, before, partitions
            )
            seconds = max(now - first, 1e-3)
            cpu = sum(p.cpu_seconds() for p in processes) - cpu_first
        finally:
            for process in processes:
                process.stop()
    crossed = 2 * records
    return RunResult(
        contender, workload.name, crossed, round(seconds, 3), round(crossed / seconds),
        round(crossed * 100 / 1e6 / seconds, 1),
        round(sum(p.peak_rss_mb for p in processes), 1),
        round(cpu / crossed * 1e6, 2),
    )  # fmt: skip


def _start_two_way(
    contender: str, brokers: dict[str, LocalBroker], records: int, partitions: int
) -> tuple[list[Monitored], dict[tuple[str, str], int]]:
    """The two-way contender's processes, and the records each (cluster, topic) must end with."""
    processes: list[Monitored] = []
    if contender == "mm2":
        workdir = Path(tempfile.mkdtemp(prefix="bench-mm2-two-way-"))
        config = workdir / "mm2.properties"
        config.write_text(mm2_two_way_properties(brokers, TOPIC, partitions))
        peer = start_mm2(config, workdir, heap_mb=1024)
        processes.append(Monitored.adopt(peer.process, str(peer.log_path)))
        # Default policy: dc1's records reach dc2 as dc1.bench, dc2's reach dc1 as dc2.bench.
        wanted = {("dc2", "dc1.bench"): records, ("dc1", "dc2.bench"): records}
    else:
        for local, remote in (("dc1", "dc2"), ("dc2", "dc1")):
            env = replicator_environment(local, brokers, free_port(), log_format="json", **SETTINGS)
            if contender == "identity flows":  # the remote cluster's bench into the local one
                env |= {
                    "REPLICATOR_REPLICA_MODE": "false",
                    f"REPLICATOR_FLOWS__{remote.upper()}_IN__SOURCE": remote,
                    f"REPLICATOR_FLOWS__{remote.upper()}_IN__TARGET": local,
                }
            args = [sys.executable, "-m", "replicator", "run"]
            processes.append(Monitored(args, child_env(env), f"two-way-{local}"))
        # Each bench ends with both clusters' records: its own (preloaded there, or copied
        # from bench_REPLICA by the _REPLICA mode) and the other's.
        wanted = {("dc1", TOPIC): 2 * records, ("dc2", TOPIC): 2 * records}
    return processes, wanted


async def _watch_two_way(
    contender: str,
    brokers: dict[str, LocalBroker],
    processes: list[Monitored],
    wanted: dict[tuple[str, str], int],
    before: dict[tuple[str, str], int],
    partitions: int,
) -> tuple[float, float, float]:
    """Watch until every (cluster, topic) holds what it must: when the first record was copied,
    the processes' CPU seconds then, and when the last was."""
    first = cpu_first = 0.0
    deadline = time.monotonic() + 900
    marks = {key: Watermarks({key[0]: brokers[key[0]]}, partitions, key[1]) for key in wanted}
    for watch in marks.values():
        await watch.__aenter__()
    try:
        while time.monotonic() < deadline:
            for process in processes:
                if process.process.poll() is not None:
                    raise RuntimeError(f"{contender} exited; see {process.log_path}")
                process.sample_rss()
            held = {key: sum((await marks[key].totals()).values()) for key in wanted}
            now = time.monotonic()
            if not first and any(held[key] > before[key] for key in wanted):
                first = now
                cpu_first = sum(p.cpu_seconds() for p in processes)
            if all(held[key] >= n for key, n in wanted.items()):
                break
            await asyncio.sleep(0.1)
        else:
            raise TimeoutError(f"{contender} two-way did not finish")
    finally:
        for watch in marks.values():
            await watch.__aexit__()
    return first, cpu_first, now


@dataclass
class OneWayLatency:
    contender: str
    offered_per_second: int
    seconds: float
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    peak_rss_mb: float
    cpu_seconds: float


async def one_way_latency(
    contender: str, rate: int, seconds: float, partitions: int = 8
) -> OneWayLatency:
    """Offer ``rate`` records/s of 100 B to ``bench`` of dc1 for ``seconds`` while ``contender``
    copies it one way to dc2 (started and copying first: a warm-up record per partition must
    arrive); the time from each record's source timestamp to its read on dc2."""
    workload = Workload("latency", 100, 0, partitions, one_way=True)
    with clusters("dc1", "dc2") as brokers:
        await create_topics(brokers["dc1"], partitions, TOPIC)
        await create_topics(brokers["dc2"], partitions, TOPIC)
        process = start_contender(contender, brokers, workload)
        producer = AIOKafkaProducer(
            bootstrap_servers=brokers["dc1"].bootstrap_servers, acks="all", linger_ms=0
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=brokers["dc2"].bootstrap_servers,
            enable_auto_commit=False,
            fetch_max_wait_ms=5,
        )
        await producer.start()
        await consumer.start()
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)  # new and empty: offset 0 is its beginning
        try:
            await _warm_up(contender, process, producer, consumer, partitions)
            samples, cpu_start = array("d"), process.cpu_seconds()
            arrived, expected = asyncio.Event(), [-1]  # set once every offered record is read

            async def tail() -> None:
                while True:
                    fetched = await consumer.getmany(timeout_ms=50)
                    now_ms = time.time() * 1000
                    for batch in fetched.values():
                        samples.extend(now_ms - r.timestamp for r in batch if r.value != b"warm-up")
                    if 0 <= expected[0] <= len(samples):
                        arrived.set()

            reading = asyncio.create_task(tail())
            offered = await _offer_one_way(producer, process, rate, seconds, partitions)
            await producer.flush()
            expected[0] = offered
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), 120)
            reading.cancel()
            cpu = process.cpu_seconds() - cpu_start
        finally:
            await producer.stop()
            await consumer.stop()
            process.stop()
    if len(samples) < offered:
        raise RuntimeError(f"{contender}: {len(samples)} of {offered} records arrived")
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return OneWayLatency(
        contender, rate, seconds, len(ordered), at(0.5), at(0.99), round(ordered[-1], 1),
        round(process.peak_rss_mb, 1), round(cpu, 2),
    )  # fmt: skip


async def _warm_up(
    contender: str,
    process: Monitored,
    producer: AIOKafkaProducer,
    consumer: AIOKafkaConsumer,
    partitions: int,
) -> None:
    """Until the contender is up and copying every partition: a warm-up record to each, until
    each has one read on dc2."""
    warm: set[TopicPartition] = set()
    deadline = time.monotonic() + 240
    while len(warm) < partitions:  # the contender is up and copying every partition
        if time.monotonic() > deadline or process.process.poll() is not None:
            raise RuntimeError(f"{contender} never copied; see {process.log_path}")
        for p in range(partitions):
            await producer.send(TOPIC, b"warm-up", partition=p)
        fetched = await consumer.getmany(timeout_ms=1000)
        warm |= {tp for tp, batch in fetched.items() if batch}


async def _offer_one_way(
    producer: AIOKafkaProducer, process: Monitored, rate: int, seconds: float, partitions: int
) -> int:
    """Offer ``rate`` records/s to ``bench`` for ``seconds``, a batch per partition every tick;
    how many were offered."""
    offered, started, value = 0, time.monotonic(), b"x" * 100
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(rate * elapsed) - offered
        now_ms = int(time.time() * 1000)
        for p in range(partitions):
            n = due // partitions + (1 if p < due % partitions else 0)
            batch = producer.create_batch()
            for i in range(max(n, 0)):
                if batch.append(timestamp=now_ms, key=b"k%d" % i, value=value) is None:
                    await producer.send_batch(batch, TOPIC, partition=p)
                    batch = producer.create_batch()
                    batch.append(timestamp=now_ms, key=b"k%d" % i, value=value)
            if n > 0:
                await producer.send_batch(batch, TOPIC, partition=p)
        offered += max(due, 0)
        process.sample_rss()
        await asyncio.sleep(0.005)
    return offered


async def caught_up(consumer: AIOKafkaConsumer, tps: list[TopicPartition], expected: int) -> bool:
    """Whether ``consumer`` has read ``expected`` records' worth of its partitions' log ends."""
    ends = [consumer.highwater(tp) for tp in tps]
    if any(end is None for end in ends) or sum(e or 0 for e in ends) < expected:
        return False
    positions = [await consumer.position(tp) for tp in tps]
    return all(p >= (e or 0) for p, e in zip(positions, ends, strict=True))


async def acknowledged_within(http_port: int, bound: float) -> float:
    """Share of the replicator's batches acknowledged within ``bound`` seconds of their source
    timestamp, from its own latency histogram (its oldest record per batch)."""
    url = f"http://127.0.0.1:{http_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    within = total = 0.0
    for line in text.splitlines():
        if not line.startswith("replicator_replication_latency_seconds_bucket"):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if f'le="{bound}"' in line:
            within += value
        elif 'le="+Inf"' in line:
            total += value
    return round(within / total, 4) if total else float("nan")


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return (float("nan"),) * 3

    def pick(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 1)

    return pick(0.50), pick(0.99), round(values[-1], 1)


async def unreachable_destination(workload: Workload) -> dict[str, Any]:
    """Peak RSS while the remote cluster disappears mid-run; local delivery must still finish."""
    with clusters("dc1", "dc2") as brokers:
        await create_topics(brokers["dc1"], workload.partitions, SOURCE, TOPIC)
        await create_topics(brokers["dc2"], workload.partitions, TOPIC)
        await preload(brokers["dc1"], workload)
        with replicator_beside_dc1(brokers) as (process, _):
            assert process is not None
            async with Watermarks({"dc1": brokers["dc1"]}, workload.partitions) as local:
                async with Watermarks({"dc2": brokers["dc2"]}, workload.partitions) as remote:
                    while (await remote.totals())["dc2"] == 0:  # noqa: ASYNC110 - polling a broker
                        await asyncio.sleep(0.01)
                    reached = (await remote.totals())["dc2"]
                brokers["dc2"].stop()
                deadline = time.monotonic() + 300
                while (await local.totals())["dc1"] < workload.records:
                    process.sample_rss()
                    if time.monotonic() > deadline:
                        raise TimeoutError("local delivery stalled while the remote was down")
                    await asyncio.sleep(0.05)
            for _ in range(100):  # keep watching memory while the remote stays down
                process.sample_rss()
                await asyncio.sleep(0.1)
            return {
                "records": workload.records,
                "value_bytes": workload.value_bytes,
                "remote_had_when_cut": reached,
                "local_complete": True,
                "peak_rss_mb": round(process.peak_rss_mb, 1),
            }


# -- report -------------------------------------------------------------------------------------


def report(
    runs: list[RunResult],
    lat: LatencyResult | None,
    floor: LatencyResult | None,
    outage: dict[str, Any] | None,
) -> None:
    table = Table(
        title="Throughput: a preloaded source replicated to two clusters, or one way to dc2 "
        "(median run)"
    )
    for column in ("workload", "contender", "records", "records/s", "source MB/s", "peak RSS MB",
                   "CPU s / M records", "start to 1st s", "output"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("workload", "contender") else "right")
    for r in runs:
        table.add_row(
            r.workload, r.contender, str(r.records), f"{r.records_per_second:,}",
            f"{r.source_mb_per_second}", f"{r.peak_rss_mb}", f"{r.cpu_seconds_per_million}",
            f"{r.start_to_first_s}", r.verified,
        )  # fmt: skip
    console.print(table)
    for name, ratio in ratios(runs).items():
        console.print(f"  {name}: {ratio}")
    if lat and floor:
        title = f"Latency at {lat.offered_per_second:,} records/s for {lat.seconds:.0f}s"
        table = Table(title=title)
        for column in ("path", "read on", "p50 ms", "p99 ms", "max ms"):
            table.add_column(column)
        for alias, figures in floor.by_destination.items():
            table.add_row("floor: produce, read back", alias, *map(str, figures.values()))
        for alias, figures in lat.by_destination.items():
            table.add_row("through the replicator", alias, *map(str, figures.values()))
        console.print(table)
        console.print(
            f"  replicator's own view: {lat.batches_acknowledged_within_50ms:.2%} of batches "
            "acknowledged by the destination within 50 ms of the source timestamp; "
            f"peak RSS {lat.peak_rss_mb} MB"
        )
    if outage:
        console.print(
            f"Remote cut mid-run ({outage['records']:,} x {outage['value_bytes']} B): local "
            f"delivery complete, peak RSS {outage['peak_rss_mb']} MB"
        )


def ratios(runs: list[RunResult]) -> dict[str, float]:
    """The replicator's records/s over each other contender's; against MirrorMaker, also its
    records per CPU-second over theirs (the MirrorMaker JVM's CPU included)."""
    out = {}
    by = {(r.workload, r.contender): r for r in runs}
    for workload in dict.fromkeys(r.workload for r in runs):
        rep = by.get((workload, "replicator"))
        for other in ("naive", "ceiling", "franz-go", *PEERS):
            ref = by.get((workload, other))
            if rep and ref:
                key = f"{workload} replicator/{other}"
                out[key] = round(rep.records_per_second / ref.records_per_second, 2)
                if (other in PEERS or other == "franz-go") and rep.cpu_seconds_per_million:
                    per_cpu = ref.cpu_seconds_per_million / rep.cpu_seconds_per_million
                    out[f"{key} per CPU-second"] = round(per_cpu, 2)
                    if rep.start_to_first_s:
                        first = ref.start_to_first_s / rep.start_to_first_s
                        out[f"{workload} {other}/replicator start to first record"] = round(
                            first, 1
                        )
    for workload in dict.fromkeys(r.workload for r in runs if "WAN" in r.workload):
        across, near = (
            by.get((workload, "replicator")),
            by.get(("100B one-way mirror", "replicator")),
        )
        if across and near:
            out[f"{workload} replicator/replicator without it"] = round(
                across.records_per_second / near.records_per_second, 2
            )
    two_way_mm2 = by.get(("100B two-way", "mm2"))
    for mode in ("replicator", "identity flows"):
        mine = by.get(("100B two-way", mode))
        if mine and two_way_mm2 and mine.cpu_seconds_per_million:
            key = f"100B two-way {mode}/mm2"
            out[key] = round(mine.records_per_second / two_way_mm2.records_per_second, 2)
            per_cpu = two_way_mm2.cpu_seconds_per_million / mine.cpu_seconds_per_million
            out[f"{key} per CPU-second"] = round(per_cpu, 2)
    return out


async def main(args: argparse.Namespace) -> None:
    failures: dict[str, str] = {}
    if "franz-go" in args.contenders:
        console.print(f"franz-go copy loop: {franz_go.binary()}, {franz_go.versions()}")
    runs = await _throughput_runs(args)
    runs += await _two_way_runs(args, failures)
    lat, floor = await _latencies(args, failures)
    one_way = await _one_way_latencies(args, failures)
    resume = await _resume_phase(args, failures)
    failover = await _failover_phase(args, failures)
    outage = None
    if args.outage_records > 0:
        console.print("[bold]remote cut mid-run[/] ...")
        workload = Workload("1KiB", 1024, args.outage_records)
        outage = await phase("remote_outage", unreachable_destination(workload), failures)
    scale = await _scale_phase(args, failures)
    report(runs, lat, floor, outage)
    console.print(f"broker: {broker_name()}")
    figures = {
        "broker": broker_name(),
        "throughput": [asdict(r) for r in runs],
        "ratios": ratios(runs),
        "latency": asdict(lat) if lat else None,
        "latency_floor": asdict(floor) if floor else None,
        "one_way_latency": [asdict(r) for r in one_way],
        "remote_outage": outage,
        "resume": resume,
        "failover": failover,
        "scale": scale,
        "failed_phases": failures,
    }
    extra = franz_go.versions() if "franz-go" in args.contenders else None
    path = recording.write(figures, contender_settings(args), vars(args), extra)
    console.print(f"figures kept in {path.relative_to(recording.ROOT)}")
    print(json.dumps(figures))


def contender_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of every contender asked for, as recorded with the figures (``<partitions>``
    given: every throughput workload has 8)."""
    partitions = str(Workload("", 0, 0).partitions)

    def given(properties: dict[str, str]) -> dict[str, str]:
        return {k: v.replace("<partitions>", partitions) for k, v in properties.items()}

    settings: dict[str, Any] = {
        "replicator": {
            "settings": dict(SETTINGS),
            "data_path": SETTINGS.get("data_path", "auto (native when it loads)"),
            "note": "its defaults otherwise; the one-way workloads run one identity flow "
            "(REPLICATOR_REPLICA_MODE=false, flow dc1 -> dc2)",
        },
        "naive": {"consumer": CONSUMER_SETTINGS, "producer": PRODUCER_SETTINGS},
        "ceiling": {"consumer": CONSUMER_SETTINGS, "producer": PRODUCER_SETTINGS},
        "franz-go": {
            "flags": franz_go.FRANZ_GO_SETTINGS,
            "fixed": "no consumer group, start offsets, acks=all, idempotent, no compression, "
            "ManualPartitioner (the source partition)",
        },
        "mm2": {"properties": given(MM2_SETTINGS), "jvm": mm2_jvm()},
        "mm2-tuned": {"properties": given(MM2_TUNED_SETTINGS), "jvm": mm2_jvm()},
        "mm1": {"options": given(MM1_SETTINGS), "heap_mb": 1024},
    }
    return {name: value for name, value in settings.items() if name in args.contenders}


async def _throughput_runs(args: argparse.Namespace) -> list[RunResult]:
    """Every throughput workload's contenders, ``--rounds`` times each: the median runs."""
    workloads = [
        Workload("100B", 100, args.records_100b),
        Workload("1KiB", 1024, args.records_1kb),
        Workload("100B one-way mirror", 100, args.records_mirror, one_way=True),
        Workload("1KiB one-way mirror", 1024, args.records_mirror_1kb, one_way=True),
    ]
    if lists_offsets():  # Apache Kafka: a WAN listener for the relay
        name = f"100B one-way mirror, {args.wan_ms:g} ms WAN"
        workloads.append(Workload(name, 100, args.records_wan, one_way=True, wan_ms=args.wan_ms))
    runs: list[RunResult] = []
    if any(peer in args.contenders for peer in PEERS):
        console.print(f"MirrorMaker 2 settings: {MM2_SETTINGS}; MirrorMaker 1: {MM1_SETTINGS}")
        console.print(f"MirrorMaker 2 tuned: {MM2_TUNED_SETTINGS}; its JVM: {mm2_jvm()}")
    if "franz-go" in args.contenders:
        console.print(f"franz-go copy loop: {franz_go.FRANZ_GO_SETTINGS}")
    for workload in [w for w in workloads if w.records > 0]:
        # MirrorMaker copies one way: it runs in the one-way workloads only; across the WAN,
        # MirrorMaker and the replicator only (the others have no datacenter to run in).
        contenders = [c for c in args.contenders if workload.one_way or c not in PEERS]
        if workload.wan_ms:
            contenders = [c for c in contenders if c == "replicator" or c in PEERS]
        rounds: dict[str, list[RunResult]] = {c: [] for c in contenders}
        for round_number in range(1, args.rounds + 1):
            # Contenders alternate within each round, so machine noise hits them alike.
            for contender in contenders:
                console.print(f"[bold]{workload.name}[/] {contender} round {round_number} ...")
                result = await throughput(contender, workload)
                console.print(f"  {result.records_per_second:,} records/s, {result.verified}")
                rounds[contender].append(result)
        runs.extend(_median(results) for results in rounds.values())
    return runs


def _median(results: list[RunResult]) -> RunResult:
    """The median run by records/s, with the peak RSS of them all and every verdict given."""
    median = sorted(results, key=lambda r: r.records_per_second)[len(results) // 2]
    median.rounds = [(r.records_per_second, r.cpu_seconds_per_million) for r in results]
    median.peak_rss_mb = max(r.peak_rss_mb for r in results)
    if any(r.verified != median.verified for r in results):
        median.verified = "; ".join(sorted({r.verified for r in results}))
    return median


async def _two_way_runs(args: argparse.Namespace, failures: dict[str, str]) -> list[RunResult]:
    """The two-way contenders' runs (none with ``--records-two-way 0``)."""
    runs: list[RunResult] = []
    if args.records_two_way > 0:
        contenders = [c for c in TWO_WAY if c != "mm2" or "mm2" in args.contenders]
        for contender in contenders:
            console.print(f"[bold]100B two-way[/] {contender} ...")
            found = await phase(
                f"two_way {contender}", two_way(contender, args.records_two_way), failures
            )
            if found:
                runs.append(found)
                console.print(f"  {found.records_per_second:,} records/s crossed")
    return runs


async def _latencies(
    args: argparse.Namespace, failures: dict[str, str]
) -> tuple[LatencyResult | None, LatencyResult | None]:
    """The latency through the replicator, and its floor (no replicator)."""
    lat = floor = None
    if args.latency_seconds > 0:
        rate, seconds = args.latency_rate, args.latency_seconds
        console.print(f"[bold]latency floor[/] (no replicator) at {rate:,}/s for {seconds}s ...")
        floor = await phase("latency_floor", latency(rate, seconds, replicated=False), failures)
        console.print(f"[bold]latency[/] through the replicator at {rate:,}/s for {seconds}s ...")
        lat = await phase("latency", latency(rate, seconds), failures)
    return lat, floor


async def _one_way_latencies(
    args: argparse.Namespace, failures: dict[str, str]
) -> list[OneWayLatency]:
    """The one-way latency of the replicator and of each MirrorMaker (and the franz-go loop)
    asked for."""
    one_way: list[OneWayLatency] = []
    peers = [c for c in args.contenders if c in PEERS or c == "franz-go"]
    if args.latency_seconds > 0 and peers:
        rate, seconds = args.latency_rate, args.latency_seconds
        for contender in ["replicator", *peers]:
            console.print(f"[bold]one-way latency[/] {contender} at {rate:,}/s for {seconds}s ...")
            timed = await phase(
                f"one_way_latency {contender}", one_way_latency(contender, rate, seconds), failures
            )
            if timed:
                one_way.append(timed)
                console.print(f"  p50 {timed.p50_ms} ms, p99 {timed.p99_ms} ms, max {timed.max_ms}")
    return one_way


async def _resume_phase(
    args: argparse.Namespace, failures: dict[str, str]
) -> dict[str, Any] | None:
    """The cost of resuming from the destination (:mod:`benchmarks.resume`)."""
    resume = None
    if args.resume_records > 0:
        console.print(f"[bold]resume[/] tail reads on a {args.resume_records:,}-record partition")
        resume = await phase("resume", resume_cost(args.resume_records), failures)
        if resume:
            for case in ("active_origin", "idle_origin_marked", "origin_never_written_no_mark"):
                console.print(f"  {case}: {resume[case]}")
    return resume


async def _failover_phase(
    args: argparse.Namespace, failures: dict[str, str]
) -> dict[str, Any] | None:
    """The time to translate a group's positions (:mod:`benchmarks.failover`)."""
    failover = None
    if args.failover_records > 0:
        records = args.failover_records
        console.print(f"[bold]failover[/] translating a group over 12 partitions of {records:,}")
        failover = await phase("failover", failover_cost(records), failures)
        if failover:
            for case in (
                "no checkpoint, half way",
                "no checkpoint, lag 1%",
                "from a checkpoint, lag 1%",
                "from a checkpoint a round ago",
            ):
                console.print(f"  {case}: {failover[case]}")
    return failover


async def _scale_phase(args: argparse.Namespace, failures: dict[str, str]) -> dict[str, Any] | None:
    """The scale comparison (:mod:`benchmarks.scale`); its failures join ``failures``."""
    scale = None
    if args.scale_records > 0:
        layouts = [Layout.parse(token) for token in args.scale_sizes.split(",")]
        console.print(f"[bold]scale[/] {args.scale_records:,} records over {args.scale_sizes}")
        comparison = scale_comparison(layouts, args.scale_records, settings=SETTINGS)
        scale = await phase("scale", comparison, failures)
        if scale and scale["failures"]:
            failures["scale"] = "; ".join(f"{k}: {v}" for k, v in scale["failures"].items())
    return scale


async def phase(name: str, work: Coroutine[Any, Any, T], failures: dict[str, str]) -> T | None:
    """Run one benchmark phase; a failure is reported, and the other phases still run."""
    try:
        return await work
    except Exception as exc:
        failures[name] = repr(exc)
        console.print(f"[red]{name} failed:[/] {exc!r}")
        return None


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Replicator benchmark")
    # Volumes long enough for every contender's steady state: the franz-go loop copies 300,000
    # records of 100 B in half a second, and MirrorMaker 2 warms up its JIT for seconds.
    parser.add_argument(
        "--records-100b",
        type=int,
        default=3_000_000,
        help="100 B records, preloaded and replicated to two clusters",
    )
    parser.add_argument(
        "--records-1kb",
        type=int,
        default=500_000,
        help="1 KiB records, preloaded and replicated to two clusters",
    )
    parser.add_argument(
        "--records-mirror",
        type=int,
        default=3_000_000,
        help="100 B records, one-way identity flow (one destination)",
    )
    parser.add_argument("--latency-rate", type=int, default=20_000)
    # 30 s: the embedded test broker slows down past about 700,000 records in one topic.
    parser.add_argument("--latency-seconds", type=float, default=30)
    parser.add_argument("--outage-records", type=int, default=150_000)
    parser.add_argument(
        "--resume-records", type=int, default=1_000_000, help="destination size for resume reads"
    )
    parser.add_argument(
        "--failover-records",
        type=int,
        default=1_000_000,
        help="topic size (12 partitions) for translating a group's positions",
    )
    parser.add_argument(
        "--records-two-way",
        type=int,
        default=300_000,
        help="100 B records preloaded in each cluster, copied both ways (0: skip)",
    )
    parser.add_argument(
        "--records-wan",
        type=int,
        default=1_000_000,
        help="100 B records, one-way identity flow across a simulated WAN (Apache Kafka; 0: skip)",
    )
    parser.add_argument(
        "--wan-ms", type=float, default=50, help="round trip between the datacenters (WAN workload)"
    )
    parser.add_argument(
        "--records-mirror-1kb",
        type=int,
        default=500_000,
        help="1 KiB records, one-way identity flow",
    )
    parser.add_argument(
        "--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS,
        help="franz-go: the Go copy loop (built with the Go toolchain; left out of the default "
        "without one); mm2, mm2-tuned, mm1: MirrorMaker 2 with its settings and tuned, and "
        "MirrorMaker 1 (one-way workloads only)",
    )  # fmt: skip
    parser.add_argument(
        "--scale-records",
        type=int,
        default=120_000,
        help="100 B records spread over each of --scale-sizes (benchmarks.scale; 0: skip)",
    )
    parser.add_argument(
        "--scale-sizes", default="24,240", help="partition layouts compared (benchmarks.scale)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per contender (median)")
    parser.add_argument("--quick", action="store_true", help="small sizes, 10 s of latency")
    add_setting_option(parser)
    parser.add_argument(
        "--mm2-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a MirrorMaker 2 property for every run (mm2 and mm2-tuned) instead of the "
        "recommended one, e.g. tasks.max=1 (its default) to see what the recommendation is worth",
    )
    parser.add_argument(
        "--mm2-tuned-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property of mm2-tuned alone, e.g. dc2.producer.linger.ms=50",
    )
    parser.add_argument(
        "--mm2-jvm",
        choices=JVMS,
        default="launcher",
        help="the one-way MirrorMaker 2 contenders' JVM: as connect-mirror-maker.sh starts it "
        "(G1, -Xmx2G: launcher, the default) or the test suite's (serial GC, 1 GiB: suite)",
    )
    add_broker_option(parser)
    args = parser.parse_args(argv)
    choose(args)
    choose_jvm(args.mm2_jvm)
    SETTINGS.update(item.split("=", 1) for item in args.setting)
    MM2_SETTINGS.update(item.split("=", 1) for item in args.mm2_setting)
    MM2_TUNED_SETTINGS.update(item.split("=", 1) for item in args.mm2_setting)
    MM2_TUNED_SETTINGS.update(item.split("=", 1) for item in args.mm2_tuned_setting)
    if "franz-go" in args.contenders and not franz_go.available():
        if args.contenders is not parser.get_default("contenders"):  # asked for by name
            parser.error("--contenders franz-go: the Go toolchain (go) is not on the PATH")
        args.contenders.remove("franz-go")
        console.print("[yellow]no Go toolchain on the PATH: the franz-go loop is left out[/]")
    if args.quick:
        args.records_100b, args.records_1kb, args.records_mirror = 100_000, 30_000, 100_000
        args.records_mirror_1kb, args.records_two_way, args.records_wan = 30_000, 100_000, 100_000
        args.latency_seconds, args.outage_records, args.rounds = 10, 30_000, 1
        args.resume_records = args.failover_records = 200_000
        args.scale_records = 60_000
    try:
        for token in args.scale_sizes.split(","):
            Layout.parse(token)
    except ValueError as exc:
        parser.error(f"--scale-sizes: {exc}")
    return args


if __name__ == "__main__":
    uvloop.run(main(parse()))
