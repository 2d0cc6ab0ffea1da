"""The aiokafka destination's own choices that need no broker."""

from __future__ import annotations

import asyncio
from typing import Any

import aiokafka.errors as kerr
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

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
    for outcome in outcomes:
        future = await kafka.send(object(), "orders", 0)
        if outcome is None:
            sent[-1].set_result(object())
        else:
            sent[-1].set_exception(outcome)
            future.exception()  # retrieved, as the sender's callback does
        await asyncio.sleep(0)
    assert len(refreshes) == 2
