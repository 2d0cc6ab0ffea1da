"""The committer commits what partitions say is due, never walks idle ones, and loses nothing.

Through its seams: :class:`LegPartition`'s transitions report a tracker with something to
commit (:meth:`LegPartition.owe_commits_to`), and an in-memory :class:`OffsetCommits` stands for
the leg's consumer group.
"""

from __future__ import annotations

import asyncio
from typing import Any
from unittest.mock import patch

from aiokafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.lifecycle import sleep_unless_stopped
from replicator.replication import committer as committer_module
from replicator.replication.committer import Committer
from replicator.replication.partition import LegPartition
from replicator.replication.resume import Tail
from replicator.replication.states import Mode
from replicator.telemetry.metrics import Metrics
from tests.unit.model.test_batching import new_batch


class MemoryGroup:
    """The leg's consumer group, in memory: every commit request and what it committed."""

    def __init__(self) -> None:
        self.requests: list[dict[TopicPartition, int]] = []
        self.committed: dict[TopicPartition, int] = {}
        self.fail = False

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.requests.append(dict(offsets))
        if self.fail:
            raise ConnectionError("coordinator unreachable")
        self.committed.update(offsets)


class MemoryMarks:
    """Where destination marks are saved."""

    def __init__(self) -> None:
        self.saved: dict[TopicPartition, int] = {}

    async def __call__(self, marks: dict[TopicPartition, tuple[int, int]]) -> None:
        self.saved.update({tp: mark for tp, (mark, _) in marks.items()})


def replicating(partition: int, position: int) -> LegPartition:
    """A partition resumed at ``position`` and attached to the feed, nothing to commit."""
    made = LegPartition(TopicPartition("orders_REPLICA", partition), "orders", "dc1", position,
                        100, 1 << 20)  # fmt: skip
    made.resumed(Tail(origin_offset=None, log_end=0, scanned=0, seconds=0.0))
    made.prepared(new_batch)
    assert made.mode is Mode.ATTACHED
    assert made.tracker is not None and not made.tracker.needs_commit
    return made


def committer(group: MemoryGroup, marks: MemoryMarks) -> Committer:
    return Committer("dc1->dc2", group, Metrics(), 1.0, marks)


def acknowledge(p: LegPartition, first: int, end: int, destination_end: int) -> None:
    tracker = p.sending(p.epoch, first, end)
    assert tracker is not None
    p.acknowledged(tracker, first, destination_end)


async def ticks(c: Committer, partitions: dict[TopicPartition, LegPartition], n: int) -> None:
    """Let the timed commit run exactly ``n`` rounds (a 10 ms wait, then its commit), however
    slow the machine: the wait is counted, so a loaded CI runner cannot skip a round."""
    stop, rounds = asyncio.Event(), 0

    async def counted(stopping: asyncio.Event, every: float) -> None:
        nonlocal rounds
        if rounds == n:  # n rounds done, each with its commit: end the loop here
            stop.set()
            return
        rounds += 1
        await sleep_unless_stopped(stopping, every)

    with patch.object(committer_module, "sleep_unless_stopped", counted):
        await asyncio.wait_for(c.run(stop, partitions, 0.01), 30)
    assert rounds == n


async def test_only_partitions_that_moved_are_committed_and_idle_ones_cost_nothing() -> None:
    group, marks = MemoryGroup(), MemoryMarks()
    c = committer(group, marks)
    partitions = {p.tp: p for p in (replicating(n, 100) for n in range(1_000))}
    for p in partitions.values():
        p.owe_commits_to(c.due)
    await ticks(c, partitions, 3)
    assert group.requests == []  # a thousand idle partitions: no request, nothing walked

    moved = partitions[TopicPartition("orders_REPLICA", 7)]
    acknowledge(moved, 100, 150, destination_end=900)
    await ticks(c, partitions, 3)
    assert group.requests == [{moved.tp: 150}]
    assert marks.saved == {TopicPartition("orders", 7): 900}
    assert moved.tracker is not None and not moved.tracker.needs_commit


async def test_a_failed_commit_is_due_again_and_a_released_partition_is_not_committed_late(
) -> None:  # fmt: skip
    group = MemoryGroup()
    c = committer(group, MemoryMarks())
    first, second = replicating(0, 10), replicating(1, 10)
    partitions = {first.tp: first, second.tp: second}
    for p in partitions.values():
        p.owe_commits_to(c.due)
    acknowledge(first, 10, 20, 5)
    acknowledge(second, 10, 30, 5)
    group.fail = True
    await ticks(c, partitions, 1)
    assert group.committed == {} and len(group.requests) == 1
    group.fail = False
    # Released meanwhile (its release commit is the leg's): the timer never commits it again,
    # since a new owner may have committed past it.
    del partitions[second.tp]
    await ticks(c, partitions, 2)
    assert group.requests[1:] == [{first.tp: 20}]
    assert group.committed == {first.tp: 20}


