"""Prometheus metrics of the replicator, in one registry per service instance.

Names use base units (seconds, bytes) and ``_total`` for counters. Labels are the leg
(``dc1->dc2``), ``topic`` (always the real topic ``X``, never ``X_REPLICA``), a partition state or
a reason, never a partition: the number of series grows with legs and topics, not with the
thousands of partitions a replicator may hold (``/status`` shows partitions on request). No label
ever carries configuration values, so secrets cannot leak through metrics. ``Metrics.catalogue``
lists every metric (docs/reference/metrics.md and the Grafana dashboard are checked against it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

_M = TypeVar("_M", bound=MetricWrapperBase)

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0,
)  # fmt: skip


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric, as documented: name, type, label names and meaning."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


class Metrics:
    """Every metric the replicator exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.catalogue: list[MetricSpec] = []
        self.records_replicated = self._declare(
            Counter,
            "replicator_records_replicated_total",
            "Records acknowledged by a destination cluster.",
            ["leg", "topic"],
        )
        self.bytes_replicated = self._declare(
            Counter,
            "replicator_bytes_replicated_total",
            "Key and value bytes of records acknowledged by a destination cluster.",
            ["leg", "topic"],
        )
        self.records_skipped = self._declare(
            Counter,
            "replicator_records_skipped_total",
            "Source records not replicated, by reason: loop (its provenance names the topic it "
            "was read from), malformed_provenance.",
            ["leg", "topic", "reason"],
        )
        self.records_derived = self._declare(
            Counter,
            "replicator_records_derived_total",
            "Source records that carried another topic's provenance (derived data): replicated "
            "with their own, the carried one kept as replicator-upstream.",
            ["leg", "topic"],
        )
        self.send_errors = self._declare(
            Counter,
            "replicator_send_errors_total",
            "Batches a destination failed to acknowledge, by error type.",
            ["leg", "topic", "error"],
        )
        self.records_dead_lettered = self._declare(
            Counter,
            "replicator_records_dead_lettered_total",
            "Records too large for a destination topic, parked in the local dead-letter topic.",
            ["leg", "topic"],
        )
        self.offset_resets = self._declare(
            Counter,
            "replicator_offset_resets_total",
            "Source positions found outside the log (below_log_start, beyond_log_end).",
            ["leg", "topic", "reason"],
        )
        self.partitions_taken_over = self._declare(
            Counter,
            "replicator_partitions_taken_over_total",
            "Partitions a flow started for the first time with TAKE_OVER, by where: "
            "confirmed_by_the_target (after the last record the MirrorMaker copied, found in the "
            "source), at_its_saved_position (the offset it saved), by_start_from (nothing of it "
            "found: START_FROM applied).",
            ["leg", "outcome"],
        )
        self.records_lost = self._declare(
            Counter,
            "replicator_records_lost_total",
            "Source records deleted before they were replicated (known counts only), and records "
            "a destination lost that the source no longer held when they were replayed (at most: "
            "the source offsets below its log start).",
            ["leg", "topic"],
        )
        self.records_undecodable = self._declare(
            Counter,
            "replicator_records_undecodable_total",
            "Source records the client cannot decode (malformed; a header key that is not UTF-8 "
            "is copied as its bytes): the partition halts on that leg at the record, named in "
            "/status and the log.",
            ["leg", "topic"],
        )
        self.records_replayed = self._declare(
            Counter,
            "replicator_records_replayed_total",
            "Records written again because their destination lost them (its partition replaced, "
            "truncated or rebuilt empty): from the source log start (a rolled-back log: after the "
            "last record it still holds) up to the committed offset.",
            ["leg", "topic"],
        )
        self.partitions_replaced = self._declare(
            Counter,
            "replicator_destination_partitions_replaced_total",
            "Destination partitions whose log was replaced or lost records (topic deleted and "
            "created again, truncated, a cluster rebuilt empty); each is replayed from the source "
            "log start, or after the last record a rolled-back log still holds.",
            ["leg", "topic"],
        )
        self.idempotent_producer = self._declare(
            Gauge,
            "replicator_idempotent_producer",
            "1 when the leg's destination granted an idempotent producer (retries deduplicated "
            "by the broker), 0 when it refused one (batches of unknown outcome resume from the "
            "destination's tail instead).",
            ["leg"],
        )
        self.resume_skipped = self._declare(
            Counter,
            "replicator_resume_skipped_records_total",
            "Records a starting partition found already written in the destination (acknowledged "
            "after the last offset commit): skipped, not written again.",
            ["leg", "topic"],
        )
        self.resume_ignored = self._declare(
            Counter,
            "replicator_resume_ignored_total",
            "Resumes that found records carrying their origin's provenance which the leg did not "
            "write in order (below a higher one, or below the committed offset without a replay "
            "from the source log start: an application republished copies with their headers); "
            "ignored, never taken as where the leg stands.",
            ["leg", "topic"],
        )
        self.resume_seconds = self._declare(
            Histogram,
            "replicator_resume_seconds",
            "Time a starting partition spent reading the destination's tail to find where to "
            "resume.",
            ["leg"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.duplicates_written = self._declare(
            Counter,
            "replicator_duplicates_written_total",
            "Records written to a destination a second time, known for certain (reason "
            "destination_replaced: a replay wrote again what the recreated topic already held).",
            ["leg", "topic", "reason"],
        )
        self.duplicates_possible = self._declare(
            Counter,
            "replicator_duplicates_possible_total",
            "Records that may have been written twice, an upper bound, by reason: "
            "unacknowledged_at_release (a partition given up to another owner at a rebalance "
            "while batches were neither acknowledged nor refused; not at a stop, where the "
            "producer is closed before the group is left), past_a_gap (a resume found records "
            "of its origin not following the committed offset and repeated them), "
            "answered_after_the_lease (a request answered more than 2 s after the source "
            "group's lease ran out: the replica was frozen or cut off with it in flight, and it "
            "may have landed after a new owner read the destination).",
            ["leg", "topic", "reason"],
        )
        self.latency = self._declare(
            Histogram,
            "replicator_replication_latency_seconds",
            "Time from a record's append to the source (its log-append time when the topic uses "
            "LogAppendTime; with CreateTime, when the replicator fetched it) to its "
            "acknowledgement by the destination.",
            ["leg"],
            buckets=LATENCY_BUCKETS,
        )
        self.commit_lag = self._declare(
            Gauge,
            "replicator_commit_lag_records",
            "Source records not yet committed for a leg, per topic: the sum over its assigned "
            "partitions of the source log end minus the committed offset (partitions whose log "
            "end is not known yet are left out; the series goes when no partition of the topic "
            "is assigned any more).",
            ["leg", "topic"],
        )
        self.commit_lag_max = self._declare(
            Gauge,
            "replicator_commit_lag_max_records",
            "The largest commit lag of one assigned partition of a leg (records): a single "
            "stuck partition that its topic's sum would hide.",
            ["leg"],
        )
        self.commits = self._declare(
            Counter,
            "replicator_offset_commits_total",
            "Upstream offset commits, by result (ok, failed).",
            ["leg", "result"],
        )
        self.assigned_partitions = self._declare(
            Gauge,
            "replicator_assigned_partitions",
            "Source partitions currently assigned to a leg.",
            ["leg"],
        )
        self.rebalances = self._declare(
            Counter,
            "replicator_rebalances_total",
            "Partition assignments received by a leg.",
            ["leg"],
        )
        self.leg_ready = self._declare(
            Gauge,
            "replicator_leg_ready",
            "1 when a leg's destination is connected and reachable and every partition assigned "
            "to it is replicating (none starting, stalled or halted).",
            ["leg"],
        )
        self.leg_partitions = self._declare(
            Gauge,
            "replicator_leg_partitions",
            "Source partitions assigned to a leg, by state: starting (destination topic being "
            "prepared or its tail read), replicating (attached to the shared fetch, fetching "
            "alone or replaying), stalled (a batch unacknowledged for "
            "REPLICATOR_SEND_STALL_TIMEOUT_MS), halted (blocked or failed).",
            ["leg", "state"],
        )
        self.source_topics = self._declare(
            Gauge,
            "replicator_source_topics",
            "Topics of a feed's source cluster at the last listing, by what its topic rules make "
            "of them: replicated, or the reason they are not (not_included, excluded, "
            "not_a_replica_topic, target_is_replica_topic, remote_topic_of_target, "
            "flow_output, target_name_too_long, internal). feed: replica (the _REPLICA mode) or "
            "the flow's name.",
            ["feed", "selection"],
        )
        self.topics_blocked = self._declare(
            Gauge,
            "replicator_topics_blocked",
            "Topics a leg cannot replicate (destination has fewer partitions, or refused).",
            ["leg"],
        )

        self.partitions_added = self._declare(
            Counter,
            "replicator_partitions_added_total",
            "Partitions a leg added to a destination topic because its source topic grew.",
            ["leg", "topic"],
        )
        self.topic_config_sync_failures = self._declare(
            Counter,
            "replicator_topic_config_sync_failures_total",
            "Rounds of topic config sync a destination refused or failed (the topics keep the "
            "configs they have; the round is retried less and less often).",
            ["leg"],
        )
        self.acl_sync_bindings = self._declare(
            Gauge,
            "replicator_acl_sync_bindings",
            "Source topic ACL bindings an ACL sync (source->target) decided in its last round, "
            "by state: copied (the target holds them), downgraded, skipped (left out, each said "
            "once in the log and in /status), owned (bindings on the target the sync created).",
            ["sync", "state"],
        )
        self.acl_sync_changes = self._declare(
            Counter,
            "replicator_acl_sync_changes_total",
            "ACL bindings an ACL sync created on, or removed from, its target.",
            ["sync", "change"],
        )
        self.acl_sync_failures = self._declare(
            Counter,
            "replicator_acl_sync_failures_total",
            "Rounds of an ACL sync that failed (a grant missing, no authorizer, a cluster down): "
            "the target keeps the ACLs it has; the round is retried less and less often.",
            ["sync"],
        )
        self.heartbeats_emitted = self._declare(
            Counter,
            "replicator_heartbeats_emitted_total",
            "Heartbeat records a flow wrote into its source cluster's heartbeat topic.",
            ["flow"],
        )
        self.heartbeat_age = self._declare(
            Gauge,
            "replicator_heartbeat_age_seconds",
            "Now minus the emission time of the newest heartbeat of the flow seen on its target: "
            "grows when the flow stalls, with or without application traffic (before the first "
            "heartbeat: since the flow started).",
            ["flow"],
        )
        self.heartbeat_delay = self._declare(
            Gauge,
            "replicator_heartbeat_delay_seconds",
            "End-to-end replication delay the newest heartbeat measured (seen on the target "
            "minus emitted on the source).",
            ["flow"],
        )

        self.checkpoint_age = self._declare(
            Gauge,
            "replicator_checkpoint_age_seconds",
            "Now minus the time of the newest checkpoint of a synced consumer group written into "
            "a cluster (REPLICATOR_SYNC_GROUPS): how much a failover from it would read again "
            "at most, in time.",
            ["group", "source", "cluster"],
        )
        self.checkpoints_written = self._declare(
            Counter,
            "replicator_checkpoints_written_total",
            "Checkpoints (one per group, topic and partition) written into a cluster's "
            "checkpoints topic.",
            ["group", "source", "cluster"],
        )
        self.checkpoint_repeats = self._declare(
            Gauge,
            "replicator_checkpoint_repeats",
            "Records a synced group would read again if it failed over to the cluster now (the "
            "newest checkpoint's repeats).",
            ["group", "source", "cluster"],
        )
        self.checkpoint_failures = self._declare(
            Counter,
            "replicator_checkpoint_failures_total",
            "Rounds of checkpoints for a cluster that failed (retried at the next interval).",
            ["source", "cluster"],
        )
        self.group_offsets_synced = self._declare(
            Counter,
            "replicator_group_offsets_synced_total",
            "Partitions whose translated position was committed for a synced group with no "
            "active member in the cluster (REPLICATOR_SYNC_GROUP_OFFSETS; never backwards).",
            ["group", "source", "cluster"],
        )

        self.data_path = self._declare(
            Gauge,
            "replicator_data_path",
            "1 for the data path this process runs (native: records kept as bytes by the "
            "native extension; python: the reference path, when the extension cannot be loaded "
            "or REPLICATOR_DATA_PATH=python), 0 for the other.",
            ["path"],
        )

    def _declare(
        self, kind: type[_M], name: str, help: str, labels: list[str], **options: Any
    ) -> _M:
        self.catalogue.append(MetricSpec(name, kind.__name__.lower(), tuple(labels), help))
        return kind(name, help, labels, registry=self.registry, **options)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
