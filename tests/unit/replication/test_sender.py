"""The sender's decisions, without a broker: a real :class:`LegPartition`, real batches and
provenance, and an in-memory destination behind the sender's seam
(``tests/unit/replication/destinations.py``).

Each test feeds source records as the shared feed does, lets the destination write, refuse, lose
an answer or lose its log, and checks what the destination holds record by record (by origin
offset), what the partition acknowledged, and what was counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from replicator import clock
from replicator.config.topology import Leg
from replicator.config.values import OffsetResetPolicy
from replicator.errors import AuthorizationFailed, OutcomeUnknown, RecordRefused, TopicMismatch
from replicator.model.offsets import OutOfRange
from replicator.model.records import SourceRecord
from replicator.replication.accounting import Duplicates
from replicator.replication.committer import Committer
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import LegPartition
from replicator.replication.preparing import read_destination
from replicator.replication.resume import Tail
from replicator.replication.sender import PartitionSender
from replicator.replication.sending import LegSending
from replicator.replication.states import Halt, Mode
from replicator.telemetry.metrics import Metrics
from tests.unit.replication.destinations import (
    MemoryCommits,
    MemoryDeadLetters,
    MemoryDestination,
    MemoryTopics,
    Outcome,
    Stored,
)
from tests.unit.sample import Record
from tests.unit.waiting import until

SOURCE = TopicPartition("orders_REPLICA", 0)
TARGET = TopicPartition("orders", 0)
LEG = Leg("dc1", "dc2")
DENIED = AuthorizationFailed("TopicAuthorizationFailedError: denied by the cluster's ACLs")


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, {"leg": LEG.name, **labels})
    return 0.0 if found is None else found


@dataclass
class Rig:
    """One partition's sender against a memory destination."""

    destination: MemoryDestination = field(default_factory=MemoryDestination)
    topics: MemoryTopics = field(default_factory=MemoryTopics)
    dead_letters: MemoryDeadLetters | None = None
    metrics: Metrics = field(default_factory=Metrics)
    duplicates: Duplicates = field(init=False)
    source_log_start: int = 0  # the source log's first offset
    position: int | None = 0
    preserve_partitions: bool = True
    commits: MemoryCommits = field(default_factory=MemoryCommits)
    partition: LegPartition = field(init=False)
    sender: PartitionSender = field(init=False)
    task: asyncio.Task[None] | None = None
    committing: asyncio.Task[None] | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.duplicates = Duplicates(LEG.name, self.metrics)
        self.build()

    def build(self) -> None:
        """A new owner of the partition (a restart, a rebalance), at the committed position."""
        self.partition = LegPartition(
            SOURCE, "orders", "dc1", self.position, 10_000, 1 << 22, committed=True
        )

        async def save_marks(marks: dict[TopicPartition, tuple[int, int]]) -> None:
            self.destination.marks.update({tp: mark for tp, (mark, _) in marks.items()})
            self.destination.covers.update({tp: offset for tp, (_, offset) in marks.items()})

        self.committer = Committer(LEG.name, self.commits, self.metrics, 1.0, save_marks)
        self.partition.owe_commits_to(self.committer.due)
        sending = LegSending(
            LEG,
            self.destination,
            self.topics,
            self.metrics,
            self,  # the source log: log_start() and outside() below
            self.duplicates,
            self.dead_letters,
            self.preserve_partitions,
            OffsetResets(LEG.name, OffsetResetPolicy.EARLIEST, self.metrics),
        )
        self.sender = PartitionSender(sending, self.partition)

    async def log_start(self, tp: TopicPartition) -> int:
        return self.source_log_start

    async def outside(self, tp: TopicPartition, position: int) -> OutOfRange | None:
        return None  # the source log holds every position asked

    async def start(self) -> None:
        self.stopping = asyncio.Event()
        partitions = {SOURCE: self.partition}
        self.committing = asyncio.create_task(self.committer.run(self.stopping, partitions, 0.01))
        self.task = asyncio.create_task(self.sender.run())
        await until(lambda: self.partition.mode is not Mode.STARTING or not self.partition.open)

    def feed(self, first: int, end: int, value: bytes = b"v" * 10) -> None:
        """Records ``[first, end)`` from the shared feed."""
        assert self.partition.position == first, (self.partition.position, first)
        records: list[SourceRecord] = [Record(o, value=value) for o in range(first, end)]
        self.partition.take_chunk(records, end, 0)

    def held(self) -> list[int]:
        """The origin offsets the destination holds of this partition, in log order."""
        return self.destination.origins(TARGET, self.partition.tagger)

    @property
    def committable(self) -> int | None:
        tracker = self.partition.tracker
        return None if tracker is None else tracker.committable

    @property
    def committed(self) -> int | None:
        """The leg's committed offset of the partition."""
        return self.commits.offsets.get(SOURCE)

    async def stop(self) -> None:
        self.partition.stop()
        self.stopping.set()
        for task in (self.task, self.committing):
            if task is not None:
                await asyncio.wait_for(task, 5)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    made = Rig()
    yield made
    await made.stop()


