"""Topology: clusters, legs, and which topics are replicated where.

A *leg* is one direction of replication, from the local (source) cluster to one destination
cluster, the local one included. The topic rules map a source topic ``X_REPLICA`` to its real topic
``X`` and apply the include/exclude regexes to ``X``. Pure logic, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
class TopicRules:
    """Maps ``<topic><suffix>`` to ``<topic>`` and decides which topics are replicated."""

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

    @property
    def subscription_pattern(self) -> str:
        """Regex for the consumer's pattern subscription: exactly the replicated source topics.

        The include and exclude rules are folded in as lookaheads, so the consumer group is never
        assigned a partition the leg would not replicate.
        """
        suffix = re.escape(self.suffix)
        return (
            f"^(?=(?:{self.include.pattern}){suffix}$)"
            f"(?!(?:{self.exclude.pattern}){suffix}$)"
            f"(?!.*{suffix}{suffix}$)"
            f".+{suffix}$"
        )

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
