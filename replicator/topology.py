"""Topology: clusters, legs, and which topics are replicated where.

A *leg* is one direction of replication, from the local (source) cluster to one destination
cluster, the local one included. The topic rules map a source topic ``X_REPLICA`` to its real topic
``X`` and apply the include/exclude regexes to ``X`` (whole name). One function decides
(:meth:`TopicRules.rejection`); a :class:`TopicSelection` is its answer for one topic listing,
and the consumer subscription is built from that answer, never from the user's regexes.
Pure logic, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from replicator.settings import Settings


@dataclass(frozen=True, slots=True)
class Leg:
    """One replication direction: every replica topic of ``source`` into ``destination``."""

    source: str
    destination: str

    @property
    def name(self) -> str:
        return f"{self.source}->{self.destination}"

    @property
    def is_local(self) -> bool:
        return self.source == self.destination

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
    """Maps ``<topic><suffix>`` to ``<topic>`` and decides which topics are replicated.

    :meth:`rejection` is the only decision; everything else (:meth:`select`, :meth:`target`,
    the subscription) is derived from it, so no two parts can disagree on a topic.
    """

    suffix: str
    include: re.Pattern[str]
    exclude: re.Pattern[str]

    @classmethod
    def from_settings(cls, settings: Settings) -> TopicRules:
        return cls(
            suffix=settings.replica_suffix,
            include=re.compile(settings.topics_include),
            exclude=re.compile(settings.topics_exclude),
        )

    def describe(self) -> dict[str, str]:
        """The rules as configured, for logs and ``/status``."""
        return {
            "include": self.include.pattern,
            "exclude": self.exclude.pattern,
            "suffix": self.suffix,
        }

    def rejection(self, source_topic: str) -> Rejection | None:
        """Why ``source_topic`` is not replicated, or ``None`` when it is."""
        if not source_topic.endswith(self.suffix) or source_topic == self.suffix:
            return Rejection.NOT_A_REPLICA_TOPIC
        target = source_topic[: -len(self.suffix)]
        if target.endswith(self.suffix):
            # Writing into another replica topic would make the replicator read its own output.
            return Rejection.TARGET_IS_REPLICA_TOPIC
        if not self.include.fullmatch(target):
            return Rejection.NOT_INCLUDED
        if self.exclude.fullmatch(target):
            return Rejection.EXCLUDED
        return None

    def target(self, source_topic: str) -> str | None:
        """The real topic ``source_topic`` replicates into, or ``None`` if it is not replicated."""
        if self.rejection(source_topic) is not None:
            return None
        return source_topic[: -len(self.suffix)]

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
