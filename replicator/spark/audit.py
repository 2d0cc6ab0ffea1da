"""The audit: proof that every cluster holds what every replica topic was given.

From one snapshot of every cluster (exact offset ranges, taken first), reads each ``X_REPLICA``
(what applications published) and each ``X`` (what the clusters hold), applies the loop rule
(:mod:`replicator.model.provenance`) to every source record, matches the records of ``X`` to their
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
``replicator_records_skipped_total``). Duplicates fail it too: a record held twice is not what
was published. Only what the operator allows (:class:`Allowed`: the tail not yet replicated,
duplicates) is reported without failing; ``untagged`` records (no provenance: written to ``X``
directly, or copied there by a tool that writes none, such as MirrorMaker) never fail it.

Everything is computed in Spark; only the per-partition report reaches the driver.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as sf

from replicator.model.provenance import HEADER_NAMES, LEGACY_HEADERS, Marking
from replicator.spark.frames import (
    REPLICATED,
    ClusterInput,
    marking,
    origin_columns,
    parsed,
    read_snapshot,
    real_topic,
)
from replicator.spark.stage_times import reading_seconds, stage_times

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
FAILING = ("missing", "duplicates", "mismatched", "out_of_order", "loops", "malformed")


@dataclass(frozen=True)
class Allowed:
    """What the operator allows an audit to find and still pass (``--allow-lag``,
    ``--allow-duplicates``): nothing, by default."""

    lag: bool = False  # missing records that are the tail not yet replicated at the snapshot
    duplicates: bool = False  # a source record held more than once in a cluster

    def named(self) -> list[str]:
        return [name for name, on in asdict(self).items() if on]


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

    def failures(self, allowed: Allowed = Allowed()) -> dict[str, int]:
        """Each count that fails the audit (those ``allowed`` left out), with its total."""
        totals = self.totals()
        if allowed.lag:
            totals["missing"] -= totals["lag"]
        if allowed.duplicates:
            totals["duplicates"] = 0
        return {name: totals[name] for name in FAILING if totals[name]}

    def ok(self, allowed: Allowed = Allowed()) -> bool:
        return not self.failures(allowed)

    def as_json(self, allowed: Allowed = Allowed()) -> dict[str, Any]:
        return {
            "ok": self.ok(allowed),
            "failed_by": self.failures(allowed),
            "allowed": allowed.named(),
            "totals": self.totals(),
            "partitions": [asdict(p) for p in self.partitions],
            "snapshot": self.snapshot,
            "timings": self.timings,
        }


def _digest() -> Column:
    """Key, value and the application's headers (provenance excluded, also a pre-0.1.0
    build's), nulls kept distinct: SHA-256, as 32 bytes."""
    own = sf.filter("headers", lambda h: ~h["key"].isin(*HEADER_NAMES, *LEGACY_HEADERS))
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


_SOURCE, _COPY, _REFUSED, _UNTAGGED = "source", "copy", "refused", "untagged"
_JOBS = "replicator-audit"  # the Spark job group of an audit
_AT = ["g_origin", "g_topic", "g_partition"]  # the source partition a record is about


def _scan(
    spark: SparkSession,
    fmt: str,
    clusters: list[ClusterInput],
    topics: list[str],
    suffix: str,
    tasks: int,
) -> DataFrame:
    """Every record of every cluster's snapshot, narrowed to what the audit compares and
    gathered by the source partition it is about: one scan of each range, one shuffle.

    Per record: ``kind`` (``source``: a replica record the replicator replicates; ``copy``: a
    record of ``X`` whose provenance names ``X_REPLICA``; ``refused``: a replica record that is a
    loop or has malformed provenance, with ``mark`` saying which; ``untagged``: anything else in
    ``X``), the source record it is about (``g_origin``, ``g_topic``, ``g_partition``,
    ``g_offset``: its own place for a source, its provenance for a copy, its own place for the
    others), where it is (``cluster``, ``partition``, ``offset``) and the ``digest`` of its
    payload.
    """
    frame: DataFrame | None = None
    for cluster in clusters:
        read = read_snapshot(spark, fmt, cluster).withColumn("cluster", sf.lit(cluster.alias))
        frame = read if frame is None else frame.unionByName(read)
    assert frame is not None
    return narrowed(frame, topics, suffix, tasks)


