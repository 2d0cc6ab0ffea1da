"""Committing a leg's upstream offsets: only what every destination acknowledgement covers.

Each partition's :class:`OffsetTracker` knows the contiguous prefix of source offsets the
destination acknowledged; the committer commits those prefixes to the leg's consumer group on a
timer, when partitions are released (rebalance) and on shutdown; then it saves their destination
marks in the destination cluster (where a resume starts reading it, :mod:`replicator.resume`),
never before the offsets they go with. A commit is bounded in time (a commit for a partition
being deleted is retried by the client forever) and its outcome counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.kafka import translate
from replicator.lifecycle import sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.partition import LegPartition

log = structlog.get_logger(__name__)


class Committer:
    """Commits acknowledged offsets of one leg's partitions to the leg's group."""

    def __init__(
        self,
        leg: str,
        consumer: AIOKafkaConsumer,
        metrics: Metrics,
        timeout: float,
        save_marks: Callable[[dict[TopicPartition, int]], Awaitable[None]] | None = None,
    ) -> None:
        self._leg = leg
        self._save_marks = save_marks
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
            (p, tracker, tracker.committable, tracker.mark_to_save)
            for p in partitions
            if (tracker := p.tracker) is not None and tracker.needs_commit
        ]
        if not await self.commit_offsets({p.tp: offset for p, _, offset, _ in points}):
            return
        for _, tracker, offset, _ in points:
            tracker.mark_committed(offset)
        marks = {
            TopicPartition(p.target_topic, p.tp.partition): (tracker, mark)
            for p, tracker, _, mark in points
            if mark is not None
        }
        if marks and self._save_marks is not None:
            try:
                await self._save_marks({tp: mark for tp, (_, mark) in marks.items()})
            except Exception as exc:  # an older mark only makes a resume read more
                self._log.info("destination marks not saved", error=repr(translate(exc)))
                return
            for tracker, mark in marks.values():
                tracker.mark_saved(mark)

    async def commit_offsets(self, offsets: dict[TopicPartition, int]) -> bool:
        """Commit ``offsets`` to the leg's group; ``False`` if nothing was committed."""
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
