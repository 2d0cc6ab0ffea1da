"""Preparing a partition's destination and resuming after what it holds.

Before a partition's first batch, and again after a replay, its sender makes the destination
topic ready (:class:`TopicPreparer`: created, grown, its ``max.message.bytes`` learnt) and reads
the destination partition's tail (:mod:`replicator.replication.resume`). :func:`read_destination`
does both and returns a :class:`Prepared` value; nothing of the partition changes while it runs
(it is retried as a whole). :class:`Resumption` then decides what the value means for the
partition and applies it through the partition's named transitions: continue after the last
record of this origin the destination holds, count what a replay repeats, or say that the
destination lost records (a :class:`Loss`, which the sender replays, :mod:`replicator.replication.
replay`).

A flow placing records by key (it does not preserve partition numbers) reads, instead of one
tail, the source offsets every destination partition already holds (:class:`Placement`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from replicator.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ClusterUnavailable,
    ReplicatorError,
    Stopped,
    TopicMismatch,
    TopicNotListedYet,
)
from replicator.kafka.retry import Backoff, retrying
from replicator.kafka.translation import denial, said
from replicator.lifecycle import unless_stopped
from replicator.model.batching import Placement
from replicator.replication.destination import Destination
from replicator.replication.partition import LegPartition
from replicator.replication.resume import Tail, destination_lost, rolled_back_to
from replicator.replication.sending import LegSending
from replicator.replication.states import Halt, Mode


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the destination said before a partition's first batch (or a replay's)."""

    limit: int | None  # the destination topic's max.message.bytes, if known
    partitions: int  # the destination topic's partition count
    tail: Tail | None = None  # where to resume (partition numbers preserved)
    mark: int | None = None  # the mark the tail was read from (in memory, else saved)
    covers: int | None = None  # the source offset that mark was reached with
    placement: Placement | None = None  # placed by key: what every partition holds


@dataclass(frozen=True, slots=True)
class Loss:
    """The destination partition lost records this leg delivered: replay, from ``begin`` (0:
    the source log start; later: a log rolled back still holds the origin's records before it)."""

    cause: str
    begin: int = 0


