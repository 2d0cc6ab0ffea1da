"""One source partition on one leg (:class:`LegPartition`), its feeds and its offset resets.

No brokers: the shared feed is a :class:`PartitionFanout` handed records directly, the catch-up
fetch a :class:`CatchUpFetch` over a real aiokafka consumer that is never started.
"""

from __future__ import annotations

import asyncio
import copy
import sys
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.config.values import OffsetResetPolicy
from replicator.kafka.fetching import ConsumerSource
from replicator.lifecycle import PartitionEvent
from replicator.model import batching
from replicator.model.batching import Target
from replicator.model.offsets import OffsetTracker, OutOfRange
from replicator.model.records import SourceRecord
from replicator.replication.catch_up import CatchUpFetch
from replicator.replication.fanout import PartitionFanout
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import LegPartition
from replicator.replication.states import FED_ALONE, Fit, Halt, Mode, Work
from replicator.telemetry.metrics import Metrics
from tests.unit.model.test_batching import contents, new_batch
from tests.unit.sample import Record

TP = TopicPartition("orders_REPLICA", 0)
LEG = "dc1->dc2"
FETCHED_MS = 1_800_000_000_000


# -- helpers ------------------------------------------------------------------------------------


def records(first: int, end: int) -> list[SourceRecord]:
    """Source records at every offset of ``[first, end)`` (11 key and value bytes each)."""
    return [Record(o) for o in range(first, end)]


def partition(
    position: int | None,
    mode: Mode = Mode.ATTACHED,
    max_records: int = 100,
    max_bytes: int = 1 << 20,
    tp: TopicPartition = TP,
) -> LegPartition:
    """A partition brought to ``mode`` through its own transitions."""
    made = LegPartition(tp, "orders", "dc1", position, max_records, max_bytes)
    if mode is Mode.STARTING:
        return made
    made.prepared(new_batch)
    if mode in FED_ALONE:
        made.detach()
    else:
        made.attach()
    if mode is Mode.REPLAYING:
        assert position is not None
        made.rewind(position, "replaying")
    elif mode is Mode.HALTED:
        made.halt("refused")
    elif mode is Mode.STOPPED:
        made.stop()
    assert made.mode is mode
    return made


def queued(p: LegPartition) -> list[Work]:
    """Take every queued work out (as the sender does) and free its room."""
    taken: list[Work] = []
    while (work := p.next_work()) is not None:
        taken.append(work)
        p.handed_over(work)
    return taken


def offsets(work: Work) -> list[int]:
    """The source offsets a queued work delivers: its batches' records."""
    return [o for b in work.batches if b.builder is not None for o, _, _ in contents(b)]


def ranges(work: Work) -> list[tuple[int, int, int]]:
    """``(first, end, records)`` of each range the sender will track for ``work``."""
    return [(b.first, b.end, b.count) for b in work.batches]


def gaps(work: Work) -> list[tuple[int, int]]:
    """The ranges of ``work`` that are skipped source offsets (queued by ``skip_to``)."""
    return [(b.first, b.end) for b in work.batches if b.builder is None]


def snapshot(p: LegPartition) -> dict[str, Any]:
    """Every attribute of ``p``, comparable (events by whether they are set)."""
    out: dict[str, Any] = {}
    for name in LegPartition.__slots__:
        value = getattr(p, name)
        if isinstance(value, asyncio.Event):
            out[name] = ("event", value.is_set())
        elif isinstance(value, OffsetTracker):
            out[name] = ("tracker", copy.deepcopy(vars(value)))
        elif isinstance(value, list):
            out[name] = ("list", list(value))
        else:
            out[name] = value  # immutable, or compared by identity (the tagger, the factory)
    return out


# -- carried over from the old PartitionSender tests -------------------------------------------


async def test_an_attached_partition_takes_continuing_chunks() -> None:
    p = partition(None, Mode.STARTING)
    p.place(0)  # no committed offset: starts where the shared feed starts
    p.prepared(new_batch)
    assert p.fit(0, 10) is Fit.JOIN
    assert p.target().start == 0
    fanout = PartitionFanout(TP, [p], 0)
    fanout.deliver(records(0, 10), FETCHED_MS)
    assert p.attached and p.position == 10 and p.queued_records == 10
    assert p.fit(10, 20) is Fit.JOIN and p.attached
    fanout.deliver(records(10, 20), FETCHED_MS)
    assert [offsets(w) for w in queued(p)] == [list(range(10)), list(range(10, 20))]


async def test_a_partition_ahead_of_the_feed_waits_attached() -> None:
    p = partition(500)
    assert p.fit(0, 100) is Fit.AHEAD
    fanout = PartitionFanout(TP, [p], 0)
    fanout.deliver(records(0, 100), FETCHED_MS)
    assert p.attached and p.position == 500 and p.queued_records == 0
    assert p.fit(450, 520) is Fit.JOIN and p.target().start == 500
    fanout.position = 450
    fanout.deliver(records(450, 520), FETCHED_MS)
    assert [offsets(w) for w in queued(p)] == [list(range(500, 520))]


async def test_the_feed_went_past_an_attached_partition_it_detaches() -> None:
    p = partition(50)
    assert p.fit(60, 70) is Fit.BEHIND
    assert p.attached, "fit() only judges"
    PartitionFanout(TP, [p], 60).deliver(records(60, 70), FETCHED_MS)
    assert p.mode is Mode.ALONE and p.fed_alone
    assert p.position == 50 and p.queued_records == 0


