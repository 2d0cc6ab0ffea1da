"""The Kafka ACLs a configuration needs, exactly: what ``replicator acls`` prints.

One function (:func:`required_acls`) turns a configuration and, per feed, the topics its rules
select now into the grants each cluster must hold for the replicator's principal there: every
feed's source topics and consumer groups on its source; every leg's destination topics and
destination marks on its destination; the replicator's own topics (heartbeats, checkpoints,
dead letters) and synced groups where the configuration uses them. Each grant says why, so the
operator can tell which setting asks for it (``AlterConfigs`` only while the config sync runs,
``Alter`` only where destinations keep their source's partitions). The same derivation is what
``docs/operations/security.md`` shows and what the ACL integration tests grant, nothing more.

Kafka ACLs match names literally or by prefix, never by regex: a grant is literal for a topic or
group the configuration names, prefixed only where the configuration itself names a prefix
(``REPLICATOR_SYNC_GROUPS=billing.*``). Pure logic, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, TopicSelection, feeds_for
from replicator.config.values import AclPolicy, HeartbeatPlacement, OversizePolicy, TakeOver

_ANY = ".*"


class Resource(StrEnum):
    """A Kafka resource type, as ``kafka-acls`` names it (``--topic``, ``--group``)."""

    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"  # the one resource named kafka-cluster (--cluster)


CLUSTER_RESOURCE = "kafka-cluster"


class Pattern(StrEnum):
    """How a grant's name matches (``--resource-pattern-type``)."""

    LITERAL = "literal"
    PREFIXED = "prefixed"


# Kafka's operation names, in the order kafka-acls lists them.
OPERATIONS = ("Read", "Write", "Create", "Describe", "Alter", "DescribeConfigs", "AlterConfigs")


@dataclass(frozen=True, order=True)
class AclGrant:
    """The operations the replicator's principal on ``cluster`` needs on one resource, and why
    (one reason per feature that needs them)."""

    cluster: str
    resource: Resource
    name: str
    pattern: Pattern
    operations: tuple[str, ...]
    why: tuple[str, ...] = field(compare=False)

    def describe(self) -> str:
        """``Read, Describe on topic orders_REPLICA`` (the pattern said when prefixed)."""
        kind = f"{self.resource} prefix" if self.pattern is Pattern.PREFIXED else self.resource
        if self.resource is Resource.CLUSTER:
            return f"{', '.join(self.operations)} on the cluster"
        return f"{', '.join(self.operations)} on {kind} {self.name}"


@dataclass
class _Needs:
    """Operations and reasons collected per resource, merged into grants at the end."""

    found: dict[tuple[str, Resource, str, Pattern], tuple[set[str], list[str]]] = field(
        default_factory=dict
    )

    def add(
        self,
        cluster: str,
        resource: Resource,
        name: str,
        operations: Iterable[str],
        why: str,
        pattern: Pattern = Pattern.LITERAL,
    ) -> None:
        held, reasons = self.found.setdefault((cluster, resource, name, pattern), (set(), []))
        held.update(operations)
        if why not in reasons:
            reasons.append(why)

    def grants(self) -> list[AclGrant]:
        return sorted(
            AclGrant(
                cluster,
                resource,
                name,
                pattern,
                tuple(op for op in OPERATIONS if op in held),
                tuple(reasons),
            )
            for (cluster, resource, name, pattern), (held, reasons) in self.found.items()
        )


def required_acls(settings: Settings, selections: Mapping[str, TopicSelection]) -> list[AclGrant]:
    """The grants ``settings`` needs, for the topics each feed selects (``selections`` by feed
    name; a feed without one needs only its groups until its source is listed)."""
    needs = _Needs()
    plans = feeds_for(settings)
    for plan in plans:
        selection = selections.get(plan.name, TopicSelection((), {}))
        topics = list(selection.replicated)
        # A flow's heartbeats written into its source are copied from the first one on, also
        # before the topic exists (then not in the listing).
        if settings.heartbeat_topic not in topics and plan.source in _heartbeat_clusters(
            settings, plan
        ):
            topics.append(settings.heartbeat_topic)
        _feed(needs, settings, plan, topics)
    _own_topics(needs, settings, plans)
    return needs.grants()


def _feed(needs: _Needs, settings: Settings, plan: FeedPlan, topics: list[str]) -> None:
    """A feed's source topics and groups, and each of its legs' destination topics and marks."""
    source = plan.source
    for topic in topics:
        needs.add(
            source,
            Resource.TOPIC,
            topic,
            ("Read", "Describe", "DescribeConfigs"),
            "replicated: fetched, its partitions and configs copied",
        )
    needs.add(source, Resource.GROUP, plan.group, ("Read", "Describe"), "the feed's consumer group")
    destination_ops = ["Write", "Read", "Create", "Describe", "DescribeConfigs"]
    if plan.preserve_partitions:
        destination_ops.append("Alter")  # CreatePartitions: grown as the source grows
    if settings.topic_config_sync_interval_ms > 0:
        destination_ops.append("AlterConfigs")  # IncrementalAlterConfigs: the config sync
    for leg in plan.legs:
        group = leg.group_id(plan.leg_group_prefix)
        needs.add(
            source, Resource.GROUP, group, ("Read", "Describe"), "the leg's committed offsets"
        )
        needs.add(
            leg.destination,
            Resource.GROUP,
            f"{group}.resume",
            ("Read", "Describe"),
            "the leg's destination marks (resumption)",
        )
        for topic in topics:
            target = plan.rules.target(topic)
            if target is None:
                continue
            needs.add(
                leg.destination,
                Resource.TOPIC,
                target,
                destination_ops,
                "destination: written, created, its tail read; grown and its configs synced",
            )
        if plan.acl_sync is not AclPolicy.OFF and leg.destination != leg.source:
            _acl_sync(needs, settings, leg.source, leg.destination)
        if plan.take_over is not TakeOver.NONE:
            needs.add(
                leg.destination,
                Resource.TOPIC,
                settings.checkpoints_topic,
                ("Write", "Read", "Create", "Describe"),
                "the takeover's handovers (TAKE_OVER)",
            )


