"""The partition layouts of the scale benchmark: ``<topic>_REPLICA`` topics of a few partitions
each, their names, and the preload that fills them (:mod:`benchmarks.scale`,
:mod:`benchmarks.steady`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import TopicPartition

from benchmarks.resume import create_topics, produce_batches
from benchmarks.shared import value_of
from replicator.devtools.embedded import LocalBroker

VALUE_BYTES = 100
SUFFIX = "_REPLICA"
PREFIX = "scale"
# Topics per CreateTopics request and topics preloaded at once.
CREATE_CHUNK = 500
PRELOAD_CONCURRENCY = 8


@dataclass(frozen=True)
class Layout:
    """``topics`` topics of ``partitions_per_topic`` partitions each."""

    topics: int
    partitions_per_topic: int

    @classmethod
    def parse(cls, token: str) -> Layout:
        """``TxP`` (topics x partitions), or a partition count spread over topics of 6."""
        token = token.strip().lower()
        if "x" in token:
            topics, per_topic = (int(part) for part in token.split("x", 1))
            return cls(topics, per_topic)
        total = int(token)
        if total % 6:
            raise ValueError(f"{total} partitions: not a multiple of 6 (say TOPICSxPARTITIONS)")
        return cls(total // 6, 6)

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic

    @property
    def most_held(self) -> int:
        """The partitions of the cluster holding the most: dc1, with the ``_REPLICA`` topics and
        the real topics the replicator writes there too."""
        return 2 * self.partitions

    @property
    def name(self) -> str:
        return f"{self.topics:,} x {self.partitions_per_topic}"

    def real_topics(self) -> list[str]:
        width = len(str(self.topics - 1))
        return [f"{PREFIX}{i:0{width}d}" for i in range(self.topics)]

    def source_topics(self) -> list[str]:
        return [topic + SUFFIX for topic in self.real_topics()]

    def source_pattern(self) -> str:
        """A Java (and Python) regex matching this layout's ``_REPLICA`` topics and no other
        topic of the benchmark's clusters (neither the real topics nor MirrorMaker 2's own)."""
        return f"{PREFIX}[0-9]+{re.escape(SUFFIX)}"

    def partitions_of(self, topics: Sequence[str]) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t in topics for p in range(self.partitions_per_topic)]


async def create_layout(broker: LocalBroker, layout: Layout) -> None:
    """Create the layout's ``_REPLICA`` topics, a few hundred per request."""
    topics = layout.source_topics()
    for first in range(0, len(topics), CREATE_CHUNK):
        chunk = topics[first : first + CREATE_CHUNK]
        await create_topics(broker, layout.partitions_per_topic, *chunk)


async def preload_layout(broker: LocalBroker, layout: Layout, per_partition: int) -> None:
    """Create the layout's ``_REPLICA`` topics and write ``per_partition`` records of 100 B in
    each partition of each, a few topics at a time."""
    await create_layout(broker, layout)

    def record(i: int, partition: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        return f"key-{i % 1000}".encode(), value_of(i, VALUE_BYTES), [("bench", b"1")]

    slots = asyncio.Semaphore(PRELOAD_CONCURRENCY)

    async def one(topic: str) -> None:
        async with slots:
            await produce_batches(
                broker.bootstrap_servers, topic, per_partition, layout.partitions_per_topic, record
            )

    await asyncio.gather(*(one(topic) for topic in layout.source_topics()))
