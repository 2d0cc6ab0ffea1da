"""Topology: clusters, feeds, legs, and which topics are replicated where under which name.

A *feed* (:class:`FeedPlan`) is one fetch of one source cluster with its topic rules and its
legs; a *leg* is one direction of replication, from that source to one destination cluster.
The ``_REPLICA`` mode is one feed of the local cluster with a leg per cluster, the local one
included: its rules map a source topic ``X_REPLICA`` to its real topic ``X`` and apply the
include/exclude regexes to ``X``. Each MirrorMaker-style flow is one feed with one leg: its rules
apply the regexes to the source topic and name the target topic by the flow's naming policy
(identity, prefix, or MM2's ``<source><separator><topic>`` with MM2's cycle rule). One function
decides (:meth:`TopicRules.rejection`); a :class:`TopicSelection` is its answer for one topic
listing, and the consumer subscription is built from that answer, never from the user's regexes.
The replicator's own topics (heartbeats, checkpoints, dead letters) are never application data:
the rules leave them out, and :func:`internal_topic_problem` refuses a configuration that names
one of them after a topic the rules replicate. :func:`colliding_flow_names` names two flows
into one cluster whose topic names Kafka would take for each other's. Pure logic, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import NamedTuple

from replicator.config.clusters import FlowSettings
from replicator.config.settings import Settings
from replicator.config.values import (
    ENV_PREFIX,
    INTERNAL_TOPIC_FIELDS,
    AclPolicy,
    HeartbeatPlacement,
    Naming,
    OversizePolicy,
    StartPosition,
    TakeOver,
)

# The longest topic name Kafka accepts.
_MAX_TOPIC_LENGTH = 249


@dataclass(frozen=True, slots=True)
class Leg:
    """One replication direction: the topics a feed of ``source`` selects, into ``destination``.

    ``flow`` names the MirrorMaker-style flow the leg belongs to (``None`` in the ``_REPLICA``
    mode); it prefixes the leg's name, so two feeds between the same clusters never share one.
    """

    source: str
    destination: str
    flow: str | None = None

    @property
    def name(self) -> str:
        route = f"{self.source}->{self.destination}"
        return route if self.flow is None else f"{self.flow}:{route}"

    def group_id(self, prefix: str) -> str:
        """The consumer group that holds this leg's upstream offsets on the source cluster."""
        return f"{prefix}.{self.source}.{self.destination}"


def legs_for(settings: Settings) -> list[Leg]:
    """The legs one replicator runs: local first, then every remote cluster in alias order."""
    local = settings.local_cluster
    return [Leg(local, local)] + [Leg(local, remote) for remote in settings.remote_clusters]


class Rejection(StrEnum):
    """Why a source topic is not replicated."""

    NOT_A_REPLICA_TOPIC = "not_a_replica_topic"
    NOT_INCLUDED = "not_included"
    EXCLUDED = "excluded"
    TARGET_IS_REPLICA_TOPIC = "target_is_replica_topic"
    # MM2's cycle rule: the topic is the target's own data, copied here under its name.
    REMOTE_TOPIC_OF_TARGET = "remote_topic_of_target"
    # A prefix flow's own output (it starts with the prefix): copying it would rename it again.
    FLOW_OUTPUT = "flow_output"
    TARGET_NAME_TOO_LONG = "target_name_too_long"
    # The replicator's own topics (checkpoints of consumer groups, dead letters, and heartbeats
    # in the _REPLICA mode): never application data.
    INTERNAL = "internal"


@dataclass(frozen=True)
class TopicSelection:
    """What the rules make of one listing of a cluster's topics: the one answer every part of
    the replicator (subscription, legs, ``lag``, ``check-config``, Spark jobs) works from."""

    replicated: tuple[str, ...]
    rejected: dict[str, Rejection] = field(default_factory=dict)

    @property
    def subscription_pattern(self) -> str:
        """A consumer subscription to exactly :attr:`replicated`: the names, escaped.

        A pattern rather than a topic list: a list makes the client ask for the topics' metadata
        by name, which some brokers answer by creating a missing topic.
        """
        if not self.replicated:
            return r"(?!)"  # matches nothing: the group is joined with no partition
        names = "|".join(re.escape(topic) for topic in self.replicated)
        return rf"\A(?:{names})\Z"

    def by_reason(self) -> dict[str, list[str]]:
        """Rejected topics, sorted, per reason."""
        grouped: dict[str, list[str]] = {}
        for topic, reason in sorted(self.rejected.items()):
            grouped.setdefault(reason.value, []).append(topic)
        return grouped

    def replica_topics_rejected(self) -> dict[str, Rejection]:
        """The rejected topics that carry the replica suffix (what a user meant to replicate)."""
        return {t: r for t, r in self.rejected.items() if r is not Rejection.NOT_A_REPLICA_TOPIC}


