"""What a leg needs of its two clusters: the seam :class:`~replicator.replication.leg.LegRunner`
works through (:class:`LegConnections`), in the product's terms.

A leg has a *source consumer* (:class:`LegSource`: the catch-up fetch's
:class:`~replicator.kafka.fetching.FetchSource`, assigned by the leg, holding the leg's committed
offsets and answering the source logs' bounds), a *destination* (:class:`LegDestination`: the
senders' :class:`~replicator.replication.destination.Destination`, whose tail also lists log ends
and saves destination marks), an admin of each cluster for its topics
(:class:`~replicator.topics.provisioning.TopicAdmin`), and, for a flow that takes over from a
MirrorMaker, that predecessor (:class:`Predecessor`). Connecting and closing them belongs to the
seam; retrying, reporting and the order of a stop stay with the leg.

:mod:`replicator.replication.kafka_connections` implements it on aiokafka;
:mod:`replicator.replication.testing` in memory, for the leg's unit tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiokafka import TopicPartition

from replicator.kafka.fetching import FetchSource
from replicator.model.handover import Handover
from replicator.replication.destination import Destination, TailReader
from replicator.topics.provisioning import TopicAdmin


class LegSource(FetchSource, Protocol):
    """The leg's source consumer, started: fetched by the catch-up fetch, assigned by the leg
    (every partition paused, at no position, until the leg seeks it), committing under the
    leg's group."""

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Assign exactly ``partitions`` (positions are forgotten; each is paused)."""
        ...

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` to the leg's group."""
        ...

    async def committed(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int | None, str]]:
        """The leg's committed offset (``None``: never committed) and its metadata, for each of
        ``partitions``."""
        ...

    async def log_starts(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset each partition's log still holds."""
        ...

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log end, as the broker lists it."""
        ...

    async def close(self) -> None:
        """Stop the consumer (it leaves nothing: the leg's group is never joined)."""
        ...


class MarkedTail(TailReader, Protocol):
    """A destination's tails, and its marks: where a resume starts reading."""

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-end offsets of destination partitions (a lower bound is enough for a mark)."""
        ...

    async def save_marks(
        self, marks: dict[TopicPartition, tuple[int, int]], timeout: float
    ) -> None:
        """Save destination marks (destination offset, source offset it covers)."""
        ...


class LegDestination(Destination, Protocol):
    """The leg's destination: what its senders send through, and the marks the leg keeps."""

    @property
    def idempotent(self) -> bool | None:
        """Whether the producer is idempotent (``None``: not connected yet)."""
        ...

    @property
    def tail(self) -> MarkedTail: ...


class Predecessor(Protocol):
    """The MirrorMaker a flow replaces (:mod:`replicator.replication.takeover`), bound to the
    leg's source consumer."""

    @property
    def predecessor(self) -> str:
        """Who it is, for the logs."""
        ...

    @property
    def outcome(self) -> dict[str, Any] | None:
        """What the last :meth:`take` found (``/status``)."""
        ...

    @property
    def evidence(self) -> dict[TopicPartition, str]:
        """Each partition the last :meth:`take` looked at, and on which evidence it started
        (:data:`~replicator.replication.takeover.OUTCOMES`)."""
        ...

    async def take(
        self,
        committed: dict[TopicPartition, int | None],
        handed_back: frozenset[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """Where the partitions it stands on start, committed under the leg's group."""
        ...


class Ownership(Protocol):
    """Whether this replica may read a partition's destination and write it: no previous owner
    can still write it (:class:`~replicator.kafka.membership.MembershipLease` in the service,
    :class:`~replicator.kafka.membership.AlwaysOwned` in memory)."""

    async def settled(self, tp: TopicPartition, closed: asyncio.Event) -> bool:
        """Wait until ``tp``'s destination may be read; ``False`` if ``closed`` came first or
        this replica may never write again (fenced)."""
        ...


class LegConnections(Protocol):
    """A leg's clients of its source and destination clusters."""

    @property
    def ownership(self) -> Ownership:
        """Whether the leg owns a partition it was assigned (the source group's lease)."""
        ...

    @property
    def destination(self) -> LegDestination:
        """The destination (not connected until :meth:`connect_destination` returned)."""
        ...

    @property
    def source_admin(self) -> TopicAdmin: ...

    @property
    def destination_admin(self) -> TopicAdmin: ...

    @property
    def destination_error(self) -> str | None:
        """The destination cluster's last probe failure (``None``: it answered)."""
        ...

    async def start_source(self) -> LegSource:
        """A started source consumer of the leg's group; a failure is raised as a
        :class:`~replicator.errors.ReplicatorError` (the leg retries)."""
        ...

    async def connect_destination(self) -> None:
        """Connect the destination (its ``ready`` set on return); a failure is raised as a
        :class:`~replicator.errors.ReplicatorError`, the destination left ready to try again."""
        ...

    async def close_reader(self) -> None:
        """Close the destination's reader of tails."""
        ...

    async def close_producer(self) -> None:
        """Close the destination's producer (what it holds unsent is dropped)."""
        ...

    def count_answered_late(self, count: Callable[[str, int], None]) -> None:
        """Have ``count(destination topic, records)`` told of the records of a produce request
        answered long after the source group's lease ran out: they may have landed after a
        new owner read the destination (possible duplicates)."""
        ...

    def predecessor(
        self, source: LegSource, kept: Callable[[list[Handover]], None], log: Any
    ) -> Predecessor:
        """The MirrorMaker the leg's flow takes over from, committing through ``source``; the
        handovers it appends to the destination's checkpoints topic are then ``kept``."""
        ...
