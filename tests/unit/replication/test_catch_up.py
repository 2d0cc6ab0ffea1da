"""The catch-up fetch's decisions, without a broker: real :class:`LegPartition`\\ s, the leg's
offset-reset policy, and source logs in memory behind the fetch's seam
(:class:`~replicator.kafka.testing.MemorySource`).

Each test runs :meth:`CatchUpFetch.run` as the leg does, on fake loop time, and checks record by
record what each partition queued (by source offset, exactly once, in order), which positions the
source was asked to fetch from, and what was counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiokafka import TopicPartition

from replicator.config.values import OffsetResetPolicy
from replicator.errors import ClusterUnavailable
from replicator.kafka.decoding import Poison, undecodable_reason
from replicator.kafka.testing import MemorySource
from replicator.lifecycle import IdleWait
from replicator.model.records import SourceRecord
from replicator.replication.catch_up import CatchUpFetch
from replicator.replication.fetch_round import FETCH_TIMEOUT_MS
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import LegPartition
from replicator.replication.states import Mode, Work
from replicator.telemetry.metrics import Metrics
from tests.unit.replication.test_partition import gaps, offsets, partition, queued, ranges
from tests.unit.sample import Record
from tests.unit.waiting import until

LEG = "dc1->dc2"
TP = TopicPartition("orders_REPLICA", 0)
OTHER = TopicPartition("orders_REPLICA", 1)


def log(first: int, end: int) -> list[SourceRecord]:
    """Source records at every offset of ``[first, end)``."""
    return [Record(o) for o in range(first, end)]


def delivered(works: list[Work]) -> list[int]:
    """The source offsets ``works`` deliver, in queue order."""
    return [o for work in works for o in offsets(work)]


@dataclass
class Rig:
    """One leg's catch-up fetch over ``source`` for ``partitions``, wired as the leg wires it."""

    source: MemorySource
    partitions: dict[TopicPartition, LegPartition]
    policy: OffsetResetPolicy = OffsetResetPolicy.EARLIEST
    metrics: Metrics = field(default_factory=Metrics)
    resets: OffsetResets = field(init=False)
    fetch: CatchUpFetch = field(init=False)

    def __post_init__(self) -> None:
        self.resets = OffsetResets(LEG, self.policy, self.metrics)
        self.fetch = CatchUpFetch(LEG, lambda: self.source, self.partitions, self.resets)
        for each in self.partitions.values():
            each.watch(self.fetch.changed)

    def counted(self, name: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(name, {"leg": LEG, **labels})
        return 0.0 if found is None else found


@asynccontextmanager
async def running(rig: Rig, idle: IdleWait | None = None) -> AsyncIterator[None]:
    """The catch-up fetch running (as the leg's task) for the duration of the block."""
    stop = asyncio.Event()
    task = asyncio.create_task(rig.fetch.run(stop, idle))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_partition_fed_alone_is_fetched_from_its_position_and_queued_once_in_order() -> (
    None
):
    source = MemorySource({TP: log(0, 30)}, per_fetch=7)
    alone = partition(10, Mode.ALONE, max_records=1000)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.position == 30)
        await asyncio.sleep(1)
        assert delivered(queued(alone)) == list(range(10, 30))
        asked = source.fetches_of(TP)
        assert asked[:3] == [10, 17, 24]  # 7 records a fetch, from where it stands
        assert asked[3:] == [30] * 5  # then at the log end, 200 ms a fetch waiting for more
        source.append(TP, log(30, 35))
        await until(lambda: alone.position == 35)
        assert delivered(queued(alone)) == list(range(30, 35))
        assert rig.fetch.last_error is None