@dataclass(frozen=True)
class TopicRules:
    """Which source topics a feed replicates, and each one's name on the destination.

    With a ``suffix`` (the ``_REPLICA`` mode) a source topic ``<topic><suffix>`` maps to
    ``<topic>`` and the regexes apply to ``<topic>``; without one (a flow) the regexes apply to
    the source topic and ``naming`` gives the target's name. :meth:`rejection` is the only
    decision; everything else (:meth:`select`, :meth:`target`, the subscription) is derived from
    it, so no two parts can disagree on a topic.
    """

    include: re.Pattern[str]
    exclude: re.Pattern[str]
    suffix: str | None = None
    naming: Naming = Naming.IDENTITY
    prefix: str = ""  # the prefix policy's
    separator: str = "."  # the source-alias policy's
    source_name: str = ""  # the source cluster's name in topic names (source-alias policy)
    target_name: str = ""  # the target cluster's name in topic names (MM2's cycle rule)
    # A flow's heartbeat topic: always copied, whatever the include and exclude rules say.
    heartbeat_topic: str | None = None
    # MirrorMaker 2's heartbeat names: the copy is <source><separator><topic> whatever the
    # naming policy, and other clusters' copies travel on (never back: the cycle rule).
    heartbeats_renamed: bool = False
    # The replicator's own topics: never replicated nor written into, whatever the include and
    # exclude rules say (a flow's: source topics; the _REPLICA mode's: real topics).
    internal_topics: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings) -> TopicRules:
        """The ``_REPLICA`` mode's rules."""
        return cls(
            suffix=settings.replica_suffix,
            include=re.compile(settings.topics_include),
            exclude=re.compile(settings.topics_exclude),
            internal_topics=internal_topics_in_use(settings),
        )

    @classmethod
    def for_flow(cls, flow: FlowSettings, settings: Settings) -> TopicRules:
        """A MirrorMaker-style flow's rules."""
        source, target = settings.clusters[flow.source], settings.clusters[flow.target]
        mm2_placement = settings.heartbeat_placement is HeartbeatPlacement.MIRRORMAKER2
        return cls(
            include=re.compile(flow.topics_include),
            exclude=re.compile(flow.topics_exclude),
            naming=flow.naming,
            prefix=flow.prefix,
            separator=flow.separator,
            source_name=source.topic_alias or flow.source,
            target_name=target.topic_alias or flow.target,
            # MirrorMaker 2's placement: heartbeats are copied whether the flow emits any or
            # not (emit.heartbeats.enabled=false stops the emitting only, as in MM2), so every
            # cluster's heartbeats still show the whole topology.
            heartbeat_topic=settings.heartbeat_topic
            if (flow.heartbeats or flow.reverse_heartbeats or mm2_placement)
            and settings.heartbeat_interval_ms
            else None,
            heartbeats_renamed=mm2_placement,
            # Checkpoints are meaningful only in their cluster: never copied, even when off.
            internal_topics=(internal_topics_in_use(settings) - {settings.heartbeat_topic})
            | {settings.checkpoints_topic},
        )

    def describe(self) -> dict[str, str]:
        """The rules as configured, for logs and ``/status``."""
        rules = {"include": self.include.pattern, "exclude": self.exclude.pattern}
        if self.suffix is not None:
            return {**rules, "suffix": self.suffix}
        rules["naming"] = self.naming.value
        if self.naming is Naming.PREFIX:
            rules["prefix"] = self.prefix
        elif self.naming is Naming.SOURCE_ALIAS:
            rules["topic_names"] = f"{self.source_name}{self.separator}<topic>"
        return rules

    def rejection(self, source_topic: str) -> Rejection | None:
        """Why ``source_topic`` is not replicated, or ``None`` when it is."""
        if self.suffix is None:
            return self._flow_rejection(source_topic)
        suffix = self.suffix
        if not source_topic.endswith(suffix) or source_topic == suffix:
            return Rejection.NOT_A_REPLICA_TOPIC
        target = source_topic[: -len(suffix)]
        if target.endswith(suffix):
            # Writing into another replica topic would make the replicator read its own output.
            return Rejection.TARGET_IS_REPLICA_TOPIC
        if target in self.internal_topics:
            return Rejection.INTERNAL
        if not self.include.fullmatch(target):
            return Rejection.NOT_INCLUDED
        if self.exclude.fullmatch(target):
            return Rejection.EXCLUDED
        return None

    def _is_heartbeats(self, topic: str) -> bool:
        """The heartbeat topic, or (MM2 names) another cluster's copy of it: as in MM2, always
        copied, so heartbeats show the whole topology."""
        beats = self.heartbeat_topic
        if beats is None:
            return False
        renamed = self.naming is Naming.SOURCE_ALIAS or self.heartbeats_renamed
        return topic == beats or (renamed and topic.endswith(self.separator + beats))

    def _flow_rejection(self, source_topic: str) -> Rejection | None:
        if source_topic in self.internal_topics:
            return Rejection.INTERNAL
        if not self._is_heartbeats(source_topic):
            if not self.include.fullmatch(source_topic):
                return Rejection.NOT_INCLUDED
            if self.exclude.fullmatch(source_topic):
                return Rejection.EXCLUDED
        heartbeats_renamed = self.heartbeats_renamed and self._is_heartbeats(source_topic)
        if (self.naming is Naming.SOURCE_ALIAS or heartbeats_renamed) and self._is_cycle(
            source_topic
        ):
            return Rejection.REMOTE_TOPIC_OF_TARGET
        if self.naming is Naming.PREFIX and source_topic.startswith(self.prefix):
            return Rejection.FLOW_OUTPUT
        if len(self._name(source_topic)) > _MAX_TOPIC_LENGTH:
            return Rejection.TARGET_NAME_TOO_LONG
        return None

    def _is_cycle(self, topic: str) -> bool:
        """MM2's cycle rule: a topic named ``<a><sep><b><sep>...<topic>`` came through the
        clusters ``a``, ``b``, ...; copying it to any of them would bring it back home."""
        parts = topic.split(self.separator)
        return self.target_name in parts[:-1]

    def _name(self, source_topic: str) -> str:
        if self.heartbeats_renamed and self._is_heartbeats(source_topic):
            return f"{self.source_name}{self.separator}{source_topic}"
        if self.naming is Naming.PREFIX:
            return self.prefix + source_topic
        if self.naming is Naming.SOURCE_ALIAS:
            return f"{self.source_name}{self.separator}{source_topic}"
        return source_topic

    def target(self, source_topic: str) -> str | None:
        """The topic ``source_topic`` replicates into, or ``None`` if it is not replicated."""
        if self.rejection(source_topic) is not None:
            return None
        if self.suffix is not None:
            return source_topic[: -len(self.suffix)]
        return self._name(source_topic)

    def source(self, target_topic: str) -> str | None:
        """The source topic replicated into ``target_topic``, or ``None`` (the inverse of
        :meth:`target`)."""
        if self.suffix is not None:
            candidate = target_topic + self.suffix
        elif self.heartbeats_renamed and self._is_heartbeats(target_topic):
            candidate = target_topic[len(self.source_name) + len(self.separator) :]
        elif self.naming is Naming.PREFIX:
            candidate = target_topic[len(self.prefix) :]
        elif self.naming is Naming.SOURCE_ALIAS:
            candidate = target_topic[len(self.source_name) + len(self.separator) :]
        else:
            candidate = target_topic
        return candidate if self.target(candidate) == target_topic else None

    def select(self, topics: Iterable[str]) -> TopicSelection:
        """Sort a cluster's topics into replicated and rejected (with the reason)."""
        replicated: list[str] = []
        rejected: dict[str, Rejection] = {}
        for topic in sorted(set(topics)):
            reason = self.rejection(topic)
            if reason is None:
                replicated.append(topic)
            else:
                rejected[topic] = reason
        return TopicSelection(tuple(replicated), rejected)


