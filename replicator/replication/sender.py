"""The ordered sender: the task that moves one :class:`LegPartition`'s queue to its destination.

The partition (:mod:`~replicator.replication.partition`) holds the queue of batches built as
records entered it; the sender hands them to the destination's producer in queue order. The
producer holds at most one batch per partition queued behind one in flight and keeps a failed
batch at the front, so order holds without idempotence. Each batch covers a range of source
offsets that the partition's :class:`OffsetTracker` marks acknowledged when the destination
confirms it; the leg commits only that contiguous prefix. Placed by key, a range is one batch per
destination partition it touches, acknowledged once all are.

Around that loop, each in its own module: before the first batch the destination is prepared and
the partition resumes after what it holds (:mod:`~replicator.replication.preparing`); answers
other than an acknowledgement restart or halt it (:mod:`~replicator.replication.outcomes`); a
destination that lost what was delivered is replayed (:mod:`~replicator.replication.replay`); a
record too large meets the oversize policy (:mod:`~replicator.replication.oversize`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.config.topology import Leg
from replicator.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    KafkaFailure,
    OutcomeUnknown,
    ReplicatorError,
)
from replicator.kafka.retry import Backoff, retrying
from replicator.lifecycle import sleep_unless_stopped
from replicator.model import batching
from replicator.model.batching import OutboundBatch
from replicator.model.offsets import OffsetTracker
from replicator.replication.accounting import Said, count_marked
from replicator.replication.in_flight import Outstanding
from replicator.replication.outcomes import Outcomes
from replicator.replication.oversize import OversizePolicy
from replicator.replication.partition import LegPartition
from replicator.replication.preparing import REPLACED, Loss, Refused, Resumption
from replicator.replication.replay import Halted, Replay, saved
from replicator.replication.sending import LegSending
from replicator.replication.states import Halt, Mode, Work

log = structlog.get_logger(__name__)

_RETRY_BACKOFF_S = 0.5


class PartitionSender:
    """Sends one partition's queue to one destination, in order, until the partition closes."""

    # One per assigned partition and leg: slots keep each instance small (no attribute dict).
    # What the leg's senders share is one LegSending; what the destination has not answered
    # yet is the partition's (``partition.in_flight``).
    __slots__ = (
        "_bytes",
        "_denied",
        "_latency",
        "_limit",
        "_loss",
        "_replicated",
        "_said",
        "_sending",
        "partition",
    )

    def __init__(self, sending: LegSending, partition: LegPartition) -> None:
        self._sending = sending
        self.partition = partition
        self._limit: int | None = None  # the destination topic's max.message.bytes, if known
        self._said = Said.NOTHING  # what this partition logs once (derived records, copies)
        self._loss: Loss | None = None  # the destination lost what was delivered: replay
        # A write the destination denied (ACLs, credentials): tried again after a delay that
        # grows to a minute while it keeps being denied (None: nothing denied since the last
        # acknowledgement).
        self._denied: Backoff | None = None
        leg, target, metrics = sending.leg.name, partition.target_topic, sending.metrics
        self._replicated = metrics.records_replicated.labels(leg, target)
        self._bytes = metrics.bytes_replicated.labels(leg, target)
        self._latency = metrics.latency.labels(leg)

    @property
    def leg(self) -> Leg:
        return self._sending.leg

    @property
    def _log(self) -> Any:
        """The logger bound to this leg and partition (bound when used: logs are rare, and a
        bound logger per partition and leg is memory at thousands of partitions)."""
        tp = self.partition.tp
        return log.bind(leg=self.leg.name, topic=tp.topic, partition=tp.partition)

    async def run(self) -> None:
        """Prepare the destination topic, then send queued work until the partition closes."""
        partition = self.partition
        # A partition released and assigned again may have been left fenced by a failed batch.
        self._unfence()
        if not await self._prepare():
            return
        while partition.open:
            if self._loss is not None:
                loss, self._loss = self._loss, None
                await self._replay(loss)
                continue
            if partition.mode is Mode.STARTING:  # restarted: a batch's outcome is unknown
                if not await self._resume_again():
                    return
                continue
            work = partition.next_work()
            if work is None:
                partition.wakeup.clear()  # nothing queued: sleep until work or a transition
                await partition.wakeup.wait()
                continue
            if work.poison is not None:
                self._undecodable(work)
                return
            await self._send(work)
            partition.handed_over(work)

    async def drain(self, timeout: float, handed_over: bool = True) -> None:
        """Wait up to ``timeout`` for the batches already handed to the producer.

        Only batches whose acknowledgement can still be committed count: none of a halted
        partition (nothing is committed past the problem), none of an abandoned position.
        Batches still unanswered may be written twice only if another owner takes the
        partition while they can still land (``handed_over``: a rebalance). At a stop the
        producer is closed before the group is left, and the next owner reads the destination.
        """
        if self.partition.halted:
            return
        still, records = await self.partition.in_flight.drain(self.partition.epoch, timeout)
        if not still:
            return
        if not handed_over:
            self._log.info(
                "stopping with batches the destination neither acknowledged nor refused: not "
                "committed; the next owner reads the destination and sends what is missing",
                unacknowledged_batches=still,
                records=records,
            )
            return
        # Whoever takes the partition next reads the destination's tail; these batches may land
        # after that read, and then be written twice.
        target = self.partition.target_topic
        self._sending.duplicates.possible(target, records, "unacknowledged_at_release")
        self._log.warning(
            "drain timed out: batches handed to the destination were neither acknowledged "
            "nor refused; if they land after the next owner resumed, they are written twice",
            unacknowledged_batches=still,
            records=records,
        )

    # -- preparing ------------------------------------------------------------------------------

    async def _prepare(self, replay_start: int | None = None) -> bool:
        """Prepare the destination and resume after what it holds (:mod:`replicator.
        replication.preparing`); ``False`` if this must not replicate (closed or halted)."""
        partition = self.partition
        outcome = await Resumption(self._sending, partition).prepare(replay_start, self._log)
        if outcome is None:
            return False
        if isinstance(outcome, Refused):
            self._halt(outcome.reason, outcome.kind)
            return False
        self._limit = outcome.limit
        if outcome.loss is not None:
            self._loss = outcome.loss  # replayed before anything is sent (the run loop looks first)
        partition.prepared(self._sending.destination.new_batches(self._limit), outcome.placement)
        if outcome.placement is not None:
            self._unfence()  # every destination partition it writes to, now that they are known
        return True

    # -- sending --------------------------------------------------------------------------------

    async def _send(self, work: Work) -> None:
        if work.already_written:
            target = self.partition.target_topic
            skipped = self._sending.metrics.resume_skipped.labels(self.leg.name, target)
            skipped.inc(work.already_written)
        for group in batching.ranges(work.batches):
            if not await self._hand_over(work.epoch, group):
                return
        if work.marked:
            target, metrics = self.partition.target_topic, self._sending.metrics
            self._said = count_marked(
                self.leg, target, metrics, work.marked, work.batches, self._said, self._log
            )

    async def _hand_over(self, epoch: int, group: list[OutboundBatch]) -> bool:
        """Give the batches covering source offsets ``[first, end)`` to the producer (one, or,
        placed by key, one per destination partition); the range is acknowledged once all are.

        ``False`` when the partition closed or rewound meanwhile (the rest of the work is void).
        """
        partition = self.partition
        first = group[0].first
        tracker = partition.sending(epoch, first, group[0].end)
        if tracker is None:
            return False
        live = [batch for batch in group if batch.count]
        if not live:  # every record of the range was skipped
            partition.acknowledged(tracker, first)
            return True
        outstanding = Outstanding(len(live))
        for batch in live:
            batch.builder.close()
            if self._limit is not None and batch.builder.size() > self._limit:
                if not await self._too_large(batch):
                    return False
                if outstanding.done(None):
                    partition.acknowledged(tracker, first, outstanding.mark)
                continue
            if not await self._send_batch(epoch, tracker, batch, outstanding):
                return False
        return True

    async def _too_large(self, batch: OutboundBatch) -> bool:
        """A record larger than the destination accepts (:mod:`replicator.replication.
        oversize`): ``True`` when it was parked, ``False`` when halted or closed."""
        policy = OversizePolicy(self._sending)
        outcome = await policy.apply(self.partition, batch, self._limit, self._log)
        if outcome.halt is not None:
            self._halt(outcome.halt)
        return outcome.parked

    async def _send_batch(
        self, epoch: int, tracker: OffsetTracker, batch: OutboundBatch, outstanding: Outstanding
    ) -> bool:
        """Hand one batch of a range to the producer; ``False`` if the partition closed."""
        partition = self.partition
        number = partition.tp.partition if batch.partition is None else batch.partition

        async def send() -> asyncio.Future[int] | None:
            if partition.epoch != epoch:
                return None  # restarted meanwhile: this batch belongs to an abandoned position
            try:
                destination = self._sending.destination
                return await destination.send(batch.builder, partition.target_topic, number)
            except OutcomeUnknown as error:
                # Queued behind a batch of unknown outcome (of this partition, or placed by key,
                # of another one writing to the same destination partition), or the topic is
                # gone: resume from the destination.
                if partition.epoch == epoch:
                    self._failed(tracker, error)
                return None
            except ReplicatorError:
                if partition.epoch != epoch:
                    return None  # restarted meanwhile: abandoned
                raise

        def failed(error: ReplicatorError) -> None:
            partition.report(str(error))

        try:
            answer = await retrying(
                send,
                stop=partition.closed,
                what=f"send to {self.leg.destination}",
                log=self._log,
                on_error=failed,
                persistent=False,
                backoff=Backoff(base=_RETRY_BACKOFF_S, ceiling=_RETRY_BACKOFF_S * 8),
            )
        except ReplicatorError as error:
            self._failed(tracker, error)
            return False
        if answer is None:
            return False  # closed while retrying
        partition.in_flight.batch_sent(answer, epoch, batch.count)
        answer.add_done_callback(self._on_answer(tracker, batch, number, outstanding))
        return True

    def _on_answer(
        self, tracker: OffsetTracker, batch: OutboundBatch, number: int, outstanding: Outstanding
    ) -> Callable[[asyncio.Future[int]], None]:
        """What is done when the destination answers ``batch`` (written to its partition
        ``number``), as a callback: nothing here may wait."""
        partition = self.partition
        first, count, size, appended_ms = batch.first, batch.count, batch.size, batch.oldest_ms
        whole = batch.partition is None  # one destination partition holds the whole range

        def answered(done: asyncio.Future[int]) -> None:
            partition.in_flight.batch_answered(done)
            if done.cancelled():
                return
            error = done.exception()
            if error is not None:
                self._failed(tracker, error)
                return
            self._denied = None
            # -1: an idempotent retry the destination had already written, answered with
            # DuplicateSequenceNumber (the embedded broker; Apache Kafka answers with the first
            # copy's offset): written, at an offset it does not say.
            base = done.result()
            written = base >= 0
            # A destination mark only where one destination partition holds the whole range.
            if outstanding.done(base + count if written and whole else None):
                partition.acknowledged(tracker, first, outstanding.mark)
            if tracker is not partition.tracker:
                return  # an abandoned position
            if written and partition.in_flight.written(number, base, count) and self._loss is None:
                self._loss = Loss(REPLACED)
                partition.wakeup.set()
            self._replicated.inc(count)
            self._bytes.inc(size)
            if appended_ms > 0:
                self._latency.observe(max(0.0, clock.wall() - appended_ms / 1000))

        return answered

    def _failed(self, tracker: OffsetTracker, error: BaseException) -> None:
        """The destination answered a batch with ``error`` (:mod:`replicator.replication.
        outcomes`); answers of an abandoned position no longer matter."""
        partition = self.partition
        if tracker is not partition.tracker:
            return  # a batch queued behind it, or of an abandoned position
        outcomes = Outcomes(self._sending)
        if isinstance(error, OutcomeUnknown):
            outcomes.uncertain(partition, error, self._log)
        elif isinstance(error, (AuthorizationFailed, AuthenticationFailed)):
            if self._denied is None:  # waited for before resuming, growing while denied
                self._denied = Backoff(base=_RETRY_BACKOFF_S * 4, ceiling=60.0)
            outcomes.denied(partition, error, self._log)
        else:
            if not isinstance(error, ReplicatorError):
                error = KafkaFailure(repr(error), retriable=False)
            self._halt(outcomes.refused(partition, error))

    async def _resume_again(self) -> bool:
        """After :meth:`LegPartition.restart`: once every batch sent is settled (and, after a
        denied write, a delay), read the tail and resume after the last record of this origin;
        ``False`` if the partition closed."""
        partition = self.partition
        if self._denied is not None:
            await sleep_unless_stopped(partition.closed, self._denied.delay(retriable=False))
            if not partition.open:
                return False
        if not await partition.in_flight.settled(partition.closed):
            return False  # released meanwhile
        self._unfence()
        return await self._prepare()

    def _unfence(self) -> None:
        """Let the producer send to this partition's destination partitions again."""
        partition = self.partition
        numbers = {partition.tp.partition}
        if partition.placement is not None:
            numbers.update(range(partition.placement.partitions))
        for number in numbers:
            self._sending.destination.unfence(TopicPartition(partition.target_topic, number))

    async def _replay(self, loss: Loss) -> None:
        """Copy the source partition again into the destination partition that lost what the
        leg delivered (:mod:`replicator.replication.replay`); the records sent between the loss
        and its detection are duplicated, and counted as such."""
        partition = self.partition
        outcome = await Replay(self._sending).rewind(partition, loss, self._log)
        partition.in_flight.forget_written()
        if isinstance(outcome, Halted):
            self._halt(outcome.reason)
            return
        if not partition.open:
            return
        # Batches of the abandoned position still on their way land before the tail is read.
        if answers := partition.in_flight.answers():
            await asyncio.wait(answers, timeout=self._sending.destination.timeout)
        if not await self._prepare(outcome.start):  # create the topic again (or halt)
            return
        await saved(partition, outcome.note)

    # -- reporting ------------------------------------------------------------------------------

    def _undecodable(self, work: Work) -> None:
        """Every record before it was handed over: halt at the record the client cannot decode,
        naming it."""
        assert work.poison is not None
        Outcomes(self._sending).undecodable(self.partition)
        self._halt(work.poison)

    def _halt(self, reason: str, kind: Halt = Halt.FAILED) -> None:
        if self.partition.halt(reason, kind):
            self._log.error("partition halted", state=kind.value, reason=reason)
        if self.partition.placement is not None:
            # Placed by key, other source partitions write to the same destination partitions:
            # a fence left by this one's failure would stall them. Nothing of this partition is
            # sent any more, and its resume skips exactly what was written, never a refused one.
            self._unfence()
