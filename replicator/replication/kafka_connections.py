"""A leg's connections on aiokafka (:class:`KafkaLegConnections`, the
:class:`~replicator.replication.connections.LegConnections` the service gives each leg), built
from the service's :class:`~replicator.kafka.clients.ClusterClient` of each cluster.

- The source consumer (:class:`KafkaLegSource`): group ``<prefix>.<source>.<destination>``, the
  prefix being the group prefix in the ``_REPLICA`` mode and the flow's group for a flow; assigned
  by the leg, never subscribed, so its metadata need not follow new topics.
- The destination (:class:`~replicator.replication.destination.KafkaDestination`): a producer,
  idempotent until the destination cluster refuses a producer id (then never again), and a reader
  of tails; clients that failed to start are replaced by new ones before the next attempt.
- The topic admins (:class:`~replicator.topics.provisioning.ClusterAdmin`) of both clusters.
- The takeover from a MirrorMaker (:class:`~replicator.replication.takeover.Takeover`), with the
  readers it opens and the handovers it appends to the destination's checkpoints topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import TopicPartition

from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, Leg
from replicator.errors import TopicRefused
from replicator.kafka.clients import (
    ClusterClient,
    committed_offsets,
    make_reader,
    start_consumer,
    why_unreachable,
)
from replicator.kafka.fetching import ConsumerSource
from replicator.kafka.membership import AlwaysOwned, MembershipLease
from replicator.kafka.producer import append, make_producer
from replicator.kafka.roles import BatchProducer, LogReader
from replicator.lifecycle import close_quietly
from replicator.model.handover import CHECKPOINTS_TOPIC_CONFIGS, Handover
from replicator.replication.connections import LegSource, Ownership, Predecessor
from replicator.replication.destination import KafkaDestination
from replicator.replication.resume import marks_group
from replicator.replication.takeover import Takeover, default_offsets_topic
from replicator.topics.provisioning import ClusterAdmin, ensure_single_partition


class KafkaLegSource(ConsumerSource):
    """A started source consumer as a :class:`~replicator.replication.connections.LegSource`."""

    __slots__ = ()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self.consumer.assign(list(partitions))

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await self.consumer.commit(offsets)

    async def committed(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int | None, str]]:
        return await committed_offsets(self.consumer, partitions)

    async def log_starts(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        starts: dict[TopicPartition, int] = await self.consumer.beginning_offsets(partitions)
        return starts

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        ends: dict[TopicPartition, int] = await self.consumer.end_offsets(partitions)
        return ends

    async def close(self) -> None:
        await self.consumer.stop()


class _BoundTakeover:
    """A :class:`Takeover` reading and committing through the leg's source consumer."""

    def __init__(self, takeover: Takeover, consumer: LogReader) -> None:
        self._takeover = takeover
        self._consumer = consumer

    @property
    def predecessor(self) -> str:
        return self._takeover.predecessor

    @property
    def outcome(self) -> dict[str, Any] | None:
        return self._takeover.outcome

    @property
    def evidence(self) -> dict[TopicPartition, str]:
        return self._takeover.evidence

    async def take(
        self,
        committed: dict[TopicPartition, int | None],
        handed_back: frozenset[TopicPartition],
    ) -> dict[TopicPartition, int]:
        return await self._takeover.take(self._consumer, committed, handed_back)