def narrowed(frame: DataFrame, topics: list[str], suffix: str, tasks: int) -> DataFrame:
    """The records of ``frame`` (Kafka records with headers and a ``cluster`` column) as
    :func:`_scan` describes them, in ``tasks`` partitions by the source partition they are
    about."""
    # The audited replica topics by name (a real topic may itself end with the suffix).
    replica = sf.col("topic").isin(*(t + suffix for t in topics))
    # A copy names its source X_REPLICA: anything else in X is no copy of it (counted untagged).
    copy = sf.coalesce(sf.col("o_topic") == sf.concat("topic", sf.lit(suffix)), sf.lit(False))
    marked = parsed(frame).select(
        "cluster",
        "partition",
        "offset",
        sf.when(replica, real_topic(suffix)).otherwise(sf.col("topic")).alias("g_topic"),
        replica.alias("replica"),
        sf.when(replica, marking()).alias("mark"),
        (~replica & copy).alias("copy"),
        *origin_columns(),
        _digest().alias("digest"),
    )
    copied = sf.col("copy")
    narrow = marked.select(
        "cluster",
        "partition",
        "offset",
        "g_topic",
        "mark",
        sf.when(sf.col("replica") & sf.col("mark").isin(*REPLICATED), sf.lit(_SOURCE))
        .when(sf.col("replica"), sf.lit(_REFUSED))
        .when(copied, sf.lit(_COPY))
        .otherwise(sf.lit(_UNTAGGED))
        .alias("kind"),
        sf.when(copied, sf.col("o_cluster")).otherwise(sf.col("cluster")).alias("g_origin"),
        sf.when(copied, sf.col("o_partition")).otherwise(sf.col("partition")).alias("g_partition"),
        sf.when(copied, sf.col("o_offset")).otherwise(sf.col("offset")).alias("g_offset"),
        "digest",
    )
    return narrow.repartition(tasks, *_AT)


def run_audit(
    spark: SparkSession, fmt: str, clusters: list[ClusterInput], topics: list[str], suffix: str
) -> AuditReport:
    """Audit ``topics`` (real topic names) across ``clusters`` (each with its snapshot).

    One Spark job: each range is read once, its records narrowed and shuffled once (by the
    source partition they are about); every count is computed from that, and only the
    per-partition report reaches the driver. ``timings``: ``read`` spans the stages that read
    Kafka (reading, narrowing and shuffling the records), ``compare`` the rest.
    """
    began = time.monotonic()
    wanted = {t + suffix for t in topics} | set(topics)
    inputs = [
        replace(c, snapshot={tp: r for tp, r in c.snapshot.items() if tp.topic in wanted})
        for c in clusters
    ]
    tasks = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    scanned = _scan(spark, fmt, inputs, topics, suffix, tasks)
    return _report(spark, scanned, [c.alias for c in clusters], clusters, began)


def _report(
    spark: SparkSession,
    scanned: DataFrame,
    aliases: list[str] | None,
    clusters: list[ClusterInput],
    began: float,
) -> AuditReport:
    """Compare ``scanned`` (as :func:`compare` does) in the audit's job group, timed."""
    context = spark.sparkContext
    context.setJobGroup(_JOBS, "audit")
    try:
        rows = compare(spark, scanned, aliases)
        took = time.monotonic() - began
        read_s = reading_seconds(stage_times(spark, _JOBS))
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    timings = {"read": round(read_s, 2), "compare": round(took - read_s, 2)}
    return AuditReport(rows, _ranges(clusters), timings)


@dataclass(frozen=True)
class Route:
    """One flow's source topic, and the topic of its target that holds its copies: what the
    audit of flows compares (``marks``: the flow's home marks,
    :mod:`replicator.model.provenance`)."""

    source: str
    topic: str
    target: str
    target_topic: str
    marks: tuple[str, ...] = ()


