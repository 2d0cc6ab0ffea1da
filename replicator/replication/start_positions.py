"""Where a leg's newly assigned partitions start (:class:`StartPositions`).

A partition the leg committed resumes at its committed offset. One it never committed starts by
the plan's ``START_FROM``: at the log start, or at the log end, committed at once so that a
restart before the first record continues from there instead of from a later end. With
``TAKE_OVER``, the partitions the MirrorMaker a flow replaces stood on start where it stood
instead (:mod:`replicator.replication.takeover`, through the leg's
:class:`~replicator.replication.connections.Predecessor`): read before any of them starts, and
retried until read, never replaced by the start policy.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from aiokafka import TopicPartition

from replicator import clock
from replicator.config.topology import FeedPlan, Leg
from replicator.config.values import StartPosition, TakeOver
from replicator.errors import ReplicatorError
from replicator.kafka.retry import retrying
from replicator.kafka.translation import denial
from replicator.model.handover import Handover
from replicator.replication.connections import LegConnections, LegSource
from replicator.replication.states import resume_position
from replicator.replication.takeover import HANDED_BACK, which
from replicator.telemetry.metrics import Metrics

Start = tuple[int | None, bool]  # a partition's first position (None: the feed's), committed


class StartPositions:
    """Where one leg's assigned partitions start, and what its takeover found."""

    def __init__(
        self,
        leg: Leg,
        plan: FeedPlan,
        connections: LegConnections,
        metrics: Metrics,
        log: Any,
    ) -> None:
        self._leg = leg
        self._plan = plan
        self._connections = connections
        self._metrics = metrics
        self._log = log
        # What the takeovers from a MirrorMaker found (TAKE_OVER), for /status: each partition
        # by the evidence it last started on, the counts summed; and where they took
        # partitions over, for the group sync (model/handover.py).
        self.takeover: dict[str, Any] | None = None
        self._evidence: dict[TopicPartition, str] = {}
        self._found: Counter[str] = Counter()
        self.handovers: list[Handover] = []
        # Until its first assignment is taken (over): translating groups' positions before
        # the handovers are known would take MirrorMaker's copies for unread records.
        self.taking_over = plan.take_over is not TakeOver.NONE
        # Why the last assignment's committed offsets could not be read yet (None: they were).
        self.error: str | None = None

    async def read(
        self, source: LegSource, partitions: list[TopicPartition], stop: asyncio.Event
    ) -> dict[TopicPartition, Start] | None:
        """Each of ``partitions``' first position and whether it was committed, in order;
        ``None`` if stop came first (start nothing). Reading the leg's committed offsets is
        retried until it succeeds (a coordinator moving, an ACL missing on the leg's group), the
        failure kept in :attr:`error` for readiness meanwhile."""
        group = self._leg.group_id(self._plan.leg_group_prefix)

        def failed(error: ReplicatorError) -> None:
            self.error = f"cannot read the committed offsets of group {group}: {error}"

        async def read_committed() -> dict[TopicPartition, tuple[int | None, str]]:
            try:
                return await source.committed(partitions)
            except Exception as exc:  # OffsetFetch needs Describe on the group
                raise denial(exc, self._leg.source, group=("Describe", group)) from exc

        points = await retrying(
            read_committed,
            stop=stop,
            what=f"read the committed offsets of group {group}",
            log=self._log,
            on_error=failed,
            interruptible=True,
        )
        self.error = None
        if points is None:
            return None
        committed = {tp: offset for tp, (offset, _) in points.items()}
        if self._plan.take_over is not TakeOver.NONE and committed:
            handed_back = frozenset(tp for tp, (_, tag) in points.items() if tag == HANDED_BACK)
            taken = await self._take_over(source, committed, handed_back, stop)
            if taken is None:
                return None  # stop came first: start nothing
            committed.update(taken)
        self.taking_over = False
        new = [tp for tp, offset in committed.items() if offset is None]
        log_start: dict[TopicPartition, int] = {}
        if new:
            log_start = await self._first_positions(source, new)
        return {
            tp: (resume_position(committed[tp], log_start.get(tp)), committed[tp] is not None)
            for tp in partitions
        }

    async def _take_over(
        self,
        source: LegSource,
        committed: dict[TopicPartition, int | None],
        handed_back: frozenset[TopicPartition],
        stop: asyncio.Event,
    ) -> dict[TopicPartition, int] | None:
        """Where the MirrorMaker this flow replaces left the assigned partitions
        (takeover.py), committed; retried until it is read (never started by policy over a
        position it could not read: that would copy twice or skip). ``None`` if stop came
        first. The handovers it finds are kept for this process's group sync."""
        takeover = self._connections.predecessor(source, self.handovers.extend, self._log)
        ready = self._connections.destination.ready

        async def attempt() -> dict[TopicPartition, int]:
            await ready.wait()
            return await takeover.take(committed, handed_back)

        taken = await retrying(
            attempt,
            stop=stop,
            what=f"take over from {takeover.predecessor}",
            log=self._log,
            interruptible=True,
        )
        if takeover.outcome is not None:
            self._kept(takeover.outcome, takeover.evidence)
            for outcome, count in takeover.outcome["partitions"].items():
                self._metrics.partitions_taken_over.labels(self._leg.name, outcome).inc(count)
        return taken

    def _kept(self, outcome: dict[str, Any], evidence: dict[TopicPartition, str]) -> None:
        """What a takeover found, added to what the earlier ones of the leg found (a topic
        that appears later is taken over by itself): ``/status`` says, for every partition
        taken over since the start, on which evidence it started."""
        self._evidence.update(evidence)
        self._found.update(
            {k: v for k, v in outcome.items() if isinstance(v, int) and not isinstance(v, bool)}
        )
        counts = Counter(self._evidence.values())
        self.takeover = {
            **outcome,
            **self._found,
            "partitions": {**dict.fromkeys(outcome["partitions"], 0), **counts},
            "which": which(self._evidence),
            "at": clock.wall(),
        }

    async def _first_positions(
        self, source: LegSource, new: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Where partitions the leg never committed start: the log start, or (a flow told to
        start from the latest records) the log end, committed at once so that a restart before
        the first record continues from there instead of from a later end."""
        latest = self._plan.start_from is StartPosition.LATEST
        try:
            if latest:
                ends = await source.log_ends(new)
                await source.commit(ends)
                self._log.info("no committed offset: starting at the latest", partitions=len(new))
                return ends
            starts = await source.log_starts(new)
            self._log.info("no committed offset: starting at log start", partitions=len(new))
            return starts
        except Exception as exc:  # never lose the assignment over it: the feed decides
            self._log.warning(
                "first position unknown: the feed starts these at its own position "
                f"(the {'log end' if latest else 'log start'})",
                partitions=len(new),
                error=repr(exc),
            )
            return {}
