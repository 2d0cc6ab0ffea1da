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
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError

from replicator.config.topology import Leg
from replicator.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ClusterUnavailable,
    ReplicatorError,
    TopicMismatch,
)
from replicator.kafka.clients import translate
from replicator.kafka.producer import (
    PRODUCER_STATE_LOST,
    TOPIC_GONE,
    batch_records,
    unknown_outcome,
)
from replicator.kafka.retry import Backoff, retrying
from replicator.lifecycle import PartitionEvent, sleep_unless_stopped
from replicator.model import batching
from replicator.model.batching import OutboundBatch, Placement, Target
from replicator.model.offsets import OffsetTracker, OutOfRange
from replicator.model.provenance import Marking
from replicator.replication.destination import DeadLetterSink, Destination, TopicPreparer
from replicator.replication.health import Duplicates
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import Halt, LegPartition, Mode, Work
from replicator.replication.resume import Tail, destination_lost, rolled_back_to
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)

_RETRY_BACKOFF_S = 0.5
_SAVE_POLL_S = 0.05


class PartitionSender:
    """Sends one partition's queue to one destination, in order, until the partition closes."""

    # One per assigned partition and leg: slots keep each instance small (no attribute dict).
    __slots__ = (
        "_bytes",
        "_copies_seen",
        "_dead_letters",
        "_denied",
        "_derived_seen",
        "_destination",
        "_destination_offsets",
        "_duplicates",
        "_in_flight",
        "_latency",
        "_limit",
        "_log_start",
        "_metrics",
        "_outside_source",
        "_preserve",
        "_replace_cause",
        "_replaced",
        "_replay_from",
        "_replicated",
        "_resets",
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
        # Whether a source position is outside the source log, and the leg's reset policy: a
        # replay from a position beyond the log end is an offset reset, not a replay.
        self._outside_source = outside_source
        self._resets = resets
        self._dead_letters = dead_letters
        # The leg's duplicates it could not prevent (metrics and /status, counted once).
        self._duplicates = duplicates if duplicates is not None else Duplicates(leg.name, metrics)
        self._limit: int | None = None  # the destination topic's max.message.bytes, if known
        self._derived_seen = False  # derived records are logged once per partition
        self._copies_seen = False  # a flow's skipped copies are logged once per partition
        # Per destination partition, the end offset of the last batch it acknowledged: a batch
        # written below it later means its log was replaced (topic deleted and created again,
        # a cluster restored empty). The end, not the base: a log replaced after a single batch
        # takes the next one at the same base.
        self._destination_offsets: dict[int, int] = {}
        self._replaced = PartitionEvent()
        self._replace_cause = "destination partition replaced (topic deleted and created again)"
        self._replay_from = 0  # where the next replay starts, if after the source log start
        # future -> (epoch, records) of the batches handed to the producer, not yet answered
        self._in_flight: dict[asyncio.Future[Any], tuple[int, int]] = {}
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
            if self._replaced.is_set():
                await self._replay()
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
        epoch = self.partition.epoch
        pending = [f for f, (e, _) in self._in_flight.items() if e == epoch and not f.done()]
        if not pending:
            return
        _, still = await asyncio.wait(pending, timeout=timeout)
        if still and not handed_over:
            self._log.info(
                "stopping with batches the destination neither acknowledged nor refused: not "
                "committed; the next owner reads the destination and sends what is missing",
                unacknowledged_batches=len(still),
                records=sum(self._in_flight.get(f, (0, 0))[1] for f in still),
            )
        elif still:
            # Whoever takes the partition next reads the destination's tail; these batches
            # may land after that read, and then be written twice.
            records = sum(self._in_flight.get(f, (0, 0))[1] for f in still)
            target = self.partition.target_topic
            self._duplicates.possible(target, records, "unacknowledged_at_release")
            self._log.warning(
                "drain timed out: batches handed to the destination were neither acknowledged "
                "nor refused; if they land after the next owner resumed, they are written twice",
                unacknowledged_batches=len(still),
                records=records,
            )

    # -- preparing ------------------------------------------------------------------------------

    async def _prepare(self, replay_start: int | None = None) -> bool:
        """Wait for the destination and ensure its topic; ``False`` if this must not replicate.

        Run before the first batch, and again after a replay (the topic was deleted) with the
        source offset it starts at (``replay_start``); each time the destination partition's
        tail is read (:meth:`_resumed`).
        """
        partition = self.partition
        replaying = replay_start is not None

        tail: Tail | None = None
        mark: int | None = None  # the mark the tail was read from (in memory, else saved)
        covers: int | None = None  # the source offset that mark was reached with
        placement: Placement | None = None
        destination_tp = TopicPartition(partition.target_topic, partition.tp.partition)

        async def ensure() -> None:
            nonlocal tail, placement
            await self._destination.ready.wait()
            topic = await self._topics.ensure(
                partition.tp.topic, partition.target_topic, partition.tp.partition
            )
            self._limit = topic.max_message_bytes
            await self._destination.learn_partitions(partition.target_topic, topic.partitions)
            placement = None
            if not self._preserve:
                # Placed by key, whatever the counts: as MirrorMaker 1 does without
                # --preserve.partitions, and one way of resuming for the partition's whole life.
                placement = Placement(topic.partitions)
                if partition.mode is Mode.STARTING or replaying:
                    placement.written = await read_written(topic.partitions)
            elif partition.mode is Mode.STARTING or replaying:
                tail = await read_tail()

        async def read_written(partitions: int) -> frozenset[int]:
            """Placed by key: the source offsets from the position on that are written."""
            position = partition.position or 0
            written: set[int] = set()
            try:
                for number in range(partitions):
                    found, _ = await self._destination.tail.written_since(
                        TopicPartition(partition.target_topic, number), partition.tagger, position
                    )
                    written |= found
            except Exception as exc:
                raise self._tail_error(exc) from exc
            return frozenset(written)

        async def read_tail() -> Tail:
            """Where to resume (the last record of this origin the destination holds)."""
            nonlocal mark, covers
            try:
                floor = None if replaying else partition.destination_mark
                covers = partition.position  # an in-memory mark covers the committable prefix
                # A partition the leg never committed has no mark of its own to read (a mark
                # is saved after the offsets it goes with): not asked, so a first start does
                # not wait for the destination's group coordinator.
                committed = partition.committed_start is not None or partition.tracker is not None
                if floor is None and not replaying and committed:
                    saved = await self._destination.tail.saved_mark(
                        destination_tp, partition.position
                    )
                    if saved is not None:
                        floor, covers = saved
                mark = floor
                return await self._destination.tail.last_written(
                    destination_tp, partition.tagger, floor, partition.position, whole=replaying
                )
            except Exception as exc:
                raise self._tail_error(exc) from exc

        def not_ready(error: ReplicatorError) -> None:
            partition.report(f"destination not ready: {error}")

        waiting = asyncio.ensure_future(
            retrying(
                ensure,
                stop=partition.closed,
                what="prepare the destination topic",
                log=self._log,
                on_error=not_ready,
                persistent=False,
                backoff=Backoff(base=_RETRY_BACKOFF_S, ceiling=_RETRY_BACKOFF_S * 8),
            )
        )
        closed = asyncio.ensure_future(partition.closed.wait())
        try:
            await asyncio.wait({waiting, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not waiting.done():
                waiting.cancel()  # released while the destination was still down
            await asyncio.gather(waiting, closed, return_exceptions=True)
        if not partition.open or waiting.cancelled():
            return False
        error = waiting.exception()
        if isinstance(error, TopicMismatch):
            self._halt(str(error), Halt.BLOCKED)
            return False
        if error is not None:
            self._halt(f"destination topic refused: {error}")
            return False
        lost = None
        if tail is not None and not replaying:
            tracker = partition.tracker
            committed = partition.committed_start if tracker is None else tracker.committed
            lost = destination_lost(tail, mark, committed)
        if lost is not None:
            # Replayed before anything is sent (the run loop looks at this first).
            self._replay_from = await self._rolled_back(destination_tp, covers)
            self._replace_cause = f"destination partition lost records: {lost}"
            if self._replay_from:
                self._replace_cause += (
                    f"; it still holds this origin's records before source offset "
                    f"{self._replay_from} (its log was rolled back)"
                )
            self._replaced.set()
        elif tail is not None:
            log_start = None
            found, position = tail.origin_offset, partition.position
            below = found is not None and position is not None and found + 1 < position
            if not replaying and (tail.foreign or below):
                # Only a replay from the source log start moves a partition back.
                with contextlib.suppress(Exception):  # unknown: nothing moves back
                    log_start = await self._log_start()
            self._resumed(tail, replay_start, log_start, mark_saved=mark is not None)
        if placement is not None and not replaying:
            partition.resumed_placed(placement.written)
            if partition.placement is None:
                self._log.info(
                    "records placed by key (the flow does not preserve partition numbers)",
                    destination_partitions=placement.partitions,
                    already_written=len(placement.written),
                )
        partition.prepared(self._destination.new_batches(self._limit), placement)
        if placement is not None:
            self._unfence()  # every destination partition it writes to, now that they are known
        return True

    async def _rolled_back(self, tp: TopicPartition, covers: int | None) -> int:
        """Where a destination partition that lost records still holds every record of this
        origin before (:func:`rolled_back_to`), read below the mark it fell under; 0 (replay
        from the source log start) for a replaced log, or when that cannot be read."""
        partition = self.partition
        try:
            tail = await self._destination.tail.last_written(
                tp, partition.tagger, None, partition.position
            )
        except Exception as exc:
            self._log.warning("could not read below the lost mark; replaying", error=repr(exc))
            return 0
        return rolled_back_to(tail, covers) or 0

    def _tail_error(self, exc: Exception) -> ReplicatorError:
        """A failed read of where to resume: retried (a read), unless credentials are at fault."""
        error = translate(exc)
        if isinstance(error, (AuthenticationFailed, AuthorizationFailed)):
            where = f"reading where to resume in {self.leg.destination}"
            return type(error)(f"{where}: {error}")
        return ClusterUnavailable(f"reading where to resume: {error}")

    def _resumed(
        self,
        tail: Tail,
        replay_start: int | None,
        log_start: int | None = None,
        mark_saved: bool = True,
    ) -> None:
        """Continue after what the destination holds (or, replaying from ``replay_start``, count
        what it repeats); ``log_start``: the source log start, asked when the tail holds records
        of the origin below the position or out of order (see :func:`resume_after`);
        ``mark_saved``: a mark was saved for this partition (else the first commit saves one)."""
        partition = self.partition
        self._metrics.resume_seconds.labels(self.leg.name).observe(tail.seconds)
        if replay_start is not None:
            partition.replay_from_mark(tail.log_end)
            # What it holds of the origin before the replay's start (a rolled-back log) is
            # not written again; records at or past it are (counted with any before them).
            last = tail.origin_offset
            if tail.origin_records and last is not None and last >= replay_start:
                self._duplicates.written(
                    partition.target_topic, tail.origin_records, "destination_replaced"
                )
                self._log.error(
                    "the replaced destination partition already held records of this origin "
                    "(written between its deletion and its detection): the replay writes them "
                    "again",
                    duplicates=tail.origin_records,
                )
            return
        before = partition.position
        skipped = partition.resumed(tail, log_start, mark_saved)
        found = tail.origin_offset
        if (
            found is not None
            and before is not None
            and partition.position == before + skipped
            and (tail.foreign or found + 1 < before)
            and (partition.position or 0) >= before
        ):
            # Records of this origin the leg did not write in order: not where it stands.
            target = partition.target_topic
            self._metrics.resume_ignored.labels(self.leg.name, target).inc()
            self._log.warning(
                "the destination holds records carrying this origin's provenance below the "
                "highest one or below the committed offset, not written by this leg in order "
                "(an application published copies with their headers): ignored, resuming "
                "after what the leg wrote",
                committed=before,
                resume_at=partition.position,
                last_found=found,
                highest_found=tail.highest,
            )
        last = tail.highest if tail.highest is not None else found
        if last is not None and before is not None and skipped == 0 and last >= before:
            # Records past a gap: repeated, not skipped.
            repeated = last + 1 - before
            self._duplicates.possible(partition.target_topic, repeated, "past_a_gap")
            self._log.warning(
                "the destination holds records of this origin that do not follow the "
                "committed offset (a gap before them): resuming at the committed offset; "
                "those records may be written again",
                committed=before,
                first_found=tail.lowest,
                last_found=tail.origin_offset,
            )
        if skipped > 0:
            self._metrics.resume_skipped.labels(self.leg.name, partition.target_topic).inc(skipped)
        if skipped or tail.seconds > 1.0:
            self._log.info(
                "resumed after the last record the destination holds",
                committed=before,
                resume_at=partition.position,
                already_written=skipped,
                scanned=tail.scanned,
                seconds=round(tail.seconds, 3),
            )

    # -- sending --------------------------------------------------------------------------------

    async def _send(self, work: Work) -> None:
        partition = self.partition
        if work.fetched is not None:
            assert partition.new_batch is not None
            placement = partition.placement
            if placement is not None:
                placed = batching.build_placed(
                    work.fetched,
                    work.start,
                    work.end,
                    partition.tagger,
                    placement,
                    partition.new_batch,
                    work.fetched_ms,
                )
                work.batches, work.marked = placed.batches, placed.marked
                if placed.already_written:
                    self._metrics.resume_skipped.labels(self.leg.name, partition.target_topic).inc(
                        placed.already_written
                    )
            else:
                target = Target(work.start, partition.new_batch)
                batching.build(work.fetched, work.end, partition.tagger, [target], work.fetched_ms)
                work.batches, work.marked = target.batches, target.marked
        assert work.batches is not None
        for group in batching.ranges(work.batches):
            if not await self._hand_over(work.epoch, group):
                return
        if work.marked:
            self._count_marked(work.marked, work.batches)

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

    async def _send_batch(
        self, epoch: int, tracker: OffsetTracker, batch: OutboundBatch, outstanding: _Outstanding
    ) -> bool:
        """Hand one batch of a range to the producer; ``False`` if the partition closed."""
        partition = self.partition
        number = partition.tp.partition if batch.partition is None else batch.partition

        async def send() -> asyncio.Future[Any] | None:
            if partition.epoch != epoch:
                return None  # restarted meanwhile: this batch belongs to an abandoned position
            try:
                future = await self._destination.send(batch.builder, partition.target_topic, number)
            except KafkaTimeoutError as exc:
                if not self._destination.knows(partition.target_topic):
                    # Gone from the destination's metadata (deleted, a cluster rebuilt): prepare
                    # it again and resume from the destination.
                    self._uncertain(tracker, TOPIC_GONE[0]())
                    return None
                # The destination is not draining (unreachable or slow): keep the batch, wait.
                raise ClusterUnavailable("destination not acknowledging") from exc
            except Exception as exc:
                if partition.epoch != epoch:
                    return None  # restarted meanwhile: abandoned
                if unknown_outcome(exc):
                    # Queued behind a batch of unknown outcome (of this partition, or placed by
                    # key, of another one writing to the same destination partition): resume.
                    self._uncertain(tracker, exc)
                    return None
                raise
            return future

        def failed(error: ReplicatorError) -> None:
            partition.report(str(error))

        try:
            future = await retrying(
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
        if future is None:
            return False  # closed while retrying
        self._in_flight[future] = (epoch, batch.count)
        first, count, size, appended_ms = batch.first, batch.count, batch.size, batch.oldest_ms

        def delivered(done: asyncio.Future[Any]) -> None:
            self._in_flight.pop(done, None)
            if done.cancelled():
                return
            exc = done.exception()
            if exc is not None:
                if tracker is not partition.tracker:
                    return  # a batch of an abandoned position: its fate no longer matters
                error = translate(exc)
                if unknown_outcome(exc):
                    self._uncertain(tracker, exc)
                elif isinstance(error, (AuthorizationFailed, AuthenticationFailed)):
                    self._deny(tracker, error)
                else:
                    self._refused(error)
                return
            self._denied = None
            # -1: an idempotent retry the destination had already written, answered with
            # DuplicateSequenceNumber (the embedded broker; Apache Kafka answers with the first
            # copy's offset): written, at an offset it does not say.
            base = done.result().offset
            written = base >= 0
            # A destination mark only where one destination partition holds the whole range.
            mark = base + count if written and batch.partition is None else None
            if outstanding.done(mark):
                partition.acknowledged(tracker, first, outstanding.mark)
            if tracker is not partition.tracker:
                return  # an abandoned position
            if written and base < self._destination_offsets.get(number, 0):
                self._replaced.set()
                partition.wakeup.set()
            if written:
                self._destination_offsets[number] = base + count
            self._replicated.inc(count)
            self._bytes.inc(size)
            if appended_ms > 0:
                self._latency.observe(max(0.0, time.time() - appended_ms / 1000))

        future.add_done_callback(delivered)
        return True

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

    def _uncertain(self, tracker: OffsetTracker, exc: BaseException) -> None:
        """A batch was sent but not answered: resume from the destination's tail again."""
        partition = self.partition
        if tracker is not partition.tracker:
            return  # a batch queued behind it, or of an abandoned position
        name = type(exc).__name__
        if isinstance(exc, TOPIC_GONE):
            self._topics.forget(partition.target_topic)  # created again if need be
            what = "the destination partition does not exist (any more)"
        elif isinstance(exc, PRODUCER_STATE_LOST):
            what = "the destination lost the producer's state (restored or rebuilt)"
        else:
            what, name = "a batch's outcome is unknown", "OutcomeUnknown"
        note = f"{what} ({type(exc).__name__}): resuming from the destination"
        if partition.restart(note):
            target = partition.target_topic
            self._metrics.send_errors.labels(self.leg.name, target, name).inc()
            self._log.warning(
                f"{what}: reading the destination to resume without writing a record twice "
                "or losing one",
                error=repr(exc),
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
        pending = [f for f in self._in_flight if not f.done()]
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

    async def _replay(self) -> None:
        """Copy the source partition again, from its log start, into the replaced destination.

        The destination topic was deleted (and created again, by the replicator or the broker),
        or its partition lost records (truncated, a cluster rebuilt empty: see
        :func:`destination_lost`). What this leg had delivered is gone, so it is delivered
        again, counted as replayed; what the source no longer holds is counted as lost. The
        records sent between the loss and its detection are duplicated, and counted as such.
        A log rolled back to an earlier end still holds the origin's records before
        ``_replay_from`` (:func:`rolled_back_to`): the replay starts there.
        """
        self._replaced.clear()
        cause, begin = self._replace_cause, self._replay_from
        self._replace_cause = "destination partition replaced (topic deleted and created again)"
        self._replay_from = 0
        replay_start = begin  # what the destination holds of the origin below it is not repeated
        partition = self.partition
        target = partition.target_topic
        self._metrics.partitions_replaced.labels(self.leg.name, target).inc()
        self._topics.forget(target)
        try:
            log_start = await self._log_start()
        except Exception as exc:
            self._halt(f"{cause}; source log start unknown: {exc!r}")
            return
        tracker = partition.tracker
        reached = tracker.committable if tracker is not None else (partition.position or 0)
        outside = None
        if self._outside_source is not None and self._resets is not None:
            with contextlib.suppress(Exception):  # unknown: replayed as below
                outside = await self._outside_source(reached)
        self._destination_offsets.clear()
        if outside is not None and not outside.below_log_start and self._resets is not None:
            # The source log was replaced too (the position is past its end): an offset reset,
            # counted and handled by the leg's policy (start again at the log start, or halt).
            self._log.error(f"{cause}; the source position is past the source log end")
            self._resets.apply(partition, outside)
            if not partition.open:
                return
            note = f"{cause}; {outside}"
        else:
            # Past the position, records the source no longer holds are the offset reset's.
            # From ``begin``: the destination still holds every record of the origin before it.
            start = max(begin, min(log_start, reached))
            replayed, unreplayable = reached - start, max(0, min(log_start, reached) - begin)
            self._metrics.records_replayed.labels(self.leg.name, target).inc(replayed)
            if unreplayable:
                self._metrics.records_lost.labels(self.leg.name, target).inc(unreplayable)
            self._log.error(
                f"{cause}: replaying",
                target_topic=target,
                replay_from=start,
                records_replayed=replayed,
                lost_at_most=unreplayable,
            )
            note = f"{cause}; replayed from source offset {start} ({replayed} records)"
            if unreplayable:
                note += f"; the {unreplayable} records before it are no longer in the source"
            partition.rewind(start, note)
            replay_start = start
        # Batches of the abandoned position still on their way land before the tail is read.
        if self._in_flight:
            await asyncio.wait(list(self._in_flight), timeout=self._destination.timeout)
        if not await self._prepare(replay_start):  # create the topic again (or halt)
            return
        # Nothing is replayed before the rewound position and the replaced log's end (the mark)
        # are saved: a restart then replays too, rather than resuming after records that only
        # reached the new log because they were in flight when the topic was deleted.
        partition.report(f"{note}; saving the replay's position before sending")
        while partition.open and (tracker := partition.tracker) is not None:
            if not tracker.needs_commit:
                break
            await sleep_unless_stopped(partition.closed, _SAVE_POLL_S)
        partition.report(note)

    async def _too_large(self, batch: OutboundBatch) -> bool:
        """A record larger than the destination topic accepts: apply the oversize policy.

        ``True`` when it was parked (the caller counts the batch done), ``False`` if halted or
        closed."""
        partition = self.partition
        size = batch.builder.size()
        reason = (
            f"record at source offset {batch.first} is {size} bytes as a batch; "
            f"{self.leg.destination}/{partition.target_topic} accepts {self._limit} "
            "(max.message.bytes)"
        )
        self._metrics.send_errors.labels(
            self.leg.name, partition.target_topic, "RecordTooLarge"
        ).inc()
        dead_letters = self._dead_letters
        if dead_letters is None:
            self._halt(f"{reason}; REPLICATOR_RECORD_TOO_LARGE_POLICY=halt")
            return False
        records = batch_records(batch.builder)
        destination = f"{self.leg.destination}/{partition.target_topic}"

        def failed(error: ReplicatorError) -> None:
            partition.report(f"cannot park a record in the dead-letter topic: {error}")

        async def park() -> bool:
            await dead_letters.park(records, destination, reason)
            return True

        parked = await retrying(
            park,
            stop=partition.closed,
            what="park a record in the dead-letter topic",
            log=self._log,
            on_error=failed,
            backoff=Backoff(base=_RETRY_BACKOFF_S, ceiling=_RETRY_BACKOFF_S * 8),
        )
        if parked is None and partition.closed.is_set():
            return False  # stopping: the offset stays uncommitted, the record is parked next time
        self._metrics.records_dead_lettered.labels(self.leg.name, partition.target_topic).inc(
            len(records)
        )
        partition.parked(
            len(records), f"{reason}; parked in dead-letter topic {dead_letters.topic}"
        )
        self._log.warning(
            "record too large for the destination, parked in the dead-letter topic",
            offset=batch.first,
            size=size,
            limit=self._limit,
            dead_letter_topic=dead_letters.topic,
        )
        return True

    # -- reporting ------------------------------------------------------------------------------

    def _count_marked(self, marked: Counter[Marking], batches: list[OutboundBatch]) -> None:
        """Count the records that carried provenance; log skips per batch, derived data once."""
        target = self.partition.target_topic
        skipped = {mark: n for mark, n in marked.items() if not mark.replicated}
        for mark, n in skipped.items():
            self._metrics.records_skipped.labels(self.leg.name, target, mark).inc(n)
        derived = marked.get(Marking.DERIVED, 0)
        if derived:
            self._metrics.records_derived.labels(self.leg.name, target).inc(derived)
        if skipped and self.leg.flow is not None and set(skipped) == {Marking.LOOP}:
            # A flow reads the copies other replicators wrote into its source all the time
            # (same-name active-active): normal, counted, said once per partition.
            if not self._copies_seen:
                self._copies_seen = True
                self._log.info(
                    "copies from other clusters are not copied again (loop rule); counted in "
                    'replicator_records_skipped_total{reason="loop"}',
                    loop=skipped[Marking.LOOP],
                )
        elif skipped:
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
