"""Incremental fetch sessions on Apache Kafka, counted on the wire.

A source consumer made by the product's factory is assigned every partition of a 500-partition
topic, and records go to two of them. Every fetch request and answer is counted as it crosses
the client (the struct sent, the struct answered): after the first, full, fetch, requests name
only the two partitions whose position moved (or forget them while their records wait to be
handed over), and answers name only those two, not 500. Every record produced is consumed
exactly once, in order. A session the broker refuses (an epoch it did not expect, an id it does
not hold) or loses (a restart) falls back to a full fetch and a new session, and still loses,
skips and repeats nothing. And end to end: a replicator's ``/status`` counts what its feed's
sessions did, and once idle its fetches name and answer no partition of the hundreds it holds.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest

from replicator.config.loading import load_settings
from replicator.devtools.apache_kafka import ApacheKafkaCluster
from replicator.kafka.clients import answered_at, start_consumer
from replicator.kafka.fetch_sessions import SessionFetch, session_client
from replicator.kafka.internals import kafka_client
from tests.integration.harness import (
    BACKEND,
    Start,
    count,
    create_topics,
    feed_status,
    produce,
    replicator_env,
    run,
    start_clusters,
    wait_settled,
    wait_until,
)

pytestmark = pytest.mark.skipif(BACKEND != "kafka", reason="Apache Kafka's fetch sessions")

TOPIC = "sessions"
PARTITIONS = 500
ACTIVE = (7, 311)
ROUNDS = 20
PER_ROUND = 25


@dataclass
class Fetch:
    """One fetch as it crossed the client: the partitions named and forgotten, the bytes."""

    session_id: int
    epoch: int
    listed: set[int]
    forgotten: set[int]
    answered: set[int]
    error: int
    partition_errors: dict[int, int]
    request_bytes: int
    answer_bytes: int


@dataclass
class Wire:
    """Every fetch a consumer sends, recorded at its ``AIOKafkaClient``."""

    fetches: list[Fetch] = field(default_factory=list)

    def watch(self, consumer: AIOKafkaConsumer) -> None:
        client = kafka_client(consumer)
        send = client.send

        async def recorded(node_id: int, request: Any, **options: Any) -> Any:
            response = await send(node_id, request, **options)
            if isinstance(request, SessionFetch | FetchRequest):
                self.fetches.append(fetch_of(request, response))
            return response

        client.send = recorded


def fetch_of(request: SessionFetch | FetchRequest, response: Any) -> Fetch:
    if isinstance(request, SessionFetch):
        struct = request.struct
        forgotten = {p for _, ps in struct.forgotten_topics_data for p in ps}
    else:  # aiokafka's own: every partition, no session
        struct, forgotten = request.prepare({1: (4, response.API_VERSION)}), set()
    return Fetch(
        session_id=struct.session_id,
        epoch=struct.session_epoch,
        listed={p[0] for _, ps in struct.topics for p in ps},
        forgotten=forgotten,
        answered={p[0] for _, ps in response.topics for p in ps},
        error=response.error_code,
        partition_errors={p[0]: p[1] for _, ps in response.topics for p in ps if p[1]},
        request_bytes=len(struct.encode()),
        answer_bytes=len(response.encode()),
    )


class Log:
    """The records produced to the active partitions, and those consumed."""

    def __init__(self) -> None:
        self.produced: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        self.consumed: dict[int, list[tuple[int, bytes]]] = defaultdict(list)

    async def produce(self, producer: AIOKafkaProducer, round_: int) -> None:
        for partition in ACTIVE:
            for i in range(PER_ROUND):
                value = f"{partition}-{round_}-{i}".encode()
                sent = await producer.send_and_wait(TOPIC, value, partition=partition)
                self.produced[partition].append((sent.offset, value))

    async def consume(self, consumer: AIOKafkaConsumer, timeout: float = 60.0) -> None:
        """Until every record produced is consumed (or more than were produced)."""

        async def until_all() -> None:
            while sum(map(len, self.consumed.values())) < sum(map(len, self.produced.values())):
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    self.consumed[tp.partition].extend((r.offset, r.value) for r in records)

        await asyncio.wait_for(until_all(), timeout)

    def assert_exactly_once_in_order(self) -> None:
        assert set(self.consumed) <= set(ACTIVE)
        for partition in ACTIVE:
            assert self.consumed[partition] == self.produced[partition], partition


async def consumer_of_every_partition(cluster: ApacheKafkaCluster) -> AIOKafkaConsumer:
    settings = load_settings(replicator_env("dc1", {"dc1": cluster}))
    consumer = await start_consumer(settings.clusters["dc1"], settings, "sessions", "sessions")
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    # Until each partition of the new topic has its leader, fetches answer it with an error
    # (NOT_LEADER_OR_FOLLOWER), named in every answer: ListOffsets waits for them all.
    await consumer.end_offsets(partitions)
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, 0)
    return consumer


async def producer_of(cluster: ApacheKafkaCluster) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    await producer.start()
    return producer


def summary(fetches: list[Fetch]) -> str:
    listed = [len(f.listed) for f in fetches]
    answered = [len(f.answered) for f in fetches]
    return (
        f"{len(fetches)} fetches; partitions listed {listed[:6]}..., answered {answered[:6]}...; "
        f"request bytes first {fetches[0].request_bytes}, then at most "
        f"{max(f.request_bytes for f in fetches[1:])}; answer bytes first "
        f"{fetches[0].answer_bytes}"
    )


def test_after_the_first_full_fetch_only_partitions_that_changed_are_named() -> None:
    with start_clusters("dc1") as brokers:
        cluster = brokers["dc1"]
        assert isinstance(cluster, ApacheKafkaCluster)
        create_topics(cluster, sessions=PARTITIONS)

        async def scenario() -> tuple[Wire, Log, Any]:
            wire, log = Wire(), Log()
            consumer = await consumer_of_every_partition(cluster)
            wire.watch(consumer)
            producer = await producer_of(cluster)
            try:
                for round_ in range(ROUNDS):
                    await log.produce(producer, round_)
                    await log.consume(consumer)
                await asyncio.sleep(2)  # idle fetches: nothing named
                await log.consume(consumer)
                sessions = session_client(consumer)
                assert sessions is not None
                return wire, log, sessions.stats
            finally:
                await producer.stop()
                await consumer.stop()

        wire, log, stats = run(scenario())
        log.assert_exactly_once_in_order()
        first, *rest = wire.fetches
        print(summary(wire.fetches))  # the figures, shown with -s
        assert (first.session_id, first.epoch) == (0, 0)
        assert first.listed == first.answered == set(range(PARTITIONS))
        assert len(rest) > ROUNDS
        opened = rest[0].session_id
        assert opened > 0
        assert [f.epoch for f in rest] == list(range(1, len(rest) + 1))
        for fetch in rest:
            assert fetch.session_id == opened and fetch.error == 0 and not fetch.partition_errors
            assert fetch.listed <= set(ACTIVE) and fetch.forgotten <= set(ACTIVE)
            assert fetch.answered <= set(ACTIVE)
        assert any(not f.listed and not f.forgotten for f in rest)  # idle: names nothing
        assert (stats.full, stats.resets) == (1, 0)


def test_a_session_refused_or_lost_falls_back_to_a_full_fetch_and_loses_nothing() -> None:
    with start_clusters("dc1") as brokers:
        cluster = brokers["dc1"]
        assert isinstance(cluster, ApacheKafkaCluster)
        create_topics(cluster, sessions=PARTITIONS)

        async def scenario() -> tuple[Wire, Log, Any]:
            wire, log = Wire(), Log()
            consumer = await consumer_of_every_partition(cluster)
            wire.watch(consumer)
            sessions = session_client(consumer)
            assert sessions is not None
            producer = await producer_of(cluster)
            try:
                for round_ in range(3):
                    await log.produce(producer, round_)
                    await log.consume(consumer)
                # An epoch the broker does not expect: INVALID_FETCH_SESSION_EPOCH.
                for session in sessions.sessions.values():
                    session.epoch += 5
                for round_ in range(3, 6):
                    await log.produce(producer, round_)
                    await log.consume(consumer)
                # A session the broker does not hold: FETCH_SESSION_ID_NOT_FOUND.
                for session in sessions.sessions.values():
                    session.session_id ^= 0x5A5A
                for round_ in range(6, 9):
                    await log.produce(producer, round_)
                    await log.consume(consumer)
                refused = len(wire.fetches)
                # The broker restarts: the connection drops, the session is gone.
                await asyncio.to_thread(cluster.restart)
                for round_ in range(9, 12):
                    await log.produce(producer, round_)
                    await log.consume(consumer, timeout=120.0)
                return wire, log, (sessions.stats, refused)
            finally:
                await producer.stop()
                await consumer.stop()

        wire, log, (stats, refused) = run(scenario())
        log.assert_exactly_once_in_order()
        errors = [f.error for f in wire.fetches if f.error]
        print(summary(wire.fetches), "errors", errors, "stats", stats)
        assert errors[:2] == [71, 70]
        full = [i for i, f in enumerate(wire.fetches) if f.epoch == 0]
        assert full[0] == 0 and len(full) >= 4  # the first, after each refusal, after the restart
        assert any(i >= refused for i in full)
        session_ids = {f.session_id for f in wire.fetches if f.epoch > 0}
        assert len(session_ids) >= 4
        for i in full:  # every partition but those holding records not handed over yet
            assert wire.fetches[i].listed >= set(range(PARTITIONS)) - set(ACTIVE)
        last_full = full[-1]
        for fetch in wire.fetches[last_full + 1 :]:
            assert fetch.listed <= set(ACTIVE) and fetch.answered <= set(ACTIVE)
        # Refused twice; the restart is met by the request in flight (unanswered) and, when the
        # next one reached the restarted broker with the old session, by its 70 as well: every
        # session error on the wire reset exactly one session.
        assert errors[2:] in ([], [70]) and stats.resets == len(errors)
        assert stats.unanswered >= 1


def test_a_quiet_partition_is_answered_by_every_fetch_and_a_new_assignment_starts_over() -> None:
    """A partition an incremental answer leaves out was answered: nothing new at its position
    (the product judges a log end from an answer that came after a position was reached). A new
    assignment, made while nothing was in flight (every partition paused), knows no high
    watermark: the next fetch is full and every partition's log end is known again."""
    with start_clusters("dc1") as brokers:
        cluster = brokers["dc1"]
        assert isinstance(cluster, ApacheKafkaCluster)
        create_topics(cluster, sessions=PARTITIONS)
        idle = TopicPartition(TOPIC, 0)
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]

        async def scenario() -> tuple[list[int | None], int, list[TopicPartition], Wire]:
            wire, log = Wire(), Log()
            consumer = await consumer_of_every_partition(cluster)
            wire.watch(consumer)
            producer = await producer_of(cluster)
            try:
                await log.produce(producer, 0)
                await log.consume(consumer)
                seen = []
                for _ in range(3):  # idle fetches, each waiting up to the fetch wait
                    seen.append(answered_at(consumer, idle))
                    await asyncio.sleep(1.5)
                assert consumer.highwater(idle) == 0
                consumer.pause(*partitions)
                await asyncio.sleep(1.5)  # the fetch in flight answered; none sent since
                before = len(wire.fetches)
                consumer.assign(partitions)
                for tp in partitions:
                    consumer.seek(tp, 0 if tp.partition not in ACTIVE else PER_ROUND)
                await asyncio.sleep(3)
                unknown = [tp for tp in partitions if consumer.highwater(tp) is None]
                return seen, before, unknown, wire
            finally:
                await producer.stop()
                await consumer.stop()

        seen, before, unknown, wire = run(scenario())
        print(summary(wire.fetches), "answered at", seen)
        times = [t for t in seen if t is not None]
        assert len(times) == 3 and times == sorted(times) and len(set(times)) == 3, seen
        assert unknown == []
        again, *after = wire.fetches[before:]
        assert again.epoch == 0 and again.listed == again.answered == set(range(PARTITIONS))
        assert after and all(not f.listed and not f.answered for f in after)  # quiet since


