"""Checkpoints: the latest translated position of a consumer group, kept in the other cluster.

For each synced group, source cluster, topic and partition, the checkpoints topic of the target
cluster (``REPLICATOR_CHECKPOINTS_TOPIC``, one partition, compacted, never replicated) holds one
record, keyed ``[group, source, topic, partition]`` (JSON), whose value says where the group was
in the source, the translated position in the target, the consumed frontier it was computed from
and when. It is what ``failover`` uses when the source cluster is gone, and the sync point that
bounds the next translation's reads (:class:`~replicator.translation.SyncPoint`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from replicator.readback import partitions_of
from replicator.topics import TopicSpec, create_topic, describe_partitions, replication_factor
from replicator.translation import Frontier, SyncPoint


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
    at_ms: int

    @property
    def key(self) -> bytes:
        return json.dumps([self.group, self.source, self.topic, self.partition]).encode()

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
            at_ms=int(value["at_ms"]),
        )

    @property
    def sync_point(self) -> SyncPoint:
        return SyncPoint(self.source_offset, self.target_offset, self.frontier)

    def age_s(self, now_ms: int | None = None) -> float:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - self.at_ms) / 1000)


CheckpointKey = tuple[str, int]
"""A checkpoint's topic (in the source) and partition."""


async def ensure_topic(admin: AIOKafkaAdminClient, topic: str, factor: int | None) -> list[str]:
    """Create the checkpoints topic (one partition, compacted) unless it exists; the broker's
    errors, empty on success."""
    if topic in await describe_partitions(admin):
        return []
    spec = TopicSpec(
        topic, 1, await replication_factor(admin, factor), {"cleanup.policy": "compact"}
    )
    return await create_topic(admin, spec, tolerate=(36,))  # 36: already exists


async def write(producer: AIOKafkaProducer, topic: str, checkpoints: Iterable[Checkpoint]) -> int:
    """Append ``checkpoints`` to the topic and wait for every acknowledgement."""
    sent = [
        await producer.send(topic, key=cp.key, value=cp.encode(), partition=0) for cp in checkpoints
    ]
    for future in sent:
        await future
    return len(sent)


async def read_latest(
    reader: AIOKafkaConsumer, topic: str, group: str, source: str, timeout: float
) -> dict[CheckpointKey, Checkpoint]:
    """The latest checkpoint of ``group`` from ``source`` per topic and partition (the whole
    topic is read: compacted, it holds one record per key and a few not compacted yet)."""
    partitions = await partitions_of(reader, topic)
    if not partitions:
        return {}
    tp = partitions[0]
    reader.assign([tp])
    start = int((await reader.beginning_offsets([tp]))[tp])
    reader.seek(tp, start)
    latest: dict[CheckpointKey, Checkpoint] = {}
    deadline = time.monotonic() + timeout
    while True:
        batches = await reader.getmany(tp, timeout_ms=50)
        for record in batches.get(tp, ()):
            if record.value is None:
                continue
            try:
                checkpoint = Checkpoint.decode(record.value)
            except (ValueError, KeyError, TypeError):
                continue  # not a checkpoint of this format: never guessed at
            if checkpoint.group == group and checkpoint.source == source:
                latest[(checkpoint.topic, checkpoint.partition)] = checkpoint
        end = reader.highwater(tp)
        if end is not None and await reader.position(tp) >= end:
            return latest
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {topic} did not reach its end in {timeout:.0f}s")