async def test_records_arrive_in_order_tagged_and_acknowledged(rig: Rig) -> None:
    await rig.start()
    rig.feed(0, 50)
    rig.feed(50, 120)
    await until(lambda: rig.committable == 120)
    assert rig.held() == list(range(120))
    assert sample(rig.metrics, "replicator_records_replicated_total", topic="orders") == 120
    assert rig.partition.mode is Mode.ATTACHED and not rig.partition.last_error


async def test_a_start_resumes_after_what_the_destination_holds(rig: Rig) -> None:
    """A previous owner wrote 0-79 and committed 40 (its last commit before a crash): the next
    owner starts at 40, finds 40-79 in the destination and writes nothing twice."""
    await rig.start()
    rig.feed(0, 40)
    await until(lambda: rig.committed == 40)
    rig.stopping.set()  # no commit after this one: the crash
    rig.feed(40, 80)
    await until(lambda: rig.committable == 80)
    await rig.stop()
    assert rig.committed == 40
    rig.position = rig.committed
    rig.build()
    await rig.start()
    assert rig.partition.position == 80
    assert rig.partition.skipped_at_resume == 40
    rig.feed(80, 100)
    await until(lambda: rig.committable == 100)
    assert rig.held() == list(range(100))


@pytest.mark.parametrize(
    "answer",
    [
        # As the destination says them (tests/unit/kafka/test_producer.py: which answers).
        OutcomeUnknown("a batch's outcome is unknown (KafkaConnectionError)"),
        OutcomeUnknown("a batch's outcome is unknown (RequestTimedOutError)"),
        # Written, then answered with an error (the partition lost its leader meanwhile).
        OutcomeUnknown("a batch's outcome is unknown (NotLeaderForPartitionError)"),
    ],
)
async def test_an_unknown_outcome_resumes_from_the_tail_without_a_duplicate(
    rig: Rig, answer: OutcomeUnknown
) -> None:
    """A batch written but never answered, or answered with an error a broker gives after the
    append: the partition restarts, reads the destination, and goes on after what landed; the
    records fed meanwhile come again from the feed."""
    await rig.start()
    rig.feed(0, 30)
    await until(lambda: rig.committable == 30)
    rig.destination.outcomes = [Outcome(writes=True, error=answer)]
    rig.feed(30, 60)
    await until(lambda: rig.partition.mode is not Mode.STARTING and rig.partition.position == 60)
    rig.feed(60, 90)
    await until(lambda: rig.committable == 90)
    assert rig.held() == list(range(90)), "each record exactly once, in order"
    assert TARGET in rig.destination.unfenced
    assert sample(
        rig.metrics, "replicator_send_errors_total", topic="orders", error="OutcomeUnknown"
    )
    assert rig.duplicates.total() == 0


