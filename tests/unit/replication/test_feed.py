"""The shared feed's decisions, without a broker: its group consumer in memory behind the
:class:`~replicator.kafka.fetching.GroupSource` seam (:class:`~replicator.kafka.testing.
MemoryGroupSource`, rebalanced by the tests), and each leg as the feed uses it (a
:class:`~replicator.replication.feed.FeedLeg` holding real :class:`LegPartition`\\ s and the
leg's offset-reset policy).

Each test runs :meth:`SourceFeed.run` as the service does, on fake loop time, and checks record
by record what each leg's partitions queued (by source offset, exactly once, in order), which
positions the source was asked to fetch from, and what was counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from replicator.config.loading import load_settings
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, Leg, feeds_for
from replicator.config.values import OffsetResetPolicy
from replicator.kafka.decoding import Poison, undecodable_reason
from replicator.kafka.fetching import GroupSource
from replicator.kafka.testing import MemoryGroupSource
from replicator.model.offsets import OutOfRange
from replicator.model.records import SourceRecord
from replicator.replication.fanout import PartitionFanout
from replicator.replication.feed import SourceFeed
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import LegPartition
from replicator.replication.states import Mode
from replicator.telemetry.metrics import Metrics
from tests.unit.model.test_batching import new_batch
from tests.unit.replication.test_partition import gaps, offsets, partition, queued, records
from tests.unit.sample import Record
from tests.unit.waiting import until

TP = TopicPartition("orders_REPLICA", 0)
OTHER = TopicPartition("orders_REPLICA", 1)
DETACH_AFTER_S = 5.0


def log(first: int, end: int) -> list[SourceRecord]:
    """Source records at every offset of ``[first, end)``."""
    return [Record(o) for o in range(first, end)]


def settings(policy: OffsetResetPolicy = OffsetResetPolicy.EARLIEST) -> Settings:
    return load_settings(
        {
            "REPLICATOR_LOCAL_CLUSTER": "dc1",
            "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1:2",
            "REPLICATOR_DETACH_AFTER_MS": str(int(DETACH_AFTER_S * 1000)),
            "REPLICATOR_OFFSET_RESET_POLICY": policy.value,
        }
    )


class MemoryLeg:
    """A leg as the feed uses it: it takes the partitions it is assigned at its committed
    positions (``None``: never committed, the feed starts it by policy), prepares them when told,
    "sends" what they queued when told (:meth:`send`: the records by source offset, the skipped
    ranges), and on release sends what is queued and commits where each partition stands."""

    def __init__(
        self,
        leg: Leg,
        metrics: Metrics,
        policy: OffsetResetPolicy,
        committed: dict[TopicPartition, int | None],
        max_records: int = 1000,
    ) -> None:
        self.leg = leg
        self.committed = committed
        self.max_records = max_records
        self.partitions: dict[TopicPartition, LegPartition] = {}
        self.destination_up = True
        self.resets = OffsetResets(leg.name, policy, metrics)
        self.journal: list[tuple[str, list[TopicPartition]]] = []
        self.sent: dict[TopicPartition, list[int]] = {}
        self.skipped: dict[TopicPartition, list[tuple[int, int]]] = {}
        self.assigning = asyncio.Event()  # set once an assignment reached the leg
        self.may_assign = asyncio.Event()  # the leg takes its partitions once this is set
        self.may_assign.set()
        self.may_release = asyncio.Event()  # the leg drains its partitions once this is set
        self.may_release.set()

    async def assign(self, partitions: list[TopicPartition]) -> None:
        self.journal.append(("assign", list(partitions)))
        self.assigning.set()
        await self.may_assign.wait()
        for tp in partitions:
            position = self.committed.get(tp)
            self.partitions[tp] = LegPartition(
                tp, "orders", "dc1", position, self.max_records, 1 << 30, committed=True
            )

    def prepare(self) -> None:
        """The destination topics are ready: every starting partition is attached."""
        for each in self.partitions.values():
            each.prepared(new_batch)

    def send(self) -> None:
        """Take every queued work out, as the sender does, and note what it delivers."""
        for tp, each in self.partitions.items():
            for work in queued(each):
                self.sent.setdefault(tp, []).extend(offsets(work))
                self.skipped.setdefault(tp, []).extend(gaps(work))

    async def release(self, partitions: Iterable[TopicPartition]) -> None:
        released = [tp for tp in partitions if tp in self.partitions]
        if not released:
            return
        self.journal.append(("release", released))
        await self.may_release.wait()
        self.send()
        for tp in released:
            partition = self.partitions.pop(tp)
            self.committed[tp] = partition.position
            partition.stop()

    def out_of_range(self, tp: TopicPartition, found: OutOfRange) -> None:
        partition = self.partitions.get(tp)
        if partition is not None:
            self.resets.apply(partition, found)

    async def close_producer(self) -> None:
        self.journal.append(("close producer", []))


class JournalSource(MemoryGroupSource):
    """The in-memory group consumer, noting when each partition was paused and resumed."""

    def __init__(self, logs: dict[TopicPartition, list[SourceRecord]], per_fetch: int) -> None:
        super().__init__(logs, per_fetch)
        self.pauses: list[tuple[float, str, TopicPartition]] = []

    def pause(self, tp: TopicPartition) -> None:
        super().pause(tp)
        self.pauses.append((asyncio.get_running_loop().time(), "pause", tp))

    def resume(self, tp: TopicPartition) -> None:
        super().resume(tp)
        self.pauses.append((asyncio.get_running_loop().time(), "resume", tp))


@dataclass
class Rig:
    """The ``_REPLICA`` feed of dc1 over ``source``, feeding a local and a remote leg."""

    source: JournalSource
    local_committed: dict[TopicPartition, int | None] = field(default_factory=dict)
    remote_committed: dict[TopicPartition, int | None] = field(default_factory=dict)
    policy: OffsetResetPolicy = OffsetResetPolicy.EARLIEST
    remote_max_records: int = 1000
    metrics: Metrics = field(default_factory=Metrics)
    plan: FeedPlan = field(init=False)
    local: MemoryLeg = field(init=False)
    remote: MemoryLeg = field(init=False)
    feed: SourceFeed[MemoryLeg] = field(init=False)

    def __post_init__(self) -> None:
        configured = settings(self.policy)
        self.plan = feeds_for(configured)[0]
        local, remote = self.plan.legs
        assert (local.name, remote.name) == ("dc1->dc1", "dc1->dc2")
        self.local = MemoryLeg(local, self.metrics, self.policy, self.local_committed)
        self.remote = MemoryLeg(
            remote, self.metrics, self.policy, self.remote_committed, self.remote_max_records
        )

        async def connect() -> GroupSource:
            return self.source

        self.feed = SourceFeed(
            configured, self.plan, self.metrics, [self.local, self.remote], connect=connect
        )

    @property
    def legs(self) -> list[MemoryLeg]:
        return [self.local, self.remote]

    async def assigned(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """A rebalance gives the feed ``partitions`` (all by default); the legs prepare them."""
        await self.source.rebalance(partitions)
        await self.feed.taken()
        for leg in self.legs:
            leg.prepare()

    def send(self) -> None:
        for leg in self.legs:
            leg.send()

    def counted(self, name: str, leg: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(name, {"leg": leg, **labels})
        return 0.0 if found is None else found


@asynccontextmanager
async def running(rig: Rig) -> AsyncIterator[asyncio.Event]:
    """The feed running (as the service's task) for the duration of the block, subscribed."""
    stop = asyncio.Event()
    task = asyncio.create_task(rig.feed.run(stop))
    try:
        await joined(rig.source)
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def joined(source: MemoryGroupSource) -> None:
    """Let the feed connect and subscribe, with no time passing (holds then start at 0 s: the
    detach wait is added to round numbers, exactly)."""
    for _ in range(100):
        if source.subscribed:
            return
        await asyncio.sleep(0)
    raise AssertionError("the feed never subscribed")


async def test_an_assignment_starts_each_partition_at_the_lowest_position_of_the_legs() -> None:
    source = JournalSource({TP: log(0, 40), OTHER: log(0, 40)}, per_fetch=100)
    source.delete_before(OTHER, 5)
    rig = Rig(source, local_committed={TP: 30}, remote_committed={TP: 10})
    async with running(rig):
        await rig.assigned()
        assert rig.local.journal == rig.remote.journal == [("assign", [TP, OTHER])]
        await until(
            lambda: all(p.position == 40 for leg in rig.legs for p in leg.partitions.values())
        )
        rig.send()
        # TP from the remote leg's 10 (the local one, ahead, waits for the feed); OTHER,
        # committed by neither leg, from its log start.
        assert source.fetches_of(TP)[0] == 10 and source.fetches_of(OTHER)[0] == 5
        assert rig.local.sent == {TP: list(range(30, 40)), OTHER: list(range(5, 40))}
        assert rig.remote.sent == {TP: list(range(10, 40)), OTHER: list(range(5, 40))}

        source.append(TP, log(40, 45))  # every attached leg takes what follows, once
        await until(lambda: all(leg.partitions[TP].position == 45 for leg in rig.legs))
        rig.send()
        assert rig.local.sent[TP] == list(range(30, 45))
        assert rig.remote.sent[TP] == list(range(10, 45))
        assert all(p.attached for leg in rig.legs for p in leg.partitions.values())
        assert rig.feed.status()["assigned_partitions"] == 2 and rig.feed.problems() == []
    assert rig.counted("replicator_rebalances_total", "dc1->dc2") == 1


async def test_a_slow_leg_is_detached_after_the_detach_wait_and_the_others_go_on() -> None:
    source = JournalSource({TP: log(0, 100)}, per_fetch=10)
    rig = Rig(source, local_committed={TP: 0}, remote_committed={TP: 0}, remote_max_records=10)
    loop = asyncio.get_running_loop()
    async with running(rig):
        await rig.assigned([TP])
        slow = rig.remote.partitions[TP]
        modes: list[tuple[float, Mode]] = []
        slow.watch(lambda p: modes.append((loop.time(), p.mode)))
        await until(lambda: not slow.has_room)
        held_at = source.pauses[-1][0]
        assert source.pauses[-1][1:] == ("pause", TP)
        assert slow.position == 10 and slow.attached
        await until(lambda: rig.local.partitions[TP].position == 100)
        assert modes == [(held_at + DETACH_AFTER_S, Mode.ALONE)]  # exactly the detach wait
        assert source.pauses[-1] == (held_at + DETACH_AFTER_S, "resume", TP)
        rig.send()
    assert rig.local.sent[TP] == list(range(100))
    assert rig.remote.sent[TP] == list(range(10))  # the rest is its catch-up fetch's
    assert source.fetches_of(TP) == list(range(0, 100, 10)) + [100] * (
        len(source.fetches_of(TP)) - 10
    )


async def test_a_revocation_waits_for_the_legs_to_drain_and_commit() -> None:
    source = JournalSource({TP: log(0, 20), OTHER: log(0, 20)}, per_fetch=100)
    rig = Rig(source, local_committed={TP: 0, OTHER: 0}, remote_committed={TP: 0, OTHER: 0})
    async with running(rig):
        await rig.assigned()
        await until(
            lambda: all(p.position == 20 for leg in rig.legs for p in leg.partitions.values())
        )
        for leg in rig.legs:
            leg.may_release.clear()
        rebalance = asyncio.create_task(rig.source.rebalance([OTHER]))
        await asyncio.sleep(10)
        assert not rebalance.done()  # the group waits for the legs to drain and commit
        assert [leg.journal[-1] for leg in rig.legs] == [("release", [TP, OTHER])] * 2
        for leg in rig.legs:
            leg.may_release.set()
        await rebalance
        await rig.feed.taken()  # OTHER handed to the legs after the group's callback returned
        for leg in rig.legs:
            leg.prepare()
        assert [leg.committed for leg in rig.legs] == [{TP: 20, OTHER: 20}] * 2
        assert [leg.sent for leg in rig.legs] == [{TP: list(range(20)), OTHER: list(range(20))}] * 2
        fetched_tp, fetched_other = len(source.fetches_of(TP)), len(source.fetches_of(OTHER))

        # OTHER again from what was committed, nothing twice; TP no longer fetched
        source.append(OTHER, log(20, 25))
        source.append(TP, log(20, 25))
        await until(lambda: all(leg.partitions[OTHER].position == 25 for leg in rig.legs))
        rig.send()
        assert [leg.sent[OTHER] for leg in rig.legs] == [list(range(25))] * 2
        assert [leg.sent[TP] for leg in rig.legs] == [list(range(20))] * 2
        assert len(source.fetches_of(TP)) == fetched_tp
        assert source.fetches_of(OTHER)[fetched_other] == 20
        assert rig.feed.status()["assigned_partitions"] == 1
    assert [leg.journal for leg in rig.legs] == [
        [
            ("assign", [TP, OTHER]),
            ("release", [TP, OTHER]),
            ("assign", [OTHER]),
            ("release", [OTHER]),  # the stop releases what is left
        ]
    ] * 2


async def test_a_position_below_the_log_start_applies_the_policy_on_every_leg() -> None:
    source = JournalSource({TP: log(0, 30)}, per_fetch=100)
    source.delete_before(TP, 10)
    rig = Rig(source, local_committed={TP: 4}, remote_committed={TP: 6})
    async with running(rig):
        await rig.assigned()
        await until(lambda: all(leg.partitions[TP].position == 30 for leg in rig.legs))
        rig.send()
    assert source.fetches_of(TP)[:2] == [4, 10]  # the lowest position, then the log start
    assert [leg.sent[TP] for leg in rig.legs] == [list(range(10, 30))] * 2
    assert [leg.skipped[TP] for leg in rig.legs] == [[(4, 10)], [(6, 10)]]
    for leg, lost in (("dc1->dc1", 6), ("dc1->dc2", 4)):
        reason = {"topic": "orders", "reason": "below_log_start"}
        assert rig.counted("replicator_offset_resets_total", leg, **reason) == 1
        assert rig.counted("replicator_records_lost_total", leg, topic="orders") == lost


async def test_a_position_below_the_log_start_halts_the_partition_under_the_halt_policy() -> None:
    source = JournalSource({TP: log(0, 30)}, per_fetch=100)
    source.delete_before(TP, 10)
    rig = Rig(source, {TP: 4}, {TP: 4}, policy=OffsetResetPolicy.HALT)
    async with running(rig):
        await rig.assigned()
        await until(lambda: all(leg.partitions[TP].halted for leg in rig.legs))
        await asyncio.sleep(10)
        assert source.fetches_of(TP) == [4]  # halted on every leg: nothing more to fetch
        assert all(leg.partitions[TP].position == 4 for leg in rig.legs)
        rig.send()
    assert [leg.sent for leg in rig.legs] == [{}, {}]
    assert rig.counted("replicator_records_lost_total", "dc1->dc2", topic="orders") == 6


async def test_a_record_that_cannot_be_decoded_halts_its_partition_on_every_leg() -> None:
    source = JournalSource({TP: log(0, 20), OTHER: log(0, 20)}, per_fetch=100)
    source.poison(TP, 12, "CorruptRecordError")
    rig = Rig(source, {TP: 0, OTHER: 0}, {TP: 0, OTHER: 0})
    async with running(rig):
        await rig.assigned()
        await until(lambda: all(leg.partitions[TP].poisoned for leg in rig.legs))
        source.append(OTHER, log(20, 30))
        await until(lambda: all(leg.partitions[OTHER].position == 30 for leg in rig.legs))
        await asyncio.sleep(10)
        assert source.fetches_of(TP) == [0] and TP in source.paused()
        works = [queued(leg.partitions[TP]) for leg in rig.legs]
        rig.send()
    reason = undecodable_reason(Poison(TP, 12, "CorruptRecordError"))
    for leg_works in works:
        assert [o for w in leg_works for o in offsets(w)] == list(range(12))
        assert (leg_works[-1].start, leg_works[-1].poison) == (12, reason)
    assert [leg.sent[OTHER] for leg in rig.legs] == [list(range(30))] * 2


async def test_the_groups_callback_returns_before_the_legs_take_the_assignment() -> None:
    """The group client sends no heartbeat while its assignment callback runs: the feed pauses
    what it was given and returns; the legs take it meanwhile (the feed not ready: it says so)
    and fetching starts once they did. A revocation meanwhile waits for them to finish, then
    releases: nothing is taken twice or released before it was taken."""
    source = JournalSource({TP: log(0, 20), OTHER: log(0, 20)}, per_fetch=100)
    rig = Rig(source, {TP: 0, OTHER: 0}, {TP: 0, OTHER: 0})
    async with running(rig):
        rig.remote.may_assign.clear()
        await asyncio.wait_for(source.rebalance(), 1)  # returned while the remote leg waits
        assert sorted(source.paused()) == [TP, OTHER] and source.fetches_of(TP) == []
        assert rig.feed.problems() == [
            "source feed: 2 partitions assigned, handing them to the legs"
        ]
        revoking = asyncio.create_task(source.rebalance([OTHER]))
        await asyncio.sleep(5)
        assert not revoking.done()  # waits for the legs to have taken the first assignment
        assert [leg.journal for leg in rig.legs] == [[("assign", [TP, OTHER])]] * 2
        rig.remote.may_assign.set()
        await revoking
        await rig.feed.taken()
        assert [leg.journal for leg in rig.legs] == [
            [("assign", [TP, OTHER]), ("release", [TP, OTHER]), ("assign", [OTHER])]
        ] * 2
        assert rig.feed.problems() == []
        for leg in rig.legs:
            leg.prepare()
        await until(lambda: all(leg.partitions[OTHER].position == 20 for leg in rig.legs))
        rig.send()
    assert [leg.sent for leg in rig.legs] == [{OTHER: list(range(20))}] * 2
    assert source.fetches_of(TP) == []


async def test_a_stop_during_an_assignment_starts_nothing() -> None:
    """The legs were still taking the partitions when stop came: the feed fetches none of
    them and leaves (the legs release what they took when they close)."""
    source = JournalSource({TP: log(0, 20)}, per_fetch=100)
    rig = Rig(source, {TP: 0}, {TP: 0})
    stop = asyncio.Event()
    task = asyncio.create_task(rig.feed.run(stop))
    await joined(source)
    rig.remote.may_assign.clear()
    rebalance = asyncio.create_task(source.rebalance())
    await until(rig.remote.assigning.is_set)
    stop.set()
    rig.remote.may_assign.set()
    await rebalance
    await asyncio.wait_for(task, 30)
    assert source.fetches_of(TP) == [] and TP in source.paused()
    assert rig.feed.status()["assigned_partitions"] == 0
    assert [leg.journal for leg in rig.legs] == [[("assign", [TP])]] * 2
    assert source.closed


async def test_an_assignment_after_stop_reaches_no_leg() -> None:
    source = JournalSource({TP: log(0, 20)}, per_fetch=100)
    rig = Rig(source, {TP: 0}, {TP: 0})
    stop = asyncio.Event()
    task = asyncio.create_task(rig.feed.run(stop))
    await joined(source)
    stop.set()
    await source.rebalance()
    await asyncio.wait_for(task, 30)
    assert source.fetches_of(TP) == [] and TP in source.paused()
    assert [leg.journal for leg in rig.legs] == [[], []]
    assert not rig.feed.joined


def test_a_full_partition_given_up_at_the_feeds_position_stays_alone() -> None:
    """Detached because it was full, at the feed's position (the feed had nothing newer): it
    is not attached again until it has room, or it would hold the feed once more."""
    full = partition(0, Mode.ATTACHED, max_records=10)
    roomy = partition(0, Mode.ATTACHED)
    fanout = PartitionFanout(TP, [full, roomy], 0)
    fanout.deliver(records(0, 10), 1_800_000_000_000)
    assert fanout.blocking() == [full]
    fanout.give_up(fanout.blocking())
    fanout.settle()
    assert full.mode is Mode.ALONE and fanout.blocking() == []
    assert [offsets(w) for w in queued(full)] == [list(range(10))]  # room again
    fanout.settle()
    assert full.attached and roomy.attached


def test_a_fanout_is_held_only_while_it_waits_for_a_leg() -> None:
    full = partition(0, Mode.ATTACHED, max_records=10)
    fanout = PartitionFanout(TP, [full, partition(0, Mode.ATTACHED)], 0)
    assert not fanout.hold(1.0) and fanout.held_since is None  # nothing to wait for
    fanout.deliver(records(0, 10), 1_800_000_000_000)
    assert fanout.hold(1.0) and fanout.hold_ends(DETACH_AFTER_S) == 6.0
    assert not fanout.hold(2.0) and fanout.held_since == 1.0  # held once, from the first time
    assert fanout.unhold() and not fanout.unhold() and fanout.held_since is None