@dataclass(frozen=True)
class FeedPlan:
    """One fetch of one source cluster: its topic rules, consumer groups and legs.

    ``group`` is the feed's consumer group on the source; each leg commits its offsets under
    ``<leg_group_prefix>.<source>.<destination>``. ``loop_home`` (flows): a record copied under a
    renamed topic never goes back to the cluster its provenance names (``provenance.py``).
    """

    name: str
    source: str
    group: str
    leg_group_prefix: str
    rules: TopicRules
    legs: tuple[Leg, ...]
    start_from: StartPosition = StartPosition.EARLIEST
    # Whose position a partition the leg never committed takes over (takeover.py).
    take_over: TakeOver = TakeOver.NONE
    take_over_topic: str | None = None
    replication_factor: int | None = None
    loop_home: bool = False
    preserve_partitions: bool = True
    # What names the target cluster in a renamed copy of its data (provenance.py), lower-case.
    home_marks: tuple[str, ...] = ()
    # Which of the source's topic ACLs each leg into another cluster keeps on it (acl_sync.py).
    acl_sync: AclPolicy = AclPolicy.OFF

    @property
    def is_flow(self) -> bool:
        return self.rules.suffix is None


REPLICA_FEED = "replica"


def internal_topics_in_use(settings: Settings) -> frozenset[str]:
    """The replicator's own topics this configuration writes: the heartbeat topic (a flow emits
    heartbeats), the checkpoints topic (groups are synced), the dead-letter topic (its policy)."""
    used = set()
    if settings.heartbeat_interval_ms and any(flow.heartbeats for flow in settings.flows.values()):
        used.add(settings.heartbeat_topic)
    if settings.sync_groups is not None or syncs_acls(settings):
        used.add(settings.checkpoints_topic)
    if settings.record_too_large_policy is OversizePolicy.DEAD_LETTER:
        used.add(settings.dead_letter_topic)
    return frozenset(used)