async def test_a_detached_partition_reattaches_with_room_and_continues_where_it_stands() -> None:
    p = partition(50)
    p.detach()
    assert p.take_fetched(records(50, 60), 50, 60, FETCHED_MS)
    assert p.position == 60
    assert p.fit(55, 65) is Fit.JOIN  # overlaps where it stands: takes the feed again from 60
    assert p.target().start == 60
    PartitionFanout(TP, [p], 55).deliver(records(55, 65), FETCHED_MS)
    assert p.attached and p.position == 65
    assert [offsets(w) for w in queued(p)] == [list(range(50, 60)), list(range(60, 65))]


async def test_a_full_detached_partition_stays_detached() -> None:
    p = partition(0, max_records=5)
    p.detach()
    assert not p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)  # now full
    assert p.fit(10, 20) is Fit.NONE
    PartitionFanout(TP, [p], 10).deliver(records(10, 20), FETCHED_MS)
    assert p.mode is Mode.ALONE and p.position == 10 and p.queued_records == 10


async def test_fetched_records_must_continue_from_the_position() -> None:
    p = partition(100)
    assert not p.take_fetched(records(100, 101), 100, 101, FETCHED_MS), "attached: refused"
    p.detach()
    assert not p.take_fetched(records(120, 130), 120, 130, FETCHED_MS), "a gap"
    assert p.position == 100 and p.queued_records == 0
    assert p.take_fetched(records(90, 100), 90, 100, FETCHED_MS), "stale, ignored"
    assert p.position == 100 and p.queued_records == 0
    assert p.take_fetched(records(95, 105), 95, 105, FETCHED_MS), "overlap: trimmed"
    assert p.position == 105
    (work,) = queued(p)
    # Built as it entered the queue: from the position, not from the first record fetched.
    assert ranges(work) == [(100, 105, 5)]
    assert offsets(work) == list(range(100, 105))


async def test_a_gap_in_the_source_is_skipped_in_order_behind_queued_work() -> None:
    p = partition(10, Mode.ALONE)
    assert p.take_fetched(records(10, 20), 10, 20, FETCHED_MS)
    p.skip_to(50, "source deleted [20, 50)")
    assert p.position == 50 and p.last_error == "source deleted [20, 50)"
    assert p.take_fetched(records(20, 30), 20, 30, FETCHED_MS)  # stale: ignored
    assert p.status(asyncio.get_running_loop().time(), 60)["queued_records"] == 10
    assert p.take_fetched(records(50, 55), 50, 55, FETCHED_MS)
    assert p.status(asyncio.get_running_loop().time(), 60)["queued_records"] == 15
    assert [r for w in queued(p) for r in ranges(w)] == [(10, 20, 10), (20, 50, 0), (50, 55, 5)]


async def test_the_feed_judges_a_leg_beyond_the_log_end_only_on_a_later_fetch() -> None:
    ahead = partition(1000)
    fanout = PartitionFanout(TP, [ahead], 0)
    assert fanout.beyond_log_end(log_end=100, polled_ms=1) is None  # suspected only
    assert fanout.beyond_log_end(log_end=100, polled_ms=1) is None  # same response again
    assert fanout.beyond_log_end(log_end=100, polled_ms=2) == 1000  # confirmed


async def test_a_leg_that_fetched_past_a_stale_log_end_is_not_judged() -> None:
    p = partition(150, Mode.ALONE)
    fanout = PartitionFanout(TP, [p], 100)
    assert fanout.beyond_log_end(log_end=120, polled_ms=1) is None
    assert fanout.beyond_log_end(log_end=200, polled_ms=2) is None  # the log had grown
    assert fanout.beyond_log_end(log_end=200, polled_ms=3) is None


async def test_a_partition_not_yet_prepared_is_not_fed() -> None:
    p = partition(None, Mode.STARTING)
    p.place(120)  # as the feed does when it starts the partition
    fanout = PartitionFanout(TP, [p], 120)
    assert p.fit(120, 130) is Fit.NONE  # batches wait for the destination topic's limits
    fanout.deliver(records(120, 130), FETCHED_MS)
    assert (p.mode, p.position, p.queued_records) == (Mode.STARTING, 120, 0)
    p.prepared(new_batch)  # the feed is past it by now: it catches up alone
    fanout.deliver(records(130, 140), FETCHED_MS)
    assert (p.mode, p.position, p.queued_records) == (Mode.ALONE, 120, 0)


async def test_a_partition_prepared_after_the_feed_passed_it_is_fed_while_the_source_is_idle() -> (
    None
):
    slow, other = partition(None, Mode.STARTING), partition(None, Mode.STARTING)
    fanout = PartitionFanout(TP, [slow, other], 0)
    for p in (slow, other):
        p.place(0)
    other.prepared(new_batch)
    assert fanout.blocking() == [slow]
    fanout.give_up(fanout.blocking())  # REPLICATOR_DETACH_AFTER_MS passed, destination still down
    fanout.deliver(records(0, 10), FETCHED_MS)  # the source's last records: idle from now on
    assert other.position == 10 and slow.position == 0
    slow.prepared(new_batch)  # the destination is back
    assert fanout.blocking() == []  # the feed does not wait for it (and has nothing to deliver)
    fanout.settle()  # every round of the feed, records or not
    assert slow.fed_alone, f"{slow.mode}: neither the feed nor the catch-up fetch feeds [0, 10)"
    assert other.attached, "a partition where the feed stands stays attached"


