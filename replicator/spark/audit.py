"""The audit: proof that every cluster holds what every replica topic was given.

From one snapshot of every cluster (exact offset ranges, taken first), reads each ``X_REPLICA``
(what applications published) and each ``X`` (what the clusters hold), applies the loop rule
(:mod:`replicator.provenance`) to every source record, matches the records of ``X`` to their
source by provenance (origin cluster, partition, offset; the provenance must name ``X_REPLICA``),
and reports, per cluster, topic, partition and origin:

- ``expected``: the source records the replicator replicates, in every cluster: untagged ones
  and derived ones (provenance naming another topic, or only ``replicator-upstream``; their
  copies carry fresh provenance ``<origin>/X_REPLICA/<p>/<o>`` and are matched by it);
- ``delivered``, ``missing`` (and how many of those are the tail not yet replicated at the
  snapshot: ``lag``), ``duplicates``, ``out_of_order`` (first occurrences against source order);
- ``mismatched``: payload differences, by a digest of key, value and the application's own
  headers (``replicator`` and ``replicator-upstream`` excluded on both sides, since a derived
  record's copy moves the one to the other);
- ``untagged``: records of ``X`` with no readable provenance of ``X_REPLICA`` (written there
  directly; a provenance header that is malformed, repeated, or names another topic counts here);
- ``loops``: records of ``X_REPLICA`` whose provenance names ``X_REPLICA`` itself (any cluster):
  replicated data published again, which the replicator skips;
- ``malformed``: records of ``X_REPLICA`` whose ``replicator`` header does not parse or appears
  twice, which the replicator refuses.

Loops and malformed records are never expected (the replicator refuses them by design, so they
are not missing anywhere), but both fail the audit, like missing, mismatched and reordered
records: each is data an application published into a replica topic that no cluster will ever
hold, a fault of that application to fix (the live replicator only counts them, in
``replicator_records_skipped_total``). ``untagged``, ``duplicates`` and ``lag`` (with
``allow_lag``) are reported without failing it.

Everything is computed in Spark; only the per-partition report reaches the driver.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as sf

from replicator.provenance import HEADER_NAMES, Marking
from replicator.spark.frames import (
    REPLICATED,
    ClusterInput,
    marking,
    origin_columns,
    read_snapshot,
    real_topic,
)

COUNTS = (
    "expected",
    "delivered",
    "missing",
    "lag",
    "duplicates",
    "out_of_order",
    "mismatched",
    "untagged",
    "loops",
    "malformed",
)
FAILING = ("missing", "mismatched", "out_of_order", "loops", "malformed")


@dataclass
class PartitionReport:
    cluster: str
    topic: str
    partition: int
    # the cluster whose replica topic the records came from ("" for untagged, loops, malformed)
    origin: str
    expected: int = 0
    delivered: int = 0
    missing: int = 0
    lag: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    mismatched: int = 0
    untagged: int = 0
    loops: int = 0
    malformed: int = 0


@dataclass
class AuditReport:
    partitions: list[PartitionReport]
    snapshot: dict[str, dict[str, dict[str, list[int]]]]
    # where the time went, in seconds: "spark start", "snapshot", "read", "compare"
    timings: dict[str, float] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        return {name: sum(getattr(p, name) for p in self.partitions) for name in COUNTS}

    def ok(self, allow_lag: bool = False) -> bool:
        totals = self.totals()
        missing = totals["missing"] - (totals["lag"] if allow_lag else 0)
        return missing == 0 and all(totals[k] == 0 for k in FAILING if k != "missing")

    def as_json(self, allow_lag: bool = False) -> dict[str, Any]:
        return {
            "ok": self.ok(allow_lag),
            "totals": self.totals(),
            "partitions": [asdict(p) for p in self.partitions],
            "snapshot": self.snapshot,
            "timings": self.timings,
        }


def _digest() -> Column:
    """Key, value and the application's headers (provenance excluded), nulls kept distinct:
    SHA-256, as 32 bytes."""
    own = sf.filter("headers", lambda h: ~h["key"].isin(*HEADER_NAMES))
    return sf.unhex(
        sf.sha2(
            sf.to_json(
                sf.struct(
                    sf.base64("key").alias("k"),
                    sf.base64("value").alias("v"),
                    sf.transform(own, lambda h: sf.struct(h["key"], sf.base64(h["value"]))).alias(
                        "h"
                    ),
                )
            ),
            256,
        )
    )


def _scan(spark: SparkSession, fmt: str, clusters: list[ClusterInput], suffix: str) -> DataFrame:
    """Every record of every cluster's snapshot, read once, narrowed to what the audit compares.

    Per record: where it is (``cluster``, ``topic``, ``partition``, ``offset``), ``real`` (the
    real topic it belongs to), ``replica`` (read from ``X_REPLICA``), ``mark`` (the loop rule, for
    replica records), its provenance (``o_*``) and the ``digest`` of its payload.
    """
    frame: DataFrame | None = None
    for cluster in clusters:
        read = read_snapshot(spark, fmt, cluster).withColumn("cluster", sf.lit(cluster.alias))
        frame = read if frame is None else frame.unionByName(read)
    assert frame is not None
    replica = sf.col("topic").endswith(suffix)
    return frame.select(
        "cluster",
        "topic",
        "partition",
        "offset",
        sf.when(replica, real_topic(suffix)).otherwise(sf.col("topic")).alias("real"),
        replica.alias("replica"),
        marking().alias("mark"),
        *origin_columns(),
        _digest().alias("digest"),
    )


def run_audit(
    spark: SparkSession, fmt: str, clusters: list[ClusterInput], topics: list[str], suffix: str
) -> AuditReport:
    """Audit ``topics`` (real topic names) across ``clusters`` (each with its snapshot).

    Each cluster's snapshot is read once, in one job, into a narrow cached frame (``read``);
    everything else is computed from it (``compare``).
    """
    began = time.monotonic()
    wanted = {t + suffix for t in topics} | set(topics)
    inputs = [
        ClusterInput(
            c.alias, c.options, {tp: r for tp, r in c.snapshot.items() if tp.topic in wanted}
        )
        for c in clusters
    ]
    scanned = _scan(spark, fmt, inputs, suffix).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        scanned.count()
        read_s = time.monotonic() - began
        rows = _compare(spark, scanned, [c.alias for c in clusters], suffix)
    finally:
        scanned.unpersist()
    snapshot: dict[str, dict[str, dict[str, list[int]]]] = {}
    for c in clusters:
        for tp, (start, end) in sorted(c.snapshot.items()):
            snapshot.setdefault(c.alias, {}).setdefault(tp.topic, {})[str(tp.partition)] = [
                start,
                end,
            ]
    compare_s = time.monotonic() - began - read_s
    return AuditReport(rows, snapshot, {"read": round(read_s, 2), "compare": round(compare_s, 2)})


def _compare(
    spark: SparkSession, scanned: DataFrame, aliases: list[str], suffix: str
) -> list[PartitionReport]:
    """The per-partition report from the scanned records (Spark columns and joins only).

    Per destination, topic, origin and partition: ``expected`` counts the source records;
    each source record's copies are matched by provenance and aggregated (how many, how many
    altered, the first one's place); ``missing`` is what was expected and not delivered, ``lag``
    the source records past the last one delivered, ``out_of_order`` the first copies placed
    after a copy of a later source record.
    """
    sources = scanned.filter("replica")
    refused = (
        sources.filter(sf.col("mark").isin(Marking.LOOP.value, Marking.MALFORMED.value))
        .groupBy("cluster", sf.col("real").alias("topic"), "partition")
        .agg(
            sf.count(sf.when(sf.col("mark") == Marking.LOOP.value, 1)).alias("loops"),
            sf.count(sf.when(sf.col("mark") == Marking.MALFORMED.value, 1)).alias("malformed"),
        )
        .withColumn("origin", sf.lit(""))
    )
    # What every cluster should hold: the source records the replicator replicates, each with
    # its rank in its partition (how many of them up to it), which turns the last delivered
    # record into how many were delivered or skipped before it.
    source = sources.filter(sf.col("mark").isin(*REPLICATED)).select(
        sf.col("cluster").alias("origin"),
        sf.col("real").alias("topic"),
        "partition",
        sf.col("offset").alias("origin_offset"),
        sf.col("digest").alias("source_digest"),
        sf.row_number()
        .over(Window.partitionBy("cluster", "real", "partition").orderBy("offset"))
        .alias("rank"),
    )
    dests = spark.createDataFrame([(a,) for a in aliases], "dest string")
    expected = (
        source.groupBy("origin", "topic", "partition")
        .agg(sf.count("*").alias("expected"))
        .crossJoin(dests)
    )

    held = scanned.filter(~sf.col("replica"))
    # A copy names its source X_REPLICA: anything else in X is no copy of it (counted untagged).
    copy = sf.coalesce(sf.col("o_topic") == sf.concat("topic", sf.lit(suffix)), sf.lit(False))
    untagged = (
        held.filter(~copy)
        .groupBy("cluster", "topic", "partition")
        .agg(sf.count("*").alias("untagged"))
        .withColumn("origin", sf.lit(""))
    )
    copies = held.filter(copy).select(
        sf.col("cluster").alias("dest"),
        "topic",
        sf.col("o_cluster").alias("origin"),
        sf.col("o_partition").alias("partition"),
        sf.col("o_offset").alias("origin_offset"),
        sf.struct(sf.col("partition").alias("p"), sf.col("offset").alias("o")).alias("at"),
        "digest",
    )
    # Each delivered source record, once per destination: its copies, altered ones, first place.
    delivered_records = (
        copies.join(source, ["origin", "topic", "partition", "origin_offset"])
        .groupBy("dest", "topic", "origin", "partition", "origin_offset")
        .agg(
            sf.count("*").alias("copies"),
            sf.count(sf.when(sf.col("digest") != sf.col("source_digest"), 1)).alias("mismatched"),
            sf.min("at").alias("first"),
            sf.first("rank").alias("rank"),
        )
    )
    before = (
        Window.partitionBy("dest", "topic", "first.p", "origin", "partition")
        .orderBy("first.o")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    group = ["dest", "topic", "origin", "partition"]
    delivered = (
        delivered_records.withColumn("seen_max", sf.max("origin_offset").over(before))
        .groupBy(*group)
        .agg(
            sf.count("*").alias("delivered"),
            sf.count(sf.when(sf.col("seen_max") > sf.col("origin_offset"), 1)).alias(
                "out_of_order"
            ),
            sf.max("rank").alias("last_rank"),
            sf.sum("copies").alias("copies"),
            sf.sum("mismatched").alias("mismatched"),
        )
    )
    per_origin = (
        expected.join(delivered, group, "full")
        # Not delivered and past the last delivered: the tail not replicated yet.
        .withColumn("lag", sf.col("expected") - sf.coalesce(sf.col("last_rank"), sf.lit(0)))
        .withColumn(
            "missing",
            sf.coalesce(sf.col("expected"), sf.lit(0))
            - sf.coalesce(sf.col("delivered"), sf.lit(0)),
        )
        .withColumn("duplicates", sf.col("copies") - sf.col("delivered"))
        .withColumnRenamed("dest", "cluster")
    )
    report = (
        per_origin.unionByName(untagged, allowMissingColumns=True)
        .unionByName(refused, allowMissingColumns=True)
        .groupBy("cluster", "topic", "partition", "origin")
        .agg(*(sf.sum(sf.coalesce(sf.col(c), sf.lit(0))).alias(c) for c in COUNTS))
        .orderBy("cluster", "topic", "partition", "origin")
    )
    return [
        PartitionReport(
            cluster=r["cluster"],
            topic=r["topic"],
            partition=int(r["partition"]),
            origin=r["origin"],
            **{c: int(r[c]) for c in COUNTS},
        )
        for r in report.collect()
    ]
