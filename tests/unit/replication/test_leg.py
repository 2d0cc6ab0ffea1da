"""A leg's life, without a broker: a real :class:`LegRunner` (its partitions, senders, catch-up
fetch, committer and health) over in-memory connections (:mod:`replicator.replication.testing`):
source logs and the leg's group offsets in memory, the sender's in-memory destination
(``tests/unit/replication/destinations.py``) and in-memory topic admins.

Each test runs the leg as the service does (start the source consumer, run, let the shared feed
assign and release partitions, stop), on fake loop time, and checks where each partition
starts, what the destination holds record by record (by origin offset), what was committed,
what the leg reports, and what it closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

from aiokafka import TopicPartition

from replicator.config.loading import load_settings
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, feeds_for
from replicator.config.values import StartPosition, TakeOver
from replicator.errors import ClusterUnavailable
from replicator.lifecycle import StopDeadline
from replicator.model.records import SourceRecord
from replicator.replication.leg import LegRunner
from replicator.replication.partition import LegPartition
from replicator.replication.states import Mode
from replicator.replication.testing import MemoryLegConnections, MemoryLegSource
from replicator.replication.upkeep import MARK_REFRESH_S
from replicator.telemetry.metrics import Metrics
from tests.unit.replication.destinations import MemoryDestination, Stored
from tests.unit.sample import Record
from tests.unit.topics.test_provisioning import MemoryAdmin
from tests.unit.waiting import until

ENV = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1:2",
    "REPLICATOR_COMMIT_INTERVAL_MS": "1000",
}
P0 = TopicPartition("orders_REPLICA", 0)
P1 = TopicPartition("orders_REPLICA", 1)
DOWN = ClusterUnavailable("dc2 does not answer")


def log(first: int, end: int) -> list[SourceRecord]:
    """Source records at every offset of ``[first, end)``."""
    return [Record(o) for o in range(first, end)]


def target(tp: TopicPartition) -> TopicPartition:
    return TopicPartition(tp.topic.removesuffix("_REPLICA"), tp.partition)


@dataclass
class MemoryLegDestination(MemoryDestination):
    """The sender's in-memory destination, as a leg connects it (not ready until then) and
    keeps its marks."""

    idempotent: bool | None = None
    saved: list[dict[TopicPartition, tuple[int, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        pass  # connected by the leg

    @property
    def tail(self) -> MemoryLegDestination:
        return self

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.logs.get(tp, [])) for tp in partitions}

    async def save_marks(
        self, marks: dict[TopicPartition, tuple[int, int]], timeout: float
    ) -> None:
        self.saved.append(dict(marks))
        self.marks.update({tp: mark for tp, (mark, _) in marks.items()})
        self.covers.update({tp: offset for tp, (_, offset) in marks.items()})


@dataclass
class Rig:
    """One leg from dc1 into dc2 over in-memory connections."""

    source: MemoryLegSource
    env: dict[str, str] = field(default_factory=dict)
    start_from: StartPosition = StartPosition.EARLIEST
    take_over: TakeOver = TakeOver.NONE
    predecessor: dict[TopicPartition, int] = field(default_factory=dict)
    destination: MemoryLegDestination = field(default_factory=MemoryLegDestination)
    metrics: Metrics = field(default_factory=Metrics)
    settings: Settings = field(init=False)
    plan: FeedPlan = field(init=False)
    connections: MemoryLegConnections = field(init=False)
    stopping: StopDeadline = field(init=False)
    runner: LegRunner = field(init=False)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.settings = load_settings({**ENV, **self.env})
        (replica,) = feeds_for(self.settings)
        self.plan = replace(replica, start_from=self.start_from, take_over=self.take_over)
        (leg,) = (leg for leg in self.plan.legs if leg.destination == "dc2")
        partitions = len({tp.partition for tp in self.source.assignment()})
        self.connections = MemoryLegConnections(
            self.source,
            self.destination,
            MemoryAdmin("dc1", {"orders_REPLICA": partitions}),
            MemoryAdmin("dc2"),
            self.predecessor,
        )
        self.stopping = StopDeadline(self.settings.shutdown_grace_ms / 1000)
        self.runner = LegRunner(
            leg, self.settings, self.plan, self.metrics, self.connections, None, self.stopping
        )

    def partition(self, tp: TopicPartition) -> LegPartition:
        return self.runner.partitions[tp]

    def held(self, tp: TopicPartition) -> list[int]:
        """The origin offsets the destination holds of ``tp``, in log order."""
        return self.destination.origins(target(tp), self.partition(tp).tagger)

    async def fed_alone(self, *tps: TopicPartition) -> None:
        """Once prepared, ``tps`` are behind the shared feed: the catch-up fetch feeds them."""
        await until(lambda: all(self.partition(tp).mode is not Mode.STARTING for tp in tps))
        for tp in tps:
            self.partition(tp).detach()

    def counted(self, name: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(
            name, {"leg": self.runner.leg.name, **labels}
        )
        return 0.0 if found is None else found


@asynccontextmanager
async def running(rig: Rig) -> AsyncIterator[asyncio.Task[None]]:
    """The leg started and running, as the service runs it, for the duration of the block; then
    stopped as the service stops it (stop, release every partition, close)."""
    assert await rig.runner.start_source(rig.stop)
    task = asyncio.create_task(rig.runner.run(rig.stop))
    try:
        yield task
    finally:
        rig.stopping.start()
        rig.stop.set()
        await rig.runner.close_partitions()
        await asyncio.wait_for(task, 30)


async def test_each_assigned_partition_starts_at_its_committed_offset_else_the_log_start() -> None:
    source = MemoryLegSource({P0: log(0, 10), P1: log(0, 10)}, group={P1: 6})
    source.delete_before(P0, 3)  # retention: offset 0 is long gone
    rig = Rig(source)
    async with running(rig):
        await rig.runner.assign([P0, P1])
        assert rig.partition(P0).position == 3
        assert rig.partition(P1).position == 6
        assert source.assignment() == {P0, P1}
        assert (source.position(P0), source.position(P1)) == (3, 6)
        assert source.paused() == {P0, P1}  # the catch-up fetch resumes what it feeds
        assert source.commits == []  # the log start is not committed before a record is
        assert rig.runner.taking_over is False


async def test_a_plan_starting_at_the_latest_commits_the_log_end_of_new_partitions_at_once() -> (
    None
):
    source = MemoryLegSource({P0: log(0, 10), P1: log(0, 4)}, group={P1: 2})
    rig = Rig(source, start_from=StartPosition.LATEST)
    async with running(rig):
        await rig.runner.assign([P0, P1])
        assert rig.partition(P0).position == 10
        assert rig.partition(P1).position == 2  # committed: where it stood
        assert source.commits[0] == {P0: 10}


async def test_a_first_position_that_cannot_be_read_is_left_to_the_shared_feed() -> None:
    source = MemoryLegSource({P0: log(0, 10)})

    async def unanswered(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        raise DOWN

    source.log_starts = unanswered  # type: ignore[method-assign]
    rig = Rig(source)
    async with running(rig):
        await rig.runner.assign([P0])
        assert rig.partition(P0).position is None  # the feed places it where it starts
        assert source.position(P0) == 0


async def test_records_fed_through_the_catch_up_fetch_reach_the_destination_in_order() -> None:
    source = MemoryLegSource({P0: log(0, 50), P1: log(0, 20)}, per_fetch=7)
    source.delete_before(P1, 5)
    rig = Rig(source)
    async with running(rig):
        await rig.runner.assign([P0, P1])
        await rig.fed_alone(P0, P1)
        await until(lambda: len(rig.held(P0)) == 50 and len(rig.held(P1)) == 15)
        assert rig.held(P0) == list(range(50))
        assert rig.held(P1) == list(range(5, 20))
        assert source.fetches_of(P0)[:8] == [0, 7, 14, 21, 28, 35, 42, 49]
        # The committer commits on its interval what the destination acknowledged.
        await until(lambda: source.committed_offset(P0) == 50)
        assert source.committed_offset(P1) == 20
        assert all(set(commit) <= {P0, P1} for commit in source.commits)
        assert rig.destination.marks.keys() == {target(P0), target(P1)}
        source.append(P0, log(50, 53))
        await until(lambda: len(rig.held(P0)) == 53)
        assert rig.held(P0) == list(range(53))
        assert rig.runner.last_error is None
    assert rig.counted("replicator_commits_total", outcome="failed") == 0


async def test_released_partitions_are_drained_and_committed_and_the_others_continue() -> None:
    source = MemoryLegSource({P0: log(0, 30), P1: log(0, 30)})
    rig = Rig(source, env={"REPLICATOR_COMMIT_INTERVAL_MS": "600000"})  # no timed commit
    async with running(rig):
        await rig.runner.assign([P0, P1])
        await rig.fed_alone(P0, P1)
        await until(lambda: len(rig.held(P0)) == 30 and len(rig.held(P1)) == 30)
        rig.destination.hold()  # what P0 sends next stays unanswered for a while
        source.append(P0, log(30, 40))
        source.append(P1, log(30, 32))
        await until(lambda: rig.partition(P0).position == 40)
        assert source.commits == []
        released = rig.partition(P0)
        loop = asyncio.get_running_loop()
        loop.call_later(2, rig.destination.release)
        began = loop.time()
        await rig.runner.release([P0])
        assert loop.time() - began == 2  # waited for the answers
        assert released.mode is Mode.STOPPED
        assert source.commits == [{P0: 40}]  # every record it sent was acknowledged
        assert rig.destination.origins(target(P0), released.tagger) == list(range(40))
        assert P0 not in rig.runner.partitions
        assert source.assignment() == {P1}
        source.append(P1, log(32, 35))  # P1 goes on from where it stood
        await until(lambda: len(rig.held(P1)) == 35)
        assert rig.held(P1) == list(range(35))


async def test_a_destination_that_fails_to_connect_is_retried_and_reported() -> None:
    source = MemoryLegSource({P0: log(0, 5)})
    rig = Rig(source)
    rig.connections.fail_destination(DOWN, DOWN)
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with running(rig):
        await until(lambda: rig.connections.journal.count("destination refused") == 1)
        assert rig.runner.last_error == "cannot connect to dc2: dc2 does not answer"
        assert not rig.runner.destination_up
        await rig.runner.assign([P0])
        await rig.destination.ready.wait()
        assert loop.time() - began == 4  # two retries, 2 s apart
        await until(lambda: rig.runner.last_error is None)
        assert rig.connections.journal[:4] == [
            "source started",
            "destination refused",
            "destination refused",
            "destination connected",
        ]
        assert rig.runner.last_error is None
        assert rig.runner.destination_up
        await rig.fed_alone(P0)
        await until(lambda: len(rig.held(P0)) == 5)
        assert rig.held(P0) == list(range(5))
        rig.connections.destination_error = "dc2: probe timed out"  # the probe's verdict
        assert not rig.runner.destination_up
        assert rig.runner.destination_error == "dc2: probe timed out"
    assert rig.counted("replicator_idempotent_producer") == 0


async def test_a_source_consumer_that_fails_to_start_is_retried_until_stop() -> None:
    source = MemoryLegSource({P0: log(0, 5)})
    rig = Rig(source)
    rig.connections.fail_source(DOWN)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await rig.runner.start_source(rig.stop)
    assert loop.time() - began == 2
    assert rig.runner.last_error is None
    assert rig.runner.source_connected

    refused = Rig(MemoryLegSource({P0: log(0, 5)}))
    refused.connections.fail_source(*[DOWN] * 10)
    loop.call_later(3, refused.stop.set)
    assert not await refused.runner.start_source(refused.stop)
    assert refused.runner.last_error == "cannot connect to dc1: dc2 does not answer"
    assert not refused.runner.source_connected


async def test_stop_releases_every_partition_commits_and_closes_every_client() -> None:
    source = MemoryLegSource({P0: log(0, 20), P1: log(0, 10)})
    rig = Rig(source, env={"REPLICATOR_COMMIT_INTERVAL_MS": "600000"})
    async with running(rig) as task:
        await rig.runner.assign([P0, P1])
        await rig.fed_alone(P0, P1)
        await until(lambda: len(rig.held(P0)) == 20 and len(rig.held(P1)) == 10)
        partitions = [rig.partition(P0), rig.partition(P1)]
        assert source.commits == []
    assert task.done() and task.exception() is None
    assert source.commits == [{P0: 20, P1: 10}]  # one commit of both at release
    assert [p.mode for p in partitions] == [Mode.STOPPED, Mode.STOPPED]
    assert rig.runner.partitions == {}
    assert rig.connections.journal[-2:] == [
        "destination reader closed",
        "destination producer closed",
    ]
    assert source.closed
    await rig.runner.assign([P0])  # a rebalance after stop starts nothing
    assert rig.runner.partitions == {}


async def test_the_producer_closed_before_the_group_is_left_is_not_closed_again() -> None:
    rig = Rig(MemoryLegSource({P0: log(0, 5)}))
    async with running(rig):
        await rig.runner.assign([P0])
        rig.stopping.start()
        await rig.runner.close_producer()
    assert rig.connections.journal.count("destination producer closed") == 1
    assert rig.connections.journal[-1] == "destination reader closed"


async def test_a_flow_taking_over_starts_new_partitions_where_its_predecessor_stood() -> None:
    source = MemoryLegSource({P0: log(0, 30), P1: log(0, 30)}, group={P1: 12})
    rig = Rig(source, take_over=TakeOver.MIRRORMAKER1, predecessor={P0: 25, P1: 3})
    for tp, covered in ((P0, 25), (P1, 12)):  # as the takeover and the leg's commit left them
        rig.destination.marks[target(tp)] = 0
        rig.destination.covers[target(tp)] = covered
    assert rig.runner.taking_over
    async with running(rig):
        await rig.runner.assign([P0, P1])
        assert rig.partition(P0).position == 25  # where MirrorMaker stood
        assert rig.partition(P1).position == 12  # the leg's own commit wins
        assert source.commits == [{P0: 25}]
        assert not rig.runner.taking_over
        assert rig.runner.takeover is not None
        assert rig.runner.takeover["partitions"] == {"taken over": 1}
        await rig.fed_alone(P0)
        await until(lambda: len(rig.held(P0)) == 5)
        assert rig.held(P0) == list(range(25, 30))
    assert rig.counted("replicator_partitions_taken_over_total", outcome="taken over") == 1


async def test_an_idle_partitions_destination_mark_rises_to_the_destination_log_end() -> None:
    source = MemoryLegSource({P0: log(0, 10)})
    rig = Rig(source)
    async with running(rig):
        await rig.runner.assign([P0])
        await rig.fed_alone(P0)
        await until(lambda: source.committed_offset(P0) == 10)
        assert rig.destination.marks[target(P0)] == 10  # saved with the commit: its log end
        # Others write to the destination partition meanwhile (another origin's records).
        written = rig.destination.logs[target(P0)]
        written.extend(Stored(len(written) + i, b"k", b"v", ()) for i in range(5))
        saved = len(rig.destination.saved)
        await asyncio.sleep(MARK_REFRESH_S + 1)  # the next refresh, and the commit after it
        assert rig.destination.marks[target(P0)] == 15
        assert rig.destination.covers[target(P0)] == 10
        assert len(rig.destination.saved) == saved + 1
        assert source.committed_offset(P0) == 10


async def test_a_takeover_waiting_for_the_destination_starts_nothing_when_stop_comes() -> None:
    source = MemoryLegSource({P0: log(0, 30)})
    rig = Rig(source, take_over=TakeOver.MIRRORMAKER1, predecessor={P0: 25})
    rig.connections.fail_destination(*[DOWN] * 100)
    async with running(rig):
        assigning = asyncio.create_task(rig.runner.assign([P0]))
        await asyncio.sleep(10)
        assert not assigning.done()  # the takeover reads the target: it waits for it
        assert rig.runner.taking_over
    await asyncio.wait_for(assigning, 1)
    assert rig.runner.partitions == {}
    assert source.commits == []
    assert rig.runner.takeover is None
