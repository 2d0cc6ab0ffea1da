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

from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import Column, SparkSession, Window
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
        }


def _digest() -> Column:
    """Key, value and the application's headers (provenance excluded), nulls kept distinct."""
    own = sf.filter("headers", lambda h: ~h["key"].isin(*HEADER_NAMES))
    return sf.sha2(
        sf.to_json(
            sf.struct(
                sf.base64("key").alias("k"),
                sf.base64("value").alias("v"),
                sf.transform(own, lambda h: sf.struct(h["key"], sf.base64(h["value"]))).alias("h"),
            )
        ),
        256,
    )


def run_audit(
    spark: SparkSession, fmt: str, clusters: list[ClusterInput], topics: list[str], suffix: str
) -> AuditReport:
    """Audit ``topics`` (real topic names) across ``clusters`` (each with its snapshot)."""
    replica_topics = [t + suffix for t in topics]
    sources = None
    holdings = None
    for cluster in clusters:
        s = read_snapshot(spark, fmt, cluster, replica_topics).withColumn(
            "cluster", sf.lit(cluster.alias)
        )
        h = read_snapshot(spark, fmt, cluster, topics).withColumn("cluster", sf.lit(cluster.alias))
        sources = s if sources is None else sources.unionByName(s)
        holdings = h if holdings is None else holdings.unionByName(h)
    assert sources is not None and holdings is not None
    aliases = spark.createDataFrame([(c.alias,) for c in clusters], "dest string")

    sources = sources.withColumn("mark", marking()).withColumn("digest", _digest())
    refused = (
        sources.filter(sf.col("mark").isin(Marking.LOOP.value, Marking.MALFORMED.value))
        .groupBy(sf.col("cluster"), real_topic(suffix).alias("topic"), "partition")
        .agg(
            sf.count(sf.when(sf.col("mark") == Marking.LOOP.value, 1)).alias("loops"),
            sf.count(sf.when(sf.col("mark") == Marking.MALFORMED.value, 1)).alias("malformed"),
        )
        .withColumn("origin", sf.lit(""))
    )
    source = sources.filter(sf.col("mark").isin(*REPLICATED)).select(
        sf.col("cluster").alias("origin"),
        real_topic(suffix).alias("topic"),
        "partition",
        sf.col("offset").alias("origin_offset"),
        sf.col("digest").alias("source_digest"),
    )
    expected = source.crossJoin(aliases)

    held = holdings.select("*", *origin_columns()).withColumn("digest", _digest())
    # A copy names its source X_REPLICA: anything else in X is no copy of it (counted untagged).
    copy = sf.coalesce(
        sf.col("o_topic") == sf.concat(sf.col("topic"), sf.lit(suffix)), sf.lit(False)
    )
    untagged = (
        held.filter(~copy)
        .groupBy("cluster", "topic", "partition")
        .agg(sf.count("*").alias("untagged"))
        .withColumn("origin", sf.lit(""))
    )
    copies = held.filter(copy).select(
        sf.col("cluster").alias("dest"),
        sf.col("topic"),
        sf.col("partition").alias("dest_partition"),
        sf.col("offset").alias("dest_offset"),
        sf.col("o_cluster").alias("origin"),
        sf.col("o_partition").alias("partition"),
        sf.col("o_offset").alias("origin_offset"),
        sf.col("digest"),
    )
    key = ["dest", "topic", "origin", "partition", "origin_offset"]
    matched = copies.join(
        source.select("origin", "topic", "partition", "origin_offset", "source_digest"),
        ["origin", "topic", "partition", "origin_offset"],
    )
    first_copy = Window.partitionBy(*key).orderBy("dest_partition", "dest_offset")
    firsts = matched.withColumn("n", sf.row_number().over(first_copy)).filter("n = 1")
    before = (
        Window.partitionBy("dest", "topic", "dest_partition", "origin", "partition")
        .orderBy("dest_offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    firsts = firsts.withColumn("seen_max", sf.max("origin_offset").over(before))
    delivered = firsts.groupBy("dest", "topic", "origin", "partition").agg(
        sf.count("*").alias("delivered"),
        sf.sum(sf.when(sf.col("seen_max") > sf.col("origin_offset"), 1).otherwise(0)).alias(
            "out_of_order"
        ),
        sf.max("origin_offset").alias("last_delivered"),
    )
    copies_per_group = matched.groupBy("dest", "topic", "origin", "partition").agg(
        sf.count("*").alias("copies"),
        sf.sum(sf.when(sf.col("digest") != sf.col("source_digest"), 1).otherwise(0)).alias(
            "mismatched"
        ),
    )
    missing = expected.join(matched.select(*key).distinct(), key, "left_anti").join(
        delivered.select("dest", "topic", "origin", "partition", "last_delivered"),
        ["dest", "topic", "origin", "partition"],
        "left",
    )
    missing_counts = missing.groupBy("dest", "topic", "origin", "partition").agg(
        sf.count("*").alias("missing"),
        sf.sum(
            sf.when(
                sf.col("last_delivered").isNull()
                | (sf.col("origin_offset") > sf.col("last_delivered")),
                1,
            ).otherwise(0)
        ).alias("lag"),
    )
    expected_counts = expected.groupBy("dest", "topic", "origin", "partition").agg(
        sf.count("*").alias("expected")
    )
    per_origin = (
        expected_counts.join(delivered, ["dest", "topic", "origin", "partition"], "full")
        .join(copies_per_group, ["dest", "topic", "origin", "partition"], "full")
        .join(missing_counts, ["dest", "topic", "origin", "partition"], "full")
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
    rows = [
        PartitionReport(
            cluster=r["cluster"],
            topic=r["topic"],
            partition=int(r["partition"]),
            origin=r["origin"],
            **{c: int(r[c]) for c in COUNTS},
        )
        for r in report.collect()
    ]
    snapshot: dict[str, dict[str, dict[str, list[int]]]] = {}
    for c in clusters:
        for tp, (start, end) in sorted(c.snapshot.items()):
            snapshot.setdefault(c.alias, {}).setdefault(tp.topic, {})[str(tp.partition)] = [
                start,
                end,
            ]
    return AuditReport(rows, snapshot)
