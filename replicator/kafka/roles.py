"""The clients the layers above hold, as the roles they play: :class:`LogReader` (a consumer
assigned by hand, reading partitions), :class:`RecordProducer` (a producer writing records) and
:class:`BatchProducer` (the destination producer, handed closed batches through
:mod:`replicator.kafka.producer`).

Only this package makes them (:mod:`replicator.kafka.clients`, :mod:`replicator.kafka.producer`)
and only this package imports aiokafka's client classes; ``replication/`` holds these Protocols,
narrowed to the calls it makes, so a component's dependence on the client is written down in one
place and a test can hand it a stand-in. Positions, log bounds and offsets are the client's own
(``int``); fetched records are read through :mod:`replicator.kafka.decoding`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from aiokafka import TopicPartition

Headers = Sequence[tuple[str, bytes | None]]


class LogReader(Protocol):
    """A consumer assigned partitions by hand, reading them from positions it is told."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def assign(self, partitions: Iterable[TopicPartition]) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        """Records of the resumed partitions (read through :mod:`replicator.kafka.decoding`)."""
        ...

    async def position(self, tp: TopicPartition) -> int: ...

    def highwater(self, tp: TopicPartition) -> int | None: ...

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]: ...

    async def end_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]: ...

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Any]:
        """The first offset at or after each timestamp (``None`` where there is none)."""
        ...


class RecordProducer(Protocol):
    """A producer writing records one by one (internal topics, heartbeats, dead letters)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[Any]:
        """Queue a record; the future resolves once the cluster acknowledged it."""
        ...

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> Any: ...


class BatchProducer(Protocol):
    """The destination producer: started and stopped by its leg; batches are handed to it, and
    its partitions unfenced, through :mod:`replicator.kafka.producer` only."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