async def test_a_batch_lost_with_its_answer_is_sent_again(rig: Rig) -> None:
    """Not written and not answered: the resume finds it missing and the feed sends it again."""
    await rig.start()
    rig.feed(0, 30)
    await until(lambda: rig.committable == 30)
    rig.destination.outcomes = [Outcome(writes=False, error=OutcomeUnknown("no answer"))]
    rig.feed(30, 60)
    await until(lambda: rig.partition.mode is not Mode.STARTING and rig.partition.position == 30)
    rig.feed(30, 60)
    await until(lambda: rig.committable == 60)
    assert rig.held() == list(range(60))


async def test_answers_of_an_abandoned_epoch_acknowledge_nothing(rig: Rig) -> None:
    """Batches in flight when the partition restarts: their late answers do not move the new
    tracker, and what they wrote is found by the resume, not written again."""
    await rig.start()
    rig.destination.hold()
    rig.feed(0, 40)
    await until(lambda: rig.destination.sends == 1)
    old = rig.partition.tracker
    assert rig.partition.restart("test: outcome unknown")
    rig.destination.release()
    await until(lambda: rig.partition.mode is not Mode.STARTING)
    assert rig.partition.tracker is not old
    assert rig.partition.position == 40  # resumed after the batch that landed meanwhile
    rig.feed(40, 50)
    await until(lambda: rig.committable == 50)
    assert rig.held() == list(range(50))


async def test_a_refused_batch_halts_the_partition_and_nothing_after_it_is_sent(
    rig: Rig,
) -> None:
    await rig.start()
    rig.feed(0, 10)
    await until(lambda: rig.committable == 10)
    rig.destination.outcomes = [Outcome(writes=False, error=RecordRefused("PolicyViolationError"))]
    rig.feed(10, 20)
    await until(lambda: rig.partition.halted)
    assert rig.partition.halt_kind is Halt.FAILED
    assert "destination refused a batch" in (rig.partition.last_error or "")
    assert rig.committable == 10 and rig.held() == list(range(10))


async def test_a_denied_write_waits_says_why_and_goes_on_once_granted(rig: Rig) -> None:
    """An ACL denying the write is an operator's to fix, at any time: the partition is not
    halted; it names the denial, waits (2 s, then 4 s...), reads the destination again and
    takes the records from the feed again, and once the write is allowed every record is
    there once."""
    await rig.start()
    rig.feed(0, 10)
    await until(lambda: rig.committable == 10)
    rig.destination.outcomes = [Outcome(writes=False, error=DENIED)]
    rig.feed(10, 20)
    await until(lambda: "denied the write" in (rig.partition.last_error or ""))
    assert not rig.partition.halted and rig.partition.mode is Mode.STARTING
    assert sample(
        rig.metrics,
        "replicator_send_errors_total",
        topic="orders",
        error="AuthorizationFailed",
    )
    await until(lambda: rig.partition.mode is not Mode.STARTING, timeout=10)
    rig.feed(10, 20)  # the feed hands the records again from the position
    await until(lambda: rig.committable == 20)
    assert rig.held() == list(range(20)), "each record exactly once, in order"


async def test_a_destination_topic_with_too_few_partitions_blocks_the_partition() -> None:
    made = Rig(topics=MemoryTopics(refusal=TopicMismatch("orders: 1 partition, 3 needed")))
    await made.start()
    assert made.partition.halted and made.partition.halt_kind is Halt.BLOCKED
    assert "3 needed" in (made.partition.last_error or "")
    assert made.destination.sends == 0


async def test_an_oversized_record_halts_under_the_halt_policy() -> None:
    made = Rig(topics=MemoryTopics(max_message_bytes=500))
    await made.start()
    made.feed(0, 5)
    await until(lambda: made.committable == 5)
    made.feed(5, 6, value=b"x" * 2_000)
    await until(lambda: made.partition.halted)
    assert "REPLICATOR_RECORD_TOO_LARGE_POLICY=halt" in (made.partition.last_error or "")
    assert made.held() == list(range(5)) and made.committable == 5
    await made.stop()


