"""The embedded two-datacenter demo: two local brokers, two replicators, live traffic both ways.

It proves what it shows: the records produced to ``orders_REPLICA`` in each datacenter are read
back from ``orders`` in every datacenter and counted by origin, with duplicates and missing ones.
Exit status 0 only when every cluster holds every record exactly once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from replicator.devtools.embedded import (
    EmbeddedBroker,
    LocalBroker,
    embedded_clusters,
    free_port,
    replicator_environment,
    wait_until_ready,
)
from replicator.kafka.readers import read_topic
from replicator.telemetry.logs import print_table

TOPIC = "orders"
PARTITIONS = 3
console = Console(stderr=True)


@dataclass
class Sidecar:
    alias: str
    http_port: int
    process: subprocess.Popen[bytes]
    log_path: str


def start_sidecar(alias: str, brokers: dict[str, EmbeddedBroker]) -> Sidecar:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    env.update(replicator_environment(alias, brokers, port, log_format="json"))
    fd, log_path = tempfile.mkstemp(prefix=f"replicator-{alias}-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "replicator", "run"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Sidecar(alias, port, process, log_path)


async def create_replica_topic(broker: LocalBroker) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"{TOPIC}_REPLICA", PARTITIONS, 1)])
    finally:
        await admin.close()


async def produce(broker: EmbeddedBroker, rate: int, seconds: float) -> int:
    """Publish ``orders_REPLICA`` records at about ``rate`` per second; return how many."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=5)
    await producer.start()
    sent = 0
    try:
        start = time.monotonic()
        tick = 0.05
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(rate * (elapsed + tick)) - sent
            futures = []
            for _ in range(max(0, due)):
                key = f"customer-{sent % 97}".encode()
                value = f'{{"dc":"{broker.alias}","order":{sent}}}'.encode()
                futures.append(await producer.send(f"{TOPIC}_REPLICA", value=value, key=key))
                sent += 1
            await asyncio.gather(*futures)
            await asyncio.sleep(tick)
    finally:
        await producer.stop()
    return sent


async def wait_replicated(
    brokers: dict[str, EmbeddedBroker], expected: int, timeout: float
) -> dict[str, Counter[tuple[str, int, int]]]:
    """Read ``orders`` everywhere until each holds ``expected`` records (or time runs out)."""
    deadline = time.monotonic() + timeout
    while True:
        seen: dict[str, Counter[tuple[str, int, int]]] = {}
        for alias, broker in brokers.items():
            records = await read_topic(broker.bootstrap_servers, TOPIC)
            seen[alias] = Counter(
                (p.cluster, p.partition, p.offset)
                for r in records
                if (p := r.provenance) is not None
            )
        if all(sum(c.values()) >= expected for c in seen.values()):
            return seen
        if time.monotonic() > deadline:
            return seen
        await asyncio.sleep(1.0)


async def run_demo(seconds: float, rate: int) -> int:
    aliases = ("dc1", "dc2")
    with embedded_clusters(*aliases) as brokers:
        for alias, broker in brokers.items():
            console.print(f"[bold]{alias}[/]: broker on {broker.bootstrap_servers}")
            await create_replica_topic(broker)
        sidecars = [start_sidecar(alias, brokers) for alias in aliases]
        try:
            await asyncio.gather(
                *(wait_until_ready(s.http_port, s.process, s.log_path) for s in sidecars)
            )
            console.print(
                f"replicators ready; producing {rate} records/s to {TOPIC}_REPLICA "
                f"in each datacenter for {seconds:.0f}s"
            )
            started = time.monotonic()
            produced = dict(
                zip(
                    aliases,
                    await asyncio.gather(*(produce(brokers[a], rate, seconds) for a in aliases)),
                    strict=True,
                )
            )
            total = sum(produced.values())
            seen = await wait_replicated(brokers, total, timeout=120)
            elapsed = time.monotonic() - started
        finally:
            for sidecar in sidecars:
                sidecar.process.send_signal(signal.SIGTERM)
            for sidecar in sidecars:
                try:
                    sidecar.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    sidecar.process.kill()
    return report(produced, seen, elapsed)


def report(
    produced: dict[str, int], seen: dict[str, Counter[tuple[str, int, int]]], elapsed: float
) -> int:
    table, ok = report_table(produced, seen)
    print_table(console, table)
    delivered = sum(sum(c.values()) for c in seen.values())
    console.print(
        f"{delivered} records written to {len(seen)} clusters in {elapsed:.1f}s "
        f"(produced {sum(produced.values())}; {delivered / elapsed:.0f} records/s replicated)"
    )
    console.print(
        "[green]OK: every record in every datacenter exactly once[/]"
        if ok
        else "[red]FAILED: records missing or duplicated[/]"
    )
    return 0 if ok else 1


def report_table(
    produced: dict[str, int], seen: dict[str, Counter[tuple[str, int, int]]]
) -> tuple[Table, bool]:
    """The demo's table: per cluster, the records of each origin it holds, duplicates and
    missing ones; and whether every cluster holds every record exactly once."""
    table = Table(title=f"'{TOPIC}' in every datacenter after replication")
    table.add_column("cluster")
    for origin in produced:
        table.add_column(f"from {origin}", justify="right")
    table.add_column("total", justify="right")
    table.add_column("duplicates", justify="right")
    table.add_column("missing", justify="right")
    ok = True
    for alias, counts in seen.items():
        by_origin = Counter(origin for origin, _, _ in counts.elements())
        duplicates = sum(n - 1 for n in counts.values() if n > 1)
        missing = sum(produced.values()) - len(counts)
        ok = ok and duplicates == 0 and missing == 0
        table.add_row(
            alias,
            *(f"{by_origin[o]}/{produced[o]}" for o in produced),
            str(sum(counts.values())),
            str(duplicates),
            str(missing),
        )
    return table, ok


def main(seconds: float, rate: int) -> int:
    return asyncio.run(run_demo(seconds, rate))