@dataclass(frozen=True, slots=True)
class Ready:
    """The partition may send: batches to ``limit`` bytes (placed by ``placement``, if by key);
    first replaying ``loss``, if the destination lost what was delivered."""

    limit: int | None
    placement: Placement | None
    loss: Loss | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The destination topic cannot take the partition: it halts as ``kind``."""

    reason: str
    kind: Halt


REPLACED = "destination partition replaced (topic deleted and created again)"
_RETRY_BACKOFF_S = 0.5


def tail_error(
    exc: Exception, destination: str, topic: str, marks: str | None = None
) -> ReplicatorError:
    """A failed read of where to resume: retried (a read). Credentials refused or an ACL
    denying it (naming what: the tail is read with Read on the topic, the destination marks
    with Describe on the leg's ``.resume`` group) wait for an operator."""
    error = denial(exc, destination, topic=("Read", topic), group=("Describe", marks))
    if isinstance(error, AuthorizationFailed):
        return AuthorizationFailed(f"reading where to resume: {error}", named=error.named)
    if isinstance(error, AuthenticationFailed):
        return AuthenticationFailed(f"reading where to resume in {destination}: {error}")
    return ClusterUnavailable(f"reading where to resume: {error}")


def waits_for_operator(error: ReplicatorError) -> bool:
    """Refusals an operator ends (a grant, credentials fixed): retried slowly, not halted."""
    return isinstance(error, (AuthenticationFailed, AuthorizationFailed))


async def read_destination(
    sending: LegSending, partition: LegPartition, replaying: bool
) -> Prepared:
    """Wait for the destination, ensure its topic, and read where the partition resumes (when
    it starts, or replays); nothing of the partition changes, so a failure is retried whole."""
    destination, topics = sending.destination, sending.topics
    await destination.ready.wait()
    topic = await topics.ensure(partition.tp.topic, partition.target_topic, partition.tp.partition)
    await destination.learn_partitions(partition.target_topic, topic.partitions)
    limit, count = topic.max_message_bytes, topic.partitions
    reading = partition.mode is Mode.STARTING or replaying
    try:
        async with sending.tail_reads:
            return await _read(sending, partition, reading, replaying, Prepared(limit, count))
    except Exception as exc:
        cluster = sending.leg.destination
        raise tail_error(exc, cluster, partition.target_topic, sending.marks_group) from exc


async def _read(
    sending: LegSending,
    partition: LegPartition,
    reading: bool,
    replaying: bool,
    prepared: Prepared,
) -> Prepared:
    destination, limit, count = sending.destination, prepared.limit, prepared.partitions
    if not sending.preserve_partitions:
        # Placed by key, whatever the counts: as MirrorMaker 1 does without
        # --preserve.partitions, and one way of resuming for the partition's whole life.
        written = await _written(destination, partition, count) if reading else frozenset()
        return Prepared(limit, count, placement=Placement(count, written))
    if not reading:
        return prepared
    return await _tail(destination, partition, replaying, prepared)


async def _written(
    destination: Destination, partition: LegPartition, partitions: int
) -> frozenset[int]:
    """Placed by key: the source offsets from the position on that are written."""
    position = partition.position or 0
    written: set[int] = set()
    for number in range(partitions):
        found, _ = await destination.tail.written_since(
            TopicPartition(partition.target_topic, number), partition.tagger, position
        )
        written |= found
    return frozenset(written)


async def _tail(
    destination: Destination, partition: LegPartition, replaying: bool, prepared: Prepared
) -> Prepared:
    """Where to resume (the last record of this origin the destination holds)."""
    destination_tp = TopicPartition(partition.target_topic, partition.tp.partition)
    floor = None if replaying else partition.destination_mark
    covers = partition.position  # an in-memory mark covers the committable prefix
    # A partition the leg never committed has no mark of its own to read (a mark is saved after
    # the offsets it goes with): not asked, so a first start does not wait for the
    # destination's group coordinator.
    committed = partition.committed_start is not None or partition.tracker is not None
    if floor is None and not replaying and committed:
        saved = await destination.tail.saved_mark(destination_tp, partition.position)
        if saved is not None:
            floor, covers = saved
    tail = await destination.tail.last_written(
        destination_tp, partition.tagger, floor, partition.position, whole=replaying
    )
    return Prepared(prepared.limit, prepared.partitions, tail, floor, covers)


class Resumption:
    """What the destination says before a partition's batches, applied to the partition."""

    __slots__ = ("_partition", "_sending")

    def __init__(self, sending: LegSending, partition: LegPartition) -> None:
        self._sending = sending
        self._partition = partition

    async def prepare(self, replay_start: int | None, log: Any) -> Ready | Refused | None:
        """Read the destination (retried until it answers, or the partition closes: ``None``)
        and resume after what it holds; run before the first batch, and again after a replay
        (the topic was deleted) with the source offset it starts at (``replay_start``)."""
        partition, sending = self._partition, self._sending
        replaying = replay_start is not None
        # A partition new to this replica: read once no previous owner can still write it.
        if not await sending.ownership.settled(partition.tp, partition.closed):
            return None

        async def read() -> Prepared:
            return await read_destination(sending, partition, replaying)

        def not_ready(error: ReplicatorError) -> None:
            partition.report(f"destination not ready: {error}")

        reading = retrying(
            read,
            stop=partition.closed,
            what="prepare the destination topic",
            log=log,
            on_error=not_ready,
            persistent=waits_for_operator,
            backoff=Backoff(base=_RETRY_BACKOFF_S, ceiling=_RETRY_BACKOFF_S * 8),
            expected=lambda error: isinstance(error, TopicNotListedYet),
            shared=sending.preparing_warnings,
        )
        try:
            prepared = await unless_stopped(reading, partition.closed)
        except Stopped:
            return None  # released while the destination was still down
        except TopicMismatch as error:
            return Refused(str(error), Halt.BLOCKED)
        except Exception as error:
            return Refused(f"destination topic refused: {error}", Halt.FAILED)
        if prepared is None or not partition.open:
            return None
        loss = await self.apply(prepared, replay_start, log)
        return Ready(prepared.limit, prepared.placement, loss)

    async def apply(self, prepared: Prepared, replay_start: int | None, log: Any) -> Loss | None:
        """Resume the partition after what the destination holds (or, replaying from
        ``replay_start``, count what it repeats); the :class:`Loss` to replay, if the
        destination lost records this leg delivered (nothing is applied then)."""
        partition = self._partition
        tail, mark = prepared.tail, prepared.mark
        replaying = replay_start is not None
        if tail is not None and not replaying:
            tracker = partition.tracker
            committed = partition.committed_start if tracker is None else tracker.committed
            lost = destination_lost(tail, mark, committed)
            if lost is not None:
                begin = await self._rolled_back(prepared.covers, log)
                cause = f"destination partition lost records: {lost}"
                if begin:
                    cause += (
                        f"; it still holds this origin's records before source offset {begin} "
                        "(its log was rolled back)"
                    )
                return Loss(cause, begin)
        if tail is not None:
            log_start = None
            found, position = tail.origin_offset, partition.position
            below = found is not None and position is not None and found + 1 < position
            if not replaying and (tail.foreign or below):
                # Only a replay from the source log start moves a partition back.
                try:
                    log_start = await self._sending.source.log_start(partition.tp)
                except Exception as exc:  # unknown: nothing moves back
                    log.warning(
                        "source log start unknown: the partition is not moved back",
                        error=said(exc),
                    )
            if replaying:
                self._replayed(tail, replay_start, log)
            else:
                self._resumed(tail, log_start, mark is not None, log)
        placement = prepared.placement
        if placement is not None and not replaying:
            partition.resumed_placed(placement.written)
            if partition.placement is None:
                log.info(
                    "records placed by key (the flow does not preserve partition numbers)",
                    destination_partitions=placement.partitions,
                    already_written=len(placement.written),
                )
        return None

    async def _rolled_back(self, covers: int | None, log: Any) -> int:
        """Where a destination partition that lost records still holds every record of this
        origin before (:func:`rolled_back_to`), read below the mark it fell under; 0 (replay
        from the source log start) for a replaced log, or when that cannot be read."""
        partition = self._partition
        tp = TopicPartition(partition.target_topic, partition.tp.partition)
        try:
            tail = await self._sending.destination.tail.last_written(
                tp, partition.tagger, None, partition.position
            )
        except Exception as exc:
            log.warning("could not read below the lost mark; replaying", error=repr(exc))
            return 0
        return rolled_back_to(tail, covers) or 0

    def _replayed(self, tail: Tail, replay_start: int | None, log: Any) -> None:
        """Replaying from ``replay_start``: count what the replaced log repeats."""
        partition = self._partition
        self._sending.metrics.resume_seconds.labels(self._sending.leg.name).observe(tail.seconds)
        partition.replay_from_mark(tail.log_end)
        # What it holds of the origin before the replay's start (a rolled-back log) is not
        # written again; records at or past it are (counted with any before them).
        last = tail.origin_offset
        if (
            tail.origin_records
            and last is not None
            and replay_start is not None
            and last >= replay_start
        ):
            self._sending.duplicates.written(
                partition.target_topic, tail.origin_records, "destination_replaced"
            )
            log.error(
                "the replaced destination partition already held records of this origin "
                "(written between its deletion and its detection): the replay writes them "
                "again",
                duplicates=tail.origin_records,
            )

    def _resumed(self, tail: Tail, log_start: int | None, mark_saved: bool, log: Any) -> None:
        """Continue after what the destination holds; ``log_start``: the source log start,
        asked when the tail holds records of the origin below the position or out of order
        (see :func:`resume_after`); ``mark_saved``: a mark was saved for this partition (else
        the first commit saves one)."""
        partition = self._partition
        leg, target, metrics = self._sending.leg.name, partition.target_topic, self._sending.metrics
        metrics.resume_seconds.labels(leg).observe(tail.seconds)
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
            metrics.resume_ignored.labels(leg, target).inc()
            log.warning(
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
            self._sending.duplicates.possible(target, last + 1 - before, "past_a_gap")
            log.warning(
                "the destination holds records of this origin that do not follow the "
                "committed offset (a gap before them): resuming at the committed offset; "
                "those records may be written again",
                committed=before,
                first_found=tail.lowest,
                last_found=tail.origin_offset,
            )
        if skipped > 0:
            metrics.resume_skipped.labels(leg, target).inc(skipped)
        tp = partition.tp
        self._sending.resumptions.resumed(f"{tp.topic}[{tp.partition}]", skipped, tail.seconds)
        if skipped or tail.seconds > 1.0:  # said for the leg by its health, once
            log.debug(
                "resumed after the last record the destination holds",
                committed=before,
                resume_at=partition.position,
                already_written=skipped,
                scanned=tail.scanned,
                seconds=round(tail.seconds, 3),
            )
