"""DataFrames of Kafka snapshots, and provenance as Spark columns (the jobs' shared vocabulary).

The columns here are the Spark form of :mod:`replicator.model.provenance` (same header, same
grammar, same loop rule), built from Spark's own functions so the jobs stay columnar: no Python UDF.
tests/unit/spark/test_provenance.py checks them against that module, case by case.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import StructType

from replicator.model.provenance import (
    HEADER_NAMES,
    LEGACY_HEADERS,
    ORIGIN,
    UPSTREAM,
    VALUE_PATTERN,
    Marking,
)
from replicator.spark.kafka_source import SCHEMA, offsets_json
from replicator.topics.snapshot import Range

# The columns read_snapshot gives (the read schema without timestampType), also when empty.
_EMPTY = StructType([f for f in SCHEMA.fields if f.name != "timestampType"])


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
    return frame.select(*_EMPTY.fieldNames())


def tagged() -> Column:
    """Whether a record carries a provenance header (``replicator``, ``replicator-upstream``)."""
    return sf.exists("headers", lambda h: h["key"].isin(*HEADER_NAMES))


# The whole value, as provenance.decode reads it (\A and \z: Java's $ would accept a final "\n").
_VALUE = rf"\A(?:{VALUE_PATTERN})\z"


_STAGES = ("p_values", "p_legacy", "p_raw", "p_parts")  # intermediate columns of :func:`parsed`


def _legacy_value() -> Column:
    """The four headers of a pre-0.1.0 build joined as one provenance value (null unless all
    four are there): what :func:`replicator.model.provenance.legacy_origin` reads."""

    def value(name: str) -> Column:  # from p_legacy: the headers read once, not per name
        found = sf.filter("p_legacy", lambda h: h["key"] == sf.lit(name))
        return sf.try_element_at(found, sf.lit(1))["value"].cast("string")

    cluster, topic, partition, offset = (value(name) for name in LEGACY_HEADERS)
    slash = sf.lit("/")
    return sf.concat(cluster, slash, topic, slash, partition, slash, offset)  # null if one is


def parsed(frame: DataFrame) -> DataFrame:
    """``frame`` (with ``headers``) and its provenance, read once per record.

    Adds ``p_count`` (how many ``replicator`` headers), ``p_tagged`` (any provenance header,
    ``replicator`` or ``replicator-upstream``), ``p_valid`` (exactly one ``replicator`` header,
    which :func:`replicator.model.provenance.decode` accepts) and its fields ``o_cluster``,
    ``o_topic``, ``o_partition``, ``o_offset``: all four null unless valid (no such header, a
    value that does not parse or whose partition or offset is out of range, or more than one),
    as :func:`replicator.model.provenance.parse` decides. A record without a ``replicator``
    header gets the fields of a pre-0.1.0 build's four headers where it has them
    (:func:`replicator.model.provenance.legacy_origin`), so that the copies such a build wrote
    are audited as copies; the loop rule (:func:`marking`) still reads them as untagged. Each
    step is its own projection, so Spark evaluates the header search and the pattern once per
    record, not once per use.
    """
    values = frame.withColumns(
        {
            "p_values": sf.filter("headers", lambda h: h["key"] == sf.lit(ORIGIN)),
            "p_legacy": sf.filter("headers", lambda h: h["key"].isin(*LEGACY_HEADERS)),
            "p_tagged": tagged(),
        }
    )
    counted = values.withColumn("p_count", sf.size("p_values")).withColumn(
        "p_raw",
        sf.when(
            sf.col("p_count") == 1,
            sf.try_element_at("p_values", sf.lit(1))["value"].cast("string"),
        ).when(sf.col("p_count") == 0, _legacy_value()),
    )
    # The grammar's four fields hold no "/": once the whole value matched, split finds them.
    split = counted.withColumn(
        "p_parts",
        sf.when(sf.coalesce(sf.col("p_raw").rlike(_VALUE), sf.lit(False)), sf.split("p_raw", "/")),
    )
    fields = split.withColumns(
        {
            "o_partition": sf.col("p_parts")[2].try_cast("int"),  # null beyond 2**31 - 1
            "o_offset": sf.col("p_parts")[3].try_cast("long"),  # null beyond 2**63 - 1
        }
    )
    valid = fields.withColumn(
        "p_valid", sf.col("o_partition").isNotNull() & sf.col("o_offset").isNotNull()
    )
    return valid.withColumns(
        {
            "o_cluster": sf.when(sf.col("p_valid"), sf.col("p_parts")[0]),
            "o_topic": sf.when(sf.col("p_valid"), sf.col("p_parts")[1]),
            "o_partition": sf.when(sf.col("p_valid"), sf.col("o_partition")),
            "o_offset": sf.when(sf.col("p_valid"), sf.col("o_offset")),
        }
    ).drop(*_STAGES)


def origin_columns() -> list[Column]:
    """``o_cluster``, ``o_topic``, ``o_partition``, ``o_offset`` of a :func:`parsed` frame."""
    return [sf.col(c) for c in ("o_cluster", "o_topic", "o_partition", "o_offset")]


def marking(topic: str = "topic") -> Column:
    """The loop rule (:func:`replicator.model.provenance.marking`) for a record read from ``topic``,
    over a :func:`parsed` frame.

    A :class:`~replicator.model.provenance.Marking` value: ``untagged`` (no provenance header),
    ``derived`` (provenance naming another topic, or only ``replicator-upstream``), ``loop``
    (provenance naming ``topic`` itself, of any cluster) or ``malformed_provenance``.
    """
    return (
        sf.when(
            sf.col("p_count") == 0,
            sf.when(sf.col("p_tagged"), sf.lit(Marking.DERIVED.value)).otherwise(
                Marking.UNTAGGED.value
            ),
        )
        .when(~sf.col("p_valid"), sf.lit(Marking.MALFORMED.value))
        .when(sf.col("o_topic") == sf.col(topic), sf.lit(Marking.LOOP.value))
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
    :meth:`replicator.model.provenance.Tagger.retag` returns. Meaningful only for records the loop
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