async def test_a_partition_attached_to_the_shared_feed_is_paused_and_never_fetched() -> None:
    source = MemorySource({TP: log(0, 20), OTHER: log(0, 20)})
    alone = partition(0, Mode.ALONE)
    attached = partition(0, Mode.ATTACHED, tp=OTHER)
    rig = Rig(source, {TP: alone, OTHER: attached})
    async with running(rig):
        await until(lambda: alone.position == 20)
        await asyncio.sleep(5)
        assert source.fetches_of(OTHER) == []
        assert OTHER in source.paused() and TP not in source.paused()
        assert attached.position == 0 and attached.queued_records == 0
        assert delivered(queued(alone)) == list(range(20))

        attached.detach()  # behind the feed: now the catch-up fetch's
        await until(lambda: attached.position == 20)
        assert source.fetches_of(OTHER)[0] == 0
        assert delivered(queued(attached)) == list(range(20))


async def test_a_full_partition_is_not_fetched_until_it_has_room() -> None:
    source = MemorySource({TP: log(0, 30)}, per_fetch=4)
    alone = partition(0, Mode.ALONE, max_records=10)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: not alone.has_room)
        await asyncio.sleep(60)  # nothing is fetched while it is full, however long
        assert source.fetches_of(TP) == [0, 4, 8]
        assert alone.position == 12 and TP in source.paused()
        first = delivered(queued(alone))  # the sender made room

        await until(lambda: not alone.has_room)
        await asyncio.sleep(60)
        assert source.fetches_of(TP) == [0, 4, 8, 12, 16, 20]
        second = delivered(queued(alone))

        await until(lambda: alone.position == 30)
        third = delivered(queued(alone))
    assert first == list(range(12)) and second == list(range(12, 24))
    assert first + second + third == list(range(30))


async def test_a_fetch_that_leaves_a_gap_is_refused_and_fetched_again_from_the_position() -> None:
    """The partition moved back (a replay) while a fetch from further on was in flight: what it
    brought is refused, and the partition is fetched again from where it stands."""
    source = MemorySource({TP: log(0, 10)}, per_fetch=5)
    alone = partition(0, Mode.ALONE, max_records=1000)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.position == 10)
        source.hold()
        await until(lambda: source.holding == 1)  # the next fetch, from 10, is in flight
        before = len(source.fetches_of(TP))
        alone.rewind(4, "the destination lost its log")
        source.append(TP, log(10, 40))
        source.release()
        await until(lambda: alone.position == 40)
        assert source.fetches_of(TP)[before : before + 3] == [10, 4, 9]
        assert delivered(queued(alone)) == list(range(4, 40))  # the replay, once, in order


@pytest.mark.parametrize(
    ("moved_to", "asked_next"),
    [
        (13, 15),  # into the fetched range: the records past the position are kept
        (20, 20),  # past it: nothing kept, fetched again from the position
    ],
)
async def test_a_fetch_overlapping_the_position_queues_nothing_twice(
    moved_to: int, asked_next: int
) -> None:
    """The partition moved forward (records lost at the source) while a fetch of ``[10, 15)``
    was in flight: no record before the position is queued, none twice, none skipped after it."""
    source = MemorySource({TP: log(0, 10)}, per_fetch=5)
    alone = partition(0, Mode.ALONE, max_records=1000)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.position == 10)
        source.hold()
        await until(lambda: source.holding == 1)
        before = len(source.fetches_of(TP))
        alone.skip_to(moved_to, "deleted at the source")
        source.append(TP, log(10, 40))
        source.release()
        await until(lambda: alone.position == 40)
        assert source.fetches_of(TP)[before : before + 2] == [10, asked_next]
        works = queued(alone)
    assert delivered(works) == [*range(10), *range(moved_to, 40)]
    assert [g for w in works for g in gaps(w)] == [(10, moved_to)]