def syncs_acls(settings: Settings) -> bool:
    """Whether any feed keeps topic ACLs on other clusters (its ledger is the checkpoints
    topic of each target: :mod:`replicator.topics.acl_sync`)."""
    flows = any(flow.acl_sync is not AclPolicy.OFF for flow in settings.flows.values())
    replica = settings.replica_mode and settings.acl_sync is not AclPolicy.OFF
    return flows or (replica and bool(settings.remote_clusters))


def internal_topic_problem(settings: Settings) -> tuple[str, str] | None:
    """The first setting that names one of the replicator's own topics (heartbeats, checkpoints,
    dead letters) after application data, as ``(variable, why)``; ``None`` when none does.

    A topic is application data when a feed's rules, left without their exceptions for the
    replicator's own topics, would replicate it (a source topic: ``orders_REPLICA``, a flow's
    ``orders``) or replicate into it (``orders`` from ``orders_REPLICA``, ``dc1.orders`` from a
    flow's ``orders``): heartbeats or checkpoints there would reach the applications, and their
    records be read as the replicator's. Whether a feed runs the topic's writer or not, a name
    is checked: it may be switched on later. The defaults (``heartbeats``, ...) are reserved:
    the rules never take them for application data (:attr:`Rejection.INTERNAL`).
    """
    feeds: list[tuple[str, TopicRules, str]] = []
    if settings.replica_mode:
        rules = replace(TopicRules.from_settings(settings), internal_topics=frozenset())
        feeds.append(("the _REPLICA mode", rules, f"{ENV_PREFIX}TOPICS_EXCLUDE"))
    for name, flow in sorted(settings.flows.items()):
        rules = replace(
            TopicRules.for_flow(flow, settings), heartbeat_topic=None, internal_topics=frozenset()
        )
        feeds.append((f"flow {name}", rules, f"{ENV_PREFIX}FLOWS__{name.upper()}__TOPICS_EXCLUDE"))
    for field_name in INTERNAL_TOPIC_FIELDS:
        topic = getattr(settings, field_name)
        reserved = Settings.model_fields[field_name].default
        if topic == reserved:
            continue
        use = _application_use(topic, feeds)
        if use is None:
            continue
        what, exclude = use
        instead = f"add it to {exclude}"
        if _application_use("__" + topic, feeds) is None:
            instead += f", or name it '__{topic}'"
        return (
            ENV_PREFIX + field_name.upper(),
            f"{topic!r} is an application topic ({what}): the replicator's own records must not "
            f"go there; leave it unset ({reserved!r}, reserved) or give a topic the rules do not "
            f"replicate ({instead})",
        )
    return None


def _application_use(
    topic: str, feeds: list[tuple[str, TopicRules, str]]
) -> tuple[str, str] | None:
    """How the first feed that does makes ``topic`` application data, and the variable that
    would exclude it; ``None`` when no feed does."""
    for what, rules, exclude in feeds:
        if rules.rejection(topic) is None:
            return f"{what} replicates it", exclude
        source = rules.source(topic)
        if source is not None:
            return f"{what} replicates {source} into it", exclude
    return None


def home_marks(settings: Settings, flow: FlowSettings) -> tuple[str, ...]:
    """What, in the name of a topic of the flow's source, says it holds a renamed copy of the
    target's data: the target's alias and topic alias, and the prefix of each configured flow
    from the target into the source."""
    target = settings.clusters[flow.target]
    marks = {flow.target, (target.topic_alias or flow.target).lower()}
    for other in settings.flows.values():
        if (other.source, other.target) == (flow.target, flow.source) and other.prefix:
            marks.add(other.prefix.lower())
    return tuple(sorted(marks))


