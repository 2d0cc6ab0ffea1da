"""Destination topic provisioning: the real topic ``X`` exists wherever it is replicated to.

Before the first record of ``X_REPLICA`` is sent to a destination cluster, ``X`` is created there
if it is missing, with the source topic's partition count, replication factor and topic-level
configuration overrides. An existing ``X`` with fewer partitions than the source cannot keep
partition numbers, so that topic is refused (:class:`TopicMismatch`) and reported, never written.

Topics are looked up by listing all topics, never by naming a missing one: some brokers create a
topic with default settings on a metadata request that names it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from replicator.errors import ClusterUnavailable, ReplicatorError, TopicMismatch
from replicator.kafka import ClusterClient, translate

log = structlog.get_logger(__name__)

# Topic-level settings copied from the source topic. Sources 2-4 are broker-wide values, which
# belong to each cluster and are not copied; read-only and sensitive entries never are.
REPLICATED_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "delete.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.type",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.ms",
    }
)
_BROKER_SOURCES = frozenset({2, 3, 4})
_TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True)
class TopicSpec:
    """What a destination topic must look like to receive a source topic."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DestinationTopic:
    """What the replicator knows of a destination topic it writes to."""

    name: str
    partitions: int
    # The largest record batch the topic accepts (its max.message.bytes), if the broker says.
    max_message_bytes: int | None = None


async def describe_partitions(admin: AIOKafkaAdminClient) -> dict[str, list[dict[str, Any]]]:
    """Partition metadata of every topic on a cluster, without naming (auto-creating) any."""
    topics = await admin.describe_topics()
    return {t["topic"]: t["partitions"] for t in topics if t["error_code"] == 0}


async def replication_factor(admin: AIOKafkaAdminClient, configured: int | None) -> int:
    """``configured``, else what a broker defaults to: 3, or fewer on a smaller cluster."""
    if configured is not None:
        return configured
    return min(3, len((await admin.describe_cluster())["brokers"]))


async def create_topic(
    admin: AIOKafkaAdminClient, spec: TopicSpec, tolerate: tuple[int, ...] = ()
) -> list[str]:
    """Create ``spec``; the broker's errors (``error <code> <message>``), empty on success."""
    response = await admin.create_topics(
        [NewTopic(spec.name, spec.partitions, spec.replication_factor, topic_configs=spec.configs)]
    )
    return [
        f"error {code} {message or ''}".strip()
        for _, code, message in response.topic_errors
        if code != 0 and code not in tolerate
    ]


async def _config_entries(admin: AIOKafkaAdminClient, topic: str) -> list[Any]:
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return [entry for r in responses for resource in r.resources for entry in resource[4]]


async def topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The replicable topic-level configuration of ``topic``."""
    configs: dict[str, str] = {}
    for entry in await _config_entries(admin, topic):
        name, value, read_only = entry[0], entry[1], entry[2]
        source, sensitive = entry[3], entry[4]
        if (
            name in REPLICATED_CONFIGS
            and value is not None
            and not read_only
            and not sensitive
            and source not in _BROKER_SOURCES
        ):
            configs[name] = value
    return configs


async def max_message_bytes(admin: AIOKafkaAdminClient, topic: str) -> int | None:
    """The effective ``max.message.bytes`` of ``topic``, whatever its source, if reported."""
    for entry in await _config_entries(admin, topic):
        if entry[0] == "max.message.bytes" and entry[1] is not None:
            return int(entry[1])
    return None


class TopicProvisioner:
    """Ensures real topics on one destination cluster, once per topic, for one leg."""

    def __init__(
        self,
        source: ClusterClient,
        destination: ClusterClient,
        replication_factor: int | None,
    ) -> None:
        self._source = source
        self._destination = destination
        self._replication_factor = replication_factor
        self._ready: dict[str, DestinationTopic] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.refused: dict[str, str] = {}

    async def ensure(self, source_topic: str, target_topic: str) -> DestinationTopic:
        """Return once ``target_topic`` can receive ``source_topic``; raise if it cannot.

        Callers for one topic wait for one attempt. A retriable failure is not remembered, so the
        next call tries again; a :class:`TopicMismatch` is remembered until :meth:`forget`.
        """
        async with self._locks.setdefault(target_topic, asyncio.Lock()):
            if target_topic in self._ready:
                return self._ready[target_topic]
            if target_topic in self.refused:
                raise TopicMismatch(self.refused[target_topic])
            topic = await self._provision(source_topic, target_topic)
            self._ready[target_topic] = topic
            return topic

    def forget(self, target_topic: str) -> None:
        """Check ``target_topic`` again on next use (after it was deleted, say)."""
        self._ready.pop(target_topic, None)
        self.refused.pop(target_topic, None)

    async def _provision(self, source_topic: str, target_topic: str) -> DestinationTopic:
        try:
            spec = await self._spec(source_topic, target_topic)
            destination = await self._destination.admin()
            existing = (await describe_partitions(destination)).get(target_topic)
            if existing is None:
                await self._create(destination, spec)
                existing = (await describe_partitions(destination)).get(target_topic, [])
            limit = await max_message_bytes(destination, target_topic)
        except ReplicatorError:
            raise
        except Exception as exc:
            raise translate(exc) from exc
        if len(existing) < spec.partitions:
            reason = (
                f"destination topic {target_topic} has {len(existing)} partitions, "
                f"source {source_topic} has {spec.partitions}: partition numbers cannot be kept"
            )
            self.refused[target_topic] = reason
            raise TopicMismatch(reason)
        return DestinationTopic(target_topic, len(existing), limit)

    async def _spec(self, source_topic: str, target_topic: str) -> TopicSpec:
        source = await self._source.admin()
        partitions = (await describe_partitions(source)).get(source_topic)
        if not partitions:
            raise ClusterUnavailable(f"source topic {source_topic} not found in metadata yet")
        replication = self._replication_factor or max(len(p["replicas"]) for p in partitions)
        configs = await topic_configs(source, source_topic)
        return TopicSpec(target_topic, len(partitions), replication, configs)

    async def _create(self, destination: AIOKafkaAdminClient, spec: TopicSpec) -> None:
        errors = await create_topic(destination, spec, tolerate=(_TOPIC_ALREADY_EXISTS,))
        if errors:
            reason = f"cannot create {spec.name}: {'; '.join(errors)}"
            self.refused[spec.name] = reason
            raise TopicMismatch(reason)
        log.info(
            "destination topic created",
            topic=spec.name,
            partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            configs=spec.configs,
        )
