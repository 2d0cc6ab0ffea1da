"""Heartbeats: each flow proves its whole path on an interval, with or without traffic.

As MirrorMaker 2 does, every flow writes a small heartbeat record into its source cluster's
heartbeat topic (``REPLICATOR_HEARTBEAT_TOPIC``, created with one partition if missing) every
``REPLICATOR_HEARTBEAT_INTERVAL_MS``: key the flow's name, value ``{"flow", "source", "target",
"emitted_ms"}`` in JSON, timestamp the emission time. The flow copies that topic like any other
(its rules always select it; the target's copy is named by the flow's policy: ``heartbeats``,
``dc1_heartbeats``, ``dc1.heartbeats``), so a heartbeat reaching the target has been through the
same fetch, build, send and acknowledgement as the application's records.

The monitor reads the target's copy from its end and keeps, of the records whose provenance
names the flow's source cluster, the newest: ``last seen`` (when it was emitted) and the
end-to-end *delay* (when the monitor read it, minus when it was emitted). Its *age* (now minus
the emission of the newest heartbeat seen) grows when the flow stalls even if no application
writes anything. Shown per flow in ``/status`` (``flows.<name>.heartbeat``) and the metrics
``replicator_heartbeat_age_seconds``, ``replicator_heartbeat_delay_seconds`` and
``replicator_heartbeats_emitted_total``. Failures (a cluster down) are retried by the service's one
retry policy, shown in ``last_error`` and logged once per change.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from replicator import provenance
from replicator.errors import ReplicatorError
from replicator.kafka import ClusterClient, make_reader, translate
from replicator.lifecycle import close_quietly, sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.producer import idempotence_refused, make_producer
from replicator.retry import Backoff
from replicator.settings import Settings
from replicator.topics import describe_partitions, ensure_single_partition
from replicator.topology import FeedPlan

log = structlog.get_logger(__name__)

_POLL_MS = 500


def heartbeat_value(plan: FeedPlan, emitted_ms: int) -> bytes:
    """The heartbeat record's value: what it proves, in JSON."""
    leg = plan.legs[0]
    body = {"flow": plan.name, "source": leg.source, "target": leg.destination}
    return json.dumps({**body, "emitted_ms": emitted_ms}, separators=(",", ":")).encode()


