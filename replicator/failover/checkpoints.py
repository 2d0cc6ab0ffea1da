"""Checkpoints: the latest translated position of a consumer group, kept in the other cluster.

For each synced group, source cluster, topic and partition, the checkpoints topic of the target
cluster (``REPLICATOR_CHECKPOINTS_TOPIC``, one partition, compacted, never replicated) holds one
record, keyed ``[group, source, target, topic, partition]`` (JSON), whose value says where the
group was in the source, the translated position in the target, the consumed frontier and the
target's index it was computed from, and when. It is what ``failover`` uses when the source
cluster is gone, and the sync point that bounds the next translation's reads
(:class:`~replicator.failover.positions.SyncPoint`). Compaction keeps one record per key; short
segments let it run often, so the topic stays about as large as its keys. The same topic keeps
the handovers of flows that took partitions over from a MirrorMaker
(:mod:`replicator.model.handover`), under keys of another shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from replicator import clock
from replicator.config.settings import Settings
from replicator.failover.positions import Frontier, SyncPoint, TargetIndex
from replicator.kafka.clients import client_options
from replicator.kafka.mm2_wire import checkpoint_record
from replicator.kafka.producer import append
from replicator.kafka.readers import read_topic
from replicator.model.handover import CHECKPOINTS_TOPIC_CONFIGS, Handover
from replicator.topics.provisioning import ensure_single_partition

TOPIC_CONFIGS = CHECKPOINTS_TOPIC_CONFIGS


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where ``group`` stood in ``topic``/``partition`` of ``source``, translated to ``target``."""

    group: str
    source: str
    target: str
    topic: str
    partition: int
    target_topic: str
    source_offset: int
    target_offset: int
    repeats: int
    frontier: Frontier
    index: TargetIndex
    at_ms: int

    @property
    def key(self) -> bytes:
        return key_of(self.group, self.source, self.target, self.topic, self.partition)

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "group": self.group,
            "source": self.source,
            "target": self.target,
            "topic": self.topic,
            "partition": self.partition,
            "target_topic": self.target_topic,
            "source_offset": self.source_offset,
            "target_offset": self.target_offset,
            "repeats": self.repeats,
            "frontier": self.frontier.encode(),
            "index": self.index.encode(),
            "at_ms": self.at_ms,
        }
        return json.dumps(value, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint:
        value = json.loads(raw)
        return cls(
            group=str(value["group"]),
            source=str(value["source"]),
            target=str(value["target"]),
            topic=str(value["topic"]),
            partition=int(value["partition"]),
            target_topic=str(value["target_topic"]),
            source_offset=int(value["source_offset"]),
            target_offset=int(value["target_offset"]),
            repeats=int(value["repeats"]),
            frontier=Frontier.decode(value["frontier"]),
            index=TargetIndex.decode(value["index"]),
            at_ms=int(value["at_ms"]),
        )

    @property
    def sync_point(self) -> SyncPoint:
        return SyncPoint(self.source_offset, self.target_offset, self.frontier, self.index)

    def age_s(self, now_ms: int | None = None) -> float:
        now = int(clock.wall() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - self.at_ms) / 1000)


def key_of(group: str, source: str, target: str, topic: str, partition: int) -> bytes:
    return json.dumps([group, source, target, topic, partition]).encode()


CheckpointKey = tuple[str, int]
"""A checkpoint's topic (in the source) and partition."""

Checkpoints = dict[str, dict[CheckpointKey, Checkpoint]]
"""The latest checkpoints from one source into one target: by group, then topic and partition."""


@dataclass
class Kept:
    """What the checkpoints topic of a target keeps for one source: the groups' latest
    checkpoints, and where flows took partitions over from a MirrorMaker (by source topic and
    partition; :mod:`replicator.model.handover`)."""

    checkpoints: Checkpoints
    handovers: dict[CheckpointKey, Handover]


async def ensure_topic(admin: AIOKafkaAdminClient, topic: str, factor: int | None) -> list[str]:
    """Create the checkpoints topic unless it exists; the broker's errors, empty on success."""
    return await ensure_single_partition(admin, topic, factor, TOPIC_CONFIGS) or []


async def write(producer: AIOKafkaProducer, topic: str, checkpoints: Iterable[Checkpoint]) -> int:
    """Append ``checkpoints`` to the topic and wait for every acknowledgement."""
    return await append(producer, topic, ((cp.key, cp.encode()) for cp in checkpoints))


def mm2_topic(settings: Settings, source: str, target: str) -> str:
    """MirrorMaker 2's checkpoints topic in ``target`` for groups of ``source``: the source's
    MM2 alias (``TOPIC_ALIAS``) and the separator of a flow between them, as its default
    replication policy names it."""
    separator = next(
        (f.separator for f in settings.flows.values() if (f.source, f.target) == (source, target)),
        ".",
    )
    alias = settings.clusters[source].topic_alias or source
    return f"{alias}{separator}checkpoints{separator}internal"


def mm2_record(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """A checkpoint as MirrorMaker 2 writes it: the key the group, the target's topic and the
    partition; the value version 0, the group's offset in the source, its translated offset in
    the target and empty metadata."""
    return checkpoint_record(
        checkpoint.group,
        checkpoint.target_topic,
        checkpoint.partition,
        checkpoint.source_offset,
        checkpoint.target_offset,
    )


async def write_mm2(
    producer: AIOKafkaProducer, topic: str, checkpoints: Iterable[Checkpoint]
) -> int:
    """Append ``checkpoints`` to MirrorMaker 2's checkpoints topic, each acknowledged."""
    return await append(producer, topic, (mm2_record(cp) for cp in checkpoints))


async def read_latest(
    settings: Settings,
    source: str,
    target: str,
    timeout: float,
    groups: Iterable[str] | None = None,
) -> Kept:
    """The latest checkpoints from ``source`` kept in ``target`` (of ``groups`` only, if
    given), and the handovers: the whole topic is read once (compacted, it is about as large
    as its keys); only the matching records' values are decoded."""
    wanted = set(groups) if groups is not None else None
    options = client_options(settings.clusters[target], settings)
    bootstrap = options.pop("bootstrap_servers")
    records = await read_topic(bootstrap, settings.checkpoints_topic, timeout, **options)
    kept = Kept({}, {})
    for record in records:
        if record.key is None or record.value is None:
            continue
        handover = Handover.decode(record.key, record.value)
        if handover is not None:
            if (handover.source, handover.target) == (source, target):
                kept.handovers[(handover.topic, handover.partition)] = handover
            continue
        try:
            group, from_, into, topic, partition = json.loads(record.key)
        except (ValueError, TypeError):
            continue  # not a checkpoint's key: never guessed at
        if from_ != source or into != target or (wanted is not None and group not in wanted):
            continue
        try:
            checkpoint = Checkpoint.decode(record.value)
        except (ValueError, KeyError, TypeError, AssertionError):
            continue  # an older or foreign format: never guessed at
        kept.checkpoints.setdefault(group, {})[(str(topic), int(partition))] = checkpoint
    return kept
