"""What a fetch loop needs of its source consumer (:class:`FetchSource`), and what the shared
feed needs of its group consumer (:class:`GroupSource`), in the product's terms; their aiokafka
implementations over a started consumer (:class:`ConsumerSource`, :class:`GroupConsumerSource`).

A fetch loop (the leg's catch-up fetch) assigns nothing itself: it resumes, seeks and pauses the
partitions it was given, fetches, and learns from the consumer what a fetch does not hand over as
records: positions found outside the source log (:attr:`Fetched.out_of_range`, a result rather
than aiokafka's ``OffsetOutOfRangeError``), a position moved past records the client never hands
over (transaction markers), records it cannot decode (:mod:`replicator.kafka.decoding`), and the
log's bounds. Every other failure is raised as a :mod:`replicator.errors` error.

The shared feed's consumer is a group member besides: it subscribes to a pattern and is told of
each assignment and revocation (aiokafka's ``ConsumerRebalanceListener`` is adapted here, not in
the data path), lists the cluster's topics (from its own metadata when that is fresh), starts a
partition at its log start or end, and says what the last fetch response told of a partition
(its log end, when it came).

The unit tests drive both through in-memory sources (:class:`replicator.kafka.testing.
MemorySource`, :class:`replicator.kafka.testing.MemoryGroupSource`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Set
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from replicator.config.clusters import ClusterSettings
from replicator.config.settings import Settings
from replicator.errors import ReplicatorError
from replicator.kafka.clients import (
    answered_at,
    check_position,
    fetched_position,
    known_topics,
    lacks_position,
    on_metadata,
    out_of_range_positions,
    pace_metadata,
    set_fetch_wait,
    start_consumer,
)
from replicator.kafka.decoding import Poison, take_poisoned
from replicator.kafka.fetch_sessions import session_client
from replicator.kafka.membership import MembershipLease
from replicator.kafka.translation import translate
from replicator.model.offsets import OutOfRange
from replicator.model.records import Chunk


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one fetch brought: ``records`` of the partitions that had some, in offset order; or
    the positions it found outside the source log (``out_of_range``), when it had no records to
    hand over (aiokafka reports them only then; the records come first)."""

    records: dict[TopicPartition, Chunk] = field(default_factory=dict)
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


Partitions = Callable[[list[TopicPartition]], Awaitable[None]]
"""Called with the partitions of an assignment, or of a revocation, and awaited."""


