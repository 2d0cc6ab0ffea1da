"""The ordered sender: one task per source partition and destination (leg).

Records reach a :class:`PartitionSender` two ways, always in source order:

- *attached*: the shared source feed built this destination's batches together with the other
  destinations' (one fetch, one pass over the records for all legs);
- *detached*: the leg's own catch-up consumer fetched the records, and the sender builds its own
  batches. A sender detaches when its queue is full (its destination is slow or down), so the
  shared feed never waits for it, and re-attaches once it has caught up with the feed.

Whatever the path, :attr:`PartitionSender.next_offset` is the next source offset this destination
needs, and input is only accepted if it continues from there: no gap, no repeat. Batches go out in
order; the producer holds at most one batch per partition queued behind one in flight and keeps a
failed batch at the front, so order holds without idempotence. Each batch covers a range of
source offsets that the :class:`OffsetTracker` marks acknowledged when the destination confirms
it; the leg commits only that contiguous prefix.

A partition whose destination topic cannot take it (too few partitions) is *blocked*; one whose
batch the destination refused for good (too large, not authorised) is *failed*. Either stops that
partition on that leg alone, commits nothing past the problem, and is reported. Batches are built
to the destination topic's ``max.message.bytes``; a single record larger than that is handled by
``REPLICATOR_RECORD_TOO_LARGE_POLICY``: halt (the default, as above) or park it in the local
dead-letter topic (:mod:`replicator.deadletter`) and go on.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from replicator import batching
from replicator.batching import OutboundBatch, Target
from replicator.deadletter import DeadLetters
from replicator.errors import ReplicatorError, TopicMismatch
from replicator.kafka import batch_factory, batch_records, translate
from replicator.lifecycle import Backoff
from replicator.metrics import Metrics
from replicator.offsets import OffsetTracker
from replicator.provenance import Marking, Tagger
from replicator.records import SourceRecord, payload_size
from replicator.topics import TopicProvisioner
from replicator.topology import Leg

log = structlog.get_logger(__name__)

_RETRY_BACKOFF_S = 0.5


@dataclass(slots=True)
class _Work:
    """A queue entry: batches the shared feed built, or records the leg fetched itself."""

    records: int
    size: int
    batches: list[OutboundBatch] | None = None
    marked: Counter[Marking] | None = None
    fetched: list[SourceRecord] | None = None
    start: int = 0
    end: int = 0


class PartitionState(StrEnum):
    """Where one source partition of one leg stands."""

    STARTING = "starting"
    REPLICATING = "replicating"
    BLOCKED = "blocked"
    FAILED = "failed"
    STOPPED = "stopped"


class PartitionSender:
    """Replicates one source partition into one destination, in order."""

    def __init__(
        self,
        *,
        leg: Leg,
        tp: TopicPartition,
        target_topic: str,
        producer: AIOKafkaProducer,
        destination_ready: asyncio.Event,
        topics: TopicProvisioner,
        metrics: Metrics,
        max_records: int,
        max_bytes: int,
        next_offset: int | None,
        on_detach: Callable[[PartitionSender], None],
        on_attach: Callable[[PartitionSender], None],
        on_room: Callable[[PartitionSender], None],
        on_replaced: Callable[[PartitionSender], None] = lambda _: None,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        self.leg = leg
        self.tp = tp
        self.target_topic = target_topic
        self.state = PartitionState.STARTING
        self.last_error: str | None = None
        self.tracker: OffsetTracker | None = None
        self.next_offset = next_offset
        self.attached = True
        self._producer = producer
        self._destination_ready = destination_ready
        self._topics = topics
        self._metrics = metrics
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._on_detach = on_detach
        self._on_attach = on_attach
        self._on_room = on_room
        self._on_replaced = on_replaced
        self._dead_letters = dead_letters
        self._new_batch: Callable[[], Any] = producer.create_batch
        self._limit: int | None = None  # the destination topic's max.message.bytes, if known
        self.dead_lettered = 0
        self._derived_seen = False  # derived records are logged once per partition
        # Base offset of the last batch the destination acknowledged: a lower one later means
        # the destination partition's log was replaced (topic deleted and created again).
        self._destination_offset = -1
        # Set by the shared feed while it waits for this sender to have room again.
        self.feed_waiting: Callable[[], None] | None = None
        self._queue: deque[_Work] = deque()
        self._queued_records = 0
        self._queued_bytes = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._in_flight: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.tagger = Tagger(leg.source, tp.topic, tp.partition)
        self._log = log.bind(leg=leg.name, topic=tp.topic, partition=tp.partition)
        self._replicated = metrics.records_replicated.labels(leg.name, target_topic)
        self._bytes = metrics.bytes_replicated.labels(leg.name, target_topic)
        self._latency = metrics.latency.labels(leg.name)

    # -- input: the shared feed and the leg's catch-up consumer ----------------------------------

    @property
    def has_room(self) -> bool:
        return self._queued_records < self._max_records and self._queued_bytes < self._max_bytes

    @property
    def halted(self) -> bool:
        return self.state in (PartitionState.BLOCKED, PartitionState.FAILED)

    @property
    def open(self) -> bool:
        return not self.halted and not self._closing

    def joins(self, start: int, end: int) -> bool:
        """Whether this sender takes the shared feed's records ``[start, end)``.

        An attached sender takes every chunk that continues where this destination stands (the
        feed pauses while an attached sender is full, see :meth:`detach`); a detached one
        re-attaches when it has room and the chunk continues from its position. A sender ahead
        of the feed (after a restart, say) stays attached and waits for the feed to reach it;
        one the feed has gone past detaches and fetches for itself.
        """
        if not self.open:
            return False
        position = start if self.next_offset is None else self.next_offset
        if self.state is PartitionState.STARTING:
            # Batches are built to the destination topic's limits, known once it is prepared:
            # until then the leg fetches the records for it, from this position.
            self.next_offset = position
            self.detach()
            return False
        if position > end and self.attached:
            return False  # ahead of the feed: nothing in this chunk for it yet
        if start <= position <= end and (self.attached or self.has_room):
            if not self.attached:
                self.attached = True
                self._on_attach(self)
            self.next_offset = position
            return True
        self.detach()
        return False

    def detach(self) -> None:
        """Leave the shared feed (too slow for it, or behind it): the leg fetches for it."""
        if self.attached:
            self.attached = False
            self._on_detach(self)

    def use_producer(self, producer: AIOKafkaProducer) -> None:
        """Send through ``producer`` from now on (the leg replaced one that failed to start)."""
        self._producer = producer
        self._new_batch = batch_factory(producer, self._limit)

    def target(self) -> Target:
        """Where this destination's records start in the chunk being built, and its batches."""
        assert self.next_offset is not None
        return Target(self.next_offset, self._new_batch)

    def take_built(self, target: Target, end: int) -> None:
        """Queue the batches the shared feed built for this destination."""
        work = _Work(
            records=sum(b.count for b in target.batches),
            size=sum(b.size for b in target.batches),
            batches=target.batches,
            marked=target.marked,
        )
        self._enqueue(work)
        self.next_offset = end

    def take_fetched(self, records: list[SourceRecord], start: int, end: int) -> bool:
        """Queue records the leg's own consumer fetched from ``start``; ``False``: stop fetching.

        Records that do not continue from :attr:`next_offset` are refused, so that a late or
        stale fetch can never repeat or skip a record.
        """
        if not self.open or self.attached:
            return False
        position = start if self.next_offset is None else self.next_offset
        if start > position:
            return False  # a gap: the leg must fetch again from next_offset
        if end <= position:
            return self.has_room  # already had all of it
        size = payload_size(records)
        self._enqueue(_Work(len(records), size, fetched=records, start=position, end=end))
        self.next_offset = end
        return self.has_room

    def skip_to(self, offset: int) -> None:
        """Continue at ``offset``: the source no longer holds the records before it.

        The gap is queued as an empty range, so it is committed in order, after what is queued
        and in flight before it. The leg counts and reports the records lost.
        """
        if self.next_offset is not None and offset > self.next_offset:
            gap = OutboundBatch(None, self.next_offset, offset, 0, 0, 0)
            self._enqueue(_Work(0, 0, batches=[gap]))
        self.next_offset = offset

    def _enqueue(self, work: _Work) -> None:
        self._queue.append(work)
        self._queued_records += work.records
        self._queued_bytes += work.size
        self._wakeup.set()

    @property
    def oldest_unacked_age(self) -> float:
        """Seconds since the oldest unacknowledged batch was handed to the producer."""
        self._prune()
        if not self._in_flight:
            return 0.0
        return time.monotonic() - self._in_flight[0][1]

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The send task: prepare the destination, then send queued work until closed."""
        if not await self._prepare():
            return
        self.state = PartitionState.REPLICATING
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue and self.open:
                work = self._queue.popleft()
                if work.fetched is not None:
                    target = Target(work.start, self._new_batch)
                    batching.build(work.fetched, work.end, self.tagger, [target])
                    work.batches, work.marked = target.batches, target.marked
                assert work.batches is not None
                for batch in work.batches:
                    await self._hand_over(batch)
                    if not self.open:
                        return
                if work.marked:
                    self._count_marked(work.marked, work.batches)
                was_full = not self.has_room
                self._queued_records -= work.records
                self._queued_bytes -= work.size
                if was_full and self.has_room:
                    self._on_room(self)
                    if self.feed_waiting is not None:
                        self.feed_waiting()
            if not self.open:
                return

    async def drain(self, timeout: float) -> None:
        """Stop taking work and wait (up to ``timeout``) for batches already handed over."""
        self._closing = True
        self._queue.clear()
        self._wakeup.set()
        pending = [future for future, _ in self._in_flight if not future.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=timeout)
            if still:
                self._log.warning("drain timed out", unacknowledged_batches=len(still))
        if not self.halted:
            self.state = PartitionState.STOPPED

    # -- internals ------------------------------------------------------------------------------

    async def _prepare(self) -> bool:
        """Wait for the destination, ensure its topic; ``False`` if this must not replicate."""
        while self.open:
            # Cancelled by the leg if it stops first (the destination never came up).
            await self._destination_ready.wait()
            try:
                topic = await self._topics.ensure(self.tp.topic, self.target_topic)
                self._limit = topic.max_message_bytes
                self._new_batch = batch_factory(self._producer, self._limit)
                return True
            except TopicMismatch as exc:
                self.halt(str(exc), PartitionState.BLOCKED)
                return False
            except ReplicatorError as exc:
                if not exc.retriable:
                    self.halt(str(exc))
                    return False
                self.last_error = f"destination topic not ready: {exc}"
                self._log.warning("destination topic not ready, retrying", error=str(exc))
                await asyncio.sleep(_RETRY_BACKOFF_S)
        return False

    def _count_marked(self, marked: Counter[Marking], batches: list[OutboundBatch]) -> None:
        """Count the records that carried provenance; log skips per batch, derived data once."""
        skipped = {mark: n for mark, n in marked.items() if not mark.replicated}
        for mark, n in skipped.items():
            self._metrics.records_skipped.labels(self.leg.name, self.target_topic, mark).inc(n)
        derived = marked.get(Marking.DERIVED, 0)
        if derived:
            self._metrics.records_derived.labels(self.leg.name, self.target_topic).inc(derived)
        if skipped:
            self._log.warning(
                "records not replicated (loop rule)",
                **{str(mark): n for mark, n in skipped.items()},
                first_offset=batches[0].first if batches else None,
                end_offset=batches[-1].end if batches else None,
            )
        if derived and not self._derived_seen:
            self._derived_seen = True  # derived data is normal for this topic: say it once
            self._log.info(
                "derived records replicated: they carried another topic's provenance, kept as "
                "replicator-upstream",
                derived=derived,
            )

    async def _hand_over(self, batch: OutboundBatch) -> None:
        """Give one batch covering source offsets ``[first, end)`` to the producer."""
        if self.tracker is None:
            self.tracker = OffsetTracker(batch.first)
        self.tracker.track(batch.first, batch.end)
        if batch.count == 0:  # every record of the range was skipped
            self.tracker.ack(batch.first)
            return
        batch.builder.close()
        if self._limit is not None and batch.builder.size() > self._limit:
            await self._too_large(batch)
            return
        while True:
            try:
                future = await self._producer.send_batch(
                    batch.builder, self.target_topic, partition=self.tp.partition
                )
                break
            except KafkaTimeoutError:
                # The destination is not draining (unreachable or slow): keep the batch and wait.
                self.last_error = "destination not acknowledging"
                self._log.warning("destination not acknowledging, still retrying")
            except Exception as exc:
                error = translate(exc)
                if not error.retriable:
                    self._refused(error)
                    return
                self.last_error = str(error)
                self._log.warning("send failed, retrying", error=str(error))
                await asyncio.sleep(_RETRY_BACKOFF_S)
            if self._closing:
                return
        self._prune()
        self._in_flight.append((future, time.monotonic()))
        first, count, size, oldest_ms = batch.first, batch.count, batch.size, batch.oldest_ms

        def delivered(done: asyncio.Future[Any]) -> None:
            if done.cancelled():
                return
            exc = done.exception()
            if exc is not None:
                self._refused(translate(exc))
                return
            assert self.tracker is not None
            self.tracker.ack(first)
            base = done.result().offset
            if base < self._destination_offset:
                self._on_replaced(self)
            self._destination_offset = base
            self._replicated.inc(count)
            self._bytes.inc(size)
            if oldest_ms > 0:
                self._latency.observe(max(0.0, time.time() - oldest_ms / 1000))

        future.add_done_callback(delivered)

    async def _too_large(self, batch: OutboundBatch) -> None:
        """A record larger than the destination topic accepts: apply the oversize policy."""
        assert self.tracker is not None
        size = batch.builder.size()
        reason = (
            f"record at source offset {batch.first} is {size} bytes as a batch; "
            f"{self.leg.destination}/{self.target_topic} accepts {self._limit} (max.message.bytes)"
        )
        self._metrics.send_errors.labels(self.leg.name, self.target_topic, "RecordTooLarge").inc()
        if self._dead_letters is None:
            self.halt(f"{reason}; REPLICATOR_RECORD_TOO_LARGE_POLICY=halt")
            return
        records = batch_records(batch.builder)
        destination = f"{self.leg.destination}/{self.target_topic}"
        backoff = Backoff(base=_RETRY_BACKOFF_S)
        while not self._closing:
            try:
                await self._dead_letters.park(records, destination, reason)
                break
            except Exception as exc:
                error = translate(exc)
                self.last_error = f"cannot park a record in the dead-letter topic: {error}"
                self._log.warning("dead-letter write failed, retrying", error=str(error))
                await asyncio.sleep(backoff.delay(error.retriable))
        else:
            return  # stopping: the offset stays uncommitted, the record is parked next time
        self.tracker.ack(batch.first)
        self.dead_lettered += len(records)
        self._metrics.records_dead_lettered.labels(self.leg.name, self.target_topic).inc(
            len(records)
        )
        self.last_error = f"{reason}; parked in dead-letter topic {self._dead_letters.topic}"
        self._log.warning(
            "record too large for the destination, parked in the dead-letter topic",
            offset=batch.first,
            size=size,
            limit=self._limit,
            dead_letter_topic=self._dead_letters.topic,
        )

    def _prune(self) -> None:
        while self._in_flight and self._in_flight[0][0].done():
            self._in_flight.popleft()

    def _refused(self, error: ReplicatorError) -> None:
        self._metrics.send_errors.labels(
            self.leg.name, self.target_topic, type(error).__name__
        ).inc()
        self.halt(f"destination refused a batch: {error}")

    def halt(self, reason: str, state: PartitionState = PartitionState.FAILED) -> None:
        """Stop replicating this partition to this destination and report ``reason``."""
        if self.halted:
            return
        self.state = state
        self.last_error = reason
        self._queue.clear()
        self._wakeup.set()
        self._log.error("partition halted", state=state, reason=reason)
        self.detach()
        if self.feed_waiting is not None:
            self.feed_waiting()

    def status(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "target_topic": self.target_topic,
            "state": self.state.value,
            "attached_to_shared_fetch": self.attached,
            "next_offset": self.next_offset,
            "acknowledged_offset": self.tracker.committable if self.tracker else None,
            "committed_offset": self.tracker.committed if self.tracker else None,
            "queued_records": self._queued_records,
            "dead_lettered_records": self.dead_lettered,
            "last_error": self.last_error,
        }
