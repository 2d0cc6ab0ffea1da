"""The fetch planner on Apache Kafka: a consumer of 2,000 partitions, nearly all paused.

A source consumer made by the product's factory (fetch sessions and the fetch planner installed)
is assigned every partition of a 2,000-partition topic at offset 0, and pauses every one, as a
leg does. Rounds of records go to 50 of them; each round resumes some (at their position, as a
leg resumes a partition), pauses others, and seeks one back to a record already consumed. Every
record is consumed exactly once in order from the position it was sought at, no record of a
paused partition is handed over, and the planner visited a few partitions per wake, not 2,000.
The cost of one wake of this consumer, planned by aiokafka's walk and by the planner on the same
state, is printed (``-s``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks.fetch_sessions import log_ends
from replicator.config.loading import load_settings
from replicator.devtools.apache_kafka import ApacheKafkaCluster
from replicator.kafka import internals
from replicator.kafka.clients import start_consumer
from replicator.kafka.fetch_planner import fetch_planner
from tests.integration.harness import BACKEND, create_topics, replicator_env, run, start_clusters

pytestmark = pytest.mark.skipif(BACKEND != "kafka", reason="Apache Kafka at 2,000 partitions")

TOPIC = "planned"
PARTITIONS = 2000
ACTIVE = list(range(0, PARTITIONS, 40))  # 50 partitions receive records
ROUNDS = 12
PER_ROUND = 10


class Log:
    """What was produced per partition, and what each partition must hand over next."""

    def __init__(self) -> None:
        self.values: dict[int, dict[int, bytes]] = defaultdict(dict)  # partition: offset: value
        self.next: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        self.consumed = 0

    async def produce(self, producer: AIOKafkaProducer, round_: int) -> None:
        sent = []
        for partition in ACTIVE:
            for i in range(PER_ROUND):
                value = f"{partition}-{round_}-{i}".encode()
                sent.append(
                    (partition, value, await producer.send(TOPIC, value, partition=partition))
                )
        for partition, value, future in sent:
            self.values[partition][(await future).offset] = value

    def owed(self, unpaused: set[int]) -> int:
        return sum(sum(1 for offset in self.values[p] if offset >= self.next[p]) for p in unpaused)

    def take(self, tp: TopicPartition, records: list[Any], unpaused: set[int]) -> None:
        assert tp.partition in unpaused, f"a paused partition handed over {tp}"
        for record in records:
            assert record.offset == self.next[tp.partition], (tp, record.offset)
            assert record.value == self.values[tp.partition][record.offset]
            self.next[tp.partition] = record.offset + 1
            self.consumed += 1


async def consume(consumer: AIOKafkaConsumer, log: Log, unpaused: set[int]) -> None:
    """Until every partition resumed has handed over all it holds past its position."""

    async def until_all() -> None:
        while log.owed(unpaused):
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                log.take(tp, records, unpaused)

    await asyncio.wait_for(until_all(), 120)


def wake_cost_ms(consumer: AIOKafkaConsumer, times: int = 20) -> tuple[float, float]:
    """One wake of ``consumer`` (its decisions, on its current state): aiokafka's walk, the
    planner (ms of CPU each)."""
    parts = internals.fetcher_parts(consumer)
    planner = fetch_planner(consumer)
    assert planner is not None
    assignment = parts.subscription.subscription.assignment
    plans: list[Callable[[Any], internals.FetchActions]] = [
        lambda state: internals.aiokafka_actions(parts, state),
        planner.plan,
    ]
    costs = []
    for plan in plans:
        started = time.process_time()
        for _ in range(times):
            plan(assignment)
        costs.append(1000 * (time.process_time() - started) / times)
    return costs[0], costs[1]


def test_a_mostly_paused_consumer_consumes_exactly_once_and_plans_what_changed() -> None:
    with start_clusters("dc1") as brokers:
        cluster = brokers["dc1"]
        assert isinstance(cluster, ApacheKafkaCluster)
        create_topics(cluster, planned=PARTITIONS)
        chance = random.Random(7)

        async def scenario() -> tuple[Log, Any, tuple[float, float]]:
            settings = load_settings(replicator_env("dc1", {"dc1": cluster}))
            consumer = await start_consumer(
                settings.clusters["dc1"], settings, "planned", "planned"
            )
            producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
            await producer.start()
            log, unpaused = Log(), set[int]()
            try:
                partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
                await log_ends(consumer, partitions, within_s=180)  # every leader ready
                consumer.assign(partitions)
                for tp in partitions:
                    consumer.seek(tp, 0)
                    consumer.pause(tp)
                for round_ in range(ROUNDS):
                    await log.produce(producer, round_)
                    for p in chance.sample(ACTIVE, 10):  # resumed at its position, as a leg
                        consumer.seek(TopicPartition(TOPIC, p), log.next[p])
                        consumer.resume(TopicPartition(TOPIC, p))
                        unpaused.add(p)
                    for p in chance.sample(sorted(unpaused), min(4, len(unpaused))):
                        consumer.pause(TopicPartition(TOPIC, p))
                        unpaused.discard(p)
                    if unpaused and round_ % 3 == 2:  # read again from a record consumed
                        p = chance.choice(sorted(unpaused))
                        log.next[p] = chance.randrange(0, log.next[p] + 1)
                        consumer.seek(TopicPartition(TOPIC, p), log.next[p])
                    await consume(consumer, log, unpaused)
                for p in ACTIVE:  # the rest, every partition resumed
                    consumer.seek(TopicPartition(TOPIC, p), log.next[p])
                    consumer.resume(TopicPartition(TOPIC, p))
                    unpaused.add(p)
                await consume(consumer, log, unpaused)
                for p in ACTIVE:
                    consumer.pause(TopicPartition(TOPIC, p))
                planner = fetch_planner(consumer)
                assert planner is not None
                return log, planner.stats, wake_cost_ms(consumer)
            finally:
                await producer.stop()
                await consumer.stop()

        log, stats, (walk_ms, planned_ms) = run(scenario())
        for p in ACTIVE:
            assert log.next[p] == max(log.values[p]) + 1  # every record, to the last
        assert log.consumed >= len(ACTIVE) * ROUNDS * PER_ROUND
        print(
            f"{stats.plans} wakes planned, {stats.visited / stats.plans:.1f} partitions visited "
            f"per wake of {PARTITIONS}; one wake (all paused): aiokafka's walk {walk_ms:.2f} ms, "
            f"the planner {planned_ms:.3f} ms"
        )
        assert stats.plans > ROUNDS and stats.delegated == 0
        # The first wake visits every partition; the others what changed (a few dozen).
        assert stats.visited < PARTITIONS + 60 * stats.plans
        # The per-wake cost is a figure (printed above, and benchmarks/fetch_planning.py):
        # asserted as a count of partitions visited, not timed on this shared machine.
