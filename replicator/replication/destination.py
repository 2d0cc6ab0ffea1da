"""What a partition's sender needs from its destination: the seam, and the aiokafka side of it.

:class:`Destination` is the Protocol :class:`~replicator.replication.sender.PartitionSender`
works through: wait until the cluster is up, send a closed batch and learn its outcome (a future
of the offset it was written at, or an error of :mod:`replicator.errors`: the seam speaks the
product's language, never the client's), build batches as the producer would, lift a
partition's fence, make the producer know a topic's partitions, and read a destination
partition's tail (where to resume: :class:`TailReader`). With it come :class:`TopicPreparer`
(prepare a destination topic, forget one deleted) and :class:`DeadLetterSink` (park a record too
large). :class:`KafkaDestination` is the implementation on aiokafka; the unit tests drive the
sender through an in-memory one (``tests/unit/replication/destinations.py``), as
:mod:`replicator.failover.positions` is driven through ``MemoryLog``
(``tests/unit/failover/test_positions.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka import TopicPartition

from replicator.errors import TopicMissing
from replicator.kafka.coalesce import Coalescer
from replicator.kafka.producer import (
    batch_factory,
    idempotent,
    learn_partitions,
    send_batch,
    unfence,
)
from replicator.kafka.roles import BatchProducer, LogReader
from replicator.model.batching import BatchMaker
from replicator.model.provenance import Tagger
from replicator.replication.resume import DestinationTail, SavedMark, Tail
from replicator.topics.provisioning import DestinationTopic

_Known = tuple[str, int]  # a topic and the partition count the producer must know


class TailReader(Protocol):
    """Where a partition resumes: what a destination partition holds of one origin."""

    async def last_written(
        self,
        tp: TopicPartition,
        origin: Tagger,
        floor: int | None,
        position: int | None = None,
        whole: bool = False,
    ) -> Tail: ...

    async def written_since(
        self, tp: TopicPartition, origin: Tagger, position: int
    ) -> tuple[set[int], Tail]: ...

    async def saved_mark(
        self, tp: TopicPartition, position: int | None = None
    ) -> SavedMark | None: ...


class Destination(Protocol):
    """A leg's destination cluster, as each of its partitions' senders uses it."""

    ready: asyncio.Event  # set once the cluster is up (producer and reader started)
    timeout: float  # how long a batch in flight may take to be answered

    @property
    def tail(self) -> TailReader: ...

    async def send(self, builder: Any, topic: str, partition: int) -> asyncio.Future[int]:
        """Hand a closed batch over; the future resolves to the offset it was written at (-1:
        written, the destination does not say where). Failures, raised or in the future, are
        :class:`~replicator.errors.ReplicatorError`: :class:`~replicator.errors.OutcomeUnknown`
        (and its :class:`~replicator.errors.TopicGone`,
        :class:`~replicator.errors.ProducerStateLost`) make the partition resume from the
        destination; :class:`~replicator.errors.ClusterUnavailable` is retried; anything else
        refuses the batch."""
        ...

    def new_batches(self, limit: int | None) -> BatchMaker: ...

    def unfence(self, tp: TopicPartition) -> None: ...

    async def learn_partitions(self, topic: str, count: int) -> None: ...


class TopicPreparer(Protocol):
    """Destination topics made ready before the first record (and checked again when gone)."""

    async def ensure(
        self, source_topic: str, target_topic: str, partition: int = 0
    ) -> DestinationTopic: ...

    def forget(self, target_topic: str) -> None: ...


class DeadLetterSink(Protocol):
    """Where a record no destination topic accepts is parked."""

    topic: str

    async def park(self, records: Sequence[Any], destination: str, reason: str) -> None: ...


class KafkaDestination:
    """A leg's destination cluster on aiokafka: the destination producer (fenced or idempotent,
    :mod:`replicator.kafka.producer`), and a reader of partition tails (where to resume)."""

    def __init__(
        self,
        producer: BatchProducer,
        reader: LogReader,
        timeout: float,
        marks_group: str,
    ) -> None:
        self.producer = producer
        self.reader = reader
        self.timeout = timeout
        self.marks_group = marks_group
        self.tail = DestinationTail(reader, timeout, marks_group)
        self.ready = asyncio.Event()
        self.idempotent: bool | None = None  # known once connected
        self._learning: Coalescer[_Known, Exception | None] = Coalescer(self._learn)

    def replace(self, producer: BatchProducer, reader: LogReader) -> None:
        """New clients take the place of those that failed to start (not started yet)."""
        self.producer = producer
        self.reader = reader
        self.tail = DestinationTail(reader, self.timeout, self.marks_group)

    async def learn_partitions(self, topic: str, count: int) -> None:
        """Make the producer's metadata know ``count`` partitions of ``topic`` (one just grown:
        a send to a partition it does not know would fail for good); :class:`TopicMissing`
        (retried) while it does not yet. Topics asked for meanwhile are learnt together, in one
        metadata request."""
        await self._learning.get((topic, count))

    async def _learn(self, wanted: list[_Known]) -> dict[_Known, Exception | None]:
        missing = await learn_partitions(self.producer, wanted)
        return {
            key: TopicMissing(f"{key[0]}: {key[1]} partitions, not all in the metadata yet")
            if key in missing
            else None
            for key in wanted
        }

    async def send(self, builder: Any, topic: str, partition: int) -> asyncio.Future[int]:
        """Hand a closed batch to the producer (:func:`~replicator.kafka.producer.send_batch`:
        outcomes in the product's terms)."""
        return await send_batch(self.producer, builder, topic, partition)

    def new_batches(self, limit: int | None) -> BatchMaker:
        """New batches as the producer builds them, no larger than ``limit`` bytes if given."""
        return batch_factory(self.producer, limit)

    def unfence(self, tp: TopicPartition) -> None:
        """Let the producer send to ``tp`` again (what is still queued for it is dropped)."""
        unfence(self.producer, tp)

    def connected(self) -> None:
        """The producer and the reader started: senders may read and send."""
        self.idempotent = idempotent(self.producer)
        self.ready.set()
