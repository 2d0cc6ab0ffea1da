"""The ordered sender: the task that moves one :class:`LegPartition`'s queue to its destination.

The partition (:mod:`replicator.replication.partition`) holds the queue; whoever fed it (the shared
feed, with batches built for every leg at once, or the leg's catch-up fetch, with records this
sender builds into batches itself), the sender hands the batches to the destination's producer in
queue order. The producer holds at most one batch per partition queued behind one in flight and
keeps a failed batch at the front, so order holds without idempotence. Each batch covers a range of
source offsets that the partition's :class:`OffsetTracker` marks acknowledged when the destination
confirms it; the leg commits only that contiguous prefix.

Before the first batch the destination topic is prepared (:class:`TopicProvisioner`). A topic
that cannot take the partition (too few partitions) *blocks* it; a batch the destination refused
for good (too large, not authorised) *fails* it. Either halts that partition on that leg alone.
Batches are built to the destination topic's ``max.message.bytes``; a single record larger than
that is handled by ``REPLICATOR_RECORD_TOO_LARGE_POLICY``: halt, or park it in the local
dead-letter topic (:mod:`replicator.replication.dead_letters`) and go on. A destination that
acknowledges at a lower offset than before had its log replaced (topic deleted and created again):
the sender rewinds the partition to the source log start, and the catch-up fetch replays it.

Before the first batch the sender also reads the destination partition's tail and continues
after the last record of this origin it holds (:mod:`replicator.replication.resume`): nothing
acknowledged before a crash, rebalance or restart is written again.

A flow that does not preserve partition numbers, writing to a topic with another partition
count, places records by key (:func:`batching.build_placed`): each source range becomes one batch
per destination partition it touches, sent together and acknowledged as one range once all are;
its resume collects, from every destination partition, the source offsets already written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
    ProducerStateLost,
    ReplicatorError,
    Stopped,
    TopicGone,
    TopicMismatch,
)
from replicator.kafka.retry import Backoff, retrying
from replicator.lifecycle import sleep_unless_stopped, unless_stopped
from replicator.model import batching
from replicator.model.batching import OutboundBatch
from replicator.model.offsets import OffsetTracker, OutOfRange
from replicator.replication.accounting import Duplicates, Said, count_marked
from replicator.replication.destination import DeadLetterSink, Destination, TopicPreparer
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.oversize import OversizePolicy
from replicator.replication.partition import Halt, LegPartition, Mode, Work
from replicator.replication.preparing import (
    REPLACED,
    Loss,
    Prepared,
    Resumption,
    read_destination,
)
from replicator.replication.replay import Halted, Replay, saved
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)

_RETRY_BACKOFF_S = 0.5


class PartitionSender:
    """Sends one partition's queue to one destination, in order, until the partition closes."""

    # One per assigned partition and leg: slots keep each instance small (no attribute dict).
    # What the destination has not answered yet is the partition's (``partition.in_flight``).
    __slots__ = (
        "_bytes",
        "_dead_letters",
        "_denied",
        "_destination",
        "_duplicates",
        "_latency",
        "_limit",
        "_log_start",
        "_loss",
        "_metrics",
        "_outside_source",
        "_preserve",
        "_replicated",
        "_resets",
        "_said",
        "_topics",
        "leg",
        "partition",
    )

    def __init__(
        self,
        leg: Leg,
        partition: LegPartition,
        destination: Destination,
        topics: TopicPreparer,
        metrics: Metrics,
        log_start: Callable[[], Awaitable[int]],
        dead_letters: DeadLetterSink | None = None,
        duplicates: Duplicates | None = None,
        preserve_partitions: bool = True,
        outside_source: Callable[[int], Awaitable[OutOfRange | None]] | None = None,
        resets: OffsetResets | None = None,
    ) -> None:
        self.leg = leg
        self._preserve = preserve_partitions
        self.partition = partition
        self._destination = destination
        self._topics = topics
        self._metrics = metrics
        self._log_start = log_start
        # Whether a source position is outside the source log, and the leg's reset policy
        # (:mod:`replicator.replication.replay`).
        self._outside_source = outside_source
        self._resets = resets
        self._dead_letters = dead_letters
        # The leg's duplicates it could not prevent (metrics and /status, counted once).
        self._duplicates = duplicates if duplicates is not None else Duplicates(leg.name, metrics)
        self._limit: int | None = None  # the destination topic's max.message.bytes, if known
        self._said = Said.NOTHING  # what this partition logs once (derived records, copies)
        self._loss: Loss | None = None  # the destination lost what was delivered: replay
        # A write the destination denied (ACLs, credentials): tried again after a delay that
        # grows to a minute while it keeps being denied (None: nothing denied since the last
        # acknowledgement).
        self._denied: Backoff | None = None
        target = partition.target_topic
        self._replicated = metrics.records_replicated.labels(leg.name, target)
        self._bytes = metrics.bytes_replicated.labels(leg.name, target)
        self._latency = metrics.latency.labels(leg.name)

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
        in_flight = self.partition.in_flight
        pending = in_flight.unanswered(self.partition.epoch)
        if not pending:
            return
        _, still = await asyncio.wait(pending, timeout=timeout)
        if not still:
            return
        records = in_flight.records(still)
        if not handed_over:
            self._log.info(
                "stopping with batches the destination neither acknowledged nor refused: not "
                "committed; the next owner reads the destination and sends what is missing",
                unacknowledged_batches=len(still),
                records=records,
            )
            return
        # Whoever takes the partition next reads the destination's tail; these batches may land
        # after that read, and then be written twice.
        self._duplicates.possible(self.partition.target_topic, records, "unacknowledged_at_release")
        self._log.warning(
            "drain timed out: batches handed to the destination were neither acknowledged "
            "nor refused; if they land after the next owner resumed, they are written twice",
            unacknowledged_batches=len(still),
            records=records,
        )

    # -- preparing ------------------------------------------------------------------------------

    async def _prepare(self, replay_start: int | None = None) -> bool:
        """Wait for the destination, ensure its topic and resume after what it holds
        (:mod:`replicator.replication.preparing`); ``False`` if this must not replicate.

        Run before the first batch, and again after a replay (the topic was deleted) with the
        source offset it starts at (``replay_start``).
        """
        partition = self.partition
        replaying = replay_start is not None

        async def read() -> Prepared:
            return await read_destination(
                self.leg, partition, self._destination, self._topics, self._preserve, replaying
            )

        def not_ready(error: ReplicatorError) -> None:
            partition.report(f"destination not ready: {error}")

        reading = retrying(
            read,
            stop=partition.closed,
            what="prepare the destination topic",
            log=self._log,
            on_error=not_ready,
            persistent=False,
            backoff=Backoff(base=_RETRY_BACKOFF_S, ceiling=_RETRY_BACKOFF_S * 8),
        )
        try:
            prepared = await unless_stopped(reading, partition.closed)
        except Stopped:
            return False  # released while the destination was still down
        except TopicMismatch as error:
            self._halt(str(error), Halt.BLOCKED)
            return False
        except Exception as error:
            self._halt(f"destination topic refused: {error}")
            return False
        if prepared is None or not partition.open:
            return False
        self._limit = prepared.limit
        resumption = Resumption(
            self.leg, partition, self._destination, self._metrics, self._duplicates, self._log_start
        )
        loss = await resumption.apply(prepared, replay_start, self._log)
        if loss is not None:
            self._loss = loss  # replayed before anything is sent (the run loop looks first)
        placement = prepared.placement
        partition.prepared(self._destination.new_batches(self._limit), placement)
        if placement is not None:
            self._unfence()  # every destination partition it writes to, now that they are known
        return True

    # -- sending --------------------------------------------------------------------------------

    async def _send(self, work: Work) -> None:
        if work.already_written:
            target = self.partition.target_topic
            self._metrics.resume_skipped.labels(self.leg.name, target).inc(work.already_written)
        for group in batching.ranges(work.batches):
            if not await self._hand_over(work.epoch, group):
                return
        if work.marked:
            target = self.partition.target_topic
            self._said = count_marked(
                self.leg, target, self._metrics, work.marked, work.batches, self._said, self._log
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
        outstanding = _Outstanding(len(live))
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
        policy = OversizePolicy(self.leg, self._metrics, self._dead_letters)
        outcome = await policy.apply(self.partition, batch, self._limit, self._log)
        if outcome.halt is not None:
            self._halt(outcome.halt)
        return outcome.parked

    async def _send_batch(
        self, epoch: int, tracker: OffsetTracker, batch: OutboundBatch, outstanding: _Outstanding
    ) -> bool:
        """Hand one batch of a range to the producer; ``False`` if the partition closed."""
        partition = self.partition
        number = partition.tp.partition if batch.partition is None else batch.partition

        async def send() -> asyncio.Future[int] | None:
            if partition.epoch != epoch:
                return None  # restarted meanwhile: this batch belongs to an abandoned position
            try:
                return await self._destination.send(batch.builder, partition.target_topic, number)
            except OutcomeUnknown as error:
                # Queued behind a batch of unknown outcome (of this partition, or placed by key,
                # of another one writing to the same destination partition), or the topic is
                # gone: resume from the destination.
                if partition.epoch == epoch:
                    self._uncertain(tracker, error)
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
        except (AuthorizationFailed, AuthenticationFailed) as error:
            self._deny(tracker, error)
            return False
        except ReplicatorError as error:
            self._refused(error)
            return False
        if answer is None:
            return False  # closed while retrying
        partition.in_flight.batch_sent(answer, epoch, batch.count)
        answer.add_done_callback(self._on_answer(tracker, batch, number, outstanding))
        return True

    def _on_answer(
        self, tracker: OffsetTracker, batch: OutboundBatch, number: int, outstanding: _Outstanding
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
                if tracker is partition.tracker:  # else abandoned: its fate no longer matters
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
        """The destination answered a batch with ``error`` (of :mod:`replicator.errors`)."""
        if isinstance(error, OutcomeUnknown):
            self._uncertain(tracker, error)
        elif isinstance(error, (AuthorizationFailed, AuthenticationFailed)):
            self._deny(tracker, error)
        elif isinstance(error, ReplicatorError):
            self._refused(error)
        else:
            self._refused(KafkaFailure(repr(error), retriable=False))

    def _deny(self, tracker: OffsetTracker, error: ReplicatorError) -> None:
        """The destination denied the write (an ACL, credentials): nothing of the batch was
        appended (a broker authorizes before it writes). Not the records' fault, and an operator
        can grant it at any time: the partition is not halted but starts again from the
        destination, after a delay that grows to a minute, naming the denial meanwhile in
        ``/readyz`` and ``/status``; once the write is allowed, nothing was lost or repeated."""
        partition = self.partition
        if tracker is not partition.tracker:
            return  # a batch queued behind it, or of an abandoned position
        if self._denied is None:
            self._denied = Backoff(base=_RETRY_BACKOFF_S * 4, ceiling=60.0)
        note = f"destination {self.leg.destination} denied the write: {error}"
        if partition.restart(note):
            target = partition.target_topic
            self._metrics.send_errors.labels(self.leg.name, target, type(error).__name__).inc()
            self._log.warning(
                "the destination denied the write: waiting, then resuming from the destination",
                error=str(error),
            )

    def _uncertain(self, tracker: OffsetTracker, error: OutcomeUnknown) -> None:
        """A batch was sent but not answered, or the destination lost the topic or the
        producer's state: resume from the destination's tail again."""
        partition = self.partition
        if tracker is not partition.tracker:
            return  # a batch queued behind it, or of an abandoned position
        if isinstance(error, TopicGone):
            self._topics.forget(partition.target_topic)  # created again if need be
            what = "the destination partition does not exist (any more)"
        elif isinstance(error, ProducerStateLost):
            what = "the destination lost the producer's state (restored or rebuilt)"
        else:
            what = "a batch's outcome is unknown"
        note = f"{what} ({error.kind}): resuming from the destination"
        if partition.restart(note):
            target = partition.target_topic
            self._metrics.send_errors.labels(self.leg.name, target, error.kind).inc()
            self._log.warning(
                f"{what}: reading the destination to resume without writing a record twice "
                "or losing one",
                error=str(error),
                resume_from=partition.position,
            )

    async def _resume_again(self) -> bool:
        """After :meth:`LegPartition.restart`: once every batch sent is settled (and, after a
        denied write, a delay), read the tail and resume after the last record of this origin;
        ``False`` if the partition closed."""
        partition = self.partition
        if self._denied is not None:
            await sleep_unless_stopped(partition.closed, self._denied.delay(retriable=False))
            if not partition.open:
                return False
        pending = partition.in_flight.unanswered()
        if pending:
            settled: asyncio.Future[Any] = asyncio.gather(*pending, return_exceptions=True)
            closed: asyncio.Future[Any] = asyncio.ensure_future(partition.closed.wait())
            try:
                await asyncio.wait({settled, closed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
            if not settled.done():
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
            self._destination.unfence(TopicPartition(partition.target_topic, number))

    async def _replay(self, loss: Loss) -> None:
        """Copy the source partition again into the destination partition that lost what the
        leg delivered (:mod:`replicator.replication.replay`); the records sent between the loss
        and its detection are duplicated, and counted as such."""
        partition = self.partition
        replay = Replay(
            self.leg,
            self._topics,
            self._metrics,
            self._log_start,
            self._outside_source,
            self._resets,
        )
        outcome = await replay.rewind(partition, loss, self._log)
        partition.in_flight.forget_written()
        if isinstance(outcome, Halted):
            self._halt(outcome.reason)
            return
        if not partition.open:
            return
        # Batches of the abandoned position still on their way land before the tail is read.
        if answers := partition.in_flight.answers():
            await asyncio.wait(answers, timeout=self._destination.timeout)
        if not await self._prepare(outcome.start):  # create the topic again (or halt)
            return
        await saved(partition, outcome.note)

    # -- reporting ------------------------------------------------------------------------------

    def _undecodable(self, work: Work) -> None:
        """Every record before it was handed over: halt at the record the client cannot decode,
        naming it (counted once per partition and leg)."""
        assert work.poison is not None
        target = self.partition.target_topic
        self._metrics.records_undecodable.labels(self.leg.name, self.partition.tp.topic).inc()
        self._metrics.send_errors.labels(self.leg.name, target, "UndecodableRecord").inc()
        self._halt(work.poison)

    def _refused(self, error: ReplicatorError) -> None:
        target = self.partition.target_topic
        self._metrics.send_errors.labels(self.leg.name, target, type(error).__name__).inc()
        self._halt(f"destination refused a batch: {error}")

    def _halt(self, reason: str, kind: Halt = Halt.FAILED) -> None:
        if self.partition.halt(reason, kind):
            self._log.error("partition halted", state=kind.value, reason=reason)
        if self.partition.placement is not None:
            # Placed by key, other source partitions write to the same destination partitions:
            # a fence left by this one's failure would stall them. Nothing of this partition is
            # sent any more, and its resume skips exactly what was written, never a refused one.
            self._unfence()


class _Outstanding:
    """The batches of one source range still unanswered, and the destination mark to give the
    range once all are acknowledged (only when a single batch holds the whole range)."""

    __slots__ = ("_left", "mark")

    def __init__(self, batches: int) -> None:
        self._left = batches
        self.mark: int | None = None

    def done(self, mark: int | None) -> bool:
        """One batch was acknowledged (written before ``mark``); ``True`` when it was the last."""
        self._left -= 1
        if mark is not None:
            self.mark = mark
        return self._left == 0
