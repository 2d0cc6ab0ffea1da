"""The fetch sessions benchmark: what a fetch costs with many idle partitions, with and without.

One fresh Apache Kafka node; for each size, a topic of that many partitions, all assigned to one
source consumer made by the product's factory (the product's fetch wait), and one of them
active: a producer in another thread writes a record to partition 0 every ``--interval-ms``.
For ``--seconds``, each fetch is counted as it crosses the consumer's client: the partitions its
request names and its answer names, their bytes (on the first ``SAMPLED`` fetches), and the
consumer thread's CPU. **without**: aiokafka's fetches, every partition in every request and
answer; **with**: the same consumer through incremental fetch sessions
(:mod:`replicator.kafka.fetch_sessions`), after its first full fetch; **planned**: with fetch
sessions and the fetch planner (:mod:`replicator.kafka.fetch_planner`), as the product's
consumers fetch. The producer shares the
process (and its GIL): records per second are bounded by it as much as by the consumer.

    .venv/bin/python -m benchmarks.fetch_sessions                    # 24, 1200, 6000
    .venv/bin/python -m benchmarks.fetch_sessions --sizes 24,1200 --seconds 5
    .venv/bin/python -m benchmarks.fetch_sessions --sizes 2000,10000 --paused 0.99
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.brokers import broker_name, clusters
from benchmarks.shared import console, rows_table
from replicator.config.loading import load_settings
from replicator.devtools.embedded import LocalBroker
from replicator.kafka.clients import make_consumer
from replicator.kafka.fetch_planner import use_fetch_planner
from replicator.kafka.fetch_sessions import SessionFetch, use_fetch_sessions
from replicator.kafka.internals import kafka_client

SAMPLED = 50  # fetches whose bytes are counted (encoding them costs CPU)
VERSIONS = {1: (4, 11)}


@dataclass
class Figures:
    """One consumer over one topic for the measured window."""

    partitions: int
    sessions: bool
    planner: bool = False
    paused: int = 0
    fetches: int = 0
    listed: int = 0
    answered: int = 0
    request_bytes: int = 0
    answer_bytes: int = 0
    sampled: int = 0
    records: int = 0
    cpu_s: float = 0.0
    seconds: float = 0.0

    def row(self) -> dict[str, Any]:
        per = max(self.fetches, 1)
        sampled = max(self.sampled, 1)
        return {
            "partitions": self.partitions,
            "sessions": self.sessions,
            "planner": self.planner,
            "paused": self.paused,
            "fetches_per_s": round(self.fetches / self.seconds, 1),
            "listed_per_fetch": round(self.listed / per, 2),
            "answered_per_fetch": round(self.answered / per, 2),
            "request_bytes": round(self.request_bytes / sampled),
            "answer_bytes": round(self.answer_bytes / sampled),
            "records_per_s": round(self.records / self.seconds, 1),
            "cpu_percent": round(100 * self.cpu_s / self.seconds, 1),
            "cpu_ms_per_fetch": round(1000 * self.cpu_s / per, 2),
            "cpu_ms_per_1000_records": round(1_000_000 * self.cpu_s / max(self.records, 1), 1),
        }


@dataclass
class Counting:
    """Counts each fetch a consumer's client sends, once ``on``."""

    figures: Figures
    on: bool = False
    first: list[int] = field(default_factory=list)

    def watch(self, consumer: AIOKafkaConsumer) -> None:
        client = kafka_client(consumer)
        send = client.send

        async def counted(node_id: int, request: Any, **options: Any) -> Any:
            response = await send(node_id, request, **options)
            if self.on and hasattr(request, "topics") and request.API_KEY == 1:
                self.count(request, response)
            return response

        client.send = counted

    def count(self, request: Any, response: Any) -> None:
        figures = self.figures
        struct = request.struct if isinstance(request, SessionFetch) else None
        topics = struct.topics if struct is not None else request.topics
        figures.fetches += 1
        figures.listed += sum(len(partitions) for _, partitions in topics)
        figures.answered += sum(len(partitions) for _, partitions in response.topics)
        if figures.sampled < SAMPLED:
            figures.sampled += 1
            built = struct if struct is not None else request.prepare(VERSIONS)
            figures.request_bytes += len(built.encode())
            figures.answer_bytes += len(response.encode())