async def test_an_oversized_record_is_parked_and_the_partition_goes_on() -> None:
    made = Rig(topics=MemoryTopics(max_message_bytes=500), dead_letters=MemoryDeadLetters())
    await made.start()
    made.feed(0, 5)
    made.feed(5, 6, value=b"x" * 2_000)
    made.feed(6, 10)
    await until(lambda: made.committable == 10)
    assert made.held() == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert made.dead_letters is not None
    ((record, destination, reason),) = made.dead_letters.parked
    assert record.value == b"x" * 2_000 and destination == "dc2/orders"
    assert "accepts 500" in reason and made.partition.dead_lettered == 1
    assert sample(made.metrics, "replicator_records_dead_lettered_total", topic="orders") == 1
    await made.stop()


async def test_a_replaced_destination_partition_is_replayed_from_the_source_log_start(
    rig: Rig,
) -> None:
    """The destination lost its log (deleted and created again): an acknowledgement below the
    last one shows it; the partition replays from the source's log start."""
    await rig.start()
    rig.feed(0, 40)
    await until(lambda: rig.committable == 40)
    rig.destination.replace(TARGET)
    rig.feed(40, 50)  # written at offset 0 of the new log: below what it acknowledged
    await until(lambda: rig.partition.mode is Mode.REPLAYING)
    assert rig.partition.position == 0
    # Everything acknowledged is replayed, the 10 records that reached the new log before the
    # loss was seen included: they are written twice, and counted so, once the replay has read
    # the new log's tail (after it turned to REPLAYING: waited for, not raced).
    assert sample(rig.metrics, "replicator_records_replayed_total", topic="orders") == 50
    await until(lambda: rig.duplicates["written_destination_replaced"] > 0)
    assert rig.duplicates["written_destination_replaced"] == 10
    written = "replicator_duplicates_written_total"
    assert sample(rig.metrics, written, topic="orders", reason="destination_replaced") == 10
    assert rig.topics.forgotten == ["orders"]
    # The replay's position (0) is committed before anything is sent again: a restart replays.
    await until(lambda: rig.committed == 0)
    rig.feed(0, 50)  # the replay, fed from the source log start
    await until(lambda: rig.committed == 50)
    assert rig.held() == list(range(40, 50)) + list(range(50))


async def test_a_rolled_back_destination_is_refilled_from_where_it_still_holds(
    rig: Rig,
) -> None:
    """While the leg was away, the destination partition's log rolled back to an earlier end
    (an unclean leader election, a restore from an older copy): below the mark saved with the
    committed offset. The new owner reads below the mark, finds the origin's records 0-29 in
    order, all before the offset the mark covers, and replays from 30: nothing the destination
    still holds is written twice; the 30 records it lost are counted as replayed."""
    await rig.start()
    rig.feed(0, 60)
    await until(lambda: rig.committed == 60 and rig.destination.covers.get(TARGET) == 60)
    await rig.stop()
    rig.destination.roll_back(TARGET, 30)
    rig.position = rig.committed
    rig.build()
    await rig.start()
    await until(lambda: rig.partition.mode is Mode.REPLAYING)
    assert rig.partition.position == 30
    assert sample(rig.metrics, "replicator_records_replayed_total", topic="orders") == 30
    assert "rolled back" in (rig.partition.last_error or "")
    await until(lambda: rig.committed == 30)  # the replay's start saved before sending
    rig.feed(30, 70)
    await until(lambda: rig.committed == 70)
    assert rig.held() == list(range(70)), "each record once, in order"
    assert rig.duplicates.total() == 0