async def test_a_partition_that_caught_up_alone_is_fed_again_while_the_source_is_idle() -> None:
    behind, replaying = partition(0, Mode.ATTACHED), partition(0, Mode.ATTACHED)
    fanout = PartitionFanout(TP, [behind, replaying], 10)  # the feed is past both
    fanout.settle()
    assert behind.mode is Mode.ALONE and replaying.mode is Mode.ALONE
    replaying.rewind(0, "replay")  # a replay ends by itself, not by catching up with the feed
    behind.take_fetched(records(0, 6), 0, 6, FETCHED_MS)  # the catch-up fetch: not there yet
    fanout.settle()
    assert behind.mode is Mode.ALONE
    behind.take_fetched(records(6, 10), 6, 10, FETCHED_MS)  # where the feed stands
    fanout.settle()
    assert behind.attached, "caught up: the feed serves it, the catch-up fetch no longer does"
    assert replaying.state == Mode.REPLAYING.value  # still fed by its own fetch
    fanout.deliver(records(10, 12), FETCHED_MS)  # the next records come through the feed
    assert (behind.position, behind.queued_records) == (12, 12)


# -- transitions --------------------------------------------------------------------------------


async def test_prepared_feeds_a_starting_partition_and_only_replaces_the_factory_later() -> None:
    p = partition(7, Mode.STARTING)
    p.last_error = "destination topic not ready: timeout"
    assert p.fit(0, 10) is Fit.NONE and not p.fed_alone and p.new_batch is None
    p.wakeup.clear()
    p.prepared(new_batch)
    assert p.mode is Mode.ATTACHED and p.new_batch is new_batch
    assert p.last_error is None and p.wakeup.is_set()
    assert p.fit(0, 10) is Fit.JOIN
    p.rewind(0, "replay")
    p.prepared(new_batch)  # the topic prepared again, after a replay
    assert p.mode is Mode.REPLAYING and p.last_error == "replay"
    p.halt("refused")
    p.prepared(new_batch)
    assert p.halted


async def test_place_sets_only_an_unknown_position() -> None:
    p = partition(None, Mode.STARTING)
    p.place(42)
    p.place(7)
    assert p.position == 42
    assert partition(3).position == 3


@pytest.mark.parametrize("mode", [Mode.ALONE, Mode.REPLAYING])
async def test_attach_takes_a_partition_fed_alone_to_the_shared_feed(mode: Mode) -> None:
    p = partition(5, mode)
    assert p.fed_alone
    p.attach()
    assert p.attached and not p.fed_alone
    p.detach()
    assert p.mode is Mode.ALONE


@pytest.mark.parametrize("mode", [Mode.STARTING, Mode.ATTACHED, Mode.HALTED, Mode.STOPPED])
async def test_attach_does_nothing_unless_fed_alone(mode: Mode) -> None:
    p = partition(5, mode)
    p.attach()
    assert p.mode is mode


@pytest.mark.parametrize(
    "mode", [Mode.STARTING, Mode.ALONE, Mode.REPLAYING, Mode.HALTED, Mode.STOPPED]
)
async def test_detach_does_nothing_unless_attached(mode: Mode) -> None:
    p = partition(5, mode)
    p.detach()
    assert p.mode is mode


def fill(p: LegPartition) -> None:
    """Queue work until ``p`` is full, through whatever feeds it in its mode."""
    assert p.position is not None
    first, end = p.position, p.position + 200
    if p.attached:
        target = p.target()
        batching.build(records(first, end), end, p.tagger, [target], FETCHED_MS)
        p.take_built(target, end)
    elif p.fed_alone:
        p.take_fetched(records(first, end), first, end, FETCHED_MS)
    assert not p.has_room


@pytest.mark.parametrize("mode", [Mode.STARTING, Mode.ATTACHED, Mode.ALONE, Mode.REPLAYING])
@pytest.mark.parametrize("kind", [Halt.FAILED, Halt.BLOCKED])
async def test_halt_from_each_open_mode(mode: Mode, kind: Halt) -> None:
    p = partition(0, mode, max_records=50)
    if mode is not Mode.STARTING:
        fill(p)
    p.closed.clear()
    assert p.halt("destination refused a batch", kind)
    assert p.mode is Mode.HALTED and p.halted and not p.open
    assert p.state == kind.value and p.halt_kind is kind
    assert p.last_error == "destination refused a batch"
    assert p.queued_records == 0 and p.next_work() is None
    assert p.has_room and p.closed.is_set()
    assert p.fit(0, 1000) is Fit.NONE
    assert not p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    assert p.sending(p.epoch, 0, 10) is None


@pytest.mark.parametrize("mode", [Mode.HALTED, Mode.STOPPED])
async def test_halt_does_nothing_when_not_open(mode: Mode) -> None:
    p = partition(0, mode)
    before = (p.mode, p.state, p.last_error)
    assert not p.halt("again", Halt.BLOCKED)
    assert (p.mode, p.state, p.last_error) == before


@pytest.mark.parametrize("mode", [Mode.STARTING, Mode.ATTACHED, Mode.ALONE, Mode.REPLAYING])
async def test_stop_releases_an_open_partition(mode: Mode) -> None:
    p = partition(0, mode, max_records=50)
    if mode is not Mode.STARTING:
        fill(p)
    p.stop()
    assert p.mode is Mode.STOPPED and not p.open and p.state == "stopped"
    assert p.closed.is_set() and p.has_room and p.wakeup.is_set()
    assert p.queued_records == 0 and p.next_work() is None


async def test_a_halted_partition_stays_halted_when_stopped() -> None:
    p = partition(0, Mode.ALONE)
    p.halt("too few partitions", Halt.BLOCKED)
    p.stop()
    assert p.mode is Mode.HALTED and p.state == "blocked" and p.closed.is_set()
    assert p.last_error == "too few partitions"
    p.stop()
    assert p.mode is Mode.HALTED


