"""An in-memory destination cluster for the sender's unit tests (the seam of
``replicator/replication/destination.py``), as ``MemoryLog`` is for position translation.

Each destination partition is a list of the records written to it, in order, with their
absolute offsets. Batches are aiokafka's own (built by the sender with
:meth:`MemoryDestination.new_batches`) and read back as a broker would store them. What a real
destination can do to a batch is scripted per send (:class:`Outcome`): write it and acknowledge
it, refuse it, or write it and lose the answer (an unknown outcome); answers can be held
(:meth:`MemoryDestination.hold`) to stop or rewind while batches are in flight. A partition
whose batch failed is fenced, as the destination producer fences it, until the sender unfences
it. Tails are read with the product's own window logic (``resume._Window``), so a resume
decides on what the fake holds exactly as it would on a broker's log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from replicator import clock
from replicator.errors import OutcomeUnknown, ReplicatorError
from replicator.kafka.producer import BatchFactory, batch_records
from replicator.model.provenance import Tagger
from replicator.replication.resume import SavedMark, Tail, _Window
from replicator.topics.provisioning import DestinationTopic


@dataclass(frozen=True, slots=True)
class Stored:
    """A record as the destination holds it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the destination does with one batch: ``writes`` it or not, and answers with
    ``error`` (``None``: acknowledged at the offset it was written at)."""

    writes: bool = True
    error: ReplicatorError | None = None  # as the destination says it (the product's terms)


WRITTEN = Outcome()


@dataclass
class MemoryDestination:
    """A destination cluster in memory (the sender's :class:`Destination`)."""

    timeout: float = 2.0
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    logs: dict[TopicPartition, list[Stored]] = field(default_factory=dict)
    marks: dict[TopicPartition, int] = field(default_factory=dict)
    covers: dict[TopicPartition, int] = field(default_factory=dict)  # a mark's source offset
    fenced: set[TopicPartition] = field(default_factory=set)
    unfenced: list[TopicPartition] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)  # the next sends', in order
    batch_size: int = 64 * 1024
    sends: int = 0
    _held: list[Callable[[], None]] | None = None

    def __post_init__(self) -> None:
        self.ready.set()

    # -- the seam -------------------------------------------------------------------------------

    @property
    def tail(self) -> MemoryDestination:
        return self

    async def send(self, builder: Any, topic: str, partition: int) -> asyncio.Future[int]:
        self.sends += 1
        tp = TopicPartition(topic, partition)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if tp in self.fenced:  # queued behind a failed batch: failed with it
            future.set_exception(OutcomeUnknown(f"queued behind a failed batch ({tp})"))
            return future
        outcome = self.outcomes.pop(0) if self.outcomes else WRITTEN
        records = batch_records(builder)

        def settle() -> None:
            log = self.logs.setdefault(tp, [])
            base = len(log)
            if outcome.writes:
                log.extend(
                    Stored(base + i, r.key, r.value, tuple(r.headers))
                    for i, r in enumerate(records)
                )
            if future.done():
                return
            if outcome.error is not None:
                self.fenced.add(tp)
                future.set_exception(outcome.error)
            else:
                future.set_result(base)

        if self._held is not None:
            self._held.append(settle)
        else:
            asyncio.get_running_loop().call_soon(settle)
        return future

    def new_batches(self, limit: int | None) -> BatchFactory:
        size = self.batch_size if limit is None else max(1, min(self.batch_size, limit))
        return BatchFactory(size, 0)

    def unfence(self, tp: TopicPartition) -> None:
        self.fenced.discard(tp)
        self.unfenced.append(tp)

    async def learn_partitions(self, topic: str, count: int) -> None:
        return None

    # -- tails (TailReader) ---------------------------------------------------------------------

    async def last_written(
        self,
        tp: TopicPartition,
        origin: Tagger,
        floor: int | None,
        position: int | None = None,
        whole: bool = False,
    ) -> Tail:
        return self._window(tp, origin, floor or 0)

    async def written_since(
        self, tp: TopicPartition, origin: Tagger, position: int
    ) -> tuple[set[int], Tail]:
        found: set[int] = set()
        return found, self._window(tp, origin, 0, (found, position))

    async def saved_mark(self, tp: TopicPartition, position: int | None = None) -> SavedMark | None:
        mark = self.marks.get(tp)
        return None if mark is None else SavedMark(mark, self.covers.get(tp))

    def _window(self, tp: TopicPartition, origin: Tagger, begin: int, collect: Any = None) -> Tail:
        log = self.logs.get(tp, [])
        done: asyncio.Future[Tail] = asyncio.get_running_loop().create_future()
        window = _Window(tp, origin, begin, None, collect, done, answered_at=0)
        window.take(log)
        assert window.finished(len(log), len(log), clock.monotonic(), answered_at=1)
        return done.result()

    # -- what a test does to it -----------------------------------------------------------------

    def hold(self) -> None:
        """Answer nothing until :meth:`release` (batches stay in flight)."""
        self._held = []

    def release(self) -> None:
        """Answer every batch held, in the order sent."""
        held, self._held = self._held or [], None
        for settle in held:
            settle()

    def replace(self, tp: TopicPartition) -> None:
        """The destination partition's log is gone (topic deleted and created again)."""
        self.logs[tp] = []

    def roll_back(self, tp: TopicPartition, end: int) -> None:
        """The destination partition's log rolled back to ``end`` (an unclean leader election,
        a restore from an older copy): the records before it stay, at their offsets."""
        del self.logs[tp][end:]

    def origins(self, tp: TopicPartition, tagger: Tagger) -> list[int]:
        """The origin offsets of ``tagger``'s records in ``tp``, in log order."""
        found = (tagger.origin_offset(list(r.headers)) for r in self.logs.get(tp, []))
        return [offset for offset in found if offset is not None]


@dataclass
class MemoryTopics:
    """Destination topics (the sender's :class:`TopicPreparer`): every topic is ready with
    ``partitions`` partitions and ``max_message_bytes``, or refused with ``refusal``."""

    partitions: int = 1
    max_message_bytes: int | None = None
    refusal: ReplicatorError | None = None
    forgotten: list[str] = field(default_factory=list)

    async def ensure(
        self, source_topic: str, target_topic: str, partition: int = 0
    ) -> DestinationTopic:
        if self.refusal is not None:
            raise self.refusal
        return DestinationTopic(
            target_topic, self.partitions, self.max_message_bytes, self.partitions
        )

    def forget(self, target_topic: str) -> None:
        self.forgotten.append(target_topic)


@dataclass
class MemoryDeadLetters:
    """The dead-letter topic (the sender's :class:`DeadLetterSink`)."""

    topic: str = "replicator.dead-letter"
    parked: list[tuple[Any, str, str]] = field(default_factory=list)

    async def park(self, records: Sequence[Any], destination: str, reason: str) -> None:
        self.parked.extend((record, destination, reason) for record in records)


@dataclass
class MemoryCommits:
    """A leg's group offsets (the committer's :class:`OffsetCommits`)."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.offsets.update(offsets)
