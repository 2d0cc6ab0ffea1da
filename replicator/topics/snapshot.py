"""Offset snapshots: the exact ``[start, end)`` range of every partition of some topics.

End offsets are the high watermarks of fetch responses, not ListOffsets(LATEST) answers, which
some brokers get wrong after multi-record batches. Starts are the log start, or the first offset
at or after a timestamp.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.config.topology import TopicRules, TopicSelection
from replicator.kafka.readers import partitions_of

Range = tuple[int, int]


async def cluster_topics(client: dict[str, Any]) -> set[str]:
    """The names of every topic on a cluster (one metadata request)."""
    consumer = AIOKafkaConsumer(**client, enable_auto_commit=False)
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()


async def topic_selection(client: dict[str, Any], rules: TopicRules) -> TopicSelection:
    """What ``rules`` make of every topic on a cluster: replicated, and rejected with why."""
    return rules.select(await cluster_topics(client))


async def replica_topics(client: dict[str, Any], rules: TopicRules) -> list[str]:
    """The replica topics on a cluster that ``rules`` replicate, sorted."""
    return list((await topic_selection(client, rules)).replicated)


async def snapshot(
    client: dict[str, Any],
    topics: list[str],
    since_ms: int | None = None,
    timeout: float = 30.0,
) -> dict[TopicPartition, Range]:
    """``{partition: (start, end)}`` for every partition of ``topics`` that exist."""
    # An empty partition's fetch is held for fetch_max_wait_ms: the log end is all it brings.
    consumer = AIOKafkaConsumer(
        **client, enable_auto_commit=False, auto_offset_reset="none", fetch_max_wait_ms=20
    )
    await consumer.start()
    try:
        partitions = await partitions_of(consumer, *topics)
        if not partitions:
            return {}
        consumer.assign(partitions)
        begin = await consumer.beginning_offsets(partitions)
        listed = await consumer.end_offsets(partitions)
        starts = dict(begin)
        if since_ms is not None:
            found = await consumer.offsets_for_times({tp: since_ms for tp in partitions})
            starts = {tp: (found[tp].offset if found[tp] else listed[tp]) for tp in partitions}
        for tp in partitions:  # one fetch near the end reports the true log end
            consumer.seek(tp, max(begin[tp], listed[tp] - 1))
        ends: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + timeout
        while len(ends) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no log end for {sorted(set(partitions) - set(ends))}")
            await consumer.getmany(timeout_ms=200)
            for tp in partitions:
                end = consumer.highwater(tp)
                if end is not None:
                    ends[tp] = end
                    consumer.pause(tp)
        return {tp: (min(starts[tp], ends[tp]), ends[tp]) for tp in partitions}
    finally:
        await consumer.stop()


def take(
    client: dict[str, Any], topics: list[str], since_ms: int | None = None
) -> dict[TopicPartition, Range]:
    return asyncio.run(snapshot(client, topics, since_ms))