async def test_rewind_replays_from_a_lower_offset_in_a_new_epoch() -> None:
    p = partition(100)
    fanout = PartitionFanout(TP, [p], 100)
    fanout.deliver(records(100, 110), FETCHED_MS)
    (old,) = queued(p)
    assert old.batches is not None
    (batch,) = old.batches
    tracker = p.sending(old.epoch, batch.first, batch.end)  # in flight when the rewind comes
    assert tracker is not None
    fanout.deliver(records(110, 120), FETCHED_MS)  # queued when the rewind comes
    assert p.queued_records == 10

    p.rewind(20, "destination orders was deleted; replayed from offset 20")
    assert p.epoch == 1 and p.mode is Mode.REPLAYING and p.fed_alone
    assert p.position == 20 and p.queued_records == 0 and p.next_work() is None
    assert p.last_error == "destination orders was deleted; replayed from offset 20"
    assert p.oldest_unacked_age(asyncio.get_running_loop().time() + 1000) == 0.0
    new = p.tracker
    assert new is not None and new is not tracker
    # The committer commits the lower offset, although nothing was acknowledged from it yet.
    assert (new.committable, new.committed, new.needs_commit) == (20, None, True)
    # The old epoch's acknowledgement and batches no longer count.
    p.acknowledged(tracker, batch.first)
    assert tracker.committable == 110
    assert (new.committable, new.pending) == (20, 0)
    assert p.sending(old.epoch, 110, 120) is None
    assert p.sending(p.epoch, 20, 30) is new


async def test_a_replaying_partition_attaches_when_it_meets_the_feed() -> None:
    p = partition(100)
    p.rewind(20, "replay")
    fanout = PartitionFanout(TP, [p], 100)
    fanout.deliver(records(100, 110), FETCHED_MS)
    assert p.mode is Mode.REPLAYING and p.position == 20 and p.queued_records == 0
    assert p.take_fetched(records(20, 110), 20, 110, FETCHED_MS)
    fanout.deliver(records(110, 120), FETCHED_MS)  # continues exactly where it stands
    assert p.attached and p.position == 120
    works = queued(p)
    assert {w.epoch for w in works} == {1}
    assert [o for w in works for o in offsets(w)] == list(range(20, 120))


async def test_rewind_keeps_a_starting_partition_starting_and_ignores_a_closed_one() -> None:
    p = partition(100, Mode.STARTING)
    p.rewind(0, "log replaced")
    assert (p.mode, p.position, p.epoch) == (Mode.STARTING, 0, 1)
    for mode in (Mode.HALTED, Mode.STOPPED):
        closed = partition(100, mode)
        closed.rewind(0, "log replaced")
        assert (closed.mode, closed.position, closed.epoch, closed.tracker) == (
            mode,
            100,
            0,
            None,
        )


async def test_skip_to_queues_the_gap_as_an_empty_range_and_moves_on() -> None:
    p = partition(10, Mode.ALONE)
    p.skip_to(10, "nothing to skip")
    p.skip_to(5, "behind: nothing to skip")  # never moves a position back with a gap
    assert p.next_work() is None
    p = partition(10, Mode.ALONE)
    p.skip_to(40, "records lost")
    assert p.position == 40 and p.queued_records == 0 and p.has_room
    (work,) = queued(p)
    assert ranges(work) == [(10, 40, 0)] and work.epoch == 0
    assert work.batches is not None and work.batches[0].builder is None
    tracker = p.sending(work.epoch, 10, 40)
    assert tracker is not None
    p.acknowledged(tracker, 10)
    assert tracker.committable == 40


# -- room ---------------------------------------------------------------------------------------


async def test_room_is_cleared_when_full_and_set_when_handed_over_below_the_bound() -> None:
    p = partition(0, Mode.ALONE, max_records=12)
    assert p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    assert p.has_room
    assert not p.take_fetched(records(10, 15), 10, 15, FETCHED_MS)
    assert not p.has_room and p.queued_records == 15
    first = p.next_work()
    assert first is not None
    assert not p.has_room, "room only once handed over"
    p.handed_over(first)
    assert p.queued_records == 5 and p.has_room


async def test_room_stays_cleared_while_handed_over_work_leaves_it_full() -> None:
    p = partition(0, Mode.ALONE, max_records=5)
    p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    fanout = PartitionFanout(TP, [p], 10)
    p.attach()
    fanout.deliver(records(10, 20), FETCHED_MS)  # attached and full: the feed overfills
    assert p.queued_records == 20
    first = p.next_work()
    assert first is not None
    p.handed_over(first)
    assert p.queued_records == 10 and not p.has_room
    second = p.next_work()
    assert second is not None
    p.handed_over(second)
    assert p.queued_records == 0 and p.has_room


async def test_the_byte_bound_counts_too() -> None:
    p = partition(0, Mode.ALONE, max_bytes=100)  # 11 bytes a record
    assert p.take_fetched(records(0, 9), 0, 9, FETCHED_MS)
    assert not p.take_fetched(records(9, 10), 9, 10, FETCHED_MS)
    assert not p.has_room and p.queued_records == 10
    queued(p)
    assert p.has_room


async def test_handing_over_old_epoch_work_after_a_rewind_keeps_the_counts() -> None:
    p = partition(0, Mode.ALONE, max_records=10)
    p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    old = p.next_work()
    assert old is not None
    p.rewind(0, "replay")
    assert p.queued_records == 0 and p.has_room
    assert not p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    p.handed_over(old)  # the sender finishes the abandoned work
    assert p.queued_records == 10 and not p.has_room
    (new,) = queued(p)
    assert new.epoch == 1 and p.queued_records == 0 and p.has_room


