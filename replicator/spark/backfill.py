"""The backfill: copy a bounded history of replica topics to other clusters, then hand over.

Reads one cluster's ``X_REPLICA`` topics over an exact range (the log start, or the first record
at or after a timestamp, up to a snapshot of the log end taken when the job starts), applies the
loop rule (:mod:`replicator.model.provenance`) to every record as the live replicator does, and
writes what it replicates to ``X`` on each destination, into the same partition number and in source
order, with exactly the headers the live replicator writes: untagged records get
``replicator: <source>/X_REPLICA/<p>/<o>`` after their own headers; derived records (provenance
naming another topic, or only ``replicator-upstream``) get their own headers, the provenance they
carried as ``replicator-upstream``, then their fresh ``replicator``. Loops (provenance naming
``X_REPLICA`` itself) and records with malformed provenance are not copied, and are counted in
the result. Records a destination already holds (matched by provenance) are not written again,
so re-running a backfill over the same range adds nothing; what it skipped is reported.

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

from replicator.model.provenance import Marking
from replicator.spark.frames import (
    REPLICATED,
    ClusterInput,
    marking,
    origin_columns,
    parsed,
    read_snapshot,
    real_topic,
    task_size,
    with_provenance,
)
from replicator.spark.kafka_source import FORMAT

_WITH, _WITHOUT = "with_provenance", "without_provenance"  # a real-topic record's kind


@dataclass
class BackfillResult:
    source: str
    # records to copy: the untagged and derived ones of the replica topics' range (with real
    # topics: those with provenance)
    records: int
    written: dict[str, int] = field(default_factory=dict)  # per destination
    already_there: dict[str, int] = field(default_factory=dict)
    derived: int = 0  # of ``records``: derived, copied with fresh provenance and their upstream
    loops: int = 0  # provenance naming the replica topic they sit in: not copied (as live)
    malformed: int = 0  # a provenance header that does not parse or is repeated: not copied
    untagged: int = 0  # real-topic records without (readable) provenance: not copied
    handed_over: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0
    # where the time went: "read" (the source read and classified), "write <destination>"
    timings: dict[str, float] = field(default_factory=dict)


def run_backfill(
    spark: SparkSession,
    fmt: str,  # the format that reads (the connector's)
    source: ClusterInput,
    destinations: list[ClusterInput],
    suffix: str,
    real_topics: bool = False,
) -> BackfillResult:
    """Copy ``source.snapshot`` to every destination's real topics.

    The snapshot covers replica topics (the loop rule applied and provenance written here, as
    live; loops and malformed provenance counted, not copied), or with ``real_topics`` the real
    topics themselves (every origin's records, copied with their provenance as they are; records
    without provenance are not copied and are counted). Each destination's ``snapshot`` covers
    its real topics, read to skip the records it already holds.
    """
    started = time.monotonic()
    result = BackfillResult(source.alias, 0)
    if not any(end > start for start, end in source.snapshot.values()):
        result.seconds = time.monotonic() - started
        return result
    frame = parsed(read_snapshot(spark, fmt, source))
    columns = ["key", "value", "partition", "offset", "timestamp"]
    origin = ["target", "o_cluster", "o_topic", "o_partition", "o_offset"]
    if real_topics:
        marked = frame.select(
            sf.col("topic").alias("target"), *columns, "headers", *origin_columns()
        ).withColumn("kind", sf.when(sf.col("o_cluster").isNotNull(), _WITH).otherwise(_WITHOUT))
        copied: tuple[str, ...] = (_WITH,)
    else:
        marked = frame.select(
            real_topic(suffix).alias("target"),
            *columns,
            with_provenance(source.alias).alias("headers"),
            sf.lit(source.alias).alias("o_cluster"),
            sf.col("topic").alias("o_topic"),
            sf.col("partition").alias("o_partition"),
            sf.col("offset").alias("o_offset"),
            marking().alias("kind"),
        )
        copied = REPLICATED
    # Counted by kind, then copied: read from Kafka once.
    marked = marked.cache()
    kinds = {r["kind"]: int(r["count"]) for r in marked.groupBy("kind").count().collect()}
    result.records = sum(kinds.get(k, 0) for k in copied)
    result.derived = kinds.get(Marking.DERIVED.value, 0)
    result.loops = kinds.get(Marking.LOOP.value, 0)
    result.malformed = kinds.get(Marking.MALFORMED.value, 0)
    result.untagged = kinds.get(_WITHOUT, 0)
    result.timings["read"] = round(time.monotonic() - started, 2)
    records = marked.filter(sf.col("kind").isin(*copied)).select(
        "target", *columns, "headers", *origin[1:]
    )
    partitions = max(1, len(source.snapshot))
    step = task_size(spark, source)
    split = any(end - start > step for start, end in source.snapshot.values())
    for destination in destinations:
        writing = time.monotonic()
        out, written = records, result.records
        held = any(end > start for start, end in destination.snapshot.values())
        if held:
            existing = (
                parsed(read_snapshot(spark, fmt, destination))
                .select(sf.col("topic").alias("target"), *origin_columns())
                .select(*origin)
                .distinct()
            )
            out = records.join(existing, origin, "left_anti")
        # Each Spark partition of the read holds one Kafka partition's range, in source order;
        # after a join or a split, one writer per Kafka partition's rows, sorted again.
        ordered = out
        if held or split:
            ordered = out.repartition(partitions, "target", "partition").sortWithinPartitions(
                "target", "partition", "offset"
            )
        if held:
            ordered = ordered.cache()
            written = ordered.count()
        (
            ordered.select(
                sf.col("target").alias("topic"),
                "key",
                "value",
                "headers",
                "partition",
                sf.unix_millis("timestamp").alias("timestamp"),
            )
            # replicator-kafka, whichever connector read: Spark's own Kafka sink has no
            # timestamp column, and would stamp every copy with the time it was written.
            .write.format(FORMAT)
            .options(**destination.options)
            .mode("append")
            .save()
        )
        ordered.unpersist()
        result.written[destination.alias] = written
        result.already_there[destination.alias] = result.records - written
        result.timings[f"write {destination.alias}"] = round(time.monotonic() - writing, 2)
    marked.unpersist()
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
