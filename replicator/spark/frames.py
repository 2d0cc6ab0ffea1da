"""DataFrames of Kafka snapshots, and provenance as Spark columns (the jobs' shared vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from replicator.provenance import (
    HEADER_NAMES,
    ORIGIN_CLUSTER,
    ORIGIN_OFFSET,
    ORIGIN_PARTITION,
    ORIGIN_TOPIC,
)
from replicator.snapshot import Range
from replicator.spark.kafka_source import offsets_json

_EMPTY = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)


@dataclass
class ClusterInput:
    """One cluster a job reads or writes: its Spark Kafka options and its snapshot."""

    alias: str
    options: dict[str, str]
    snapshot: dict[Any, Range] = field(default_factory=dict)


def read_snapshot(
    spark: SparkSession, fmt: str, cluster: ClusterInput, topics: list[str] | None = None
) -> DataFrame:
    """The records of ``cluster``'s snapshot (of ``topics`` only, if given), with headers."""
    ranges = {tp: r for tp, r in cluster.snapshot.items() if topics is None or tp.topic in topics}
    if not any(end > start for start, end in ranges.values()):
        return spark.createDataFrame([], _EMPTY)
    frame = (
        spark.read.format(fmt)
        .options(**cluster.options)
        .option("subscribe", ",".join(sorted({tp.topic for tp in ranges})))
        .option("startingOffsets", offsets_json({tp: r[0] for tp, r in ranges.items()}))
        .option("endingOffsets", offsets_json({tp: r[1] for tp, r in ranges.items()}))
        .option("includeHeaders", "true")
        .load()
    )
    return frame.select("key", "value", "topic", "partition", "offset", "timestamp", "headers")


def header(name: str) -> Column:
    """The first value of header ``name`` (null if absent)."""
    return sf.try_element_at(sf.filter("headers", lambda h: h["key"] == sf.lit(name)), sf.lit(1))[
        "value"
    ]


def tagged() -> Column:
    """Whether a record carries any provenance header."""
    return sf.exists("headers", lambda h: h["key"].isin(*HEADER_NAMES))


def origin_columns() -> list[Column]:
    """``o_cluster``, ``o_topic``, ``o_partition``, ``o_offset`` (null where unreadable)."""
    return [
        header(ORIGIN_CLUSTER).cast("string").alias("o_cluster"),
        header(ORIGIN_TOPIC).cast("string").alias("o_topic"),
        header(ORIGIN_PARTITION).cast("string").try_cast("int").alias("o_partition"),
        header(ORIGIN_OFFSET).cast("string").try_cast("long").alias("o_offset"),
    ]


def real_topic(suffix: str) -> Column:
    """``X`` for a record of ``X_REPLICA``."""
    return sf.expr(f"substring(topic, 1, length(topic) - {len(suffix)})")


def with_provenance(alias: str) -> Column:
    """The application's headers followed by the four provenance headers (ASCII decimal)."""

    def entry(name: str, value: Column) -> Column:
        return sf.struct(sf.lit(name).alias("key"), value.cast("binary").alias("value"))

    return sf.concat(
        sf.col("headers"),
        sf.array(
            entry(ORIGIN_CLUSTER, sf.lit(alias)),
            entry(ORIGIN_TOPIC, sf.col("topic")),
            entry(ORIGIN_PARTITION, sf.col("partition").cast("string")),
            entry(ORIGIN_OFFSET, sf.col("offset").cast("string")),
        ),
    )
