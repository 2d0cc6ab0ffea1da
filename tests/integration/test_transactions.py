"""Transactions respected: only committed records are replicated, control records never are.

The replicator reads ``read_committed``. This needs a broker that grants transactional
producers: Apache Kafka (``REPLICATOR_TEST_BROKER=kafka``, testcontainers). The embedded broker
refuses ``InitProducerId`` for transactions, so there the test skips, saying so; what it can
check there (plain records read ``read_committed`` and replicated exactly) every other
integration test covers.
"""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tests.integration.harness import (
    Broker,
    Start,
    create_topics,
    holds,
    read,
    replicator_env,
    run,
    start_clusters,
    wait_until,
)


async def transactional_producer(broker: Broker) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, transactional_id="orders-writer"
    )
    try:
        await producer.start()
    except KafkaError as exc:
        await producer.stop()
        pytest.skip(f"this broker refuses transactional producers ({exc!r}): run with kafka")
    return producer


async def in_transaction(
    producer: AIOKafkaProducer, values: list[bytes], partition: int, commit: bool
) -> None:
    await producer.begin_transaction()
    for value in values:
        await producer.send_and_wait("orders_REPLICA", value, partition=partition)
    if commit:
        await producer.commit_transaction()
    else:
        await producer.abort_transaction()


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_only_committed_transactions_are_replicated(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=2)

        async def write() -> AIOKafkaProducer:
            producer = await transactional_producer(local)
            await in_transaction(producer, values("committed", 10), 0, commit=True)
            await in_transaction(producer, values("aborted", 10), 0, commit=False)
            await in_transaction(producer, values("committed-too", 10), 0, commit=True)
            # Left open: it holds back partition 1 only.
            await producer.begin_transaction()
            for value in values("open", 5):
                await producer.send_and_wait("orders_REPLICA", value, partition=1)
            return producer

        producer = run(write())
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 20), 60, f"{broker.alias}: committed", dc1.log)
        time.sleep(2)
        for broker in brokers.values():
            stored = sorted(r.value or b"" for r in read(broker, "orders"))
            assert stored == sorted(values("committed", 10) + values("committed-too", 10))

        async def commit_open() -> None:
            await producer.commit_transaction()
            await producer.stop()

        run(commit_open())
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 25), 60, f"{broker.alias}: the late commit", dc1.log)
            stored_open = [r.value for r in read(broker, "orders") if r.partition == 1]
            assert stored_open == list(values("open", 5))
        assert dc1.stop() == 0