async def test_a_position_below_the_log_start_skips_to_it_and_counts_the_loss() -> None:
    source = MemorySource({TP: log(0, 30)})
    source.delete_before(TP, 10)
    alone = partition(4, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.position == 30)
        works = queued(alone)
    assert source.fetches_of(TP)[:2] == [4, 10]
    assert delivered(works) == list(range(10, 30))
    assert [g for w in works for g in gaps(w)] == [(4, 10)]  # committed past the loss, in order
    assert rig.counted("replicator_offset_resets_total", topic="orders", reason="below_log_start")
    assert rig.counted("replicator_records_lost_total", topic="orders") == 6
    (reset,) = rig.resets.recent
    assert (reset["position"], reset["log_start"], reset["records_lost"]) == (4, 10, 6)
    assert alone.last_error is not None and "6 records lost" in alone.last_error


async def test_a_position_below_the_log_start_halts_the_partition_under_the_halt_policy() -> None:
    source = MemorySource({TP: log(0, 30)})
    source.delete_before(TP, 10)
    alone = partition(4, Mode.ALONE)
    rig = Rig(source, {TP: alone}, policy=OffsetResetPolicy.HALT)
    async with running(rig):
        await until(lambda: alone.halted)
        await asyncio.sleep(10)
    assert source.fetches_of(TP) == [4] and TP in source.paused()
    assert alone.position == 4 and alone.next_work() is None
    assert rig.counted("replicator_offset_resets_total", topic="orders", reason="below_log_start")
    assert rig.counted("replicator_records_lost_total", topic="orders") == 6


async def test_a_position_past_the_log_end_is_held_until_the_partition_moves() -> None:
    """The log was replaced: the shared feed, further on, resets the partition on every leg; this
    leg does not fetch it meanwhile, nor reset it itself."""
    source = MemorySource({TP: log(0, 30)})
    alone = partition(50, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: source.fetches_of(TP) == [50])
        await asyncio.sleep(60)
        assert source.fetches_of(TP) == [50] and TP in source.paused()
        assert alone.position == 50 and alone.mode is Mode.ALONE
        assert not rig.counted(
            "replicator_offset_resets_total", topic="orders", reason="beyond_log_end"
        )
        assert not rig.resets.recent
        alone.attach()  # changes that leave it where it stands: still not fetched
        alone.detach()
        await asyncio.sleep(60)
        assert source.fetches_of(TP) == [50]

        alone.rewind(0, "the source log was replaced")  # the shared feed's reset
        await until(lambda: alone.position == 30)
        assert source.fetches_of(TP)[:2] == [50, 0]
        assert delivered(queued(alone)) == list(range(30))


async def test_a_record_that_cannot_be_decoded_halts_its_partition_only() -> None:
    source = MemorySource({TP: log(0, 20), OTHER: log(0, 20)})
    source.poison(TP, 12, "CorruptRecordError")
    poisoned = partition(0, Mode.ALONE)
    healthy = partition(0, Mode.ALONE, tp=OTHER)
    rig = Rig(source, {TP: poisoned, OTHER: healthy})
    async with running(rig):
        await until(lambda: poisoned.poisoned and healthy.position == 20)
        await asyncio.sleep(10)
        assert source.fetches_of(TP) == [0] and TP in source.paused()
        works = queued(poisoned)
        assert delivered(queued(healthy)) == list(range(20))
    assert delivered(works) == list(range(12))  # everything before it goes first
    assert works[-1].start == 12
    assert works[-1].poison == undecodable_reason(Poison(TP, 12, "CorruptRecordError"))
    assert poisoned.position == 12 and not poisoned.fed_alone


async def test_transaction_markers_after_the_last_record_pass_the_partition_over() -> None:
    source = MemorySource({TP: log(0, 10)})
    source.markers(TP, 2)  # a commit marker and another transaction's: offsets 10 and 11
    alone = partition(0, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.position == 12)
        assert [r for w in queued(alone) for r in ranges(w)] == [(0, 10, 10), (10, 12, 0)]
        source.append(TP, log(12, 15))
        await until(lambda: alone.position == 15)
        assert delivered(queued(alone)) == [12, 13, 14]
    assert 10 not in source.fetches_of(TP) and source.fetches_of(TP)[1] == 12


