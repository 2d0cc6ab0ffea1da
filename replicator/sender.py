"""The ordered sender: one task per assigned source partition of one leg.

The leg's fetch loop hands each partition's records to its :class:`PartitionSender`. The sender
checks every record for provenance (the loop check), tags the ones it replicates, packs them into
destination batches for the *same partition number* of the real topic, and sends the batches in
source order. Delivery is pipelined: the producer holds at most one batch per partition queued
behind one in flight, and keeps failed batches at the front, so order holds without idempotence.
Each batch covers a range of source offsets that the :class:`OffsetTracker` marks acknowledged
when the destination confirms it; the leg commits only that contiguous prefix.

A partition whose destination topic cannot take it (too few partitions) is *blocked*; one whose
batch the destination refused for good (too large, not authorised) is *failed*. Either stops that
partition alone, commits nothing past the problem, and is reported in ``/status`` and metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

import structlog
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from replicator import provenance
from replicator.errors import ReplicatorError, TopicMismatch
from replicator.kafka import translate
from replicator.metrics import Metrics
from replicator.offsets import OffsetTracker
from replicator.provenance import Marking
from replicator.topics import TopicProvisioner
from replicator.topology import Leg

log = structlog.get_logger(__name__)

_RETRY_BACKOFF_S = 0.5


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
        topics: TopicProvisioner,
        metrics: Metrics,
        max_records: int,
        max_bytes: int,
        on_room: Callable[[TopicPartition], None],
        on_halt: Callable[[TopicPartition], None],
    ) -> None:
        self.leg = leg
        self.tp = tp
        self.target_topic = target_topic
        self.state = PartitionState.STARTING
        self.last_error: str | None = None
        self.tracker: OffsetTracker | None = None
        self._producer = producer
        self._topics = topics
        self._metrics = metrics
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._on_room = on_room
        self._on_halt = on_halt
        self._queue: deque[list[ConsumerRecord]] = deque()
        self._queued_records = 0
        self._queued_bytes = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._in_flight: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._tagger = provenance.Tagger(leg.source, tp.topic, tp.partition)
        self._log = log.bind(leg=leg.name, topic=tp.topic, partition=tp.partition)
        self._replicated = metrics.records_replicated.labels(leg.name, target_topic)
        self._bytes = metrics.bytes_replicated.labels(leg.name, target_topic)
        self._latency = metrics.latency.labels(leg.name)

    # -- the fetch loop's side ------------------------------------------------------------------

    @property
    def has_room(self) -> bool:
        return self._queued_records < self._max_records and self._queued_bytes < self._max_bytes

    @property
    def halted(self) -> bool:
        return self.state in (PartitionState.BLOCKED, PartitionState.FAILED)

    def offer(self, records: list[ConsumerRecord]) -> bool:
        """Queue fetched records; return ``False`` when the partition should stop fetching.

        Records offered to a halted or closing partition are dropped here: nothing past them is
        ever committed, so they are fetched again by whoever owns the partition next.
        """
        if self.halted or self._closing:
            return False
        self._queue.append(records)
        self._queued_records += len(records)
        self._queued_bytes += sum(r.serialized_key_size + r.serialized_value_size for r in records)
        self._wakeup.set()
        return self.has_room

    @property
    def oldest_unacked_age(self) -> float:
        """Seconds since the oldest unacknowledged batch was handed to the producer."""
        while self._in_flight and self._in_flight[0][0].done():
            self._in_flight.popleft()
        if not self._in_flight:
            return 0.0
        return time.monotonic() - self._in_flight[0][1]

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The partition's send task: prepare the destination, then send until closed."""
        if not await self._prepare():
            return
        self.state = PartitionState.REPLICATING
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._closing or self.halted:
                return
            while self._queue and not self._closing and not self.halted:
                records = self._take()
                await self._send(records)

    async def drain(self, timeout: float) -> None:
        """Stop taking records and wait (up to ``timeout``) for batches already handed over."""
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
        """Ensure the destination topic; ``False`` if this partition must not be replicated."""
        while not self._closing:
            try:
                await self._topics.ensure(self.tp.topic, self.target_topic)
                return True
            except TopicMismatch as exc:
                self._halt(PartitionState.BLOCKED, str(exc))
                return False
            except ReplicatorError as exc:
                if not exc.retriable:
                    self._halt(PartitionState.FAILED, str(exc))
                    return False
                self.last_error = f"destination topic not ready: {exc}"
                self._log.warning("destination topic not ready, retrying", error=str(exc))
                await asyncio.sleep(_RETRY_BACKOFF_S)
        return False

    def _take(self) -> list[ConsumerRecord]:
        records: list[ConsumerRecord] = []
        while self._queue:
            records.extend(self._queue.popleft())
        was_full = not self.has_room
        self._queued_records = 0
        self._queued_bytes = 0
        if was_full:
            self._on_room(self.tp)
        return records

    async def _send(self, records: Sequence[ConsumerRecord]) -> None:
        """Pack ``records`` into as many destination batches as they need and send them."""
        # The per-record loop is the replicator's hot path: no avoidable Python work in it.
        tag, untagged = self._tagger.tag, provenance.untagged
        batch = self._producer.create_batch()
        append = batch.append
        first = records[0].offset
        count = size = 0
        oldest = records[0].timestamp
        skipped: Counter[Marking] = Counter()
        for record in records:
            headers = record.headers
            if headers and not untagged(headers):
                skipped[provenance.marking(headers)] += 1
                continue
            key, value, timestamp = record.key, record.value, record.timestamp
            tags = tag(headers, record.offset)
            if append(timestamp=timestamp, key=key, value=value, headers=tags) is None:
                await self._hand_over(batch, first, record.offset, count, size, oldest)
                batch = self._producer.create_batch()
                append = batch.append
                first, count, size, oldest = record.offset, 0, 0, timestamp
                append(timestamp=timestamp, key=key, value=value, headers=tags)
            count += 1
            size += record.serialized_key_size + record.serialized_value_size
        await self._hand_over(batch, first, records[-1].offset + 1, count, size, oldest)
        if skipped:
            for mark, n in skipped.items():
                self._metrics.records_skipped.labels(self.leg.name, self.target_topic, mark).inc(n)
            self._log.info(
                "records not mirrored again",
                **{str(mark): n for mark, n in skipped.items()},
                first_offset=records[0].offset,
                last_offset=records[-1].offset,
            )

    async def _hand_over(
        self, batch: Any, first: int, end: int, count: int, size: int, oldest_ms: int
    ) -> None:
        """Give one batch covering source offsets ``[first, end)`` to the producer."""
        if self.tracker is None:
            self.tracker = OffsetTracker(first)
        self.tracker.track(first, end)
        if count == 0:  # every record of the range was skipped
            self.tracker.ack(first)
            return
        batch.close()
        while True:
            try:
                future = await self._producer.send_batch(
                    batch, self.target_topic, partition=self.tp.partition
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
        while self._in_flight and self._in_flight[0][0].done():
            self._in_flight.popleft()
        self._in_flight.append((future, time.monotonic()))

        def delivered(done: asyncio.Future[Any]) -> None:
            if done.cancelled():
                return
            exc = done.exception()
            if exc is not None:
                self._refused(translate(exc))
                return
            assert self.tracker is not None
            self.tracker.ack(first)
            self._replicated.inc(count)
            self._bytes.inc(size)
            if oldest_ms > 0:
                self._latency.observe(max(0.0, time.time() - oldest_ms / 1000))

        future.add_done_callback(delivered)

    def _refused(self, error: ReplicatorError) -> None:
        self._metrics.send_errors.labels(
            self.leg.name, self.target_topic, type(error).__name__
        ).inc()
        self._halt(PartitionState.FAILED, f"destination refused a batch: {error}")

    def _halt(self, state: PartitionState, reason: str) -> None:
        if self.halted:
            return
        self.state = state
        self.last_error = reason
        self._queue.clear()
        self._wakeup.set()
        self._log.error("partition halted", state=state, reason=reason)
        self._on_halt(self.tp)

    def status(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "target_topic": self.target_topic,
            "state": self.state.value,
            "acknowledged_offset": self.tracker.committable if self.tracker else None,
            "committed_offset": self.tracker.committed if self.tracker else None,
            "queued_records": self._queued_records,
            "last_error": self.last_error,
        }