class FlowHeartbeat:
    """Emits one flow's heartbeats into its source and watches them arrive at its target."""

    def __init__(
        self,
        settings: Settings,
        plan: FeedPlan,
        metrics: Metrics,
        source: ClusterClient,
        target: ClusterClient,
    ) -> None:
        self._settings = settings
        self.plan = plan
        self._source = source
        self._target = target
        self.topic = settings.heartbeat_topic
        self.target_topic = plan.rules.target(self.topic)
        self._interval = settings.heartbeat_interval_ms / 1000
        self._idempotence = settings.idempotence
        self._emitted = metrics.heartbeats_emitted.labels(plan.name)
        self._age = metrics.heartbeat_age.labels(plan.name)
        self._delay = metrics.heartbeat_delay.labels(plan.name)
        self._log = log.bind(flow=plan.name)
        self.last_emitted_ms: int | None = None
        self.last_seen_ms: int | None = None  # emission time of the newest heartbeat seen
        self.delay_seconds: float | None = None
        self.emit_error: str | None = None
        self.watch_error: str | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Emit and watch until ``stop``."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._emit(stop), name=f"heartbeat-emit:{self.plan.name}")
            if self.target_topic is not None:
                tasks.create_task(self._watch(stop), name=f"heartbeat-watch:{self.plan.name}")

    # -- emitting into the source ---------------------------------------------------------------

    async def _emit(self, stop: asyncio.Event) -> None:
        producer: AIOKafkaProducer | None = None
        backoff = Backoff(base=max(self._interval, 1.0))
        try:
            while not stop.is_set():
                try:
                    if producer is None:
                        producer = await self._start_producer()
                    now = int(time.time() * 1000)
                    sent = producer.send_and_wait(
                        self.topic,
                        key=self.plan.name.encode(),
                        value=heartbeat_value(self.plan, now),
                        timestamp_ms=now,
                    )
                    # Batches never expire here: an unreachable source is a timeout, reported.
                    await asyncio.wait_for(sent, self._settings.request_timeout_ms / 1000)
                except Exception as exc:
                    error = translate(exc)
                    self._failed("emit", error)
                    if producer is not None:
                        await close_quietly(producer.stop())
                        producer = None
                    await sleep_unless_stopped(stop, backoff.delay(error.retriable))
                    continue
                self.last_emitted_ms = now
                self._emitted.inc()
                self._recovered("emit")
                await sleep_unless_stopped(stop, self._interval)
        finally:
            if producer is not None:
                await close_quietly(producer.stop())

    async def ensure_topic(self) -> None:
        """Create the source's heartbeat topic if it is missing (one partition, compacted).

        Called before the flow's feed first lists its topics: a topic appearing later changes
        the feed's subscription, which costs a rebalance."""
        admin = await self._source.admin()
        compacted = {"cleanup.policy": "compact"}
        errors = await ensure_single_partition(
            admin, self.topic, self.plan.replication_factor, compacted
        )
        if errors is None:
            return
        if errors:
            self._log.warning("heartbeat topic not created", topic=self.topic, errors=errors)
        else:
            self._log.info("heartbeat topic created", topic=self.topic)

    async def _start_producer(self) -> AIOKafkaProducer:
        await self.ensure_topic()
        cluster = self._settings.clusters[self.plan.source]
        client_id = f"replicator-{self.plan.name}-heartbeat"
        producer = make_producer(
            cluster, self._settings, client_id, enable_idempotence=self._idempotence
        )
        try:
            await producer.start()
        except Exception as exc:
            await close_quietly(producer.stop())
            if self._idempotence and idempotence_refused(exc):
                self._idempotence = False  # as the legs do: heartbeats need no deduplication
                self._log.info("the source refused an idempotent producer: heartbeats go without")
                return await self._start_producer()
            raise
        except BaseException:
            await close_quietly(producer.stop())
            raise
        return producer

    # -- watching the target's copy -------------------------------------------------------------

    async def _watch(self, stop: asyncio.Event) -> None:
        consumer: AIOKafkaConsumer | None = None
        backoff = Backoff(base=max(self._interval, 1.0))
        try:
            while not stop.is_set():
                try:
                    if consumer is None:
                        consumer = await self._start_watch()
                        if consumer is None:  # the copy does not exist yet
                            await sleep_unless_stopped(stop, self._interval)
                            continue
                    fetched = await consumer.getmany(timeout_ms=_POLL_MS)
                except Exception as exc:
                    error = translate(exc)
                    self._failed("watch", error)
                    if consumer is not None:
                        await close_quietly(consumer.stop())
                        consumer = None
                    await sleep_unless_stopped(stop, backoff.delay(error.retriable))
                    continue
                self._recovered("watch")
                for records in fetched.values():
                    for record in records:
                        self._seen(record.headers, record.timestamp)
        finally:
            if consumer is not None:
                await close_quietly(consumer.stop())

    async def _start_watch(self) -> AIOKafkaConsumer | None:
        assert self.target_topic is not None
        admin = await self._target.admin()
        partitions = (await describe_partitions(admin)).get(self.target_topic)
        if not partitions:
            return None
        cluster = self._settings.clusters[self.plan.legs[0].destination]
        client_id = f"replicator-{self.plan.name}-heartbeat-watch"
        consumer = make_reader(cluster, self._settings, client_id, fetch_max_wait_ms=_POLL_MS)
        try:
            await consumer.start()
            assigned = [TopicPartition(self.target_topic, p["partition"]) for p in partitions]
            consumer.assign(assigned)
            # The newest heartbeat already there counts: a restart shows the age at once.
            ends = await consumer.end_offsets(assigned)
            for tp, end in ends.items():
                consumer.seek(tp, max(0, end - 1))
        except BaseException:
            await close_quietly(consumer.stop())
            raise
        return consumer

    def _seen(self, headers: Any, timestamp_ms: int) -> None:
        try:
            origin = provenance.parse(headers)
        except provenance.ProvenanceError:
            return
        if origin is None or origin.cluster != self.plan.source or origin.topic != self.topic:
            return  # the target's own heartbeats, or another cluster's
        if self.last_seen_ms is not None and timestamp_ms <= self.last_seen_ms:
            return
        self.last_seen_ms = timestamp_ms
        self.delay_seconds = max(0.0, time.time() - timestamp_ms / 1000)
        self._delay.set(self.delay_seconds)

    # -- what /status and /metrics show ---------------------------------------------------------

    @property
    def age_seconds(self) -> float | None:
        if self.last_seen_ms is None:
            return None
        return max(0.0, time.time() - self.last_seen_ms / 1000)

    def refresh(self) -> None:
        age = self.age_seconds
        if age is not None:
            self._age.set(age)

    def status(self) -> dict[str, Any]:
        age = self.age_seconds
        return {
            "topic": self.topic,
            "target_topic": self.target_topic,
            "interval_seconds": self._interval,
            "last_emitted_ms": self.last_emitted_ms,
            "last_seen_ms": self.last_seen_ms,
            "age_seconds": None if age is None else round(age, 3),
            "delay_seconds": None if self.delay_seconds is None else round(self.delay_seconds, 3),
            "last_error": self.emit_error or self.watch_error,
        }

    def _failed(self, what: str, error: ReplicatorError) -> None:
        message = f"heartbeat {what} failed: {error}"
        previous = self.emit_error if what == "emit" else self.watch_error
        if previous != message:
            self._log.warning(f"heartbeat {what} failed", error=str(error))
        if what == "emit":
            self.emit_error = message
        else:
            self.watch_error = message

    def _recovered(self, what: str) -> None:
        if what == "emit" and self.emit_error is not None:
            self._log.info("heartbeat emit recovered")
            self.emit_error = None
        elif what == "watch" and self.watch_error is not None:
            self._log.info("heartbeat watch recovered")
            self.watch_error = None