def _acl_sync(needs: _Needs, settings: Settings, source: str, target: str) -> None:
    """A leg's topic ACL sync: the source's ACLs read, the target's read, created and removed,
    and the ledger of what it created (each cluster's checkpoints topic) read on both."""
    why = "the ACL sync (ACL_SYNC): "
    needs.add(source, Resource.CLUSTER, CLUSTER_RESOURCE, ("Describe",), why + "ACLs read")
    needs.add(
        target,
        Resource.CLUSTER,
        CLUSTER_RESOURCE,
        ("Describe", "Alter"),
        why + "ACLs read, created and removed",
    )
    ledger = ("Read", "Describe")
    needs.add(source, Resource.TOPIC, settings.checkpoints_topic, ledger, why + "its ledger read")
    needs.add(
        target,
        Resource.TOPIC,
        settings.checkpoints_topic,
        ("Write", "Read", "Create", "Describe"),
        why + "its ledger of the bindings it created",
    )


def _own_topics(needs: _Needs, settings: Settings, plans: list[FeedPlan]) -> None:
    """Heartbeats are in the selections (flows copy them); checkpoints, synced groups and dead
    letters where the configuration uses them."""
    if settings.record_too_large_policy is OversizePolicy.DEAD_LETTER:
        for plan in plans:
            for leg in plan.legs:
                needs.add(
                    leg.destination,
                    Resource.TOPIC,
                    settings.dead_letter_topic,
                    ("Write", "Create", "Describe"),
                    "records too large parked (REPLICATOR_RECORD_TOO_LARGE_POLICY)",
                )
    _heartbeats(needs, settings, plans)
    if settings.sync_groups is None:
        return
    name, pattern = group_grant(settings.sync_groups)
    for plan in plans:
        for leg in plan.legs:
            if leg.destination == leg.source:
                continue
            needs.add(
                leg.source,
                Resource.GROUP,
                name,
                ("Describe",),
                "synced groups: their positions read (REPLICATOR_SYNC_GROUPS)",
                pattern,
            )
            needs.add(
                leg.destination,
                Resource.TOPIC,
                settings.checkpoints_topic,
                ("Write", "Read", "Create", "Describe"),
                "checkpoints of synced groups (REPLICATOR_SYNC_GROUPS)",
            )
            operations = ("Read", "Describe") if settings.sync_group_offsets else ("Describe",)
            needs.add(
                leg.destination,
                Resource.GROUP,
                name,
                operations,
                "synced groups on the destination (REPLICATOR_SYNC_GROUP_OFFSETS commits)",
                pattern,
            )


def _heartbeat_clusters(settings: Settings, plan: FeedPlan) -> list[str]:
    """The clusters whose heartbeat topic a feed writes into (flows only)."""
    flow = settings.flows.get(plan.name)
    if flow is None or not settings.heartbeat_interval_ms:
        return []
    leg = plan.legs[0]
    if settings.heartbeat_placement is HeartbeatPlacement.SOURCE:
        return [leg.source] if flow.heartbeats else []
    into = [leg.destination] if flow.heartbeats else []
    return into + ([leg.source] if flow.reverse_heartbeats else [])


def _heartbeats(needs: _Needs, settings: Settings, plans: list[FeedPlan]) -> None:
    """The heartbeat topic each flow writes (the copies are among its feed's topics)."""
    for plan in plans:
        for cluster in _heartbeat_clusters(settings, plan):
            needs.add(
                cluster,
                Resource.TOPIC,
                settings.heartbeat_topic,
                ("Write", "Read", "Create", "Describe"),
                f"heartbeats of flow {plan.name} (REPLICATOR_HEARTBEAT_INTERVAL_MS)",
            )


def group_grant(regex: str) -> tuple[str, Pattern]:
    """The ACL that covers the groups a regex names: literal for a plain name (``billing``,
    ``billing\\.eu``), prefixed for ``name.*``; any other regex needs every group (the wildcard
    ``*``: Kafka has no regex ACLs)."""
    name = r"[\w-]+(?:\\?\.[\w-]+)*"
    if re.fullmatch(name, regex):
        return regex.replace("\\.", "."), Pattern.LITERAL
    stem = regex.removesuffix(_ANY)
    if stem != regex and re.fullmatch(name + r"(?:\\?\.)?", stem):
        return stem.replace("\\.", "."), Pattern.PREFIXED
    return "*", Pattern.LITERAL
