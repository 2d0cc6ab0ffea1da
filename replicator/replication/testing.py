"""In-memory stand-ins for a leg's connections (:mod:`replicator.replication.connections`),
shipped with the product so that the leg's tests drive
:class:`~replicator.replication.leg.LegRunner` without a broker.

- :class:`MemoryLegSource` is the leg's source consumer: a
  :class:`~replicator.kafka.testing.MemorySource` (source logs in memory, fetched as a consumer
  fetches them) that also holds the leg's group offsets (:attr:`MemoryLegSource.group`, each
  with its metadata; every commit kept in :attr:`MemoryLegSource.commits`) and answers the logs'
  bounds; commits can be failed or held (scripted).
- :class:`MemoryLegConnections` hands the leg that source, a destination and two topic admins
  given to it (a test brings its own: the sender's in-memory destination lives with the tests),
  and scripts how many attempts to start the source consumer or connect the destination fail.
  What was opened and closed is kept, in order (:attr:`MemoryLegConnections.journal`; the
  source's close in :attr:`MemoryLegSource.closed`).
- :class:`MemoryPredecessor` is a MirrorMaker a flow takes over from: the positions it left,
  committed through the leg's source as a takeover commits them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition

from replicator.errors import ReplicatorError
from replicator.kafka.membership import AlwaysOwned
from replicator.kafka.testing import MemorySource
from replicator.model.handover import Handover
from replicator.model.records import SourceRecord
from replicator.replication.connections import LegDestination, LegSource, Ownership, Predecessor
from replicator.topics.provisioning import TopicAdmin


class MemoryLegSource(MemorySource):
    """A leg's source consumer in memory (see the module docstring)."""

    def __init__(
        self,
        logs: Mapping[TopicPartition, Sequence[SourceRecord]] | None = None,
        per_fetch: int = 100,
        group: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """``group``: the leg's committed offsets before the leg starts."""
        super().__init__(logs, per_fetch)
        self.group: dict[TopicPartition, tuple[int, str]] = {
            tp: (offset, "") for tp, offset in (group or {}).items()
        }
        self.commits: list[dict[TopicPartition, int]] = []  # every commit, in order
        self.commit_failures: deque[ReplicatorError] = deque()
        self.closed = False
        self._commit_gate = asyncio.Event()
        self._commit_gate.set()

    def committed_offset(self, tp: TopicPartition) -> int | None:
        """The leg's committed offset of ``tp`` (``None``: never committed)."""
        point = self.group.get(tp)
        return None if point is None else point[0]

    def fail_commits(self, *errors: ReplicatorError) -> None:
        """The next commits fail with ``errors``, one each, in order."""
        self.commit_failures.extend(errors)

    def hold_commits(self) -> None:
        """Hold each commit, before it is kept, until :meth:`release_commits`."""
        self._commit_gate.clear()

    def release_commits(self) -> None:
        self._commit_gate.set()

    # -- LegSource ------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await self._commit_gate.wait()
        if self.commit_failures:
            raise self.commit_failures.popleft()
        self.commits.append(dict(offsets))
        self.group.update({tp: (offset, "") for tp, offset in offsets.items()})

    async def committed(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int | None, str]]:
        await asyncio.sleep(0)
        return {tp: self.group.get(tp, (None, "")) for tp in partitions}

    async def log_starts(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        await asyncio.sleep(0)
        return {tp: self.log_start(tp) for tp in partitions}

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        await asyncio.sleep(0)
        return {tp: self.log_end(tp) for tp in partitions}

    async def close(self) -> None:
        self.closed = True


class MemoryPredecessor:
    """A MirrorMaker that left ``positions``: each partition the leg never committed and the
    predecessor stands on is committed there (through the leg's source) and returned."""

    def __init__(
        self,
        source: LegSource,
        positions: Mapping[TopicPartition, int],
        kept: Callable[[list[Handover]], None],
    ) -> None:
        self._source = source
        self._positions = dict(positions)
        self._kept = kept
        self.predecessor = "MirrorMaker in memory"
        self.outcome: dict[str, Any] | None = None
        self.evidence: dict[TopicPartition, str] = {}

    async def take(
        self,
        committed: dict[TopicPartition, int | None],
        handed_back: frozenset[TopicPartition],
    ) -> dict[TopicPartition, int]:
        taken = {
            tp: position
            for tp, position in self._positions.items()
            if tp in committed and (committed[tp] is None or tp in handed_back)
        }
        if taken:
            await self._source.commit(taken)
        self.outcome = {"partitions": {"taken over": len(taken)}}
        self.evidence = dict.fromkeys(taken, "taken over")
        return taken


class MemoryLegConnections:
    """A leg's connections in memory (see the module docstring)."""

    def __init__(
        self,
        source: MemoryLegSource,
        destination: LegDestination,
        source_admin: TopicAdmin,
        destination_admin: TopicAdmin,
        predecessor_positions: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        self.source = source
        self.destination = destination
        self.source_admin = source_admin
        self.destination_admin = destination_admin
        self.destination_error: str | None = None  # as the destination's probe says
        self.source_failures: deque[ReplicatorError] = deque()
        self.destination_failures: deque[ReplicatorError] = deque()
        self.predecessor_positions = dict(predecessor_positions or {})
        self.journal: list[str] = []  # what was opened and closed, in order
        self.ownership: Ownership = AlwaysOwned()  # a test may give a lease of its own
        self.answered_late: Callable[[str, int], None] | None = None

    def fail_source(self, *errors: ReplicatorError) -> None:
        """The next starts of the source consumer fail with ``errors``, one each, in order."""
        self.source_failures.extend(errors)

    def fail_destination(self, *errors: ReplicatorError) -> None:
        """The next connections of the destination fail with ``errors``, one each, in order."""
        self.destination_failures.extend(errors)

    # -- LegConnections -------------------------------------------------------------------------

    async def start_source(self) -> MemoryLegSource:
        await asyncio.sleep(0)
        if self.source_failures:
            self.journal.append("source refused")
            raise self.source_failures.popleft()
        self.journal.append("source started")
        return self.source

    async def connect_destination(self) -> None:
        await asyncio.sleep(0)
        if self.destination_failures:
            self.journal.append("destination refused")
            raise self.destination_failures.popleft()
        self.journal.append("destination connected")
        self.destination.ready.set()

    async def close_reader(self) -> None:
        self.journal.append("destination reader closed")

    async def close_producer(self) -> None:
        self.journal.append("destination producer closed")

    def count_answered_late(self, count: Callable[[str, int], None]) -> None:
        self.answered_late = count  # a test calls it as the producer's sender would

    def predecessor(
        self, source: LegSource, kept: Callable[[list[Handover]], None], log: Any
    ) -> Predecessor:
        return MemoryPredecessor(source, self.predecessor_positions, kept)