async def test_handing_over_after_a_halt_keeps_the_counts() -> None:
    p = partition(0, Mode.ALONE)
    p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    work = p.next_work()
    assert work is not None
    p.halt("refused")
    p.handed_over(work)
    assert p.queued_records == 0 and p.has_room


# -- acknowledgements and stalls ------------------------------------------------------------------


async def test_unacknowledged_batches_age_until_the_prefix_is_acknowledged() -> None:
    p = partition(0)
    sent = asyncio.get_running_loop().time()  # the product's clock (replicator.clock)
    assert p.oldest_unacked_age(sent) == 0.0
    tracker = p.sending(p.epoch, 0, 10)
    assert tracker is not None and p.tracker is tracker
    assert p.sending(p.epoch, 10, 20) is tracker
    later = sent + 100
    assert p.oldest_unacked_age(later) == 100.0  # on fake loop time: exactly
    assert p.stalled(later, 30) and not p.stalled(later, 1000)
    p.acknowledged(tracker, 10)  # out of order: the first batch still waits
    assert tracker.committable == 0 and p.stalled(later, 30)
    p.acknowledged(tracker, 0)
    assert tracker.committable == 20
    assert p.oldest_unacked_age(later) == 0.0 and not p.stalled(later, 30)


async def test_status_shows_a_stalled_partition() -> None:
    p = partition(0)
    p.sending(p.epoch, 0, 10)
    now = asyncio.get_running_loop().time()
    assert p.status(now, 30)["state"] == "attached"
    status = p.status(now + 60, 30)
    assert status["state"] == "stalled" and status["unacknowledged_seconds"] == 60.0
    assert (status["next_offset"], status["acknowledged_offset"]) == (0, 0)
    p.halt("refused")
    assert not p.stalled(now + 60, 30)
    assert p.status(now + 60, 30)["state"] == "failed"


def states() -> Iterator[LegPartition]:
    """Partitions in every mode, with queued and unacknowledged work where they can have it."""
    yield partition(None, Mode.STARTING)
    yield partition(5, Mode.STARTING)
    attached = partition(0, max_records=10)
    fill(attached)
    attached.sending(attached.epoch, 0, 10)
    yield attached
    alone = partition(0, Mode.ALONE)
    alone.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    yield alone
    full = partition(0, Mode.ALONE, max_records=5)
    fill(full)
    yield full
    replaying = partition(3, Mode.REPLAYING)
    replaying.skip_to(8, "lost")
    yield replaying
    yield partition(3, Mode.HALTED)
    yield partition(3, Mode.STOPPED)


async def test_queries_do_not_mutate() -> None:
    for p in states():
        before = snapshot(p)
        now = asyncio.get_running_loop().time()
        for start, end in ((0, 0), (0, 5), (0, 10), (3, 8), (5, 500), (200, 300), (1000, 1001)):
            p.fit(start, end)
        _ = (p.open, p.halted, p.attached, p.fed_alone, p.has_room, p.queued_records, p.state)
        p.oldest_unacked_age(now + 100)
        p.stalled(now + 100, 1)
        p.status(now + 100, 1)
        assert snapshot(p) == before, p.mode


# -- scenarios ----------------------------------------------------------------------------------


def resets(policy: OffsetResetPolicy = OffsetResetPolicy.EARLIEST) -> tuple[OffsetResets, Metrics]:
    metrics = Metrics()
    return OffsetResets(LEG, policy, metrics), metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    value: float | None = metrics.registry.get_sample_value(name, labels)
    return value


async def test_a_partition_stopped_by_a_rebalance_mid_replay_accepts_nothing() -> None:
    p = partition(500)
    p.rewind(0, "replay")
    assert p.take_fetched(records(0, 10), 0, 10, FETCHED_MS)
    p.stop()
    assert p.mode is Mode.STOPPED and p.closed.is_set() and p.next_work() is None
    assert not p.fed_alone and p.fit(10, 20) is Fit.NONE
    assert not p.take_fetched(records(10, 20), 10, 20, FETCHED_MS)
    PartitionFanout(TP, [p], 10).deliver(records(10, 20), FETCHED_MS)
    p.prepared(new_batch)
    p.attach()
    p.rewind(0, "again")
    assert not p.halt("late")
    assert p.sending(p.epoch, 10, 20) is None
    policy, metrics = resets()
    policy.apply(p, OutOfRange(10, 50, 100))
    assert (p.mode, p.position, p.epoch, p.queued_records) == (Mode.STOPPED, 10, 1, 0)
    assert p.last_error == "replay"
    assert sample(metrics, "replicator_offset_resets_total", leg=LEG, topic="orders") is None


async def test_a_position_below_the_log_start_skips_and_counts_the_loss() -> None:
    policy, metrics = resets()
    p = partition(10, Mode.ALONE)
    assert p.take_fetched(records(10, 20), 10, 20, FETCHED_MS)
    policy.apply(p, OutOfRange(position=20, log_start=65, log_end=100))
    assert p.position == 65 and p.mode is Mode.ALONE and p.epoch == 0
    assert p.last_error is not None and "45 records lost" in p.last_error
    lost = sample(metrics, "replicator_records_lost_total", leg=LEG, topic="orders")
    assert lost == 45
    resets_total = sample(
        metrics, "replicator_offset_resets_total", leg=LEG, topic="orders", reason="below_log_start"
    )
    assert resets_total == 1
    (event,) = policy.recent
    assert (event["reason"], event["position"], event["records_lost"]) == (
        "below_log_start",
        20,
        45,
    )
    assert [r for w in queued(p) for r in ranges(w)] == [(10, 20, 10), (20, 65, 0)]


