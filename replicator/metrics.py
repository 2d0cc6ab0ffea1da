"""Prometheus metrics of the replicator, in one registry per service instance.

Names use base units (seconds, bytes) and ``_total`` for counters. Labels are the leg
(``dc1->dc2``), the real topic, and where it matters the source partition or a reason. No label
ever carries configuration values, so secrets cannot leak through metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0,
)  # fmt: skip


class Metrics:
    """Every metric the replicator exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.records_replicated = Counter(
            "replicator_records_replicated_total",
            "Records acknowledged by a destination cluster.",
            ["leg", "topic"],
            registry=r,
        )
        self.bytes_replicated = Counter(
            "replicator_bytes_replicated_total",
            "Key and value bytes of records acknowledged by a destination cluster.",
            ["leg", "topic"],
            registry=r,
        )
        self.records_skipped = Counter(
            "replicator_records_skipped_total",
            "Source records not replicated, by reason (already_replicated, malformed_provenance).",
            ["leg", "topic", "reason"],
            registry=r,
        )
        self.send_errors = Counter(
            "replicator_send_errors_total",
            "Batches a destination failed to acknowledge, by error type.",
            ["leg", "topic", "error"],
            registry=r,
        )
        self.records_dead_lettered = Counter(
            "replicator_records_dead_lettered_total",
            "Records too large for a destination topic, parked in the local dead-letter topic.",
            ["leg", "topic"],
            registry=r,
        )
        self.offset_resets = Counter(
            "replicator_offset_resets_total",
            "Source positions found outside the log (below_log_start, beyond_log_end).",
            ["leg", "topic", "reason"],
            registry=r,
        )
        self.records_lost = Counter(
            "replicator_records_lost_total",
            "Source records deleted before they were replicated (known counts only).",
            ["leg", "topic"],
            registry=r,
        )
        self.partitions_replaced = Counter(
            "replicator_destination_partitions_replaced_total",
            "Destination partitions whose log was replaced (topic deleted and created again); "
            "each is replayed from the source log start.",
            ["leg", "topic"],
            registry=r,
        )
        self.latency = Histogram(
            "replicator_replication_latency_seconds",
            "Time from a source record's timestamp to its acknowledgement by the destination.",
            ["leg"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_lag = Gauge(
            "replicator_commit_lag_records",
            "Source records not yet committed for a leg (source log end minus committed offset).",
            ["leg", "topic", "partition"],
            registry=r,
        )
        self.commits = Counter(
            "replicator_offset_commits_total",
            "Upstream offset commits, by result (ok, failed).",
            ["leg", "result"],
            registry=r,
        )
        self.assigned_partitions = Gauge(
            "replicator_assigned_partitions",
            "Source partitions currently assigned to a leg.",
            ["leg"],
            registry=r,
        )
        self.rebalances = Counter(
            "replicator_rebalances_total",
            "Partition assignments received by a leg.",
            ["leg"],
            registry=r,
        )
        self.leg_ready = Gauge(
            "replicator_leg_ready",
            "1 when a leg is assigned, reachable and has no partition in a failed state.",
            ["leg"],
            registry=r,
        )
        self.topics_blocked = Gauge(
            "replicator_topics_blocked",
            "Topics a leg cannot replicate (destination has fewer partitions, or refused).",
            ["leg"],
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