def produce(bootstrap: str, topic: str, interval_s: float, stop: threading.Event) -> None:
    """A record to partition 0 every ``interval_s`` until ``stop`` (its own thread and loop)."""

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
        await producer.start()
        try:
            while not stop.is_set():
                await producer.send_and_wait(topic, b"x" * 100, partition=0)
                await asyncio.sleep(interval_s)
        finally:
            await producer.stop()

    asyncio.run(main())


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def log_ends(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], within_s: float = 300.0
) -> dict[TopicPartition, int]:
    """Each partition's log end, once every leader of the new topic is ready (thousands of
    partitions take longer than one ListOffsets waits)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
            return ends
        except Exception:  # aiokafka's KafkaTimeoutError: some leaders not ready yet
            if time.monotonic() > deadline:
                raise


async def measure(
    broker: LocalBroker, topic: str, partitions: int, variant: tuple[bool, bool], shape: Shape
) -> Figures:
    settings = load_settings(
        {
            "REPLICATOR_LOCAL_CLUSTER": "dc1",
            "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        }
    )
    consumer = make_consumer(settings.clusters["dc1"], settings, "bench-sessions", "bench")
    await consumer.start()
    sessions, planner = variant
    if sessions:
        use_fetch_sessions(consumer)
    if planner:
        use_fetch_planner(consumer)
    paused = [TopicPartition(topic, p) for p in range(1, partitions)][
        : int(shape.paused * partitions)
    ]
    figures = Figures(partitions, sessions, planner, len(paused))
    counting = Counting(figures)
    counting.watch(consumer)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await log_ends(consumer, assigned)
        consumer.assign(assigned)
        for tp in assigned:
            consumer.seek(tp, ends[tp])
        for tp in paused:  # a leg's source consumer: those not catching up alone
            consumer.pause(tp)
        await consumer.getmany(timeout_ms=1000)  # past the first (full) fetch
        counting.on = True
        start, cpu = time.monotonic(), time.thread_time()
        while time.monotonic() - start < shape.seconds:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                figures.records += len(records)
        figures.cpu_s = time.thread_time() - cpu
        figures.seconds = time.monotonic() - start
    finally:
        await consumer.stop()
    return figures


@dataclass(frozen=True)
class Shape:
    """What is measured: for how long, the share of partitions paused (never partition 0)."""

    seconds: float
    paused: float = 0.0


VARIANTS = ((False, False), (True, False), (True, True))  # (sessions, planner)


def run_size(
    broker: LocalBroker, partitions: int, shape: Shape, interval_s: float
) -> list[Figures]:
    topic = f"idle{partitions}"
    asyncio.run(create_topic(broker.bootstrap_servers, topic, partitions))
    stop = threading.Event()
    producer = threading.Thread(
        target=produce, args=(broker.bootstrap_servers, topic, interval_s, stop), daemon=True
    )
    producer.start()
    try:
        found = []
        for variant in VARIANTS:
            found.append(asyncio.run(measure(broker, topic, partitions, variant, shape)))
            print(json.dumps(found[-1].row()), flush=True)  # each as it comes
        return found
    finally:
        stop.set()
        producer.join(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="24,1200,6000", help="partition counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured per consumer")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="between two records")
    parser.add_argument("--paused", type=float, default=0.0, help="share of partitions paused")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    results: list[Figures] = []
    with clusters("dc1") as started:
        for size in sizes:
            shape = Shape(args.seconds, args.paused)
            results.extend(run_size(started["dc1"], size, shape, args.interval_ms / 1000))
    rows = [figures.row() for figures in results]
    console.print(rows_table(f"Fetches with one active partition, on {broker_name()}", rows))
    print(json.dumps({"broker": broker_name(), "runs": rows, "raw": [asdict(r) for r in results]}))


if __name__ == "__main__":
    main()
