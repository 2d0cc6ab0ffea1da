"""Committing a leg's upstream offsets: only what every destination acknowledgement covers.

Each partition's :class:`OffsetTracker` knows the contiguous prefix of source offsets the
destination acknowledged; a partition tells the committer when its tracker has something to
commit (:meth:`LegPartition.owe_commits_to`), so an idle partition costs the timer nothing. The
committer commits those prefixes to the leg's consumer group on a timer, when partitions are
released (rebalance) and on shutdown; then it saves their destination marks in the destination
cluster (where a resume starts reading it, :mod:`replicator.replication.resume`), never before the
offsets they go with. A commit is bounded in time (a commit for a partition being deleted is
retried by the client forever) and its outcome counted.

Commits go one at a time, in order: a commit retried while its coordinator is not ready yet
could otherwise land after a later one (the final commit at a stop) and move the group's offsets
or the destination marks back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.kafka.retry import Reminder
from replicator.kafka.translation import denial, translate
from replicator.lifecycle import sleep_unless_stopped
from replicator.replication.partition import LegPartition
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)

# What a commit that waited for the one before it still gets: a moment, for a coordinator that
# answers at once.
_FLOOR_S = 0.5


class OffsetCommits(Protocol):
    """Where a leg's offsets are committed: its consumer (an in-memory fake in unit tests)."""

    async def commit(self, offsets: dict[TopicPartition, int]) -> None: ...


class Committer:
    """Commits acknowledged offsets of one leg's partitions to the leg's group."""

    def __init__(
        self,
        leg: str,
        consumer: OffsetCommits,
        metrics: Metrics,
        timeout: float,
        save_marks: Callable[[dict[TopicPartition, tuple[int, int]]], Awaitable[None]]
        | None = None,
        group: tuple[str, str] | None = None,
    ) -> None:
        """``group``: the leg's group and its cluster, named when an ACL denies a commit."""
        self._leg = leg
        self._group = group
        # Why commits fail, until one succeeds (shown in readiness; logged when it changes and
        # then every REPEAT_LOG_S, not once per commit interval).
        self.error: str | None = None
        self._reminder = Reminder()
        self._save_marks = save_marks
        self._consumer = consumer
        self._metrics = metrics
        self._timeout = timeout
        self._log = log.bind(leg=leg)
        # Partitions whose tracker has something to commit, since the last timed commit.
        self._due: dict[TopicPartition, LegPartition] = {}
        # Held by the commit under way: the next one reads the trackers once it is done.
        self._in_order = asyncio.Lock()

    def due(self, partition: LegPartition) -> None:
        """``partition``'s tracker has an offset or a mark to commit at the next tick."""
        self._due[partition.tp] = partition

    async def run(
        self, stop: asyncio.Event, partitions: Mapping[TopicPartition, LegPartition], every: float
    ) -> None:
        """Every ``every`` seconds until ``stop``, commit the partitions that are due and still
        assigned (``partitions``; the final commit is :meth:`commit`'s, on release)."""
        while not stop.is_set():
            await sleep_unless_stopped(stop, every)
            if stop.is_set() or not self._due:
                continue
            due, self._due = self._due, {}
            # A released partition was committed on release; its successor (a new object) is
            # due by its own transitions.
            await self.commit([p for tp, p in due.items() if partitions.get(tp) is p])

    async def commit(self, partitions: Iterable[LegPartition], within: float | None = None) -> None:
        """Commit the acknowledged prefix of every partition that moved since its last commit
        (within ``within`` seconds, else the request timeout); what could not be committed (or
        its mark saved) is due again; a commit under way is waited for first, within the same
        bound."""
        partitions = list(partitions)
        timeout = self._timeout if within is None else within
        deadline = clock.monotonic() + timeout
        try:
            try:
                async with asyncio.timeout(timeout):
                    await self._in_order.acquire()
            except TimeoutError:
                self._log.warning("offset commit skipped: the previous one is still under way",
                                  partitions=len(partitions))  # fmt: skip
                return
            try:
                await self._commit(partitions, max(deadline - clock.monotonic(), _FLOOR_S))
            finally:
                self._in_order.release()
        finally:
            for partition in partitions:
                if (tracker := partition.tracker) is not None and tracker.needs_commit:
                    self._due[partition.tp] = partition

    async def _commit(self, partitions: list[LegPartition], timeout: float) -> None:
        points = [
            (p, tracker, tracker.committable, tracker.mark_to_save)
            for p in partitions
            if (tracker := p.tracker) is not None and tracker.needs_commit
        ]
        if not await self.commit_offsets({p.tp: offset for p, _, offset, _ in points}, timeout):
            return
        for _, tracker, offset, _ in points:
            tracker.mark_committed(offset)
        marks = {
            TopicPartition(p.target_topic, p.tp.partition): (tracker, mark, offset)
            for p, tracker, offset, mark in points
            if mark is not None
        }
        if marks and self._save_marks is not None:
            try:
                await self._save_marks({tp: (mark, at) for tp, (_, mark, at) in marks.items()})
            except Exception as exc:  # an older mark only makes a resume read more
                self._log.info("destination marks not saved", error=repr(translate(exc)))
                return
            for tracker, mark, _ in marks.values():
                tracker.mark_saved(mark)

    async def commit_offsets(
        self, offsets: dict[TopicPartition, int], timeout: float | None = None
    ) -> bool:
        """Commit ``offsets`` to the leg's group (within ``timeout``, else the request
        timeout); ``False`` if nothing was committed."""
        if not offsets:
            return False
        try:
            within = self._timeout if timeout is None else timeout
            await asyncio.wait_for(self._consumer.commit(offsets), within)
        except Exception as exc:
            self._failed(exc, len(offsets))
            return False
        self._metrics.commits.labels(self._leg, "ok").inc()
        if self.error is not None:
            self._log.info("offset commits work again")
            self.error = None
            self._reminder.clear()
        return True

    def _failed(self, exc: BaseException, partitions: int) -> None:
        """Count a failed commit; say it when the reason changes, else every REPEAT_LOG_S."""
        if self._group is None:
            error = translate(exc)
        else:  # OffsetCommit needs Read on the group
            group, cluster = self._group
            error = denial(exc, cluster, group=("Read", group))
        self._metrics.commits.labels(self._leg, "failed").inc()
        if self._reminder.due(str(error)):
            self._log.warning("offset commit failed", error=str(error), partitions=partitions)
        self.error = str(error)
