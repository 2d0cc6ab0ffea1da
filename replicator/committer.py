"""Committing a leg's upstream offsets: only what every destination acknowledgement covers.

Each partition's :class:`OffsetTracker` knows the contiguous prefix of source offsets the
destination acknowledged; the committer commits those prefixes to the leg's consumer group on a
timer, when partitions are released (rebalance) and on shutdown, each with its destination mark
as metadata (where a resume starts reading the destination, :mod:`replicator.resume`). A commit
is bounded in time (a commit for a partition being deleted is retried by the client forever) and
its outcome counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.kafka import translate
from replicator.lifecycle import sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.partition import LegPartition
from replicator.resume import encode_mark

log = structlog.get_logger(__name__)


class Committer:
    """Commits acknowledged offsets of one leg's partitions to the leg's group."""

    def __init__(
        self, leg: str, consumer: AIOKafkaConsumer, metrics: Metrics, timeout: float
    ) -> None:
        self._leg = leg
        self._consumer = consumer
        self._metrics = metrics
        self._timeout = timeout
        self._log = log.bind(leg=leg)

    async def run(
        self, stop: asyncio.Event, partitions: Mapping[TopicPartition, LegPartition], every: float
    ) -> None:
        """Commit every ``every`` seconds until ``stop`` (the final commit is :meth:`commit`'s)."""
        while not stop.is_set():
            await sleep_unless_stopped(stop, every)
            if not stop.is_set():
                await self.commit(list(partitions.values()))

    async def commit(self, partitions: Iterable[LegPartition]) -> None:
        """Commit the acknowledged prefix of every partition that moved since its last commit."""
        points = [
            (p.tp, tracker, tracker.committable, tracker.destination_mark)
            for p in partitions
            if (tracker := p.tracker) is not None and tracker.needs_commit
        ]
        offsets = {tp: (offset, encode_mark(mark)) for tp, _, offset, mark in points}
        if await self.commit_offsets(offsets):
            for _, tracker, offset, mark in points:
                tracker.mark_committed(offset, mark)

    async def commit_offsets(self, offsets: dict[TopicPartition, tuple[int, str]]) -> bool:
        """Commit ``offsets`` (with their metadata) to the leg's group; ``False`` if nothing
        was committed."""
        if not offsets:
            return False
        try:
            await asyncio.wait_for(self._consumer.commit(offsets), self._timeout)
        except Exception as exc:
            error = translate(exc)
            self._metrics.commits.labels(self._leg, "failed").inc()
            self._log.warning("offset commit failed", error=str(error), partitions=len(offsets))
            return False
        self._metrics.commits.labels(self._leg, "ok").inc()
        return True