IDLE_TOPICS = 4
IDLE_PARTITIONS = 60


def _sessions(process: Any) -> dict[str, int]:
    feed = feed_status(process)
    assert feed is not None, "no /status"
    stats = feed["fetch_sessions"]
    assert isinstance(stats, dict), f"the feed fetches without sessions: {feed}"
    return stats


def test_an_idle_replicators_feed_fetches_naming_no_partition_and_status_counts_it(
    replicators: Start,
) -> None:
    """A replicator over 240 ``_REPLICA`` partitions copies every record, then idles (no
    heartbeats): its feed keeps long-polling, and ``/status`` shows those fetches listing,
    answering and resetting nothing: an idle feed's requests do not grow with its partitions."""
    with start_clusters("dc1") as brokers:
        dc1 = brokers["dc1"]
        topics = [f"idle{n}" for n in range(IDLE_TOPICS)]
        create_topics(dc1, None, **{f"{t}_REPLICA": IDLE_PARTITIONS for t in topics})
        env = replicator_env("dc1", brokers, heartbeat_interval_ms="0")
        process = replicators("dc1", env)
        for topic in topics:
            produce(dc1, f"{topic}_REPLICA", 2 * IDLE_PARTITIONS, IDLE_PARTITIONS)
        copied = lambda: all(count(dc1, t) == 2 * IDLE_PARTITIONS for t in topics)  # noqa: E731
        wait_until(copied, 120, "copied", process.log)
        wait_settled(process)
        before = _sessions(process)
        time.sleep(5)
        after = _sessions(process)
        grew = {name: after[name] - before[name] for name in before}
        print("fetch sessions:", before, "then idle 5 s:", grew)
        everything = IDLE_TOPICS * IDLE_PARTITIONS
        assert before["full"] >= 1 and before["listed"] >= everything
        assert before["answered"] >= everything  # every partition's records came
        assert grew["requests"] >= 2, "the idle feed stopped fetching"
        quiet = {name: grew[name] for name in ("full", "listed", "forgotten", "answered")}
        assert quiet == dict.fromkeys(quiet, 0)
        assert grew["resets"] == grew["unanswered"] == 0
