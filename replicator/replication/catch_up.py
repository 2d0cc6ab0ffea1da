"""A leg's catch-up fetch: its own reads of the source for the partitions the shared feed cannot
serve (behind the feed, too slow for it, or replaying).

It fetches with the leg's consumer (group ``<prefix>.<source>.<destination>``, manually assigned
the partitions the shared feed owns), paused for every partition except those whose
:class:`LegPartition` is fed alone and has room; before each fetch it brings the consumer in line
with the partitions (:meth:`CatchUpFetch.reconcile`), so the partitions' state alone decides what
is fetched and from where. A position found below the source log start applies the leg's
offset-reset policy; one beyond the log end is left to the shared feed, which is further on and
resets the partition on every leg. The consumer is read through the
:class:`~replicator.kafka.fetching.FetchSource` seam (by the unit tests, an in-memory one), one
:class:`~replicator.replication.fetch_round.FetchRound` at a time (the shared feed's too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from functools import partial

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.errors import ReplicatorError
from replicator.kafka.decoding import Poison, undecodable_reason
from replicator.kafka.fetching import FetchSource
from replicator.kafka.translation import denial
from replicator.lifecycle import IdleWait, wait_any
from replicator.model.records import Chunk, chunk_end
from replicator.replication.fetch_round import FetchRound
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import LegPartition

log = structlog.get_logger(__name__)
# Without changes the fetch still wakes this often, to show it is alive (liveness).
_IDLE_S = 5.0
# A partition whose out-of-range answer could not be settled is fetched again after this long.
_AGAIN_S = 1.0


class CatchUpFetch:
    """Fetches for one leg's partitions that are fed alone."""

    def __init__(
        self,
        leg: str,
        source: Callable[[], FetchSource],
        partitions: Mapping[TopicPartition, LegPartition],
        resets: OffsetResets,
        source_cluster: str = "the source",
    ) -> None:
        """``source``: the leg's source consumer (started before :meth:`run`) of
        ``source_cluster`` (named in an ACL denial)."""
        self._source = source
        self._partitions = partitions
        self._resets = resets
        # Where the consumer fetches each partition it is resuming (absent: paused).
        self._positions: dict[TopicPartition, int] = {}
        # Positions found beyond the log end: not fetched again until the partition moves.
        self._held: dict[TopicPartition, int | None] = {}
        # Partitions that changed since the last reconcile (LegPartition.watch): all of them at
        # first and after the consumer was assigned again.
        self._dirty: set[TopicPartition] = set(partitions)
        # Paused after an out-of-range answer that could not be settled (the log bounds could
        # not be read, or the position was in range after all): looked at again from
        # ``_later_at`` on (every partition waiting shares that one time).
        self._later: set[TopicPartition] = set()
        self._later_at = 0.0
        self._wake = asyncio.Event()
        self._log = log.bind(leg=leg)
        self._round = FetchRound(
            source,
            self,
            what="fetch (catch-up)",
            failure="catch-up fetch failed",
            log=self._log,
            denied=partial(denial, cluster=source_cluster, topic=("Read", None)),
        )

    @property
    def last_poll(self) -> float:
        """When the source last answered, or the fetch last found nothing to fetch."""
        return self._round.last_poll

    @property
    def last_error(self) -> str | None:
        return self._round.last_error

    async def run(self, stop: asyncio.Event, idle: IdleWait | None = None) -> None:
        """Fetch for the partitions fed alone until ``stop`` (waiting longer for data while
        fetches come back empty, with ``idle``: see :class:`IdleWait`)."""
        while not stop.is_set():
            if not self.reconcile():
                # Nothing to fetch: sleep until a partition changes (no polling of partitions).
                self._round.last_poll = clock.monotonic()
                await wait_any([self._wake, stop], _IDLE_S)
                self._wake.clear()
                continue
            await self._round.run(stop, idle)

    def changed(self, partition: LegPartition) -> None:
        """``partition`` changed (fed alone, room freed, moved): reconcile it at the next round."""
        self._dirty.add(partition.tp)
        self._wake.set()

    def reconcile(self) -> bool:
        """Resume, seek or pause each partition that changed or is being fetched, as its state
        says; ``True`` if any is to be fetched."""
        source = self._source()
        if self._later and clock.monotonic() >= self._later_at:
            self._dirty |= self._later
            self._later = set()
        check = self._dirty | set(self._positions)
        self._dirty = set()
        if not check:
            return False
        assignment = source.assignment()
        fetching = False
        for tp in sorted(check):
            partition = self._partitions.get(tp)
            if tp not in assignment or partition is None:
                self._positions.pop(tp, None)
                continue
            held = self._held.get(tp, -1)
            wanted = partition.fed_alone and partition.has_room and held != partition.position
            at = self._positions.get(tp)
            if wanted and partition.position is not None:
                self._held.pop(tp, None)
                if at != partition.position:
                    source.seek(tp, partition.position)
                    self._positions[tp] = partition.position
                    source.resume(tp)
                fetching = True
            elif at is not None:
                source.pause(tp)
                del self._positions[tp]
        return fetching

    def reassigned(self) -> None:
        """The consumer was assigned again: every partition is paused, no position is known."""
        self._positions.clear()
        self._dirty.update(self._partitions)
        self._wake.set()

    # -- what a round brought (RoundReader) ---------------------------------------------------

    def take(self, tp: TopicPartition, records: Chunk, fetched_ms: int) -> None:
        partition = self._partitions.get(tp)
        start = self._positions.get(tp)
        if partition is None or start is None:
            return
        end = chunk_end(records)
        self._positions[tp] = end
        # Refused (a gap, or no longer fed alone) or full: reconcile() pauses or seeks.
        partition.take_fetched(records, start, end, fetched_ms)

    def reading(self) -> Iterable[tuple[TopicPartition, int]]:
        return self._positions.items()

    def pass_over(self, tp: TopicPartition, position: int) -> None:
        """Past records the client never hands over (transaction markers, aborted records)."""
        partition = self._partitions.get(tp)
        start = self._positions.get(tp)
        if partition is not None and start is not None:
            self._positions[tp] = position
            partition.pass_over(start, position)

    def undecodable(self, poison: Poison) -> None:
        """Stopped at a record it cannot decode: the partition halts there (kafka/decoding.py)."""
        self._positions.pop(poison.tp, None)
        partition = self._partitions.get(poison.tp)
        if partition is not None and partition.undecodable(
            poison.offset, undecodable_reason(poison)
        ):
            self._log.error(
                "a source record cannot be decoded: its partition halts at it",
                topic=poison.tp.topic,
                partition=poison.tp.partition,
                offset=poison.offset,
                error=poison.error,
            )

    async def out_of_range(self, positions: dict[TopicPartition, int]) -> None:
        """A partition's fetch position is outside the source log.

        Below the log start, this leg alone lost records: the policy applies here. Beyond the
        log end, the log was replaced: the shared feed, which is further on, finds it too and
        resets the partition on every leg, so this leg holds that position meanwhile.
        """
        for tp, position in positions.items():
            self._source().pause(tp)
            self._positions.pop(tp, None)
            partition = self._partitions.get(tp)
            try:
                found = await self._source().bounds(tp, position)
            except ReplicatorError as exc:
                self._log.warning(
                    "cannot read the source log bounds: fetching it again shortly",
                    error=str(exc),
                    topic=tp.topic,
                )
                self._again(tp)
                continue
            if partition is None:
                continue
            if found is None:
                self._again(tp)  # in range after all: fetched again shortly
                continue
            if found.below_log_start:
                self._resets.apply(partition, found)
            else:
                self._held[tp] = partition.position

    def _again(self, tp: TopicPartition) -> None:
        """Look at ``tp`` again after :data:`_AGAIN_S` (a paused partition nothing else would
        change): reconciled with the partitions that changed once that time has come."""
        if not self._later:
            self._later_at = clock.monotonic() + _AGAIN_S
        self._later.add(tp)
