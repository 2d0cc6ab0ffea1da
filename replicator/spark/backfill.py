"""The backfill: copy a bounded history of replica topics to other clusters, then hand over.

Reads one cluster's ``X_REPLICA`` topics over an exact range (the log start, or the first record
at or after a timestamp, up to a snapshot of the log end taken when the job starts), tags every
record with the same provenance headers the live replicator writes, and writes it to ``X`` on
each destination, into the same partition number and in source order. Records that already carry
provenance are not copied (as live). Records a destination already holds (matched by provenance)
are not written again, so re-running a backfill over the same range adds nothing; what it skipped
is reported.

Hand-over: the live replicator's consumer group of each leg (``<prefix>.<source>.<destination>``)
is set to the snapshot end where it is behind it, so the sidecar continues exactly where the
backfill stopped. Run it while that leg's replicator is stopped (or before it first starts).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from replicator.spark.frames import (
    ClusterInput,
    origin_columns,
    read_snapshot,
    real_topic,
    tagged,
    with_provenance,
)


@dataclass
class BackfillResult:
    source: str
    records: int  # untagged source records in the range
    written: dict[str, int] = field(default_factory=dict)  # per destination
    already_there: dict[str, int] = field(default_factory=dict)
    untagged: int = 0  # real-topic records without provenance: not copied
    handed_over: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0


def run_backfill(
    spark: SparkSession,
    fmt: str,
    source: ClusterInput,
    destinations: list[ClusterInput],
    suffix: str,
    real_topics: bool = False,
) -> BackfillResult:
    """Copy ``source.snapshot`` to every destination's real topics.

    The snapshot covers replica topics (tagged here, as live), or with ``real_topics`` the real
    topics themselves (every origin's records, copied with their provenance as they are; records
    without provenance are not copied and are counted). Each destination's ``snapshot`` covers
    its real topics, read to skip the records it already holds.
    """
    started = time.monotonic()
    result = BackfillResult(source.alias, 0)
    if not any(end > start for start, end in source.snapshot.values()):
        result.seconds = time.monotonic() - started
        return result
    frame = read_snapshot(spark, fmt, source)
    columns = ["key", "value", "partition", "offset", "timestamp"]
    if real_topics:
        # counted twice (untagged, then copied): read from Kafka once
        frame = frame.select("*", *origin_columns()).cache()
        known = sf.col("o_cluster").isNotNull() & sf.col("o_offset").isNotNull()
        result.untagged = frame.filter(~known).count()
        records = frame.filter(known).withColumnRenamed("topic", "target")
    else:
        records = (
            frame.filter(~tagged())
            .select(
                real_topic(suffix).alias("target"),
                *columns,
                with_provenance(source.alias).alias("headers"),
            )
            .select("*", *origin_columns())
        )
    records = records.select(
        "target", *columns, "headers", "o_cluster", "o_partition", "o_offset"
    ).cache()
    result.records = records.count()
    frame.unpersist()  # records holds what is needed from here on
    partitions = max(1, len(source.snapshot))
    origin = ["target", "o_cluster", "o_partition", "o_offset"]
    for destination in destinations:
        out = records
        if any(end > start for start, end in destination.snapshot.values()):
            existing = (
                read_snapshot(spark, fmt, destination)
                .select(sf.col("topic").alias("target"), *origin_columns())
                .select(*origin)
                .distinct()
            )
            out = records.join(existing, origin, "left_anti")
        # One writer per Kafka partition's rows, in source order.
        ordered = (
            out.repartition(partitions, "target", "partition")
            .sortWithinPartitions("target", "partition", "offset")
            .cache()
        )
        written = ordered.count()
        held = result.records - written
        (
            ordered.select(
                sf.col("target").alias("topic"),
                "key",
                "value",
                "headers",
                "partition",
                sf.unix_millis("timestamp").alias("timestamp"),
            )
            .write.format(fmt)
            .options(**destination.options)
            .mode("append")
            .save()
        )
        ordered.unpersist()
        result.written[destination.alias] = written
        result.already_there[destination.alias] = held
    records.unpersist()
    result.seconds = time.monotonic() - started
    return result


async def _hand_over(
    client: dict[str, Any], group: str, ends: dict[TopicPartition, int]
) -> dict[str, int]:
    consumer = AIOKafkaConsumer(**client, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(ends))
        moved = {}
        for tp, end in ends.items():
            committed = await consumer.committed(tp)
            if committed is None or committed < end:
                moved[tp] = end
        if moved:
            await consumer.commit(moved)
        return {f"{tp.topic}[{tp.partition}]": offset for tp, offset in sorted(moved.items())}
    finally:
        await consumer.stop()


def hand_over(client: dict[str, Any], source: ClusterInput, group: str) -> dict[str, int]:
    """Set ``group`` (a leg's group on the source cluster) to the snapshot end where behind."""
    ends = {tp: end for tp, (_, end) in source.snapshot.items()}
    return asyncio.run(_hand_over(client, group, ends))
