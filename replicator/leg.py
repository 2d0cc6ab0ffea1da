"""A replication leg: every replica topic of the local cluster into one destination cluster.

Each leg has its own consumer group on the source cluster, its own producer to the destination and
its own partition senders, so a slow or unreachable destination stalls only its own leg (contract
point 4). The leg owns:

- connecting (retried until the destination answers; the group is joined only then, so another
  instance that can reach the destination keeps the partitions meanwhile),
- the fetch loop (records to partition senders; a partition whose sender is full is paused, which
  bounds memory by the queue settings rather than by the backlog),
- rebalances (revoked partitions are drained and their acknowledged offsets committed first),
- committing upstream offsets: only offsets every record below which the destination acknowledged,
  on a timer, on revocation and on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from replicator.kafka import ClusterClient, make_consumer, make_producer, translate
from replicator.metrics import Metrics
from replicator.sender import PartitionSender, PartitionState
from replicator.settings import Settings
from replicator.topics import TopicProvisioner
from replicator.topology import Leg, TopicRules

log = structlog.get_logger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]

_FETCH_TIMEOUT_MS = 200
_CONNECT_BACKOFF_S = 2.0


class LegRunner(ConsumerRebalanceListener):  # type: ignore[misc]
    """Runs one leg: fetch, fan out to partition senders, commit what was acknowledged."""

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
        group = leg.group_id(settings.group_prefix)
        self._make_consumer: Callable[[], AIOKafkaConsumer] = partial(
            make_consumer, source, settings, group, client_id
        )
        self._make_producer: Callable[[], AIOKafkaProducer] = partial(
            make_producer, destination, settings, client_id
        )
        self._consumer = self._make_consumer()
        self._producer = self._make_producer()
        self._topics = TopicProvisioner(
            source_client, destination_client, settings.destination_replication_factor
        )
        self._senders: dict[TopicPartition, PartitionSender] = {}
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self.connected = False
        self.joined = False
        self.last_error: str | None = None
        self.last_poll = time.monotonic()
        self._log = log.bind(leg=leg.name)

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, replicate until ``stop`` is set, then drain, commit and close."""
        try:
            if await self._connect(stop):
                self._spawn(self._commit_loop(stop), f"commit:{self.leg.name}")
                await self._fetch_loop(stop)
        finally:
            await self._shutdown()

    async def _connect(self, stop: asyncio.Event) -> bool:
        """Start the producer (destination), then the consumer (source); retry each until up.

        A client whose start failed is closed and replaced, so retries leak no connections.
        """
        producing = False
        while not stop.is_set():
            try:
                if not producing:
                    await self._producer.start()
                    producing = True
                await self._consumer.start()
                self._consumer.subscribe(pattern=self._rules.subscription_pattern, listener=self)
            except Exception as exc:
                error = translate(exc)
                side = self.leg.source if producing else self.leg.destination
                self.last_error = f"cannot connect to {side}: {error}"
                self._log.warning("leg cannot connect, retrying", cluster=side, error=str(error))
                if producing:
                    await _stop_quietly(self._consumer.stop())
                    self._consumer = self._make_consumer()
                else:
                    await _stop_quietly(self._producer.stop())
                    self._producer = self._make_producer()
                await _wait(stop, _CONNECT_BACKOFF_S)
                continue
            self.connected = True
            self.last_error = None
            self._log.info("leg connected", group=self.leg.group_id(self._settings.group_prefix))
            return True
        return False

    async def _shutdown(self) -> None:
        grace = self._settings.shutdown_grace_ms / 1000
        senders = list(self._senders.values())
        await self._drain(senders, grace)
        if self.connected:
            await self._commit(senders)
            try:
                await asyncio.wait_for(self._consumer.stop(), timeout=max(grace, 1.0))
            except Exception as exc:
                self._log.warning("consumer did not stop cleanly", error=str(translate(exc)))
        try:
            # A producer whose destination is down would wait for ever to flush.
            await asyncio.wait_for(self._producer.stop(), timeout=max(grace, 1.0))
        except Exception as exc:
            self._log.warning("producer did not stop cleanly", error=str(translate(exc)))
        self._metrics.assigned_partitions.labels(self.leg.name).set(0)
        self._log.info("leg stopped")

    # -- fetch ----------------------------------------------------------------------------------

    async def _fetch_loop(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        while not stop.is_set():
            try:
                fetched = await consumer.getmany(timeout_ms=_FETCH_TIMEOUT_MS)
            except Exception as exc:
                error = translate(exc)
                self.last_error = f"fetch failed: {error}"
                self._log.warning("fetch failed", error=str(error), retriable=error.retriable)
                await _wait(stop, _CONNECT_BACKOFF_S)
                continue
            self.last_poll = time.monotonic()
            for tp, records in fetched.items():
                sender = self._senders.get(tp)
                if sender is None or not records:
                    continue
                if not sender.offer(records):
                    consumer.pause(tp)

    def _resume(self, tp: TopicPartition) -> None:
        sender = self._senders.get(tp)
        if sender is not None and not sender.halted and tp in self._consumer.assignment():
            self._consumer.resume(tp)

    def _pause(self, tp: TopicPartition) -> None:
        if tp in self._consumer.assignment():
            self._consumer.pause(tp)

    # -- rebalance (called by aiokafka) ---------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        senders = [self._senders.pop(tp) for tp in revoked if tp in self._senders]
        if not senders:
            return
        await self._drain(senders, self._settings.shutdown_grace_ms / 1000)
        await self._commit(senders)
        self._log.info("partitions revoked", partitions=len(senders))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.joined = True
        self._metrics.rebalances.labels(self.leg.name).inc()
        added = 0
        for tp in assigned:
            target = self._rules.target(tp.topic)
            if target is None or tp in self._senders:
                if target is None:
                    self._consumer.pause(tp)
                continue
            sender = PartitionSender(
                leg=self.leg,
                tp=tp,
                target_topic=target,
                producer=self._producer,
                topics=self._topics,
                metrics=self._metrics,
                max_records=self._settings.partition_queue_max_records,
                max_bytes=self._settings.partition_queue_max_bytes,
                on_room=self._resume,
                on_halt=self._pause,
            )
            self._senders[tp] = sender
            self._tasks[tp] = self._spawn(
                sender.run(), f"send:{self.leg.name}:{tp.topic}:{tp.partition}"
            )
            added += 1
        self._metrics.assigned_partitions.labels(self.leg.name).set(len(self._senders))
        self._log.info("partitions assigned", added=added, total=len(self._senders))

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
        if not offsets:
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
            await _wait(stop, interval)
            if stop.is_set():
                return
            await self._commit(list(self._senders.values()))
            self._update_lag()

    def _update_lag(self) -> None:
        for tp, sender in self._senders.items():
            end = self._consumer.highwater(tp)
            if end is None:
                continue
            committed = sender.tracker.committed if sender.tracker else end
            self._metrics.commit_lag.labels(self.leg.name, tp.topic, str(tp.partition)).set(
                max(0, end - committed)
            )

    # -- health ---------------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Why this leg is not ready; empty when it is."""
        found: list[str] = []
        if not self.connected:
            found.append(f"leg {self.leg.name} not connected: {self.last_error or 'starting'}")
            return found
        if not self.joined:
            found.append(f"leg {self.leg.name} has not joined its consumer group yet")
        stall = self._settings.send_stall_timeout_ms / 1000
        for sender in self._senders.values():
            where = f"leg {self.leg.name} {sender.tp.topic}[{sender.tp.partition}]"
            if sender.halted:
                found.append(f"{where} {sender.state}: {sender.last_error}")
            elif sender.oldest_unacked_age > stall:
                found.append(f"{where} unacknowledged for {sender.oldest_unacked_age:.0f}s")
        self._metrics.leg_ready.labels(self.leg.name).set(0 if found else 1)
        blocked = {s.tp.topic for s in self._senders.values() if s.halted}
        self._metrics.topics_blocked.labels(self.leg.name).set(len(blocked))
        return found

    def status(self) -> dict[str, Any]:
        partitions = []
        for tp, sender in sorted(self._senders.items()):
            entry = sender.status()
            end = self._consumer.highwater(tp) if self.connected else None
            entry["log_end_offset"] = end
            committed = sender.tracker.committed if sender.tracker else None
            entry["lag"] = None if end is None or committed is None else max(0, end - committed)
            partitions.append(entry)
        return {
            "leg": self.leg.name,
            "source": self.leg.source,
            "destination": self.leg.destination,
            "group": self.leg.group_id(self._settings.group_prefix),
            "connected": self.connected,
            "joined": self.joined,
            "assigned_partitions": len(self._senders),
            "replicating": sum(
                1 for s in self._senders.values() if s.state is PartitionState.REPLICATING
            ),
            "last_error": self.last_error,
            "refused_topics": dict(self._topics.refused),
            "partitions": partitions,
        }

    @property
    def seconds_since_poll(self) -> float:
        return time.monotonic() - self.last_poll


async def _stop_quietly(stopping: Coroutine[Any, Any, None]) -> None:
    """Close a client whose start failed; its own errors add nothing to the one reported."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(stopping, timeout=5)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