async def test_a_position_beyond_the_log_end_rewinds_to_the_new_log_start() -> None:
    policy, metrics = resets()
    p = partition(500)
    PartitionFanout(TP, [p], 500).deliver(records(500, 510), FETCHED_MS)
    policy.apply(p, OutOfRange(position=510, log_start=0, log_end=30))
    assert (p.mode, p.position, p.epoch, p.queued_records) == (Mode.REPLAYING, 0, 1, 0)
    assert p.tracker is not None and p.tracker.needs_commit and p.tracker.committable == 0
    assert p.last_error is not None and "resumed at offset 0" in p.last_error
    assert sample(metrics, "replicator_records_lost_total", leg=LEG, topic="orders") is None
    reason = "beyond_log_end"
    assert sample(metrics, "replicator_offset_resets_total", leg=LEG, topic="orders", reason=reason)
    assert policy.recent[0]["records_lost"] is None


async def test_the_halt_policy_halts_the_partition_and_names_itself() -> None:
    policy, metrics = resets(OffsetResetPolicy.HALT)
    p = partition(10, Mode.ALONE)
    policy.apply(p, OutOfRange(position=10, log_start=40, log_end=100))
    assert p.halted and p.state == "failed" and p.closed.is_set() and p.position == 10
    assert p.last_error is not None
    assert "REPLICATOR_OFFSET_RESET_POLICY=halt" in p.last_error
    assert "30 records lost" in p.last_error
    assert sample(metrics, "replicator_records_lost_total", leg=LEG, topic="orders") == 30
    beyond = partition(500)
    policy.apply(beyond, OutOfRange(position=500, log_start=0, log_end=30))
    assert beyond.halted and beyond.epoch == 0 and beyond.position == 500


async def test_a_partition_whose_own_position_is_in_the_log_is_untouched() -> None:
    policy, metrics = resets()
    behind, inside, ahead = partition(5), partition(40), partition(100)
    found = OutOfRange(position=5, log_start=30, log_end=100)  # seen at the feed's position
    for p in (inside, ahead):
        before = snapshot(p)
        policy.apply(p, found)
        assert snapshot(p) == before
    assert not policy.recent
    assert sample(metrics, "replicator_records_lost_total", leg=LEG, topic="orders") is None
    policy.apply(behind, found)
    assert behind.position == 30 and len(policy.recent) == 1
    unplaced = partition(None, Mode.STARTING)
    policy.apply(unplaced, found)
    assert unplaced.position is None and len(policy.recent) == 1


# -- the shared feed -----------------------------------------------------------------------------


async def test_the_feed_builds_batches_only_for_partitions_that_join() -> None:
    joins = partition(100)
    overlaps = partition(105)
    behind = partition(90)
    ahead = partition(500)
    starting = partition(100, Mode.STARTING)
    alone_behind = partition(50, Mode.ALONE)
    alone_meets = partition(103, Mode.ALONE)
    alone_full = partition(100, Mode.ALONE, max_records=1)
    alone_full.take_fetched(records(100, 101), 100, 101, FETCHED_MS)
    halted = partition(100, Mode.HALTED)
    everyone = [
        joins, overlaps, behind, ahead, starting, alone_behind, alone_meets, alone_full, halted
    ]  # fmt: skip
    fanout = PartitionFanout(TP, everyone, 100)
    fanout.deliver(records(100, 110), FETCHED_MS)
    assert fanout.position == 110

    def got(p: LegPartition) -> list[int]:
        return [o for w in queued(p) for o in offsets(w)]

    assert got(joins) == list(range(100, 110)) and joins.position == 110
    assert got(overlaps) == list(range(105, 110)) and overlaps.position == 110
    assert got(alone_meets) == list(range(103, 110)) and alone_meets.attached
    assert behind.mode is Mode.ALONE and behind.position == 90 and got(behind) == []
    assert ahead.attached and ahead.position == 500 and got(ahead) == []
    assert starting.mode is Mode.STARTING and got(starting) == []
    assert alone_behind.mode is Mode.ALONE and got(alone_behind) == []
    assert alone_full.mode is Mode.ALONE and alone_full.position == 101
    assert got(alone_full) == [100]  # only what it fetched itself
    assert halted.halted and halted.queued_records == 0


async def test_the_feed_waits_for_full_attached_and_starting_partitions_until_it_gives_up() -> None:
    full = partition(0, max_records=10)
    fill(full)
    roomy = partition(0)
    starting = partition(0, Mode.STARTING)
    alone_full = partition(0, Mode.ALONE, max_records=10)
    fill(alone_full)
    halted = partition(0, Mode.HALTED)
    fanout = PartitionFanout(TP, [full, roomy, starting, alone_full, halted], 0)
    assert fanout.blocking() == [full, starting]
    fanout.give_up(fanout.blocking())
    assert full.mode is Mode.ALONE and starting.mode is Mode.STARTING
    assert fanout.blocking() == []
    starting.prepared(new_batch)
    starting.attach()  # attached, and full again later: waited for again
    fill(starting)
    assert fanout.blocking() == [starting]
    queued(starting)
    assert fanout.blocking() == []


# -- the catch-up fetch over a real, never-started consumer -----------------------------------


@dataclass
class Consumer:
    """A real aiokafka consumer, never started. ``seek()`` needs the fetcher ``start()``
    creates, so it is replaced by one doing what the fetcher's ``seek_to`` does to the
    subscription state, recording each seek."""

    real: Any
    seeks: list[tuple[TopicPartition, int]] = field(default_factory=list)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.real._subscription.seek(tp, offset)

    def paused(self) -> set[TopicPartition]:
        return set(self.real.paused())

    def take_seeks(self) -> list[tuple[TopicPartition, int]]:
        seeks, self.seeks = self.seeks, []
        return seeks