def narrowed_flows(
    spark: SparkSession, frame: DataFrame, routes: list[Route], tasks: int
) -> DataFrame:
    """The records of ``frame`` (every source and target topic of ``routes``) as :func:`_scan`
    describes them, for flows, plus ``dests`` on a source record: the targets it is expected
    in.

    A record of a flow's source topic is expected in each target the flow's loop rule sends it
    to (:func:`replicator.model.provenance.marking` with the flow's home: a record naming its own
    topic is a copy from elsewhere, a renamed copy of the target's data goes not back there);
    one no flow sends anywhere is not counted (identity flows both ways read each other's
    copies: by design, not a fault), unless its provenance is malformed. A record of a flow's
    target topic is a copy when its provenance names a flow's source cluster and topic into it;
    anything else there is ``untagged``, unless the topic is also a flow's source (then it is
    counted as a source record). One pass over the records: a topic that is both a source and
    a target gives each record both roles.
    """
    by_source: dict[tuple[str, str], list[tuple[str, list[str]]]] = {}
    by_target: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r in routes:
        by_source.setdefault((r.source, r.topic), []).append((r.target, list(r.marks)))
        by_target.setdefault((r.target, r.target_topic), []).append((r.source, r.topic))
    sources = spark.createDataFrame(
        [(c, t, v) for (c, t), v in by_source.items()],
        "s_cluster string, s_topic string, "
        "s_routes array<struct<r_target:string,r_marks:array<string>>>",
    )
    targets = spark.createDataFrame(
        [(c, t, v) for (c, t), v in by_target.items()],
        "t_cluster string, t_topic string, t_origins array<struct<o:string,t:string>>",
    )
    p = (
        parsed(frame)
        .join(
            sf.broadcast(sources),
            (sf.col("cluster") == sf.col("s_cluster")) & (sf.col("topic") == sf.col("s_topic")),
            "left",
        )
        .join(
            sf.broadcast(targets),
            (sf.col("cluster") == sf.col("t_cluster")) & (sf.col("topic") == sf.col("t_topic")),
            "left",
        )
    )
    own = marking()
    topic, origin_topic = sf.col("topic"), sf.col("o_topic")
    renamed_by = sf.lower(sf.expr("substring(topic, 1, length(topic) - length(o_topic))"))

    def sends(route: Column) -> Column:
        """Whether the flow of ``route`` replicates the record (its loop rule)."""
        home_copy = (
            (sf.col("o_cluster") == route["r_target"])
            & topic.endswith(origin_topic)
            & sf.exists(route["r_marks"], lambda m: sf.instr(renamed_by, m) > 0)
        )
        return own.isin(*REPLICATED) & ~sf.coalesce(
            (own == Marking.DERIVED.value) & home_copy, sf.lit(False)
        )

    dests = sf.filter(
        sf.transform("s_routes", lambda r: sf.when(sends(r), r["r_target"])),
        lambda d: d.isNotNull(),
    )
    is_copy = sf.coalesce(
        sf.col("p_valid")
        & sf.exists(
            "t_origins",
            lambda o: (o["o"] == sf.col("o_cluster")) & (o["t"] == sf.col("o_topic")),
        ),
        sf.lit(False),
    )
    as_source = sf.when(
        sf.col("s_routes").isNotNull(),
        sf.struct(
            sf.when(sf.size(dests) > 0, sf.lit(_SOURCE))
            .when(own == Marking.MALFORMED.value, sf.lit(_REFUSED))
            .alias("kind"),
            own.alias("mark"),
            topic.alias("g_topic"),
            sf.col("cluster").alias("g_origin"),
            sf.col("partition").alias("g_partition"),
            sf.col("offset").alias("g_offset"),
            dests.alias("dests"),
        ),
    )
    as_target = sf.when(
        sf.col("t_origins").isNotNull(),
        sf.struct(
            sf.when(is_copy, sf.lit(_COPY))
            .when(sf.col("s_routes").isNull(), sf.lit(_UNTAGGED))
            .alias("kind"),
            sf.lit(None).cast("string").alias("mark"),
            sf.when(is_copy, origin_topic).otherwise(topic).alias("g_topic"),
            sf.when(is_copy, sf.col("o_cluster")).otherwise(sf.col("cluster")).alias("g_origin"),
            sf.when(is_copy, sf.col("o_partition"))
            .otherwise(sf.col("partition"))
            .alias("g_partition"),
            sf.when(is_copy, sf.col("o_offset")).otherwise(sf.col("offset")).alias("g_offset"),
            sf.lit(None).cast("array<string>").alias("dests"),
        ),
    )
    roles = p.select(
        "cluster",
        "partition",
        "offset",
        _digest().alias("digest"),
        sf.explode(sf.filter(sf.array(as_source, as_target), lambda r: r.isNotNull())).alias("r"),
    )
    narrow = roles.filter(sf.col("r.kind").isNotNull()).select(
        "cluster", "partition", "offset", "r.*", "digest"
    )
    return narrow.repartition(tasks, *_AT)