async def test_the_idle_wait_lengthens_on_empty_fetches_and_shortens_on_data() -> None:
    """Each empty fetch waits ``FETCH_TIMEOUT_MS``; every half second of them doubles the
    broker's wait up to the idle wait; the first records bring it back at once."""
    assert FETCH_TIMEOUT_MS == 200
    source = MemorySource({TP: log(0, 5)})
    alone = partition(0, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with running(rig, IdleWait(busy_ms=10, idle_ms=80, longest_ms=80)):
        await asyncio.sleep(3.1)
        # Empty from 0.2 s on: doubled at 0.8, 1.4 and 2.0 s (0.6 s of empty fetches apart).
        assert [(round(at - start, 3), ms) for at, ms in source.waits] == [
            (0.8, 20),
            (1.4, 40),
            (2.0, 80),
        ]
        source.append(TP, log(5, 8))
        await until(lambda: alone.position == 8)
        assert [(round(at - start, 3), ms) for at, ms in source.waits[3:]] == [(3.1, 10)]
    assert delivered(queued(alone)) == list(range(8))


async def test_a_failed_fetch_is_reported_and_retried_after_the_backoff() -> None:
    source = MemorySource({TP: log(0, 10)})
    source.fail(ClusterUnavailable("KafkaConnectionError"))
    alone = partition(0, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await asyncio.sleep(1.9)
        assert rig.fetch.last_error == "catch-up fetch failed: KafkaConnectionError"
        assert alone.position == 0 and source.fetches_of(TP) == []
        await asyncio.sleep(0.2)  # the retriable backoff (2 s) is over
        assert alone.position == 10 and source.fetches_of(TP)[0] == 0
        assert rig.fetch.last_error is None
        assert delivered(queued(alone)) == list(range(10))


async def test_a_partition_whose_log_bounds_could_not_be_read_is_fetched_again() -> None:
    """An out-of-range answer pauses the partition while its log bounds are read; a failed read
    stalled it (paused, nothing to change it) until it is fetched again a second later."""
    source = MemorySource({TP: log(0, 30)})
    source.delete_before(TP, 10)
    source.fail_bounds(ClusterUnavailable("KafkaConnectionError"))
    alone = partition(4, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await asyncio.sleep(60)
    assert source.fetches_of(TP)[:2] == [4, 4]
    assert alone.position == 30


async def test_a_fetch_without_records_still_halts_at_a_record_that_cannot_be_decoded() -> None:
    """The record at the position cannot be decoded: the fetch hands nothing over, and the
    partition halts there all the same (not fetched from it again and again)."""
    source = MemorySource({TP: log(0, 20)})
    source.poison(TP, 12, "CorruptRecordError")
    alone = partition(12, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.poisoned)
        await asyncio.sleep(10)
        assert source.fetches_of(TP) == [12] and TP in source.paused()
        (work,) = queued(alone)
    assert (work.start, work.poison) == (
        12,
        undecodable_reason(Poison(TP, 12, "CorruptRecordError")),
    )
    assert alone.position == 12 and not alone.fed_alone


async def test_a_fetch_without_records_still_passes_over_transaction_markers() -> None:
    """Only markers past the position: the fetch hands nothing over and moves past them, and
    the partition moves with it (its committed offset reaches the log end)."""
    source = MemorySource({TP: log(0, 10)})
    source.markers(TP, 2)
    alone = partition(10, Mode.ALONE)
    rig = Rig(source, {TP: alone})
    async with running(rig):
        await until(lambda: alone.position == 12)
        assert [r for w in queued(alone) for r in ranges(w)] == [(10, 12, 0)]
        source.append(TP, log(12, 15))
        await until(lambda: alone.position == 15)
        assert delivered(queued(alone)) == [12, 13, 14]
    assert source.fetches_of(TP)[:2] == [10, 12]