@pytest.fixture
async def consumer() -> AsyncIterator[Consumer]:
    real = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", enable_auto_commit=False)
    wrapped = Consumer(real)
    real.seek = wrapped.seek
    try:
        yield wrapped
    finally:
        await real.stop()


async def test_a_never_started_consumer_assigns_pauses_and_resumes() -> None:
    real = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", enable_auto_commit=False)
    try:
        a, b = TopicPartition("t", 0), TopicPartition("t", 1)
        real.assign([a, b])
        assert real.assignment() == {a, b}
        real.pause(a, b)
        real.resume(a)
        assert real.paused() == {b}
        with pytest.raises(AttributeError):  # no fetcher before start(): seek() cannot work
            real.seek(a, 5)
    finally:
        await real.stop()


def deliver(fetch: CatchUpFetch, fetched: dict[TopicPartition, list[SourceRecord]]) -> None:
    """Hand ``fetch`` what a fetch returned, as its round does."""
    for tp, taken in fetched.items():
        fetch.take(tp, taken, FETCHED_MS)


async def test_catch_up_fetches_exactly_the_partitions_fed_alone_with_room(
    consumer: Consumer,
) -> None:
    tps = [TopicPartition("orders_REPLICA", n) for n in range(6)]
    alone = partition(10, Mode.ALONE, max_records=20, tp=tps[0])
    attached = partition(0, tp=tps[1])
    full = partition(0, Mode.ALONE, max_records=5, tp=tps[2])
    fill(full)
    starting = partition(3, Mode.STARTING, tp=tps[3])
    replaying = partition(7, Mode.REPLAYING, tp=tps[4])
    unassigned = partition(9, Mode.ALONE, tp=tps[5])
    partitions = dict(
        zip(tps, [alone, attached, full, starting, replaying, unassigned], strict=True)
    )
    real = consumer.real
    real.assign(tps[:5])  # as the leg assigns them: every position set, every one paused
    for tp in tps[:5]:
        real.seek(tp, 0)
        real.pause(tp)
    consumer.take_seeks()
    source = ConsumerSource(real)
    fetch = CatchUpFetch(LEG, lambda: source, partitions, resets()[0])
    for each in partitions.values():  # as the leg wires them: changes reach the fetch
        each.watch(fetch.changed)

    assert fetch.reconcile()
    assert consumer.take_seeks() == [(tps[0], 10), (tps[4], 7)]
    assert consumer.paused() == {tps[1], tps[2], tps[3]}
    assert await real.position(tps[0]) == 10 and await real.position(tps[4]) == 7
    assert fetch.reconcile() and consumer.take_seeks() == []  # nothing changed: no seek

    deliver(fetch, {tps[0]: records(10, 15), tps[1]: records(0, 5)})  # what a fetch returns
    assert alone.position == 15 and attached.position == 0 and attached.queued_records == 0
    assert fetch.reconcile() and consumer.take_seeks() == []  # the consumer is there already

    alone.rewind(2, "replay")  # a position change is a seek
    assert fetch.reconcile() and consumer.take_seeks() == [(tps[0], 2)]
    alone.skip_to(12, "lost")
    assert fetch.reconcile() and consumer.take_seeks() == [(tps[0], 12)]

    deliver(fetch, {tps[0]: records(12, 40)})  # now full: paused
    assert not alone.has_room
    assert fetch.reconcile()  # the replaying one still fetches
    assert consumer.paused() == {tps[0], tps[1], tps[2], tps[3]}
    replaying.attach()  # met the feed
    assert not fetch.reconcile() and consumer.paused() == set(tps[:5])

    queued(alone)  # the sender made room: fetched again from where it stands
    full.stop()
    assert fetch.reconcile()
    assert consumer.take_seeks() == [(tps[0], 40)] and consumer.paused() == set(tps[1:5])

    alone.attach()
    deliver(fetch, {tps[0]: records(40, 45)})  # in flight when it attached: refused
    assert alone.position == 40 and alone.queued_records == 0
    assert not fetch.reconcile() and consumer.paused() == set(tps[:5])


# -- the property: what is queued continues from the position, once --------------------------

N = 40
MAX_RECORDS = 8