def run_flow_audit(
    spark: SparkSession, fmt: str, clusters: list[ClusterInput], routes: list[Route]
) -> AuditReport:
    """Audit ``routes`` (every flow's source topics) across ``clusters`` (each with its
    snapshot of the topics it plays in): the same report as :func:`run_audit`, where a copy
    is expected only in its flow's target."""
    began = time.monotonic()
    tasks = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    frame: DataFrame | None = None
    for cluster in clusters:
        read = read_snapshot(spark, fmt, cluster).withColumn("cluster", sf.lit(cluster.alias))
        frame = read if frame is None else frame.unionByName(read)
    assert frame is not None
    return _report(spark, narrowed_flows(spark, frame, routes, tasks), None, clusters, began)


def _ranges(clusters: list[ClusterInput]) -> dict[str, dict[str, dict[str, list[int]]]]:
    """The snapshots, as the report shows them."""
    shown: dict[str, dict[str, dict[str, list[int]]]] = {}
    for c in clusters:
        for tp, (start, end) in sorted(c.snapshot.items()):
            shown.setdefault(c.alias, {}).setdefault(tp.topic, {})[str(tp.partition)] = [
                start,
                end,
            ]
    return shown


def compare(
    spark: SparkSession, scanned: DataFrame, aliases: list[str] | None
) -> list[PartitionReport]:
    """The per-partition report from the scanned records (Spark columns only).

    Everything below is partitioned as ``scanned`` is (by source partition), so it needs no
    other shuffle of records: per source record, its digest and rank (how many source records
    of its partition up to it); per destination and source record, its copies, altered ones and
    the first one's place; per destination partition, first copies placed after a copy of a
    later source record (``out_of_order``). ``missing`` is what was expected and not delivered,
    ``lag`` the source records past the last one delivered.
    """
    key = Window.partitionBy(*_AT, "g_offset")
    source = sf.col("kind") == _SOURCE
    ranked = scanned.select(
        "*",
        sf.max(sf.when(source, sf.col("digest"))).over(key).alias("source_digest"),
        sf.max(source.cast("int")).over(key).alias("has_source"),
        sf.sum(source.cast("int")).over(Window.partitionBy(*_AT).orderBy("g_offset")).alias("rank"),
    )
    if aliases is None:  # flows: each source record names the targets it is expected in
        expected = (
            ranked.filter(source)
            .select(*_AT, sf.explode("dests").alias("dest"))
            .groupBy(*_AT, "dest")
            .agg(sf.count("*").alias("expected"))
        )
    else:  # the _REPLICA mode: every source record is expected in every cluster
        expected = (
            ranked.filter(source)
            .groupBy(*_AT)
            .agg(sf.count("*").alias("expected"))
            .crossJoin(spark.createDataFrame([(a,) for a in aliases], "dest string"))
        )
    firsts = (
        ranked.filter((sf.col("kind") == _COPY) & (sf.col("has_source") == 1))
        .groupBy(sf.col("cluster").alias("dest"), *_AT, "g_offset")
        .agg(
            sf.count("*").alias("copies"),
            sf.count(sf.when(sf.col("digest") != sf.col("source_digest"), 1)).alias("mismatched"),
            sf.min(sf.struct(sf.col("partition").alias("p"), sf.col("offset").alias("o"))).alias(
                "first"
            ),
            sf.max("rank").alias("rank"),
        )
    )
    before = (
        Window.partitionBy("dest", *_AT, "first.p")
        .orderBy("first.o")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    group = ["dest", *_AT]
    delivered = (
        firsts.withColumn("seen_max", sf.max("g_offset").over(before))
        .groupBy(*group)
        .agg(
            sf.count("*").alias("delivered"),
            sf.count(sf.when(sf.col("seen_max") > sf.col("g_offset"), 1)).alias("out_of_order"),
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
        .select(
            sf.col("dest").alias("cluster"),
            sf.col("g_topic").alias("topic"),
            sf.col("g_partition").alias("partition"),
            sf.col("g_origin").alias("origin"),
            *COUNTS[:7],
        )
    )
    # Untagged records and refused ones (loops, malformed), where they are.
    others = (
        scanned.filter(sf.col("kind").isin(_UNTAGGED, _REFUSED))
        .groupBy(sf.col("cluster"), sf.col("g_topic").alias("topic"), "partition")
        .agg(
            sf.count(sf.when(sf.col("kind") == _UNTAGGED, 1)).alias("untagged"),
            sf.count(sf.when(sf.col("mark") == Marking.LOOP.value, 1)).alias("loops"),
            sf.count(sf.when(sf.col("mark") == Marking.MALFORMED.value, 1)).alias("malformed"),
        )
        .withColumn("origin", sf.lit(""))
    )
    report = (
        per_origin.unionByName(others, allowMissingColumns=True)
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