class GroupSource(FetchSource, Protocol):
    """A group consumer as the shared feed uses it: subscribed to a pattern, told of each
    assignment (partitions at no position, which the feed seeks and pauses) and revocation."""

    def subscribe(self, pattern: str, assigned: Partitions, revoked: Partitions) -> None:
        """Join (or stay in) the group for the topics matching ``pattern``; every later
        assignment is handed to ``assigned``, every revocation to ``revoked``."""
        ...

    async def topics(self, within_s: float | None) -> set[str]:
        """The cluster's topics: from the consumer's own metadata if it was refreshed in the
        last ``within_s`` seconds (no request), else asked of the cluster (``None``: asked);
        a failure is raised as a :class:`ReplicatorError`."""
        ...

    def pace_metadata(self, every_s: float) -> float:
        """Refresh the metadata every ``every_s``, or less often for very many partitions; the
        interval set, in seconds."""
        ...

    def on_metadata(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each refresh of the consumer's metadata."""
        ...

    async def seek_to_log_start(self, tp: TopicPartition) -> int:
        """Fetch ``tp`` from its log start next; that position."""
        ...

    async def seek_to_log_end(self, tp: TopicPartition) -> int:
        """Fetch ``tp`` from its log end next; that position."""
        ...

    def log_end_seen(self, tp: TopicPartition) -> int | None:
        """``tp``'s log end as the last fetch response for it said (``None``: none yet, or not
        assigned)."""
        ...

    def answered_at(self, tp: TopicPartition) -> int | None:
        """When the last fetch response for ``tp`` came (ms; ``None``: none, or not assigned)."""
        ...

    def fetch_sessions(self) -> dict[str, int] | None:
        """What the consumer's incremental fetch sessions did, counted since it started
        (:class:`~replicator.kafka.fetch_sessions.SessionStats`); ``None``: it fetches
        without them."""
        ...

    async def close(self) -> None:
        """Leave the group and close the consumer."""
        ...


class ConsumerSource:
    """A started :class:`AIOKafkaConsumer` as a :class:`FetchSource` (each method one of its
    calls, or one of :mod:`replicator.kafka.clients`' or :mod:`replicator.kafka.decoding`'s)."""

    __slots__ = ("consumer",)

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer

    async def fetch(self, timeout_ms: int) -> Fetched:
        try:
            records: dict[TopicPartition, Chunk] = await self.consumer.getmany(
                timeout_ms=timeout_ms
            )
        except ReplicatorError:
            raise
        except Exception as exc:
            positions = out_of_range_positions(exc)
            if positions is not None:
                return Fetched(out_of_range=positions)
            if self._nothing_yet(exc):
                return Fetched()
            raise translate(exc) from exc
        return Fetched(records)

    def _nothing_yet(self, _exc: Exception) -> bool:
        """Whether a fetch that raised ``_exc`` merely had nothing to hand over yet."""
        return False

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


class GroupConsumerSource(ConsumerSource):
    """A started group :class:`AIOKafkaConsumer` as a :class:`GroupSource`."""

    __slots__ = ()

    def _nothing_yet(self, exc: Exception) -> bool:
        # A partition between its assignment and the listener setting its position.
        return lacks_position(exc)

    def subscribe(self, pattern: str, assigned: Partitions, revoked: Partitions) -> None:
        self.consumer.subscribe(pattern=pattern, listener=_Rebalances(assigned, revoked))

    async def topics(self, within_s: float | None) -> set[str]:
        cached = None if within_s is None else known_topics(self.consumer, within_s)
        if cached is not None:
            return cached
        try:
            topics: set[str] = await self.consumer.topics()
        except Exception as exc:
            raise translate(exc) from exc
        return topics

    def pace_metadata(self, every_s: float) -> float:
        return pace_metadata(self.consumer, every_s)

    def on_metadata(self, listener: Callable[[], None]) -> None:
        on_metadata(self.consumer, listener)

    async def seek_to_log_start(self, tp: TopicPartition) -> int:
        await self.consumer.seek_to_beginning(tp)
        position: int = await self.consumer.position(tp)
        return position

    async def seek_to_log_end(self, tp: TopicPartition) -> int:
        await self.consumer.seek_to_end(tp)
        position: int = await self.consumer.position(tp)
        return position

    def log_end_seen(self, tp: TopicPartition) -> int | None:
        with contextlib.suppress(AssertionError, AttributeError):  # not assigned (any more)
            end: int | None = self.consumer.highwater(tp)
            return end
        return None

    def answered_at(self, tp: TopicPartition) -> int | None:
        return answered_at(self.consumer, tp)

    def fetch_sessions(self) -> dict[str, int] | None:
        sessions = session_client(self.consumer)
        return None if sessions is None else dataclasses.asdict(sessions.stats)

    async def close(self) -> None:
        await self.consumer.stop()


async def start_group_source(
    cluster: ClusterSettings,
    settings: Settings,
    group_id: str,
    client_id: str,
    lease: MembershipLease | None = None,
) -> GroupConsumerSource:
    """A started group consumer of ``cluster`` (see :func:`replicator.kafka.clients.
    start_consumer`), as a :class:`GroupSource`; its membership told to ``lease``."""
    consumer = await start_consumer(cluster, settings, group_id, client_id, lease=lease)
    return GroupConsumerSource(consumer)


class _Rebalances(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance listener, handing each revocation and assignment on."""

    def __init__(self, assigned: Partitions, revoked: Partitions) -> None:
        self._assigned = assigned
        self._revoked = revoked

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._assigned(list(assigned))