def feeds_for(settings: Settings) -> list[FeedPlan]:
    """The feeds one replicator runs: the ``_REPLICA`` mode's (if on), then each flow by name."""
    feeds = []
    if settings.replica_mode:
        local = settings.local_cluster
        feeds.append(
            FeedPlan(
                name=REPLICA_FEED,
                source=local,
                group=f"{settings.group_prefix}.{local}",
                leg_group_prefix=settings.group_prefix,
                rules=TopicRules.from_settings(settings),
                legs=tuple(legs_for(settings)),
                replication_factor=settings.destination_replication_factor,
                acl_sync=settings.acl_sync,
            )
        )
    for name, flow in sorted(settings.flows.items()):
        group = flow.group_id or f"{settings.group_prefix}.{name}"
        feeds.append(
            FeedPlan(
                name=name,
                source=flow.source,
                group=group,
                leg_group_prefix=group,
                rules=TopicRules.for_flow(flow, settings),
                legs=(Leg(flow.source, flow.target, name),),
                start_from=flow.start_from,
                take_over=flow.take_over,
                take_over_topic=flow.take_over_topic,
                replication_factor=flow.replication_factor
                or settings.destination_replication_factor,
                loop_home=True,
                preserve_partitions=flow.preserve_partitions,
                home_marks=home_marks(settings, flow),
                acl_sync=flow.acl_sync,
            )
        )
    return feeds


def _names_begin_with(flow: FlowSettings, settings: Settings) -> str:
    """What every target topic name of a flow begins with (its naming policy's stem)."""
    if flow.naming is Naming.PREFIX:
        return flow.prefix
    if flow.naming is Naming.SOURCE_ALIAS:
        return f"{settings.clusters[flow.source].topic_alias or flow.source}{flow.separator}"
    return ""


def colliding_flow_names(settings: Settings) -> list[str]:
    """One warning per pair of flows into one cluster whose names Kafka takes for each other's.

    Kafka refuses a topic whose name differs from an existing one only in ``.`` against ``_``
    (they collide in its metric names): ``dc1_orders`` beside ``dc1.orders`` is refused
    (InvalidTopicException, "collides with existing topic"). Two flows into one cluster whose
    names begin differently but alike in that way (a prefix ``dc1_`` beside MM2's ``dc1.<topic>``)
    make such a pair of every topic both copy: whichever is created second is refused, and its
    partitions halt (reported). A warning, not a refusal: their topic rules may select
    different topics. Two flows with the same naming into one cluster write into the same
    topics (an aggregation), which Kafka accepts.
    """
    warnings = []
    flows = sorted(settings.flows.items())
    for i, (name, flow) in enumerate(flows):
        stem = _names_begin_with(flow, settings)
        for other_name, other in flows[i + 1 :]:
            other_stem = _names_begin_with(other, settings)
            if other.target != flow.target or other_stem == stem:
                continue
            if other_stem.replace(".", "_") != stem.replace(".", "_"):
                continue
            warnings.append(
                f"flows {name} and {other_name} both write into {flow.target}, as "
                f"{stem}<topic> and {other_stem}<topic>: Kafka takes '.' and '_' in topic names "
                "for the same character, so of a topic both copy only the name created first is "
                "accepted, the other's partitions halt; give one flow another prefix or separator"
            )
    return warnings


class Counterpart(NamedTuple):
    """Where a topic's records are in another cluster, for moving a consumer group."""

    topic: str
    paired: bool  # partition numbers kept (false: a flow placing records by key)


def counterpart(settings: Settings, topic: str, source: str, target: str) -> Counterpart | None:
    """The topic of cluster ``target`` that holds the records of ``topic`` of cluster ``source``
    (for moving a consumer group between them), or ``None`` when nothing replicates it there.

    A flow from ``source`` to ``target`` names it (``orders`` -> ``dc1.orders``); a flow the other
    way gives back the original of a copy (``dc2.orders`` -> ``orders``); the ``_REPLICA`` mode
    keeps the name of a real topic whose replica topic its rules select.
    """
    for plan in feeds_for(settings):
        if not plan.is_flow:
            continue
        leg = plan.legs[0]
        if (leg.source, leg.destination) == (source, target):
            named = plan.rules.target(topic)
            if named is not None:
                return Counterpart(named, plan.preserve_partitions)
        if (leg.source, leg.destination) == (target, source):
            original = plan.rules.source(topic)
            if original is not None:
                return Counterpart(original, plan.preserve_partitions)
    if settings.replica_mode:
        rules = TopicRules.from_settings(settings)
        if rules.source(topic) is not None:
            return Counterpart(topic, True)
    return None
