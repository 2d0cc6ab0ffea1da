"""A replication leg: the local cluster's replica topics into one destination cluster.

A leg owns everything that is per destination, so that a slow or unreachable destination stalls
only its own leg (contract point 4):

- the producer to the destination (connected in the background, retried until it answers),
- the destination topic provisioning,
- one :class:`PartitionSender` per assigned source partition,
- its *catch-up consumer*: a consumer of the source cluster with the leg's own consumer group
  (``<prefix>.<source>.<destination>``), manually assigned the partitions the shared feed owns.
  It holds the leg's committed (upstream) offsets, and it fetches for the partitions whose sender
  is detached from the shared feed (behind it, or full), paused for all the others. Fetching
  pauses when a sender's queue is full, so memory is bounded by the queue settings,
- committing upstream offsets: only offsets every record below which the destination
  acknowledged, on a timer, when partitions are released (rebalance) and on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from replicator.kafka import ClusterClient, make_consumer, make_producer, translate
from replicator.lifecycle import close_quietly, sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.sender import PartitionSender, PartitionState
from replicator.settings import Settings
from replicator.topics import TopicProvisioner
from replicator.topology import Leg, TopicRules

log = structlog.get_logger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]

_FETCH_TIMEOUT_MS = 200
_CONNECT_BACKOFF_S = 2.0


class LegRunner:
    """Runs one leg: destination producer, partition senders, catch-up fetch, commits."""

    def __init__(
        self,
        leg: Leg,
        settings: Settings,
        rules: TopicRules,
        metrics: Metrics,
        spawn: Spawn,
        source_client: ClusterClient,
        destination_client: ClusterClient,
    ) -> None:
        self.leg = leg
        self._settings = settings
        self._rules = rules
        self._metrics = metrics
        self._spawn = spawn
        source = settings.clusters[leg.source]
        destination = settings.clusters[leg.destination]
        client_id = f"replicator-{leg.source}-to-{leg.destination}"
        self.group = leg.group_id(settings.group_prefix)
        self._make_consumer: Callable[[], AIOKafkaConsumer] = partial(
            make_consumer, source, settings, self.group, client_id
        )
        self._make_producer: Callable[[], AIOKafkaProducer] = partial(
            make_producer, destination, settings, client_id
        )
        self._consumer = self._make_consumer()
        self._producer = self._make_producer()
        self.destination_ready = asyncio.Event()
        self._topics = TopicProvisioner(
            source_client, destination_client, settings.destination_replication_factor
        )
        self.senders: dict[TopicPartition, PartitionSender] = {}
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self._positions: dict[TopicPartition, int] = {}
        self.source_connected = False
        self.last_error: str | None = None
        self.last_poll = time.monotonic()
        self._log = log.bind(leg=leg.name)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start_source(self, stop: asyncio.Event) -> bool:
        """Start the catch-up consumer (source cluster); retry until up or stopped."""
        while not stop.is_set():
            try:
                await self._consumer.start()
                self.source_connected = True
                return True
            except Exception as exc:
                error = translate(exc)
                self.last_error = f"cannot connect to {self.leg.source}: {error}"
                self._log.warning("cannot reach the source, retrying", error=str(error))
                await close_quietly(self._consumer.stop())
                self._consumer = self._make_consumer()
                await sleep_unless_stopped(stop, _CONNECT_BACKOFF_S)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        """Connect the destination, then fetch for detached partitions and commit until stop."""
        self._spawn(self._connect_destination(stop), f"connect:{self.leg.name}")
        self._spawn(self._commit_loop(stop), f"commit:{self.leg.name}")
        await self._catch_up_loop(stop)

    async def _connect_destination(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._producer.start()
            except Exception as exc:
                error = translate(exc)
                self.last_error = f"cannot connect to {self.leg.destination}: {error}"
                self._log.warning("cannot reach the destination, retrying", error=str(error))
                await close_quietly(self._producer.stop())
                self._producer = self._make_producer()
                for sender in self.senders.values():
                    sender.use_producer(self._producer)
                await sleep_unless_stopped(stop, _CONNECT_BACKOFF_S)
                continue
            self.last_error = None
            self.destination_ready.set()
            self._log.info("destination connected")
            return

    async def close(self) -> None:
        """Close the clients (after :meth:`release` of every partition)."""
        grace = max(self._settings.shutdown_grace_ms / 1000, 1.0)
        if self.source_connected:
            await close_quietly(self._consumer.stop(), grace)
        # A producer whose destination is down would wait for ever to flush.
        await close_quietly(self._producer.stop(), grace)
        self._metrics.assigned_partitions.labels(self.leg.name).set(0)
        self._log.info("leg stopped")

    # -- partitions (called by the shared feed on rebalance) ------------------------------------

    async def assign(self, partitions: list[TopicPartition]) -> None:
        """Take ``partitions``: read the leg's committed offsets, start one sender each."""
        replicated = [tp for tp in partitions if self._rules.target(tp.topic) is not None]
        self._consumer.assign(replicated)
        for tp in replicated:
            committed = await self._consumer.committed(tp)
            target = self._rules.target(tp.topic)
            assert target is not None
            sender = PartitionSender(
                leg=self.leg,
                tp=tp,
                target_topic=target,
                producer=self._producer,
                destination_ready=self.destination_ready,
                topics=self._topics,
                metrics=self._metrics,
                max_records=self._settings.partition_queue_max_records,
                max_bytes=self._settings.partition_queue_max_bytes,
                next_offset=committed,
                on_detach=self._detached,
                on_attach=self._attached,
                on_room=self._room,
            )
            self.senders[tp] = sender
            self._consumer.pause(tp)  # the shared feed serves it while attached
            self._tasks[tp] = self._spawn(
                sender.run(), f"send:{self.leg.name}:{tp.topic}:{tp.partition}"
            )
        self._metrics.assigned_partitions.labels(self.leg.name).set(len(self.senders))
        self._log.info("partitions assigned", partitions=len(self.senders))

    async def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Give ``partitions`` up: drain their senders, commit what was acknowledged."""
        senders = [self.senders.pop(tp) for tp in partitions if tp in self.senders]
        if not senders:
            return
        await self._drain(senders, self._settings.shutdown_grace_ms / 1000)
        await self._commit(senders)
        for sender in senders:
            self._positions.pop(sender.tp, None)
        with contextlib.suppress(Exception):
            self._consumer.assign(list(self.senders))
        self._metrics.assigned_partitions.labels(self.leg.name).set(len(self.senders))

    def _detached(self, sender: PartitionSender) -> None:
        """A sender left the shared feed: fetch for it here, from where it stands."""
        if sender.halted:
            return
        self._log.info(
            "partition detached from the shared fetch",
            topic=sender.tp.topic,
            partition=sender.tp.partition,
            next_offset=sender.next_offset,
        )
        if sender.has_room:
            self._resume(sender)

    def _attached(self, sender: PartitionSender) -> None:
        with contextlib.suppress(Exception):
            self._consumer.pause(sender.tp)
        self._positions.pop(sender.tp, None)

    def _room(self, sender: PartitionSender) -> None:
        if not sender.attached and sender.open:
            self._resume(sender)

    def _resume(self, sender: PartitionSender) -> None:
        tp = sender.tp
        if tp not in self._consumer.assignment() or sender.next_offset is None:
            return
        if tp in self._positions and tp not in self._consumer.paused():
            return  # already fetching
        self._consumer.seek(tp, sender.next_offset)
        self._positions[tp] = sender.next_offset
        self._consumer.resume(tp)

    # -- catch-up fetch -------------------------------------------------------------------------

    async def _catch_up_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not self._consumer.assignment():
                self.last_poll = time.monotonic()
                await sleep_unless_stopped(stop, _FETCH_TIMEOUT_MS / 1000)
                continue
            consumer = self._consumer
            try:
                fetched = await consumer.getmany(timeout_ms=_FETCH_TIMEOUT_MS)
            except Exception as exc:
                error = translate(exc)
                self.last_error = f"catch-up fetch failed: {error}"
                self._log.warning("catch-up fetch failed", error=str(error))
                await sleep_unless_stopped(stop, _CONNECT_BACKOFF_S)
                continue
            self.last_poll = time.monotonic()
            for tp, records in fetched.items():
                sender = self.senders.get(tp)
                start = self._positions.get(tp)
                if sender is None or start is None or not records:
                    continue
                end = records[-1].offset + 1
                self._positions[tp] = end
                if not sender.take_fetched(records, start, end):
                    consumer.pause(tp)
                    if sender.open and not sender.attached and sender.has_room:
                        self._resume(sender)  # refused as stale: fetch again from its position

    # -- drain and commit -----------------------------------------------------------------------

    async def _drain(self, senders: list[PartitionSender], timeout: float) -> None:
        if not senders:
            return
        await asyncio.gather(*(s.drain(timeout) for s in senders))
        tasks = [self._tasks.pop(s.tp) for s in senders if s.tp in self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _commit(self, senders: Iterable[PartitionSender]) -> None:
        offsets = {
            s.tp: s.tracker.committable for s in senders if s.tracker and s.tracker.needs_commit
        }
        if not offsets or not self.source_connected:
            return
        try:
            await self._consumer.commit(offsets)
        except Exception as exc:
            error = translate(exc)
            self._metrics.commits.labels(self.leg.name, "failed").inc()
            self._log.warning("offset commit failed", error=str(error), partitions=len(offsets))
            return
        self._metrics.commits.labels(self.leg.name, "ok").inc()
        for sender in senders:
            if sender.tp in offsets and sender.tracker is not None:
                sender.tracker.mark_committed(offsets[sender.tp])

    async def _commit_loop(self, stop: asyncio.Event) -> None:
        interval = self._settings.commit_interval_ms / 1000
        while not stop.is_set():
            await sleep_unless_stopped(stop, interval)
            if stop.is_set():
                return
            await self._commit(list(self.senders.values()))

    def update_lag(self, log_end: Callable[[TopicPartition], int | None]) -> None:
        for tp, sender in self.senders.items():
            end = log_end(tp)
            if end is None:
                continue
            committed = _committed(sender)
            if committed is None:
                continue
            self._metrics.commit_lag.labels(self.leg.name, tp.topic, str(tp.partition)).set(
                max(0, end - committed)
            )

    # -- health ---------------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Why this leg is not ready; empty when it is."""
        found: list[str] = []
        if not self.destination_ready.is_set():
            found.append(f"leg {self.leg.name} not connected: {self.last_error or 'starting'}")
        stall = self._settings.send_stall_timeout_ms / 1000
        for sender in self.senders.values():
            where = f"leg {self.leg.name} {sender.tp.topic}[{sender.tp.partition}]"
            if sender.halted:
                found.append(f"{where} {sender.state}: {sender.last_error}")
            elif sender.oldest_unacked_age > stall:
                found.append(f"{where} unacknowledged for {sender.oldest_unacked_age:.0f}s")
        self._metrics.leg_ready.labels(self.leg.name).set(0 if found else 1)
        blocked = {s.tp.topic for s in self.senders.values() if s.halted}
        self._metrics.topics_blocked.labels(self.leg.name).set(len(blocked))
        return found

    def status(self, log_end: Callable[[TopicPartition], int | None]) -> dict[str, Any]:
        partitions = []
        for tp, sender in sorted(self.senders.items()):
            entry = sender.status()
            end = log_end(tp)
            committed = _committed(sender)
            entry["log_end_offset"] = end
            entry["lag"] = None if end is None or committed is None else max(0, end - committed)
            partitions.append(entry)
        return {
            "leg": self.leg.name,
            "source": self.leg.source,
            "destination": self.leg.destination,
            "group": self.group,
            "connected": self.destination_ready.is_set(),
            "assigned_partitions": len(self.senders),
            "replicating": sum(
                1 for s in self.senders.values() if s.state is PartitionState.REPLICATING
            ),
            "detached_partitions": sum(1 for s in self.senders.values() if not s.attached),
            "last_error": self.last_error,
            "refused_topics": dict(self._topics.refused),
            "partitions": partitions,
        }

    @property
    def seconds_since_poll(self) -> float:
        return time.monotonic() - self.last_poll


def _committed(sender: PartitionSender) -> int | None:
    """The leg's committed offset for a partition: the last commit, else where it started."""
    return sender.tracker.committed if sender.tracker else sender.next_offset