class KafkaLegConnections:
    """One leg's clients of its source and destination clusters, on aiokafka."""

    def __init__(
        self,
        leg: Leg,
        settings: Settings,
        plan: FeedPlan,
        source_client: ClusterClient,
        destination_client: ClusterClient,
        lease: MembershipLease | None = None,
    ) -> None:
        """``lease``: the membership of the feed's group that assigns the leg its partitions;
        the destination producer writes only while it runs."""
        self._leg = leg
        self._lease = lease
        self.ownership: Ownership = lease if lease is not None else AlwaysOwned()
        self._answered_late: Callable[[str, int], None] | None = None
        self._settings = settings
        self._plan = plan
        self._destination_client = destination_client
        route = f"{leg.source}-to-{leg.destination}"
        self._client_id = f"replicator-{route}" if leg.flow is None else f"replicator-{leg.flow}"
        self._group = leg.group_id(plan.leg_group_prefix)
        self.destination = KafkaDestination(
            self._new_producer(),
            self._new_reader(),
            settings.request_timeout_ms / 1000,
            marks_group(self._group),
        )
        self.source_admin = ClusterAdmin(source_client)
        self.destination_admin = ClusterAdmin(destination_client)

    @property
    def destination_error(self) -> str | None:
        return self._destination_client.error

    def _new_producer(self) -> BatchProducer:
        destination = self._settings.clusters[self._leg.destination]
        # Idempotent until the destination cluster refuses a producer id (then never again).
        idempotent = self._destination_client.idempotence
        producer: BatchProducer = make_producer(
            destination,
            self._settings,
            self._client_id,
            enable_idempotence=idempotent,
            lease=self._lease,
            answered_late=self._late,
        )
        return producer

    def count_answered_late(self, count: Callable[[str, int], None]) -> None:
        self._answered_late = count

    def _late(self, tp: TopicPartition, records: int) -> None:
        if self._answered_late is not None:
            self._answered_late(tp.topic, records)

    def _new_reader(self) -> LogReader:
        destination = self._settings.clusters[self._leg.destination]
        return make_reader(destination, self._settings, f"{self._client_id}-resume", data_path=True)

    async def start_source(self) -> KafkaLegSource:
        source = self._settings.clusters[self._leg.source]
        # Assigned by the feed, never subscribed: its metadata need not follow new topics.
        consumer = await start_consumer(
            source, self._settings, self._group, self._client_id, discovers_topics=False
        )
        return KafkaLegSource(consumer)

    async def connect_destination(self) -> None:
        destination = self.destination
        try:
            await destination.producer.start()
            await destination.reader.start()
        except BaseException as exc:
            await close_quietly(destination.producer.stop())
            await close_quietly(destination.reader.stop())
            self._destination_client.producer_failed(exc)  # refused idempotence?
            destination.replace(self._new_producer(), self._new_reader())
            if isinstance(exc, Exception):
                cluster = self._settings.clusters[self._leg.destination]
                raise await why_unreachable(exc, cluster, self._settings) from exc
            raise
        destination.connected()

    async def close_reader(self) -> None:
        await self.destination.reader.stop()

    async def close_producer(self) -> None:
        await self.destination.producer.stop()

    def predecessor(
        self, source: LegSource, kept: Callable[[list[Handover]], None], log: Any
    ) -> Predecessor:
        assert isinstance(source, KafkaLegSource), "a source this connections started"
        plan, settings, leg = self._plan, self._settings, self._leg

        async def new_reader(side: str) -> LogReader:
            alias = leg.destination if side == "target" else leg.source
            reader = make_reader(settings.clusters[alias], settings, f"{self._client_id}-takeover")
            await reader.start()
            return reader

        async def keep_handovers(handovers: list[Handover]) -> None:
            await self._keep_handovers(handovers)
            if handovers:
                kept(handovers)

        # MirrorMaker 2's alias as its file spells it: its keys and topic names use it.
        alias = settings.clusters[leg.source].topic_alias or leg.source
        takeover = Takeover(
            kind=plan.take_over,
            source=alias,
            group=plan.group,
            topic=plan.take_over_topic or default_offsets_topic(alias),
            target=plan.rules.target,
            preserve_partitions=plan.preserve_partitions,
            new_reader=new_reader,
            tail=self.destination.tail,
            commit=source.consumer.commit,
            keep_handovers=keep_handovers,
            clusters=(leg.source, leg.destination),
            timeout=settings.request_timeout_ms / 1000,
            log=log,
        )
        return _BoundTakeover(takeover, source.consumer)

    async def _keep_handovers(self, handovers: list[Handover]) -> None:
        """Append the handovers to the checkpoints topic of the destination (created as the
        group sync creates it, if it is not yet), each acknowledged."""
        if not handovers:
            return
        settings = self._settings
        topic = settings.checkpoints_topic
        admin = await self._destination_client.admin()
        factor = settings.destination_replication_factor
        refused = await ensure_single_partition(admin, topic, factor, CHECKPOINTS_TOPIC_CONFIGS)
        if refused:
            raise TopicRefused(f"checkpoints topic {topic} not created: {refused}")
        await append(self.destination.producer, topic, ((h.key, h.encode()) for h in handovers))
