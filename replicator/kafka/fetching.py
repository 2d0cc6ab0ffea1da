"""What a fetch loop needs of its source consumer (:class:`FetchSource`), in the product's terms,
and its aiokafka implementation over a started consumer (:class:`ConsumerSource`).

A fetch loop (the leg's catch-up fetch) assigns nothing itself: it resumes, seeks and pauses the
partitions it was given, fetches, and learns from the consumer what a fetch does not hand over as
records: positions found outside the source log (:attr:`Fetched.out_of_range`, a result rather
than aiokafka's ``OffsetOutOfRangeError``), a position moved past records the client never hands
over (transaction markers), records it cannot decode (:mod:`replicator.kafka.decoding`), and the
log's bounds. Every other failure is raised as a :mod:`replicator.errors` error. The unit tests
drive the catch-up fetch through an in-memory source (:class:`replicator.kafka.testing.
MemorySource`).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.errors import ReplicatorError
from replicator.kafka.clients import (
    check_position,
    fetched_position,
    out_of_range_positions,
    set_fetch_wait,
)
from replicator.kafka.decoding import Poison, take_poisoned
from replicator.kafka.translation import translate
from replicator.model.offsets import OutOfRange
from replicator.model.records import SourceRecord


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one fetch brought: ``records`` of the partitions that had some, in offset order; or
    the positions it found outside the source log (``out_of_range``), when it had no records to
    hand over (aiokafka reports them only then; the records come first)."""

    records: dict[TopicPartition, list[SourceRecord]] = field(default_factory=dict)
    out_of_range: dict[TopicPartition, int] = field(default_factory=dict)


class FetchSource(Protocol):
    """A source consumer as a fetch loop uses it: assigned by its owner, every partition paused
    until the loop resumes it at a position it seeks."""

    async def fetch(self, timeout_ms: int) -> Fetched:
        """The records of the resumed partitions from where each stands, waiting at most
        ``timeout_ms`` for some; a failure is raised as a :class:`ReplicatorError`."""
        ...

    def assignment(self) -> Set[TopicPartition]:
        """The partitions assigned to the consumer."""
        ...

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next."""
        ...

    def pause(self, tp: TopicPartition) -> None:
        """Fetch ``tp`` no more until :meth:`resume`."""
        ...

    def resume(self, tp: TopicPartition) -> None:
        """Fetch ``tp`` again, from where it stands."""
        ...

    def position_after(self, tp: TopicPartition) -> int | None:
        """Where the consumer fetches ``tp`` next, known without a request (``None``: unknown);
        past the last record handed over when a fetch ended in records the client never hands
        over (transaction markers, aborted records)."""
        ...

    def poisoned(self) -> list[Poison]:
        """The records the consumer's fetches stopped at since the last call, undecodable."""
        ...

    def set_wait(self, wait_ms: int) -> None:
        """How long the next fetches wait for data at the broker."""
        ...

    async def bounds(self, tp: TopicPartition, position: int) -> OutOfRange | None:
        """Whether ``tp``'s log no longer holds ``position`` (``None``: it does); a failure is
        raised as a :class:`ReplicatorError`."""
        ...


class ConsumerSource:
    """A started :class:`AIOKafkaConsumer` as a :class:`FetchSource` (each method one of its
    calls, or one of :mod:`replicator.kafka.clients`' or :mod:`replicator.kafka.decoding`'s)."""

    __slots__ = ("consumer",)

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer

    async def fetch(self, timeout_ms: int) -> Fetched:
        try:
            records: dict[TopicPartition, list[SourceRecord]] = await self.consumer.getmany(
                timeout_ms=timeout_ms
            )
        except ReplicatorError:
            raise
        except Exception as exc:
            positions = out_of_range_positions(exc)
            if positions is None:
                raise translate(exc) from exc
            return Fetched(out_of_range=positions)
        return Fetched(records)

    def assignment(self) -> Set[TopicPartition]:
        assigned: Set[TopicPartition] = self.consumer.assignment()
        return assigned

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.consumer.seek(tp, offset)

    def pause(self, tp: TopicPartition) -> None:
        self.consumer.pause(tp)

    def resume(self, tp: TopicPartition) -> None:
        self.consumer.resume(tp)

    def position_after(self, tp: TopicPartition) -> int | None:
        return fetched_position(self.consumer, tp)

    def poisoned(self) -> list[Poison]:
        return take_poisoned(self.consumer)

    def set_wait(self, wait_ms: int) -> None:
        set_fetch_wait(self.consumer, wait_ms)

    async def bounds(self, tp: TopicPartition, position: int) -> OutOfRange | None:
        try:
            return await check_position(self.consumer, tp, position)
        except ReplicatorError:
            raise
        except Exception as exc:
            raise translate(exc) from exc
