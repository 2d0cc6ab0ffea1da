"""The cost of resuming from the destination: reading a large destination partition's tail.

One destination partition is filled with ``records`` records as two legs write them
(``dc1`` and ``dc2`` interleaved, provenance headers included), then the reads a starting
partition makes are timed on it:

- ``active origin``: the origin wrote recently (the usual restart): the last chunk answers;
- ``idle origin, marked``: the origin went quiet long ago; the destination mark committed with
  its offset bounds the read to what others wrote since (``marked_records``);
- ``origin never written, no mark``: the worst case, a broker that keeps no commit metadata and
  an origin with nothing in the partition: the whole partition is read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.brokers import clusters
from replicator.devtools.embedded import LocalBroker
from replicator.model.provenance import Provenance, Tagger
from replicator.replication.resume import DestinationTail

TOPIC = "orders"


OriginAt = Callable[[int, int], Provenance]
"""The origin of the ``i``-th record of a partition (index, partition)."""


def alternating(i: int, partition: int) -> Provenance:
    """dc1 and dc2 one record each, in turn."""
    return Provenance("dc1" if i % 2 else "dc2", "orders_REPLICA", partition, i // 2)


async def create_topics(broker: LocalBroker, partitions: int, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


Record = Callable[[int, int], tuple[bytes | None, bytes, list[tuple[str, bytes]]]]
"""The key, value and headers of the ``i``-th record of a partition."""


async def produce_batches(
    bootstrap: str, topic: str, per_partition: int, partitions: int, record: Record
) -> None:
    """Write ``per_partition`` records (as ``record`` makes them) into each partition of
    ``topic``, in batches of 2,000, acknowledged by all replicas."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=512 * 1024)
    await producer.start()
    try:
        pending = []
        now, per_batch = int(time.time() * 1000), 2_000
        for partition in range(partitions):
            for start in range(0, per_partition, per_batch):
                batch = producer.create_batch()
                for i in range(start, min(start + per_batch, per_partition)):
                    key, value, headers = record(i, partition)
                    if batch.append(timestamp=now, key=key, value=value, headers=headers) is None:
                        raise RuntimeError(f"{per_batch} records do not fit one batch")
                pending.append(await producer.send_batch(batch, topic, partition=partition))
                if len(pending) > 32:
                    await asyncio.gather(*pending)
                    pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


async def fill(
    bootstrap: str, per_partition: int, partitions: int = 1, origin_at: OriginAt = alternating
) -> int:
    """Create ``orders`` with ``partitions`` partitions and write ``per_partition`` 100-byte
    records into each, with the provenance ``origin_at`` gives; the records per partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, partitions, 1)])
    finally:
        await admin.close()

    def record(i: int, partition: int) -> tuple[None, bytes, list[tuple[str, bytes]]]:
        return None, b"v" * 100, origin_at(i, partition).headers()

    await produce_batches(bootstrap, TOPIC, per_partition, partitions, record)
    return per_partition


async def timed(tail: DestinationTail, origin: str, floor: int | None) -> dict[str, Any]:
    began = time.monotonic()
    found = await tail.last_written(
        TopicPartition(TOPIC, 0), Tagger(origin, "orders_REPLICA", 0), floor
    )
    return {
        "ms": round((time.monotonic() - began) * 1000, 1),
        "records_read": found.scanned,
        "last_origin_offset": found.origin_offset,
    }


async def resume_cost(
    records: int, marked_records: int = 50_000, fetch_max_bytes: int = 512 * 1024
) -> dict[str, Any]:
    """Time the tail reads on a partition of ``records`` records (see the module docstring),
    with fetch answers bounded as the replicator's readers bound them (``make_reader``)."""
    with clusters("resume") as started:
        broker = started["resume"]
        log_end = await fill(broker.bootstrap_servers, records)
        reader = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers,
            enable_auto_commit=False,
            fetch_max_wait_ms=10,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=min(fetch_max_bytes, 512 * 1024),
        )
        await reader.start()
        try:
            tail = DestinationTail(reader, timeout=300, marks_group="bench.resume")
            return {
                "destination_records": log_end,
                "active_origin": await timed(tail, "dc1", None),
                "idle_origin_marked": await timed(tail, "dc3", log_end - marked_records),
                "origin_never_written_no_mark": await timed(tail, "dc3", None),
            }
        finally:
            await reader.stop()
