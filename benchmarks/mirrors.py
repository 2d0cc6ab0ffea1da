"""Reference mirrors the benchmark compares the replicator against, run as separate processes.

- ``naive``: what most hand-written Python mirrors do: one consumer, ``producer.send()`` per record
  to each destination (``acks=all``), a commit after each polled batch is acknowledged.
- ``ceiling``: a minimal batch-copy loop with no replicator features (no provenance, no loop check,
  no offset tracking, no commits): one consumer, one ``create_batch``/``send_batch`` per partition
  and destination. It bounds what this machine can do with aiokafka.

Both read ``<topic>_REPLICA`` (``--source-topic``: any topic, for the one-way mirror) on the
source and write ``<topic>`` (same partition) to every destination, until stopped with SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable
from typing import Any

import uvloop
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from replicator.kafka.readers import partitions_of

CONSUMER_SETTINGS: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "fetch_max_bytes": 16 * 1024 * 1024,
    "max_partition_fetch_bytes": 1024 * 1024,
}
"""Both mirrors' aiokafka consumer (recorded with the figures)."""

PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "linger_ms": 5,
    "max_batch_size": 512 * 1024,
    "max_request_size": 1024 * 1024,
}
"""Both mirrors' aiokafka producers, one per destination (recorded with the figures)."""


async def _clients(
    source: str, destinations: list[str], group: str
) -> tuple[AIOKafkaConsumer, list[AIOKafkaProducer]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=source, group_id=group, **CONSUMER_SETTINGS)
    producers = [AIOKafkaProducer(bootstrap_servers=d, **PRODUCER_SETTINGS) for d in destinations]
    for producer in producers:
        await producer.start()
    await consumer.start()
    return consumer, producers


async def naive(
    source: str, destinations: list[str], topic: str, source_topic: str, stop: asyncio.Event
) -> None:
    consumer, producers = await _clients(source, destinations, "bench-naive")
    consumer.subscribe([source_topic])
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=100, max_records=5000)
            futures: list[Awaitable[Any]] = []
            for tp, records in fetched.items():
                for record in records:
                    for producer in producers:
                        futures.append(
                            await producer.send(
                                topic,
                                key=record.key,
                                value=record.value,
                                partition=tp.partition,
                                timestamp_ms=record.timestamp,
                                headers=list(record.headers),
                            )
                        )
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
    finally:
        await _close(consumer, producers)


async def ceiling(
    source: str, destinations: list[str], topic: str, source_topic: str, stop: asyncio.Event
) -> None:
    consumer, producers = await _clients(source, destinations, "bench-ceiling")
    partitions = await partitions_of(consumer, source_topic)
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    pending: list[asyncio.Future[Any]] = []
    try:
        while not stop.is_set():
            fetched = await consumer.getmany(timeout_ms=100)
            for tp, records in fetched.items():
                for producer in producers:
                    batch = producer.create_batch()
                    for r in records:
                        if (
                            batch.append(
                                timestamp=r.timestamp,
                                key=r.key,
                                value=r.value,
                                headers=list(r.headers),
                            )
                            is None
                        ):
                            pending.append(
                                await producer.send_batch(batch, topic, partition=tp.partition)
                            )
                            batch = producer.create_batch()
                            batch.append(
                                timestamp=r.timestamp,
                                key=r.key,
                                value=r.value,
                                headers=list(r.headers),
                            )
                    pending.append(await producer.send_batch(batch, topic, partition=tp.partition))
            pending = [f for f in pending if not f.done()]
    finally:
        await _close(consumer, producers)


async def _close(consumer: AIOKafkaConsumer, producers: list[AIOKafkaProducer]) -> None:
    await consumer.stop()
    for producer in producers:
        await producer.stop()


async def main(
    kind: str, source: str, destinations: list[str], topic: str, source_topic: str
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    mirror = {"naive": naive, "ceiling": ceiling}[kind]
    await mirror(source, destinations, topic, source_topic, stop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=["naive", "ceiling"])
    parser.add_argument("--source", required=True)
    parser.add_argument("--destinations", required=True, help="comma-separated bootstrap servers")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--source-topic", help="default: <topic>_REPLICA")
    args = parser.parse_args()
    source_topic = args.source_topic or f"{args.topic}_REPLICA"
    uvloop.run(main(args.kind, args.source, args.destinations.split(","), args.topic, source_topic))
