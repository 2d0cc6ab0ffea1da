"""A sender accepts input only if it continues exactly where its destination stands."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from replicator.kafka import ClusterClient
from replicator.metrics import Metrics
from replicator.sender import PartitionSender, PartitionState
from replicator.settings import load_settings
from replicator.source import PartitionFanout
from replicator.topics import TopicProvisioner
from replicator.topology import Leg
from tests.unit.sample import Record

SETTINGS = load_settings(
    {
        "REPLICATOR_LOCAL_CLUSTER": "dc1",
        "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1:10",
    }
)


class Events:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def detach(self, _: PartitionSender) -> None:
        self.seen.append("detach")

    def attach(self, _: PartitionSender) -> None:
        self.seen.append("attach")

    def room(self, _: PartitionSender) -> None:
        self.seen.append("room")


_PRODUCERS: list[AIOKafkaProducer] = []


def _producer() -> AIOKafkaProducer:
    """A producer that is never started (the tests send nothing); closed after each test."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:10")
    _PRODUCERS.append(producer)
    return producer


@pytest.fixture(autouse=True)
async def _close_producers() -> AsyncIterator[None]:
    yield
    while _PRODUCERS:
        await _PRODUCERS.pop().stop()


def sender(
    next_offset: int | None, events: Events, max_records: int = 100, prepared: bool = True
) -> PartitionSender:
    """A sender; ``prepared``: as once its destination topic is known (it replicates)."""
    clients = [ClusterClient(a, SETTINGS.clusters[a], SETTINGS) for a in ("dc1", "dc2")]
    made = PartitionSender(
        leg=Leg("dc1", "dc2"),
        tp=TopicPartition("orders_REPLICA", 0),
        target_topic="orders",
        producer=_producer(),
        destination_ready=asyncio.Event(),
        topics=TopicProvisioner(clients[0], clients[1], None),
        metrics=Metrics(),
        max_records=max_records,
        max_bytes=1 << 20,
        next_offset=next_offset,
        on_detach=events.detach,
        on_attach=events.attach,
        on_room=events.room,
    )
    if prepared:
        made.state = PartitionState.REPLICATING
    return made


async def test_attached_sender_takes_continuing_chunks() -> None:
    events = Events()
    s = sender(None, events)
    assert s.joins(0, 10)  # no committed offset: starts wherever the feed starts
    target = s.target()
    assert target.start == 0
    s.take_built(target, 10)
    assert s.next_offset == 10
    assert s.joins(10, 20) and s.attached and events.seen == []


async def test_sender_ahead_of_the_feed_waits_attached() -> None:
    events = Events()
    s = sender(500, events)
    assert not s.joins(0, 100)
    assert s.attached and events.seen == []
    assert s.joins(450, 520) and s.target().start == 500


async def test_sender_the_feed_went_past_detaches() -> None:
    events = Events()
    s = sender(50, events)
    assert not s.joins(60, 70)
    assert not s.attached and events.seen == ["detach"]


async def test_detached_sender_reattaches_when_it_has_room_and_continues() -> None:
    events = Events()
    s = sender(50, events)
    s.detach()
    assert s.take_fetched([Record(o) for o in range(50, 60)], 50, 60)
    assert s.next_offset == 60
    assert s.joins(55, 65)  # overlaps where it stands: takes the feed again from 60
    assert s.attached and s.target().start == 60
    assert events.seen == ["detach", "attach"]


async def test_full_detached_sender_stays_detached() -> None:
    events = Events()
    s = sender(0, events, max_records=5)
    s.detach()
    assert not s.take_fetched([Record(o) for o in range(0, 10)], 0, 10)  # now full
    assert not s.joins(10, 20)
    assert not s.attached


async def test_fetched_records_must_continue_from_next_offset() -> None:
    events = Events()
    s = sender(100, events)
    assert not s.take_fetched([Record(100)], 100, 101), "refused while attached to the feed"
    s.detach()
    assert not s.take_fetched([Record(o) for o in range(120, 130)], 120, 130), "a gap"
    assert s.next_offset == 100
    assert s.take_fetched([Record(o) for o in range(90, 100)], 90, 100), "stale, ignored"
    assert s.next_offset == 100
    assert s.take_fetched([Record(o) for o in range(95, 105)], 95, 105)
    assert s.next_offset == 105


async def test_a_gap_in_the_source_is_skipped_in_order_behind_queued_work() -> None:
    events = Events()
    s = sender(10, events)
    s.detach()
    assert s.take_fetched([Record(o) for o in range(10, 20)], 10, 20)
    s.skip_to(50)  # the source deleted [20, 50) before this leg replicated it
    assert s.next_offset == 50
    s.take_fetched([Record(o) for o in range(20, 30)], 20, 30)  # stale: ignored
    assert s.status()["queued_records"] == 10
    assert s.take_fetched([Record(o) for o in range(50, 55)], 50, 55)
    assert s.status()["queued_records"] == 15


async def test_the_feed_judges_a_leg_beyond_the_log_end_only_on_a_later_fetch() -> None:
    events = Events()
    ahead = sender(1000, events)
    fanout = PartitionFanout(ahead.tp, [ahead], 0, lambda _: None, lambda _: None, 2.0)
    assert fanout.beyond_log_end(log_end=100, polled_ms=1) is None  # suspected only
    assert fanout.beyond_log_end(log_end=100, polled_ms=1) is None  # same response again
    assert fanout.beyond_log_end(log_end=100, polled_ms=2) == 1000  # confirmed


async def test_a_leg_that_fetched_past_a_stale_log_end_is_not_judged() -> None:
    events = Events()
    s = sender(150, events)
    fanout = PartitionFanout(s.tp, [s], 100, lambda _: None, lambda _: None, 2.0)
    assert fanout.beyond_log_end(log_end=120, polled_ms=1) is None
    assert fanout.beyond_log_end(log_end=200, polled_ms=2) is None  # the log had grown
    assert fanout.beyond_log_end(log_end=200, polled_ms=3) is None


async def test_a_sender_not_yet_prepared_leaves_the_feed_at_its_position() -> None:
    events = Events()
    s = sender(None, events, prepared=False)
    assert not s.joins(120, 130)  # batches wait for the destination topic's limits
    assert (s.attached, s.next_offset, events.seen) == (False, 120, ["detach"])
