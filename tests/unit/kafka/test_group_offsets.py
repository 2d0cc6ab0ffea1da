"""A group's offsets asked of a client whose metadata lists no broker: it bootstraps again
first (aiokafka would assert "Did we not perform bootstrap?" at every attempt)."""

from __future__ import annotations

from typing import Any

from replicator.kafka.clients import GroupOffsets


class FakeCluster:
    def __init__(self, brokers: set[int]) -> None:
        self.known = brokers

    def brokers(self) -> set[int]:
        return self.known


class FakeClient:
    def __init__(self, brokers: set[int]) -> None:
        self.cluster = FakeCluster(brokers)
        self.calls: list[str] = []

    async def bootstrap(self) -> None:
        self.calls.append("bootstrap")
        self.cluster.known = {1}

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


async def test_no_broker_known_bootstraps_again_first() -> None:
    client = FakeClient(set())
    assert await offsets(client)._send(object()) == "answer"
    assert client.calls == ["bootstrap", "lookup g", "send to 1"]


async def test_a_known_broker_is_asked_at_once() -> None:
    client = FakeClient({1})
    assert await offsets(client)._send(object()) == "answer"
    assert client.calls == ["lookup g", "send to 1"]