async def test_a_lost_log_holding_only_records_past_the_mark_is_replayed_from_the_start(
    rig: Rig,
) -> None:
    """A log that fell below the mark but whose records of the origin all come at or after
    the offset the mark covers was replaced, not rolled back (the records before are not in
    it): replayed from the source log start, the records it held counted as written twice."""
    await rig.start()
    rig.feed(0, 40)
    await until(lambda: rig.committed == 40 and rig.destination.covers.get(TARGET) == 40)
    await rig.stop()
    # Replaced while the leg was away; 40-44 reached the new log (an old owner's last batch).
    tag = rig.partition.tagger.tag
    headers = [tuple((k, v or b"") for k, v in tag([], 40 + i)) for i in range(5)]
    rig.destination.logs[TARGET] = [Stored(i, None, b"v", h) for i, h in enumerate(headers)]
    rig.position = rig.committed
    rig.build()
    await rig.start()
    await until(lambda: rig.partition.mode is Mode.REPLAYING)
    assert rig.partition.position == 0
    # Counted once the replay has read the log's tail, a step after REPLAYING: waited for.
    await until(lambda: rig.duplicates["written_destination_replaced"] > 0)
    assert rig.duplicates["written_destination_replaced"] == 5


async def test_stop_while_batches_are_in_flight_ends_the_sender_and_counts_them(
    rig: Rig,
) -> None:
    """A rebalance takes the partition while its batches are unanswered: drain waits, then
    counts them as possible duplicates (the next owner may resume before they land)."""
    await rig.start()
    rig.destination.hold()
    rig.feed(0, 25)
    await until(lambda: rig.destination.sends == 1)
    await rig.sender.drain(timeout=0.05, handed_over=True)
    assert rig.duplicates["possible_unacknowledged_at_release"] == 25
    await rig.stop()
    assert rig.task is not None and rig.task.done() and rig.task.exception() is None
    rig.destination.release()
    assert rig.committable in (None, 0)  # a stopped partition acknowledges nothing more


async def test_a_halted_partition_is_left_unfenced_for_others_placed_by_key() -> None:
    """Placed by key, several source partitions write to the same destination partitions: a
    halt must not leave them fenced."""
    made = Rig(topics=MemoryTopics(partitions=3), preserve_partitions=False)
    await made.start()
    made.destination.outcomes = [Outcome(writes=False, error=RecordRefused("PolicyViolationError"))]
    made.feed(0, 1)
    await until(lambda: made.partition.halted)
    assert {tp.partition for tp in made.destination.unfenced} >= {0, 1, 2}
    assert not made.destination.fenced
    await made.stop()


class SlowTails(MemoryDestination):
    """A destination answering tail reads after ``delay`` seconds, counting those waiting."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.reading = 0
        self.most = 0

    async def last_written(self, tp: TopicPartition, *args: Any, **kwargs: Any) -> Tail:
        self.reading += 1
        self.most = max(self.most, self.reading)
        try:
            await asyncio.sleep(self.delay)
            return await super().last_written(tp, *args, **kwargs)
        finally:
            self.reading -= 1


async def test_a_legs_partitions_read_their_destination_tails_a_wave_at_a_time() -> None:
    """Thousands of partitions starting at once must not all wait on the destination together
    (their reads timed out and were asked again): at most ``tail_reads`` read at once, the
    others start as those finish, and every one resumes."""
    metrics = Metrics()
    destination = SlowTails(delay=1.0)
    sending = LegSending(
        LEG,
        destination,
        MemoryTopics(),
        metrics,
        Rig(),
        Duplicates(LEG.name, metrics),
        tail_reads=asyncio.Semaphore(4),
    )
    partitions = [
        LegPartition(TopicPartition("orders_REPLICA", n), "orders", "dc1", 0, 10, 1 << 20)
        for n in range(10)
    ]
    began = clock.monotonic()
    prepared = await asyncio.gather(*(read_destination(sending, p, False) for p in partitions))
    assert destination.most == 4
    assert clock.monotonic() - began == 3.0  # waves of 4, 4 and 2, a second each
    assert all(p.tail is not None for p in prepared) and len(prepared) == 10