actions = st.lists(
    st.one_of(
        st.tuples(st.just("feed"), st.integers(1, 12)),
        st.tuples(st.just("feed_from"), st.integers(0, N)),
        st.tuples(st.just("fetch"), st.integers(-4, 4), st.integers(1, 12)),
        st.tuples(st.just("rewind"), st.integers(0, N)),
        st.tuples(st.just("skip"), st.integers(1, 10)),
        st.tuples(st.just("take"), st.integers(1, 3)),
        st.tuples(st.just("hand_over"), st.integers(1, 3)),
        st.tuples(st.just("detach"), st.just(0)),
        st.tuples(st.just("attach"), st.just(0)),
        st.tuples(st.just("give_up"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, N), st.booleans(), actions)
def test_queued_offsets_continue_from_the_position_exactly_once_per_epoch(
    start: int, alone: bool, steps: list[tuple[Any, ...]]
) -> None:
    p = partition(start, Mode.ALONE if alone else Mode.ATTACHED, max_records=MAX_RECORDS)
    fanout = PartitionFanout(TP, [p], 0)
    epoch_start = {0: start}
    skips: dict[int, list[tuple[int, int]]] = {0: []}
    taken: list[Work] = []  # every work the sender took, in order
    sending: deque[Work] = deque()  # taken, not handed over yet (they keep their room)
    for step in steps:
        kind, arg = step[0], step[1]
        position = p.position
        assert position is not None
        if kind == "feed" and fanout.position < N:
            fanout.deliver(records(fanout.position, min(N, fanout.position + arg)), FETCHED_MS)
        elif kind == "feed_from":
            fanout.position = arg  # the feed started the partition again there
        elif kind == "fetch":
            first = min(N, max(0, position + arg))
            end = min(N, first + step[2])
            if end > first:
                p.take_fetched(records(first, end), first, end, FETCHED_MS)
        elif kind == "rewind":
            p.rewind(arg, "rewound")
            epoch_start[p.epoch], skips[p.epoch] = arg, []
        elif kind == "skip" and position + arg <= N:
            p.skip_to(position + arg, "skipped")
            skips[p.epoch].append((position, position + arg))
        elif kind == "take":
            for _ in range(arg):
                work = p.next_work()
                if work is not None:
                    taken.append(work)
                    sending.append(work)
        elif kind == "hand_over":
            for _ in range(min(arg, len(sending))):
                p.handed_over(sending.popleft())
        elif kind == "detach":
            p.detach()
        elif kind == "attach":
            p.attach()
        elif kind == "give_up":
            fanout.give_up(fanout.blocking())
        assert p.open and p.position is not None
        assert p.has_room or p._full, "a full queue is remembered: its watchers hear it free"
        in_flight = sum(w.records for w in sending if w.epoch == p.epoch)
        assert p.queued_records >= in_flight

    in_flight = sum(w.records for w in sending if w.epoch == p.epoch)
    works = [w for w in [*taken, *queued(p)] if w.epoch == p.epoch]
    assert p.queued_records == in_flight, "room is held by the work taken, not handed over"
    while sending:
        p.handed_over(sending.popleft())
    assert p.queued_records == 0 and p.has_room
    tracker = OffsetTracker(epoch_start[p.epoch])
    expected = epoch_start[p.epoch]
    skipped: list[tuple[int, int]] = []
    for work in works:
        got = offsets(work)
        assert got == sorted(set(got)), "strictly increasing"
        for first, end, _ in ranges(work):
            assert first == expected, f"range [{first}, {end}) does not continue from {expected}"
            tracker.track(first, end)  # what the sender does: raises on a gap or an overlap
            expected = end
        skipped += gaps(work)
        covered = [
            o for first, end, _ in ranges(work) if (first, end) not in gaps(work)
            for o in range(first, end)
        ]  # fmt: skip
        assert got == covered, "every offset of a range but a skipped one is delivered"
    assert expected == p.position, "every offset the position passed was queued"
    assert skipped == skips[p.epoch], "the only gaps are the skipped ones"


async def test_a_partition_event_wakes_every_waiter_and_forgets_those_cancelled() -> None:
    event = PartitionEvent()
    waiters = [asyncio.create_task(event.wait()) for _ in range(3)]
    cancelled = asyncio.create_task(event.wait())
    await asyncio.sleep(0)
    assert len(event._waiters) == 4 and isinstance(event._waiters, list)
    cancelled.cancel()
    await asyncio.sleep(0)
    assert len(event._waiters) == 3, "a cancelled waiter removes itself"
    event.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert event._waiters == [] and await event.wait()
    event.clear()
    late = asyncio.create_task(event.wait())
    await asyncio.sleep(0.01)
    assert not late.done()
    event.set()
    assert await late


def test_partition_events_weigh_less_than_asyncio_events() -> None:
    assert sys.getsizeof(PartitionEvent()._waiters) * 5 < sys.getsizeof(asyncio.Event()._waiters)


def test_a_record_that_cannot_be_decoded_halts_the_partition_after_what_came_before() -> None:
    """Fed up to the record, the partition takes nothing more; the sender finds a halt order
    behind the work queued before it, and a partition elsewhere (behind, or ahead after a
    rewind) is not affected: it reaches the record with its own fetch."""
    p = partition(10)
    before = p.next_work()
    assert before is None
    p.take_built(Target(10, new_batch), 20)
    assert not p.undecodable(19, "elsewhere") and not p.poisoned
    assert p.undecodable(20, "offset 20 cannot be decoded")
    assert not p.undecodable(20, "again")  # once
    assert p.fit(20, 30) is Fit.NONE and not p.fed_alone
    queued = p.next_work()
    assert queued is not None and queued.poison is None  # what came before goes first
    order = p.next_work()
    assert order is not None and order.poison == "offset 20 cannot be decoded"
    assert order.start == 20 and order.records == 0
    alone = partition(5, Mode.ALONE)
    assert alone.undecodable(5, "at once") and not alone.fed_alone


async def test_the_feed_passes_over_transaction_markers_in_order_without_a_note() -> None:
    """A fetch that ended in a commit marker (offset 20) moves the consumer to 21: the attached
    partition follows behind its queued records, with an empty range, and no problem noted; a
    partition elsewhere (detached, behind) is left alone."""
    attached = partition(10, Mode.ATTACHED)
    behind = partition(5, Mode.ALONE)
    fanout = PartitionFanout(TP, [attached, behind], 10)
    fanout.deliver(records(10, 20), FETCHED_MS)
    fanout.pass_over(21)
    fanout.pass_over(21)  # no further: nothing more
    assert fanout.position == 21 and attached.position == 21 and behind.position == 5
    assert attached.last_error is None
    assert [r for w in queued(attached) for r in ranges(w)] == [(10, 20, 10), (20, 21, 0)]
    behind.pass_over(4, 9)  # not from its position: ignored
    assert behind.position == 5 and behind.next_work() is None
