"""Translating a whole consumer group's positions from one cluster into another.

:class:`GroupTranslator` finds the group's positions in the source's replicated topics (each
topic's counterpart in the target from :func:`replicator.config.topology.counterpart`), and
translates each partition with :func:`replicator.failover.positions.translate`, a few partitions at
a time, from the partition's latest checkpoint as the sync point when there is one. Used by the
``failover`` command and the continuous checkpoints (:mod:`replicator.failover.group_sync`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.config.settings import Settings
from replicator.config.topology import Counterpart, counterpart
from replicator.errors import StaleSyncPoint
from replicator.failover import positions
from replicator.failover.checkpoints import Checkpoint, CheckpointKey
from replicator.failover.positions import (
    ConsumedScan,
    Frontier,
    Identities,
    KafkaPartitionLog,
    SyncPoint,
    TargetIndex,
)
from replicator.kafka.clients import ClusterClient, GroupOffsets, make_reader
from replicator.kafka.readers import cluster_partitions
from replicator.kafka.translation import broker_error, said
from replicator.lifecycle import close_quietly
from replicator.model.handover import Handover

_WORKERS = 4
_INTERNAL_PREFIXES = ("__",)


@dataclass(frozen=True, slots=True)
class PartitionJob:
    """One partition to translate: its topic in A and in B, and the group's position in A."""

    topic: str
    partition: int
    target_topic: str
    position: int | None
    since: SyncPoint | None = None
    checkpoint: Checkpoint | None = None  # standing in for an unreachable source
    # The group stands among a MirrorMaker's copies, before the flow took the partition over.
    behind: Handover | None = None

    @property
    def key(self) -> CheckpointKey:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """A partition's translated position (``None``: the group has none in A, so none in B)."""

    topic: str
    partition: int
    target_topic: str
    source_position: int | None
    target_position: int | None
    repeats: int
    target_log_end: int | None
    frontier: Frontier = field(default_factory=Frontier)
    scanned: int = 0
    seconds: float = 0.0
    checkpoint_age_s: float | None = None
    committed_in_target: int | None = None
    problem: str | None = None  # why the partition could not be translated
    index: TargetIndex = field(default_factory=lambda: TargetIndex(0))
    behind_takeover: bool = False  # among a MirrorMaker's copies: its checkpoint stands

    def checkpoint(self, group: str, source: str, target: str, at_ms: int) -> Checkpoint | None:
        """This translation as a checkpoint (none without a position)."""
        if self.source_position is None or self.target_position is None:
            return None
        return Checkpoint(
            group,
            source,
            target,
            self.topic,
            self.partition,
            self.target_topic,
            self.source_position,
            self.target_position,
            self.repeats,
            self.frontier,
            self.index,
            at_ms,
        )

    def shown(self) -> dict[str, Any]:
        """As ``failover --json`` prints it."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "target_topic": self.target_topic,
            "source_position": self.source_position,
            "target_position": self.target_position,
            "repeats": self.repeats,
            "target_log_end": self.target_log_end,
            "committed_in_target": self.committed_in_target,
            "checkpoint_age_s": self.checkpoint_age_s,
            "records_read": self.scanned,
            "problem": self.problem,
        }


def identities(
    cluster: str, topic: str, partition: int, other_topic: str, suffix: str
) -> Identities:
    """How records of ``topic`` in ``cluster`` are identified, against ``other_topic``."""
    names = frozenset({topic, other_topic, topic + suffix, other_topic + suffix})
    return Identities(cluster, topic, partition, names)


class GroupTranslator:
    """Translates one group's positions from cluster ``source`` to ``target``: readers of both
    (the source's may be absent: then only checkpoints translate), a few partitions at a time."""

    def __init__(
        self, settings: Settings, source: str, target: str, workers: int = _WORKERS
    ) -> None:
        self.settings = settings
        self.source = source
        self.target = target
        self._workers = workers

    def reader(self, alias: str, role: str) -> AIOKafkaConsumer:
        """A consumer of no group reading ``alias`` (started by the caller)."""
        return make_reader(
            self.settings.clusters[alias], self.settings, f"replicator-failover-{role}-{alias}"
        )

    async def jobs(
        self,
        reader: AIOKafkaConsumer,
        group: str,
        topics: Iterable[str] | None,
        checkpoints: dict[CheckpointKey, Checkpoint],
        handovers: Mapping[CheckpointKey, Handover] | None = None,
    ) -> tuple[list[PartitionJob], list[str]]:
        """The group's positions in the source's replicated topics (``topics``: only those),
        and the topics it has positions in that nothing replicates into the target.

        Each from its latest checkpoint as the sync point, or from where the flow took the
        partition over from a MirrorMaker (``handovers``) when the group stands past that and
        the checkpoint, if any, is older: every record below the handover in the target is a
        copy of one the group read. A group behind the handover is not translated (``behind``):
        MirrorMaker's copies carry no provenance, and its own checkpoint stands."""
        existing = await cluster_partitions(reader)
        listed = topics if topics is not None else sorted(existing)
        partitions: list[tuple[TopicPartition, Counterpart | None]] = []
        for topic in listed:
            if topic.startswith(_INTERNAL_PREFIXES) or topic == self.settings.checkpoints_topic:
                continue
            where = counterpart(self.settings, topic, self.source, self.target)
            for p in existing.get(topic, ()):
                partitions.append((TopicPartition(topic, p), where))
        found = await GroupOffsets(reader, group).fetch([tp for tp, _ in partitions])
        jobs = []
        unmoved: set[str] = set()
        for tp, where in partitions:
            position = found[tp]
            if where is None or not where.paired:
                if position is not None:
                    why = "not replicated" if where is None else "placed by key"
                    unmoved.add(f"{tp.topic} ({why})")
                continue
            other = where.topic
            if position is None and topics is None:
                continue  # the group does not read this topic
            key = (tp.topic, tp.partition)
            since, behind = self.starting_point(
                other, position, checkpoints.get(key), (handovers or {}).get(key)
            )
            jobs.append(PartitionJob(tp.topic, tp.partition, other, position, since, behind=behind))
        return jobs, sorted(unmoved)

    def starting_point(
        self,
        target_topic: str,
        position: int | None,
        checkpoint: Checkpoint | None,
        handover: Handover | None,
    ) -> tuple[SyncPoint | None, Handover | None]:
        """Where a partition's translation starts: the sync point (``None``: from the logs'
        starts), and the handover the group stands behind (``None``: it is translated)."""
        since = None
        if checkpoint is not None and checkpoint.target_topic == target_topic:
            since = checkpoint.sync_point
        if handover is None or handover.target_topic != target_topic or position is None:
            return since, None
        if position < handover.source_offset:
            return None, handover
        # A checkpoint from before the handover, or one made without it (a group past the
        # handover is past every copy below it): the handover instead.
        below = since is not None and since.target_offset < handover.target_offset
        if since is None or since.source_offset < handover.source_offset or below:
            since = self.handover_point(handover)
        return since, None

    def handover_point(self, handover: Handover) -> SyncPoint:
        """A handover as a sync point: at its source offset the group had read every record
        below its target offset; the target's last record there, a MirrorMaker copy (no
        provenance: the target's own origin), anchors it (a partition replaced since does not
        hold it)."""
        topic, partition = handover.topic, handover.partition
        b_own = (self.target, handover.target_topic, partition)
        last = handover.target_offset - 1
        return SyncPoint(
            handover.source_offset,
            handover.target_offset,
            Frontier({(self.source, topic, partition): handover.source_offset - 1}),
            TargetIndex(handover.target_offset, {b_own: positions.Entry(last, b_own, last)}),
        )

    async def translate(self, jobs: list[PartitionJob], live: bool) -> list[PartitionMove]:
        """Translate every job; ``live``: the source answers (else checkpoints only)."""
        pending = list(reversed(jobs))
        moves: dict[CheckpointKey, PartitionMove] = {}
        held: dict[str, list[int]] = {}  # the target's partitions

        async def work() -> None:
            source = self.reader(self.source, "source") if live else None
            target = self.reader(self.target, "target")
            try:
                if source is not None:
                    await source.start()
                await target.start()
                held.update(await cluster_partitions(target))
                while pending:
                    job = pending.pop()
                    moves[job.key] = await self._one(job, source, target, held)
            finally:
                for reader in (source, target):
                    if reader is not None:
                        await close_quietly(reader.stop())

        async with asyncio.TaskGroup() as workers:
            for _ in range(min(self._workers, len(jobs))):
                workers.create_task(work())
        return [moves[job.key] for job in jobs]

    async def _one(
        self,
        job: PartitionJob,
        source: AIOKafkaConsumer | None,
        target: AIOKafkaConsumer,
        held: dict[str, list[int]],
    ) -> PartitionMove:
        suffix = self.settings.replica_suffix
        if job.position is None:
            return PartitionMove(job.topic, job.partition, job.target_topic, None, None, 0, None)
        if job.behind is not None:
            problem = (
                f"behind where the flow took it over from {job.behind.predecessor} (source "
                f"offset {job.behind.source_offset}): its copies carry no provenance, so its own "
                "checkpoint stands until the group passes that offset"
            )
            return PartitionMove(
                job.topic, job.partition, job.target_topic, job.position, None, 0, None,
                problem=problem, behind_takeover=True,
            )  # fmt: skip
        if job.partition not in held.get(job.target_topic, ()):
            problem = f"{self.target} has no partition {job.target_topic}/{job.partition}"
            return PartitionMove(
                job.topic, job.partition, job.target_topic, job.position, None, 0, None,
                problem=problem,
            )  # fmt: skip
        b_ids = identities(self.target, job.target_topic, job.partition, job.topic, suffix)
        tp_b = TopicPartition(job.target_topic, job.partition)
        target_log = KafkaPartitionLog(target, tp_b, b_ids)
        if job.checkpoint is not None:
            consumed = ConsumedScan(None, job.position, job.since)
        else:
            assert source is not None
            a_ids = identities(self.source, job.topic, job.partition, job.target_topic, suffix)
            tp_a = TopicPartition(job.topic, job.partition)
            a_log = KafkaPartitionLog(source, tp_a, a_ids)
            consumed = ConsumedScan(a_log, job.position, job.since, own=a_ids.own)
        age = job.checkpoint.age_s() if job.checkpoint is not None else None
        try:
            result = await positions.translate(target_log, consumed)
        except Exception as exc:  # this partition alone: reported, the others go on
            if isinstance(exc, StaleSyncPoint):
                problem = f"{exc}: {self.source} is needed to translate it"
            else:
                problem = f"not translated: {said(exc)}"
            return PartitionMove(
                job.topic, job.partition, job.target_topic, job.position, None, 0, None,
                checkpoint_age_s=age, problem=problem,
            )  # fmt: skip
        return PartitionMove(
            job.topic,
            job.partition,
            job.target_topic,
            job.position,
            result.position,
            result.repeats,
            result.log_end,
            result.frontier,
            result.scanned_source + result.scanned_target,
            result.seconds,
            age,
            index=result.index,
        )


async def active_members(client: ClusterClient, group: str) -> int:
    """How many members the group has in the cluster right now."""
    admin = await client.admin()
    described = await admin.describe_consumer_groups([group])
    members = 0
    for response in described:
        for (
            entry
        ) in response.groups:  # (error_code, group, state, protocol_type, protocol, members)
            code, state, found = entry[0], entry[2], entry[5]
            if code:
                raise broker_error(code)
            if state not in ("Dead", "Empty"):
                members += len(found)
    return members