class HeldMarks(MemoryMarks):
    """Marks saved in the order their saves end; the first save is held until ``release``
    (a coordinator not ready yet, retried meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started: list[int] = []
        self.landed: list[int] = []

    async def __call__(self, marks: dict[TopicPartition, tuple[int, int]]) -> None:
        self.started.extend(mark for mark, _ in marks.values())
        if len(self.started) == 1:
            await self.release.wait()
        self.landed.extend(mark for mark, _ in marks.values())
        await super().__call__(marks)


async def commit_held() -> tuple[MemoryGroup, HeldMarks, Committer, LegPartition, Any]:
    """A timed commit under way, its mark save (5) held; the partition acknowledged further
    since (offset 20, mark 9)."""
    group, marks = MemoryGroup(), HeldMarks()
    c = committer(group, marks)
    p = replicating(0, 0)
    acknowledge(p, 0, 10, destination_end=5)
    timed = asyncio.create_task(c.commit([p]))
    await asyncio.sleep(0.01)
    assert marks.started == [5]  # held, like a coordinator not ready yet
    acknowledge(p, 10, 20, destination_end=9)
    return group, marks, c, p, timed


async def test_a_commit_under_way_is_waited_for_so_marks_and_offsets_never_move_back() -> None:
    """The final commit of a stop starts while a timed one is still retrying: it goes after
    it, so the newest mark and offset land last (else the stale retry overwrote them)."""
    group, marks, c, p, timed = await commit_held()
    final = asyncio.create_task(c.commit([p], within=5.0))
    await asyncio.sleep(0.01)
    assert marks.started == [5] and group.requests == [{p.tp: 10}]  # waiting its turn
    marks.release.set()
    await asyncio.gather(timed, final)
    assert marks.landed == [5, 9] and marks.saved == {TopicPartition("orders", 0): 9}
    assert group.requests == [{p.tp: 10}, {p.tp: 20}] and group.committed == {p.tp: 20}
    assert p.tracker is not None and not p.tracker.needs_commit


async def test_a_commit_that_cannot_have_its_turn_in_time_is_due_again() -> None:
    group, marks, c, p, timed = await commit_held()
    await c.commit([p], within=0.5)  # the held save never ends within it
    assert group.requests == [{p.tp: 10}] and marks.started == [5]
    marks.release.set()
    await timed
    await ticks(c, {p.tp: p}, 1)  # due again: the next timed commit takes it
    assert group.committed == {p.tp: 20} and marks.saved == {TopicPartition("orders", 0): 9}


async def test_a_partition_assigned_before_the_committer_existed_is_committed() -> None:
    group = MemoryGroup()
    p = replicating(3, 0)
    p.rewind(40, "replay")  # a position that must be committed, known before the hook
    c = committer(group, MemoryMarks())
    p.owe_commits_to(c.due)
    await ticks(c, {p.tp: p}, 1)
    assert group.committed == {p.tp: 40}


# Transitions that touch the tracker, in any order: whatever has something to commit is due.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 20)),
        st.tuples(st.just("ack"), st.integers(0, 3)),
        st.tuples(st.just("end_seen"), st.integers(0, 500)),
        st.tuples(st.just("rewind"), st.integers(0, 200)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("resume"), st.integers(0, 300)),
        st.tuples(st.just("replay_mark"), st.integers(0, 500)),
        st.tuples(st.just("commit"), st.booleans()),
    ),
    max_size=60,
)


@given(st.integers(0, 100), steps)
@settings(max_examples=300, deadline=None)
def test_whatever_a_tracker_owes_is_due(start: int, actions: list[tuple[str, Any]]) -> None:
    p = replicating(0, start)
    due: list[LegPartition] = []
    p.owe_commits_to(due.append)
    in_flight: list[tuple[Any, int]] = []  # (tracker, first) sent, not acknowledged
    destination_end = 1_000
    for kind, arg in actions:
        tracker = p.tracker
        assert tracker is not None
        if kind == "send" and p.open and p.mode is not Mode.STARTING:
            first = tracker.last_end
            sent = p.sending(p.epoch, first, first + arg)
            if sent is not None:
                in_flight.append((sent, first))
        elif kind == "ack" and in_flight:
            sent, first = in_flight.pop(min(arg, len(in_flight) - 1))
            destination_end += 10
            p.acknowledged(sent, first, destination_end)
        elif kind == "end_seen":
            p.destination_end_seen(destination_end + arg, tracker.last_end)
        elif kind == "rewind":
            p.rewind(arg, "log replaced")
        elif kind == "restart":
            p.restart("outcome unknown")
        elif kind == "resume" and p.mode is Mode.STARTING:
            p.resumed(Tail(origin_offset=arg, log_end=destination_end, scanned=1, seconds=0.0))
            p.prepared(new_batch)
        elif kind == "replay_mark":
            p.replay_from_mark(destination_end + arg)
        elif kind == "commit" and due:
            # What the committer does with what is due: commit it (or fail, keep it due).
            due.clear()
            t = p.tracker
            assert t is not None
            if arg:
                t.mark_committed(t.committable)
                if t.mark_to_save is not None:
                    mark = t.mark_to_save
                    t.mark_saved(mark)
            if t.needs_commit:
                due.append(p)
        tracker = p.tracker
        assert tracker is not None
        # The invariant: a tracker that owes a commit was reported since the last commit.
        if tracker.needs_commit:
            assert due, (kind, arg)
