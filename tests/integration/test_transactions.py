"""Transactions in source topics: committed records copied once, aborted and control records
never, and an open transaction holds back what follows it in its partition (the last stable
offset) until it commits or aborts, also when the coordinator aborts it at its timeout. In both
modes: ``_REPLICA`` topics fanned out, and a one-way identity flow.

The replicator reads ``read_committed``. This needs a broker that grants transactional
producers: Apache Kafka (the default backend). The embedded broker refuses ``InitProducerId``
for transactions and hands aborted records to ``read_committed`` consumers, so there the test
skips, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tests.integration.harness import (
    Broker,
    ReplicatorProcess,
    Start,
    create_topics,
    holds,
    produce_records,
    read,
    replicator_cli,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)
from tests.integration.harness import Sent as Record

TIMEOUT_MS = 4000  # the open transaction's timeout: the coordinator aborts it after this


async def transactional_producer(
    broker: Broker, transactional_id: str, timeout_ms: int = 60_000
) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers,
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
    )
    try:
        await producer.start()
    except KafkaError as exc:
        await producer.stop()
        pytest.skip(f"this broker refuses transactional producers ({exc!r}): run on Apache Kafka")
    return producer


async def in_transaction(
    producer: AIOKafkaProducer, topic: str, values: list[bytes], partition: int, commit: bool
) -> None:
    await producer.begin_transaction()
    for value in values:
        await producer.send_and_wait(topic, value, partition=partition)
    if commit:
        await producer.commit_transaction()
    else:
        await producer.abort_transaction()


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def in_partition(broker: Broker, topic: str, partition: int) -> list[bytes]:
    return [r.value or b"" for r in read(broker, topic) if r.partition == partition]


@pytest.mark.parametrize("mode", ["replica", "flow"])
def test_only_committed_transactions_are_copied_and_open_ones_hold_back_what_follows(
    replicators: Start, mode: str
) -> None:
    """Partition 0: committed, aborted, committed. Partition 1: a transaction left open (it
    times out, the coordinator aborts it), plain records after it, then a transaction committed
    late. Every destination holds exactly the committed records, in order; nothing after the
    open transaction is copied while it is open."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        if mode == "replica":
            source_topic, destinations = "orders_REPLICA", dict(brokers)
            env = replicator_env("dc1", brokers)
        else:
            source_topic, destinations = "orders", {"dc2": brokers["dc2"]}
            env = replicator_env("dc1", brokers, replica_mode="false")
            prefix = "REPLICATOR_FLOWS__BACKUP__"
            env |= {prefix + "SOURCE": "dc1", prefix + "TARGET": "dc2"}
        create_topics(local, None, **{source_topic: 2})

        committed = values("committed", 10) + values("committed-too", 10)

        async def scenario() -> ReplicatorProcess:
            """One event loop for the transactional producers, which live in it throughout;
            the harness's blocking calls run in threads."""
            writer = await transactional_producer(local, "orders-writer")
            await in_transaction(writer, source_topic, values("committed", 10), 0, commit=True)
            await in_transaction(writer, source_topic, values("aborted", 10), 0, commit=False)
            await in_transaction(writer, source_topic, values("committed-too", 10), 0, True)
            # Left open past its timeout: the coordinator aborts it.
            abandoned = await transactional_producer(local, "abandoned", TIMEOUT_MS)
            await abandoned.begin_transaction()
            for value in values("open", 5):
                await abandoned.send_and_wait(source_topic, value, partition=1)
            opened = time.monotonic()
            # Plain records after the open transaction: held back by the last stable offset.
            after_open = [
                Record(source_topic, 1, -1, None, v, (), int(time.time() * 1000))
                for v in values("after-open", 5)
            ]
            await asyncio.to_thread(produce_records, local, source_topic, after_open)
            process = replicators("dc1", env)
            await asyncio.to_thread(process.wait_ready)
            for alias, broker in destinations.items():
                await asyncio.to_thread(
                    wait_until, holds(broker, "orders", 20), 60, f"{alias}: committed", process.log
                )
            if time.monotonic() - opened < TIMEOUT_MS / 1000:
                for alias, broker in destinations.items():
                    held = await asyncio.to_thread(in_partition, broker, "orders", 1)
                    assert held == [], f"{alias}: read past the last stable offset"
            # The coordinator aborts the open transaction (its timeout, then its next check):
            # what followed it is released.
            for alias, broker in destinations.items():
                await asyncio.to_thread(
                    wait_until,
                    released(broker),
                    90,
                    f"{alias}: what followed the timed-out transaction",
                    process.log,
                )
            await in_transaction(writer, source_topic, values("late", 5), 1, commit=True)
            await writer.stop()
            # Fenced by the coordinator's abort: what it says on the way out does not matter.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(abandoned.stop(), 10)
            return process

        def released(broker: Broker) -> Callable[[], bool]:
            return lambda: len(in_partition(broker, "orders", 1)) >= 5

        process = asyncio.run(scenario())
        for alias, broker in destinations.items():
            wait_until(holds(broker, "orders", 30), 60, f"{alias}: the late commit", process.log)
        wait_settled(process)
        for alias, broker in destinations.items():
            assert in_partition(broker, "orders", 0) == committed, alias
            assert in_partition(broker, "orders", 1) == values("after-open", 5) + values(
                "late", 5
            ), alias
            stored = read(broker, "orders")
            assert len(stored) == 30, f"{alias}: {len(stored)} records, 30 committed"
        assert process.stop() == 0


def test_the_recovery_point_counts_committed_records_not_offsets(replicators: Start) -> None:
    """``replicator rpo`` counts what a leg copies: transaction markers and aborted records take
    offsets in the origin but are never copied, so they are never "not here"; once the leg
    copied the committed records, the copy is complete (exit 0), not missing a marker forever."""
    with start_clusters("dc1", "dc2") as brokers:
        dc1, dc2 = brokers["dc1"], brokers["dc2"]
        for broker in brokers.values():
            create_topics(broker, orders_REPLICA=1, orders=1)

        async def publish() -> None:
            producer = await transactional_producer(dc1, "rpo-orders")
            try:
                await in_transaction(producer, "orders_REPLICA", values("a", 5), 0, True)
                await in_transaction(producer, "orders_REPLICA", values("b", 4), 0, False)
                await in_transaction(producer, "orders_REPLICA", values("c", 3), 0, True)
            finally:
                await producer.stop()

        asyncio.run(publish())  # 12 records and 3 markers: offsets 0-14, 8 committed records
        env = replicator_env("dc2", brokers)
        status, out, err = replicator_cli(env, "rpo", "--origin", "dc1", "--json")
        assert status == 1, (out, err)
        before = json.loads(out)
        assert (before["missing"], before["expired"], before["complete"]) == (8, 0, False)
        (point,) = before["partitions"]
        assert (point["held_up_to"], point["origin_log_end"]) == (None, 15), point

        node = replicators("dc1", replicator_env("dc1", brokers))
        wait_until(holds(dc2, "orders", 8), 60, "the committed records in dc2", node.log)
        wait_settled(node)
        status, out, err = replicator_cli(env, "rpo", "--origin", "dc1", "--json")
        after = json.loads(out)
        assert status == 0 and after["complete"], (after, err)
        # The last record copied is offset 13; the marker at 14 is not counted as missing.
        assert after["partitions"][0]["held_up_to"] == 14, after
        assert node.stop() == 0
