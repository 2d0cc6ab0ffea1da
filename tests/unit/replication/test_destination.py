"""The aiokafka destination's own choices that need no broker."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import aiokafka.errors as kerr
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from replicator.kafka.producer import knows_topic
from replicator.replication.destination import KafkaDestination


def destination(monkeypatch: pytest.MonkeyPatch) -> tuple[KafkaDestination, list[Any], list[int]]:
    """A destination whose producer is never started: its sends are futures the test settles,
    and its requests for a metadata refresh are counted."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
    reader = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")
    sent: list[asyncio.Future[Any]] = []
    refreshes: list[int] = []

    async def send_batch(builder: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        sent.append(future)
        return future

    monkeypatch.setattr(producer, "send_batch", send_batch)
    monkeypatch.setattr(producer.client, "force_metadata_update", lambda: refreshes.append(1))
    return KafkaDestination(producer, reader, 5.0, "marks"), sent, refreshes


async def test_a_batch_failed_for_a_stale_leader_refreshes_the_producers_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NOT_LEADER_OR_FOLLOWER fails a batch without a retry (it may be written), so aiokafka
    does not refresh its metadata: the destination asks for it, once per such failure."""
    kafka, sent, refreshes = destination(monkeypatch)
    outcomes = [
        kerr.NotLeaderForPartitionError(),
        kerr.RequestTimedOutError(),  # says nothing of the leader
        None,
        kerr.KafkaStorageError(),
    ]
    answers = []
    for outcome in outcomes:
        future = await kafka.send(object(), "orders", 0)
        if outcome is None:
            sent[-1].set_result(SimpleNamespace(offset=7))
        else:
            sent[-1].set_exception(outcome)
        await asyncio.sleep(0)
        assert future.done()
        answers.append(future.exception() or future.result())
    assert len(refreshes) == 2
    # Said in the product's terms: each may have been written, so the partition resumes.
    assert [type(a).__name__ for a in answers] == [
        "OutcomeUnknown",
        "OutcomeUnknown",
        "int",
        "OutcomeUnknown",
    ]
    assert answers[2] == 7


class MetadataOfBroker:
    """aiokafka's metadata as a broker holding ``topics`` answers it: all topics until the
    client tracks some, then those alone (each answer replaces the last)."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.tracked: set[str] = set()
        self.known = dict(topics)  # the first answer, at start: every topic
        self.requests = 0

    def refresh(self) -> asyncio.Future[bool]:
        self.requests += 1
        self.known = {t: n for t, n in self.topics.items() if not self.tracked or t in self.tracked}
        return self._answered()

    def add_topic(self, topic: str) -> asyncio.Future[bool]:
        if topic in self.tracked:
            return self._answered()
        self.tracked.add(topic)
        return self.refresh()

    @staticmethod
    def _answered() -> asyncio.Future[bool]:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.known.get(topic)
        return set(range(count)) if count else None


async def test_topics_learnt_together_all_stay_in_the_producers_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A topic the producer knew from its first metadata answer (every topic) is tracked too
    when another is learnt: tracking only the one it lacked would narrow every later answer to
    that one, and the first would drop out (measured: a second of retries at start)."""
    kafka, _, _ = destination(monkeypatch)
    broker = MetadataOfBroker({"bench": 8, "heartbeats": 1, "other": 3})
    broker.known = {"bench": 8, "other": 3}  # heartbeats created after the producer started
    client = cast(Any, kafka.producer).client  # the aiokafka producer behind the role
    monkeypatch.setattr(client, "add_topic", broker.add_topic)
    monkeypatch.setattr(client, "force_metadata_update", broker.refresh)
    monkeypatch.setattr(client.cluster, "partitions_for_topic", broker.partitions_for_topic)

    await asyncio.gather(
        kafka.learn_partitions("bench", 8), kafka.learn_partitions("heartbeats", 1)
    )
    assert knows_topic(kafka.producer, "bench") and knows_topic(kafka.producer, "heartbeats")
    assert broker.requests <= 2  # learnt in one round
