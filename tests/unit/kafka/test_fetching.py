"""The aiokafka side of the fetch seam (:class:`ConsumerSource`, :class:`GroupConsumerSource`): a
fetch's out-of-range answer becomes a result, every other failure a :mod:`replicator.errors`
error, a group's rebalances reach the feed's callbacks; and the in-memory sources answer as
those consumers do (:class:`MemorySource`, :class:`MemoryGroupSource`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiokafka.errors as kerr
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.errors import ClusterUnavailable, KafkaFailure
from replicator.kafka.decoding import Poison
from replicator.kafka.fetching import ConsumerSource, Fetched, GroupConsumerSource, GroupSource
from replicator.kafka.testing import MemoryGroupSource, MemorySource
from replicator.model.offsets import OutOfRange
from tests.unit.sample import Record

TP = TopicPartition("orders_REPLICA", 0)


def _offsets(fetched: Fetched) -> list[int]:
    """The offsets of the records of ``TP`` a fetch of a memory source brought (decoded)."""
    records = fetched.records[TP]
    assert isinstance(records, Sequence)
    return [r.offset for r in records]


@pytest.fixture
async def consumer() -> AsyncIterator[AIOKafkaConsumer]:
    """A real consumer, never started (its ``getmany`` replaced per test)."""
    real = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", enable_auto_commit=False)
    try:
        yield real
    finally:
        await real.stop()


def raising(exc: BaseException) -> Any:
    async def getmany(*_: Any, **__: Any) -> Any:
        raise exc

    return getmany


async def test_a_fetch_out_of_range_is_a_result(consumer: AIOKafkaConsumer) -> None:
    consumer.getmany = raising(kerr.OffsetOutOfRangeError({TP: 42}))
    assert await ConsumerSource(consumer).fetch(200) == Fetched(out_of_range={TP: 42})


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (kerr.KafkaConnectionError(), ClusterUnavailable),
        (kerr.OffsetOutOfRangeError("no positions"), KafkaFailure),
        (ClusterUnavailable("already ours"), ClusterUnavailable),
    ],
)
async def test_any_other_fetch_failure_is_raised_translated(
    consumer: AIOKafkaConsumer, raised: Exception, expected: type[Exception]
) -> None:
    consumer.getmany = raising(raised)
    with pytest.raises(expected) as caught:
        await ConsumerSource(consumer).fetch(200)
    assert caught.value is raised or caught.value.__cause__ is raised


async def test_records_are_handed_over_as_fetched(consumer: AIOKafkaConsumer) -> None:
    records = {TP: [Record(5), Record(6)]}

    async def getmany(*, timeout_ms: int) -> Any:
        assert timeout_ms == 200
        return records

    consumer.getmany = getmany
    assert await ConsumerSource(consumer).fetch(200) == Fetched(records)  # type: ignore[arg-type]


async def test_memory_source_reads_from_positions_and_reports_what_a_consumer_would() -> None:
    other = TopicPartition("orders_REPLICA", 1)
    source = MemorySource({TP: [Record(o) for o in range(10)], other: []}, per_fetch=4)
    assert source.assignment() == {TP, other} and source.paused() == {TP, other}
    assert await source.fetch(200) == Fetched()  # everything paused: nothing, after the wait
    source.seek(TP, 2)
    source.resume(TP)
    fetched = await source.fetch(200)
    assert _offsets(fetched) == [2, 3, 4, 5]
    assert source.position_after(TP) == 6
    source.markers(TP, 3)
    assert _offsets(await source.fetch(200)) == [6, 7, 8, 9]
    assert source.position_after(TP) == 13  # past the markers after the last record
    source.poison(TP, 14)
    source.append(TP, [Record(13), Record(14), Record(15)])
    assert _offsets(await source.fetch(200)) == [13]
    assert source.poisoned() == [Poison(TP, 14, "undecodable")] and source.poisoned() == []
    assert source.position_after(TP) == 14
    source.delete_before(TP, 15)
    assert await source.fetch(200) == Fetched(out_of_range={TP: 14})
    assert await source.bounds(TP, 14) == OutOfRange(14, 15, 16)
    assert await source.bounds(TP, 16) is None
    assert source.fetches_of(TP) == [2, 6, 13, 14]
    with pytest.raises(LookupError):
        source.seek(TopicPartition("elsewhere", 0), 0)


async def test_a_group_fetch_before_a_position_is_set_hands_nothing_over(
    consumer: AIOKafkaConsumer,
) -> None:
    """Between an assignment and the feed setting the positions, aiokafka says a partition has
    none: nothing to hand over yet, for the group's consumer only."""
    consumer.getmany = raising(kerr.NoOffsetForPartitionError(TP))
    assert await GroupConsumerSource(consumer).fetch(200) == Fetched()
    with pytest.raises(KafkaFailure):
        await ConsumerSource(consumer).fetch(200)


async def test_a_group_subscription_hands_rebalances_to_the_callbacks(
    consumer: AIOKafkaConsumer,
) -> None:
    subscribed: dict[str, Any] = {}

    def subscribe(*, pattern: str, listener: Any) -> None:
        subscribed.update(pattern=pattern, listener=listener)

    consumer.subscribe = subscribe
    calls: list[tuple[str, list[TopicPartition]]] = []

    async def assigned(partitions: list[TopicPartition]) -> None:
        calls.append(("assigned", partitions))

    async def revoked(partitions: list[TopicPartition]) -> None:
        calls.append(("revoked", partitions))

    GroupConsumerSource(consumer).subscribe(r"\A(?:orders_REPLICA)\Z", assigned, revoked)
    assert subscribed["pattern"] == r"\A(?:orders_REPLICA)\Z"
    await subscribed["listener"].on_partitions_revoked(set())
    await subscribed["listener"].on_partitions_assigned({TP})
    assert calls == [("revoked", []), ("assigned", [TP])]


async def test_memory_group_source_is_rebalanced_by_the_test_and_reports_fetch_answers() -> None:
    other = TopicPartition("orders_REPLICA", 1)
    elsewhere = TopicPartition("payments", 0)
    logs = {TP: [Record(o) for o in range(5)], other: [], elsewhere: [Record(0)]}
    memory = MemoryGroupSource(logs)
    source: GroupSource = memory  # what the feed sees of it
    assert await source.topics(None) == {"orders_REPLICA", "payments"}
    assert source.assignment() == set()
    calls: list[tuple[str, list[TopicPartition]]] = []

    async def assigned(partitions: list[TopicPartition]) -> None:
        calls.append(("assigned", partitions))
        assert source.assignment() == set(partitions)

    async def revoked(partitions: list[TopicPartition]) -> None:
        calls.append(("revoked", partitions))

    source.subscribe(r"\A(?:orders_REPLICA)\Z", assigned, revoked)
    await memory.rebalance()  # every partition of the topics the pattern matches
    await memory.rebalance([other])
    assert calls == [
        ("revoked", []),
        ("assigned", [TP, other]),
        ("revoked", [TP, other]),
        ("assigned", [other]),
    ]
    await memory.rebalance([TP])
    assert await source.seek_to_log_end(TP) == 5 and await source.seek_to_log_start(TP) == 0
    assert source.log_end_seen(TP) is None and source.answered_at(TP) is None
    fetched = await source.fetch(200)
    assert _offsets(fetched) == [0, 1, 2, 3, 4]
    assert source.log_end_seen(TP) == 5
    first = source.answered_at(TP)
    await source.fetch(200)
    answered = source.answered_at(TP)
    assert first is not None and answered is not None and answered > first
    await source.close()
    assert memory.closed
