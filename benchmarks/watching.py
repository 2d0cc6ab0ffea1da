"""Watching a scale run without loading the machine it measures: the destinations' watermarks
over thousands of partitions (fetched only while asked), which topics a contender has created
yet, and the replicator's HTTP surface (readiness, partitions by leg and state).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.brokers import lists_offsets
from benchmarks.shared import Watermarks
from replicator.devtools.embedded import LocalBroker
from replicator.kafka.readers import cluster_partitions

LEGS = ("dc1->dc1", "dc1->dc2")
GAUGE = "replicator_leg_partitions"
STARTING = "starting"


class PausedWatermarks(Watermarks):
    """:class:`~benchmarks.shared.Watermarks` over many topics, fetching only while asked.

    A consumer assigned thousands of partitions and left fetching costs the broker and this
    process most of a core (measured: about half a core each at 1,200 partitions), which the
    replicator under test would lose. Here the partitions stay paused between polls; a poll
    resumes them until every partition has answered a fetch since the poll began. Where the
    broker answers ListOffsets truly, that one request per broker is used instead.
    """

    def __init__(self, brokers: dict[str, LocalBroker], partitions: list[TopicPartition]) -> None:
        super().__init__(brokers, 0)
        self._partitions = partitions

    async def __aenter__(self) -> PausedWatermarks:
        await super().__aenter__()
        if lists_offsets():
            return self
        for consumer in self._consumers.values():
            consumer.pause(*self._partitions)
        return self

    async def totals(self) -> dict[str, int]:
        if lists_offsets():
            return await super().totals()
        result = {}
        for alias, consumer in self._consumers.items():
            since_ms = time.time() * 1000
            consumer.resume(*self._partitions)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    await consumer.getmany(timeout_ms=10)
                    polled = (consumer.last_poll_timestamp(tp) for tp in self._partitions)
                    if all(at is not None and at >= since_ms for at in polled):
                        break
                result[alias] = sum(consumer.highwater(tp) or 0 for tp in self._partitions)
            finally:
                consumer.pause(*self._partitions)
        return result


async def missing_topics(
    brokers: dict[str, LocalBroker], topics: Sequence[str], partitions: int
) -> dict[str, list[str]]:
    """Per cluster, which of ``topics`` do not exist yet, from one metadata request for every
    topic (naming a missing topic would make the embedded broker create it with 4 partitions).
    A topic that exists with another partition count than ``partitions`` raises."""
    missing = {}
    for alias, broker in brokers.items():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
        await consumer.start()
        try:
            found = await cluster_partitions(consumer)
        finally:
            await consumer.stop()
        wrong = [
            f"{t} ({len(found[t])})" for t in topics if t in found and len(found[t]) != partitions
        ]
        if wrong:
            raise RuntimeError(
                f"{alias}: {len(wrong)} real topics have the wrong partition count, expected "
                f"{partitions}: {', '.join(wrong[:5])}"
            )
        missing[alias] = [t for t in topics if t not in found]
    return missing


def gauge_states(text: str) -> dict[str, Counter[str]] | None:
    """Partitions by leg and state from ``replicator_leg_partitions``; ``None`` when the
    replicator does not expose that gauge."""
    states: dict[str, Counter[str]] | None = None
    for family in text_string_to_metric_families(text):
        if family.name != GAUGE:
            continue
        states = {}
        for sample in family.samples:
            leg, state = sample.labels.get("leg"), sample.labels.get("state")
            if leg is not None and state is not None:
                states.setdefault(leg, Counter())[state] += int(sample.value)
    return states


def status_states(status: dict[str, Any]) -> dict[str, Counter[str]]:
    """Partitions by leg and state from ``/status``: its per-partition entries when it lists
    them, else a ``{state: count}`` summary of the leg if it gives one."""
    states: dict[str, Counter[str]] = {}
    for leg in status.get("legs") or []:
        counts = states.setdefault(str(leg.get("leg")), Counter())
        partitions = leg.get("partitions")
        if isinstance(partitions, list):
            counts.update(str(p.get("state")) for p in partitions)
            continue
        for value in leg.values():
            if isinstance(value, dict) and STARTING in value:
                counts.update({str(k): int(v) for k, v in value.items() if isinstance(v, int)})
                break
    return states


class Observer:
    """Polls one replicator's HTTP surface: readiness and partitions by state."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self._session = session
        self._url = f"http://127.0.0.1:{port}"
        self.source: str | None = None  # "the metrics gauge" or "/status", once known

    async def ready(self) -> bool:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._session.get(f"{self._url}/readyz") as response:
                return response.status == 200
        return False

    async def states(self) -> dict[str, Counter[str]] | None:
        """Partitions by leg and state, ``None`` while the server does not answer."""
        try:
            if self.source != "/status":
                async with self._session.get(f"{self._url}/metrics") as response:
                    response.raise_for_status()
                    found = gauge_states(await response.text())
                if found is not None:
                    self.source = "the metrics gauge"
                    return found
                self.source = "/status"
            async with self._session.get(f"{self._url}/status") as response:
                response.raise_for_status()
                return status_states(await response.json())
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None


def started_per_leg(views: list[dict[str, Counter[str]]]) -> dict[str, tuple[int, int]]:
    """Per leg, (partitions past ``starting``, partitions still starting), over instances."""
    out = {}
    for leg in LEGS:
        counts: Counter[str] = Counter()
        for view in views:
            counts.update(view.get(leg, Counter()))
        out[leg] = (sum(n for s, n in counts.items() if s != STARTING), counts[STARTING])
    return out
