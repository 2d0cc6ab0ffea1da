"""DataFrames of Kafka snapshots, and provenance as Spark columns (the jobs' shared vocabulary).

The columns here are the Spark form of :mod:`replicator.provenance` (same header, same grammar,
same loop rule), built from Spark's own functions so the jobs stay columnar: no Python UDF.
tests/unit/test_spark_provenance.py checks them against that module, case by case.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from replicator.provenance import HEADER_NAMES, ORIGIN, UPSTREAM, VALUE_PATTERN, Marking
from replicator.snapshot import Range
from replicator.spark.kafka_source import offsets_json

_EMPTY = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)


MIN_OFFSETS_PER_TASK = 50_000
"""Below this, a range is not split: a task's own cost (a client, a Spark task) would show."""


@dataclass
class ClusterInput:
    """One cluster a job reads or writes: its Spark Kafka options and its snapshot.

    ``offsets_per_task`` splits each partition's range into Spark tasks of at most that many
    offsets; 0 chooses from the snapshot and the executors' cores (:func:`offsets_per_task`).
    """

    alias: str
    options: dict[str, str]
    snapshot: dict[Any, Range] = field(default_factory=dict)
    offsets_per_task: int = 0


def offsets_per_task(ranges: Iterable[Range], cores: int) -> int:
    """About two tasks per core over all ``ranges`` (so uneven partitions even out), but never
    tasks smaller than :data:`MIN_OFFSETS_PER_TASK`."""
    total = sum(end - start for start, end in ranges)
    return max(MIN_OFFSETS_PER_TASK, -(-total // (2 * max(1, cores))))


def task_size(spark: SparkSession, cluster: ClusterInput) -> int:
    """The offsets per task a read of ``cluster``'s snapshot uses."""
    cores = spark.sparkContext.defaultParallelism
    return cluster.offsets_per_task or offsets_per_task(cluster.snapshot.values(), cores)


def read_snapshot(
    spark: SparkSession, fmt: str, cluster: ClusterInput, topics: list[str] | None = None
) -> DataFrame:
    """The records of ``cluster``'s snapshot (of ``topics`` only, if given), with headers.

    One Spark partition per offset range (ranges longer than :func:`task_size` split), each in
    offset order.
    """
    ranges = {tp: r for tp, r in cluster.snapshot.items() if topics is None or tp.topic in topics}
    if not any(end > start for start, end in ranges.values()):
        return spark.createDataFrame([], _EMPTY)
    step = task_size(spark, cluster)
    tasks = sum(-(-(end - start) // step) for start, end in ranges.values())
    frame = (
        spark.read.format(fmt)
        .options(**cluster.options)
        .option("subscribe", ",".join(sorted({tp.topic for tp in ranges})))
        .option("startingOffsets", offsets_json({tp: r[0] for tp, r in ranges.items()}))
        .option("endingOffsets", offsets_json({tp: r[1] for tp, r in ranges.items()}))
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTask", str(step))
        .option("minPartitions", str(tasks))  # the standard connector's way to split
        .load()
    )
    return frame.select("key", "value", "topic", "partition", "offset", "timestamp", "headers")


def tagged() -> Column:
    """Whether a record carries a provenance header (``replicator``, ``replicator-upstream``)."""
    return sf.exists("headers", lambda h: h["key"].isin(*HEADER_NAMES))


# The whole value, as provenance.decode reads it (\A and \z: Java's $ would accept a final "\n").
_VALUE = rf"\A(?:{VALUE_PATTERN})\z"


def _origin() -> tuple[Column, Column, Column, Column, Column, Column]:
    """How many ``replicator`` headers a record has, whether there is exactly one that
    :func:`replicator.provenance.decode` accepts, and its four fields (nulls unless it does)."""
    values = sf.filter("headers", lambda h: h["key"] == sf.lit(ORIGIN))
    count = sf.size(values)
    raw = sf.when(count == 1, sf.try_element_at(values, sf.lit(1))["value"].cast("string"))
    found = sf.coalesce(raw.rlike(_VALUE), sf.lit(False))

    parts = sf.split(raw, "/")  # the grammar's four fields hold no "/"

    def group(index: int) -> Column:
        return sf.when(found, parts[index - 1])

    partition = group(3).try_cast("int")  # null beyond 2**31 - 1, as decode refuses
    offset = group(4).try_cast("long")  # null beyond 2**63 - 1
    valid = found & partition.isNotNull() & offset.isNotNull()
    return (
        count,
        valid,
        sf.when(valid, group(1)),
        sf.when(valid, group(2)),
        sf.when(valid, partition),
        sf.when(valid, offset),
    )


def origin_columns() -> list[Column]:
    """``o_cluster``, ``o_topic``, ``o_partition``, ``o_offset``: the ``replicator`` header.

    All four are null when the record has no such header, when its value does not parse (or its
    partition or offset is out of range), and when it appears more than once: a record has one
    provenance or none readable, as :func:`replicator.provenance.parse` decides.
    """
    _, _, cluster, topic, partition, offset = _origin()
    return [
        cluster.alias("o_cluster"),
        topic.alias("o_topic"),
        partition.alias("o_partition"),
        offset.alias("o_offset"),
    ]


def marking(topic: str = "topic") -> Column:
    """The loop rule (:func:`replicator.provenance.marking`) for a record read from ``topic``.

    A :class:`~replicator.provenance.Marking` value: ``untagged`` (no provenance header),
    ``derived`` (provenance naming another topic, or only ``replicator-upstream``), ``loop``
    (provenance naming ``topic`` itself, of any cluster) or ``malformed_provenance``.
    """
    count, valid, _, origin_topic, _, _ = _origin()
    return (
        sf.when(
            count == 0,
            sf.when(tagged(), sf.lit(Marking.DERIVED.value)).otherwise(Marking.UNTAGGED.value),
        )
        .when(~valid, sf.lit(Marking.MALFORMED.value))
        .when(origin_topic == sf.col(topic), sf.lit(Marking.LOOP.value))
        .otherwise(sf.lit(Marking.DERIVED.value))
    )


REPLICATED = (Marking.UNTAGGED.value, Marking.DERIVED.value)
"""The markings the replicator replicates (as new data, with fresh provenance)."""


def real_topic(suffix: str) -> Column:
    """``X`` for a record of ``X_REPLICA``."""
    return sf.expr(f"substring(topic, 1, length(topic) - {len(suffix)})")


def provenance_value(alias: str) -> Column:
    """``<alias>/<topic>/<partition>/<offset>`` of the record, as the live replicator writes it."""
    return sf.concat_ws(
        "/",
        sf.lit(alias),
        sf.col("topic"),
        sf.col("partition").cast("string"),
        sf.col("offset").cast("string"),
    ).cast("binary")


def with_provenance(alias: str) -> Column:
    """The headers the live replicator writes for a record (untagged or derived) of ``alias``.

    The application's own headers, in order (provenance headers removed), then, for a derived
    record, the ``replicator`` value it carried as ``replicator-upstream``, then its own
    ``replicator: <alias>/<topic>/<partition>/<offset>``: what
    :meth:`replicator.provenance.Tagger.retag` returns. Meaningful only for records the loop
    rule replicates (:data:`REPLICATED`).
    """

    def entry(name: str, value: Column) -> Column:
        return sf.struct(sf.lit(name).alias("key"), value.cast("binary").alias("value"))

    own = sf.filter("headers", lambda h: ~h["key"].isin(*HEADER_NAMES))
    carried = sf.transform(
        sf.filter("headers", lambda h: h["key"] == sf.lit(ORIGIN)),
        lambda h: entry(UPSTREAM, h["value"]),
    )
    return sf.concat(own, carried, sf.array(entry(ORIGIN, provenance_value(alias))))
