"""One source partition's fetched chunks fanned out to every leg at once (:class:`PartitionFanout`).

The shared feed (:mod:`~replicator.replication.feed`) hands each fetched chunk of a partition to
its fanout, which builds, in one pass over the records, the batches of every leg's
:class:`LegPartition` that is attached and continues exactly where the chunk starts; attaches a
leg that is ahead (it waits for the feed), detaches one that is behind (its catch-up fetch takes
it), and tells the feed which legs it must wait for (backpressure) and whether a position lies
past the source log end. It also owns the feed's state of its partition: whether the feed holds
it (paused, waiting for a leg) and since when (:meth:`PartitionFanout.hold`,
:meth:`PartitionFanout.unhold`), and what the feed last saw of the log end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiokafka import TopicPartition

from replicator.model import batching
from replicator.model.records import Chunk, chunk_end
from replicator.replication.partition import LegPartition
from replicator.replication.states import Fit, Mode


class PartitionFanout:
    """One source partition's records, built into batches for every attached leg at once.

    Backpressure: while an attached leg's queue is full (or a leg is still preparing its
    destination topic), the feed pauses this partition, so the legs move together at the pace of
    the slowest healthy one; see :meth:`SourceFeed._hold`.
    """

    def __init__(
        self,
        tp: TopicPartition,
        partitions: list[LegPartition],
        position: int,
        preparing: Callable[[LegPartition], bool] | None = None,
    ) -> None:
        self.tp = tp
        self.partitions = partitions
        self.position = position
        # Whether a starting partition's leg can prepare it now (its destination answers): the
        # feed waits for those only, never for a leg whose destination is down or frozen.
        self._preparing = preparing or (lambda _: True)
        # Paused by the feed while it waits for a leg (see blocking()), since this time.
        self.held_since: float | None = None
        self._polled_ms: int | None = None
        self._suspect: int | None = None
        # starting partitions the feed stopped waiting for (by identity: one per leg)
        self._waited_out: set[LegPartition] = set()

    def deliver(self, records: Chunk, fetched_ms: int) -> None:
        start, end = self.position, chunk_end(records)
        self.position = end
        joining: list[LegPartition] = []
        for partition in self.partitions:
            fit = partition.fit(start, end)
            if fit is Fit.JOIN:
                joining.append(partition)
            elif fit is Fit.AHEAD:
                partition.attach()  # waits for the feed instead of fetching alone
            elif fit is Fit.BEHIND:
                partition.detach()
        for partition in [p for p in joining if p.placement is not None]:
            partition.take_chunk(records, end, fetched_ms)  # placed by key: its own batches
        joining = [p for p in joining if p.placement is None]
        if joining:
            targets = [p.target() for p in joining]
            # Every leg tags a partition's records alike: build with the first leg's tagger.
            batching.build(records, end, joining[0].tagger, targets, fetched_ms)
            for partition, target in zip(joining, targets, strict=True):
                partition.take_built(target, end)

    def pass_over(self, offset: int) -> None:
        """The consumer's position moved to ``offset`` past the last record it handed over
        (transaction markers, aborted records): the attached partitions at the feed's position
        move with it."""
        if offset <= self.position:
            return
        start, self.position = self.position, offset
        for partition in self.partitions:
            if partition.attached:
                partition.pass_over(start, offset)

    def settle(self) -> None:
        """Detach attached partitions the feed is already past (prepared late, say): without
        this they would wait for a chunk that never comes while the source is idle. Attach
        those fetching alone that caught up with the feed and have room: without this they
        would stay fetched twice (by the feed and by their leg's catch-up fetch) until the next
        record. One without room stays alone (nothing fetches it until it has room, and then it
        changes): attached, it would hold the feed again for as long as it was just given up
        for."""
        for partition in self.partitions:
            position = partition.position
            if position is None:
                continue
            if partition.attached and position < self.position:
                partition.detach()
            elif partition.mode is Mode.ALONE and position == self.position and partition.has_room:
                partition.attach()

    def blocking(self) -> list[LegPartition]:
        """The partitions the feed waits for: attached and full, or still starting."""
        return [
            p
            for p in self.partitions
            if (p.attached and not p.has_room)
            or (p.mode is Mode.STARTING and p not in self._waited_out and self._preparing(p))
        ]

    def hold(self, now: float) -> bool:
        """Held from ``now`` if it waits for a leg (:meth:`blocking`); ``False``: it was held
        already, or waits for none."""
        if self.held_since is not None or not self.blocking():
            return False
        self.held_since = now
        return True

    def unhold(self) -> bool:
        """Held no more; whether it was."""
        held, self.held_since = self.held_since is not None, None
        return held

    def hold_ends(self, after: float) -> float:
        """When a hold of ``after`` seconds ends (the feed then gives up on the legs)."""
        assert self.held_since is not None, "not held"
        return self.held_since + after

    def give_up(self, partitions: Iterable[LegPartition]) -> None:
        """Stop waiting for ``partitions``: they catch up alone once they can."""
        for partition in partitions:
            if partition.attached:
                partition.detach()
            else:
                self._waited_out.add(partition)

    def beyond_log_end(self, log_end: int | None, polled_ms: int | None) -> int | None:
        """A position (of the feed or a leg) past the log end, seen in two fetches in a row.

        ``log_end`` and ``polled_ms`` come from the latest fetch response for the partition. A
        position is only judged against a response fetched after it was reached, so a leg that
        fetched further on its own, after the feed's last response, is never mistaken for one
        beyond the end.
        """
        if log_end is None or polled_ms is None or polled_ms == self._polled_ms:
            return None
        self._polled_ms = polled_ms
        suspect, self._suspect = self._suspect, None
        if suspect is not None and suspect > log_end:
            return suspect
        positions = [p.position for p in self.partitions if p.open and p.position is not None]
        furthest = max([self.position, *positions]) if positions else None
        if furthest is not None and furthest > log_end:
            self._suspect = furthest
        return None
