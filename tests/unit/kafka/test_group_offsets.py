"""A request sent through a client whose metadata lists no broker (bootstrapped while a KRaft
broker was fenced): the client bootstraps again first, closing the connection it kept, instead of
asserting "Did we not perform bootstrap?" at every attempt; a cluster that still lists none is a
retriable error that says so."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.client import ConnectionGroup
from aiokafka.errors import NodeNotReadyError

from replicator.kafka.clients import GroupOffsets
from replicator.kafka.internals import a_broker

BOOTSTRAP = ("bootstrap", ConnectionGroup.DEFAULT)


class FakeConnection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeCluster:
    def __init__(self, brokers: set[int]) -> None:
        self.known = brokers

    def brokers(self) -> set[int]:
        return self.known


class FakeClient:
    """aiokafka's client as these requests use it: its metadata, its kept bootstrap connection."""

    def __init__(self, brokers: set[int], *, listed_after: set[int] | None = None) -> None:
        self.cluster = FakeCluster(brokers)
        self.listed_after_bootstrap = {1} if listed_after is None else listed_after
        self.calls: list[str] = []
        self._conns: dict[Any, FakeConnection] = {}
        if not brokers:  # what aiokafka's bootstrap does when the answer lists no broker
            self._conns[BOOTSTRAP] = FakeConnection()

    def get_random_node(self) -> int | None:
        return min(self.cluster.known) if self.cluster.known else None

    async def bootstrap(self) -> None:
        self.calls.append("bootstrap")
        self.cluster.known = set(self.listed_after_bootstrap)
        if not self.cluster.known:
            self._conns[BOOTSTRAP] = FakeConnection()

    async def coordinator_lookup(self, kind: Any, key: str) -> int:
        assert self.cluster.known, "Did we not perform bootstrap?"
        self.calls.append(f"lookup {key}")
        return 1

    async def send(self, node: int, request: Any, **options: Any) -> str:
        self.calls.append(f"send to {node}")
        return "answer"


def offsets(client: FakeClient) -> GroupOffsets:
    group = GroupOffsets.__new__(GroupOffsets)
    group._client = client
    group.group = "g"
    return group


async def test_no_broker_known_bootstraps_again_first_and_closes_the_kept_connection() -> None:
    client = FakeClient(set())
    kept = client._conns[BOOTSTRAP]
    assert await offsets(client)._send(object()) == "answer"
    assert client.calls == ["bootstrap", "lookup g", "send to 1"]
    assert kept.closed
    assert BOOTSTRAP not in client._conns


async def test_a_known_broker_is_asked_at_once() -> None:
    client = FakeClient({1})
    assert await offsets(client)._send(object()) == "answer"
    assert client.calls == ["lookup g", "send to 1"]


async def test_a_broker_names_a_listed_broker_without_bootstrapping() -> None:
    client = FakeClient({3})
    assert await a_broker(client) == 3
    assert client.calls == []


async def test_a_cluster_that_still_lists_no_broker_is_a_retriable_error() -> None:
    client = FakeClient(set(), listed_after=set())
    with pytest.raises(NodeNotReadyError, match="lists no broker") as raised:
        await a_broker(client)
    assert raised.value.retriable
    assert client.calls == ["bootstrap"]
    assert not client._conns[BOOTSTRAP].closed  # the new one, kept for aiokafka's next refresh
