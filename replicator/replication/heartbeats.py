"""Heartbeats: each flow proves its whole path on an interval, with or without traffic.

Every flow writes a small heartbeat record into its source cluster's heartbeat topic
(``REPLICATOR_HEARTBEAT_TOPIC``, created with one partition if missing) every
``REPLICATOR_HEARTBEAT_INTERVAL_MS``: key the flow's name, value ``{"flow", "source", "target",
"emitted_ms"}`` in JSON, timestamp the emission time. The flow copies that topic like any other
(its rules always select it; the target's copy is named by the flow's policy: ``heartbeats``,
``dc1_heartbeats``, ``dc1.heartbeats``), so a heartbeat reaching the target has been through the
same fetch, build, send and acknowledgement as the application's records.

Under ``REPLICATOR_HEARTBEAT_PLACEMENT=mirrormaker2`` (``replicator mm2``) they go where MirrorMaker
2 puts them, in its record format (:func:`mm2_heartbeat`): a flow A->B writes ``A->B`` into B's
topic, and (``REVERSE_HEARTBEATS``: no flow runs B->A, whose heartbeats MirrorMaker 2 still
emits) ``B->A`` into A's, which the flow copies as ``A.heartbeats`` under every naming policy
(:func:`emissions`). The monitor is the same.

The monitor reads the target's copy from its end and keeps, of the records whose provenance
names the flow's source cluster, the newest: ``last seen`` (when it was emitted) and the
end-to-end *delay* (when the monitor read it, minus when it was emitted). Its *age* (now minus
the emission of the newest heartbeat seen) grows when the flow stalls even if no application
writes anything. Shown per flow in ``/status`` (``flows.<name>.heartbeat``) and the metrics
``replicator_heartbeat_age_seconds``, ``replicator_heartbeat_delay_seconds`` and
``replicator_heartbeats_emitted_total``. Failures (a cluster down) are retried by the service's one
retry policy (:func:`~replicator.kafka.retry.retrying`: logged at the first failure, at each change
and every 30 s), and shown in ``last_error``.

**Chains and rings of identity flows.** A flow with the same names copies only the records that
originated in its source: a copy is never copied again, so it is a mesh's flow (every cluster
into every other). In a chain (dc1 -> dc2 -> dc3, no flow dc1 -> dc3) or a ring, some origin's
records would never reach some cluster, silently. The heartbeats show it: the monitor also reads
the source's heartbeat topic, where the heartbeats of every flow into the source arrive with
their origin's provenance. An origin seen there (other than the target) whose heartbeats never
arrive in the target's topic, while this flow's own do, has no flow into the target: the flow is
reported (``/readyz``, ``/status`` ``flows.<name>.heartbeat.unforwarded``, one error line)
naming the chain (:func:`unforwarded`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan
from replicator.config.values import HeartbeatPlacement
from replicator.errors import ProvenanceError, ReplicatorError
from replicator.kafka.admin import describe_partitions
from replicator.kafka.clients import ClusterClient, make_reader
from replicator.kafka.mm2_wire import heartbeat_record
from replicator.kafka.producer import start_producer
from replicator.kafka.retry import Backoff, retrying
from replicator.kafka.roles import LogReader, RecordProducer
from replicator.lifecycle import close_quietly, sleep_unless_stopped
from replicator.model import provenance
from replicator.telemetry.metrics import Metrics
from replicator.topics.provisioning import ensure_single_partition

log = structlog.get_logger(__name__)

_POLL_MS = 500
_RECENT = 20  # heartbeats read back at start, per partition of a heartbeat topic


def heartbeat_value(plan: FeedPlan, emitted_ms: int) -> bytes:
    """The heartbeat record's value: what it proves, in JSON."""
    leg = plan.legs[0]
    body = {"flow": plan.name, "source": leg.source, "target": leg.destination}
    return json.dumps({**body, "emitted_ms": emitted_ms}, separators=(",", ":")).encode()


def mm2_heartbeat(source: str, target: str, emitted_ms: int) -> tuple[bytes, bytes]:
    """A heartbeat record as MirrorMaker 2 writes it: the key the two cluster aliases, the
    value version 0 and the timestamp."""
    return heartbeat_record(source, target, emitted_ms)


@dataclass(frozen=True)
class Emission:
    """Where one flow writes heartbeats: a cluster's heartbeat topic, and the record's key and
    value (``value(emitted_ms)``)."""

    alias: str
    client: ClusterClient
    key: bytes
    value: Callable[[int], bytes]


def emissions(
    settings: Settings, plan: FeedPlan, source: ClusterClient, target: ClusterClient
) -> list[Emission]:
    """Where ``plan``'s heartbeats go: into its source (placement ``source``), or as MirrorMaker 2
    writes them (``mirrormaker2``): into the target as ``source->target``, and, when the flow's
    ``reverse_heartbeats`` says (no flow runs the reverse direction), into the source as
    ``target->source``, which the flow then copies."""
    leg = plan.legs[0]
    if settings.heartbeat_placement is HeartbeatPlacement.SOURCE:
        key = plan.name.encode()
        return [Emission(leg.source, source, key, partial(heartbeat_value, plan))]
    flow = settings.flows[plan.name]
    found = []
    if flow.heartbeats:
        key, _ = mm2_heartbeat(leg.source, leg.destination, 0)
        value = partial(_mm2_value, leg.source, leg.destination)
        found.append(Emission(leg.destination, target, key, value))
    if flow.reverse_heartbeats:
        key, _ = mm2_heartbeat(leg.destination, leg.source, 0)
        value = partial(_mm2_value, leg.destination, leg.source)
        found.append(Emission(leg.source, source, key, value))
    return found


def _mm2_value(source: str, target: str, emitted_ms: int) -> bytes:
    return mm2_heartbeat(source, target, emitted_ms)[1]


# An origin counts as not reaching the target once this many intervals passed with its
# heartbeats arriving in the source and none of them in the target.
UNFORWARDED_AFTER_INTERVALS = 5
_UNFORWARDED_FLOOR_S = 5.0


def unforwarded(
    into_source: dict[str, float],
    into_target: dict[str, float],
    target: str,
    watched_since: float,
    now: float,
    after_s: float,
) -> list[str]:
    """The origins whose heartbeats reached the source recently (``into_source``: origin ->
    when last read there) but none of them the target (``into_target``) for ``after_s``
    seconds of watching both: nothing copies that origin's records into the target, and an
    identity flow never copies a copy. The target itself is never one (a copy back home)."""
    if now - watched_since < after_s:
        return []
    return sorted(
        origin
        for origin, seen in into_source.items()
        if origin != target
        and now - seen < after_s
        and now - into_target.get(origin, float("-inf")) >= after_s
    )


def stale_for(last_seen_ms: int | None, started: float, now: float) -> float:
    """The heartbeat age the gauge shows: since the newest heartbeat seen or, before the first,
    since the flow started, so that a flow that never delivers one is seen to stall (an alert on
    the age fires) instead of showing nothing."""
    since = started if last_seen_ms is None else last_seen_ms / 1000
    return max(0.0, now - since)


def _origin(headers: Any, topic: str) -> str | None:
    """The cluster a heartbeat copied from another cluster's ``topic`` came from, if it is one."""
    try:
        origin = provenance.parse(headers)
    except ProvenanceError:
        return None
    return origin.cluster if origin is not None and origin.topic == topic else None


class FlowHeartbeat:
    """Emits one flow's heartbeats (:func:`emissions`: into its source, or where MirrorMaker 2
    puts them) and watches them arrive at its target."""

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
        self.emissions = emissions(settings, plan, source, target)
        self.topic = settings.heartbeat_topic
        self.target_topic = plan.rules.target(self.topic)
        self._interval = settings.heartbeat_interval_ms / 1000
        self._emitted = metrics.heartbeats_emitted.labels(plan.name)
        self._age = metrics.heartbeat_age.labels(plan.name)
        self._delay = metrics.heartbeat_delay.labels(plan.name)
        self._log = log.bind(flow=plan.name)
        self.last_emitted_ms: int | None = None
        self.last_seen_ms: int | None = None  # emission time of the newest heartbeat seen
        self._started = clock.wall()  # the age's origin until a first heartbeat is seen
        self.delay_seconds: float | None = None
        self.emit_error: str | None = None
        self.watch_error: str | None = None
        # Identity flows only: origins whose heartbeats were read in the source's topic and in
        # the target's (origin -> when last read), and what the check found (see unforwarded).
        self._identity = self.target_topic == self.topic
        self._into_source: dict[str, float] = {}
        self._into_target: dict[str, float] = {}
        self._watching_since: float | None = None
        self.unforwarded: list[str] = []

    async def run(self, stop: asyncio.Event) -> None:
        """Emit and watch until ``stop``."""
        async with asyncio.TaskGroup() as tasks:
            for emission in self.emissions:
                tasks.create_task(
                    self._emit(stop, emission),
                    name=f"heartbeat-emit:{self.plan.name}:{emission.alias}",
                )
            if self.target_topic is not None:
                tasks.create_task(self._watch(stop), name=f"heartbeat-watch:{self.plan.name}")
            if self._identity:
                tasks.create_task(
                    self._watch_source(stop), name=f"heartbeat-watch-source:{self.plan.name}"
                )

    # -- emitting into the source ---------------------------------------------------------------

    async def _emit(self, stop: asyncio.Event, emission: Emission) -> None:
        producer: RecordProducer | None = None

        async def emit() -> int:
            nonlocal producer
            if producer is None:
                producer = await self._start_producer(emission)
            now = int(clock.wall() * 1000)
            sent = producer.send_and_wait(
                self.topic, key=emission.key, value=emission.value(now), timestamp_ms=now
            )
            # Batches never expire here: an unreachable source is a timeout, reported.
            await asyncio.wait_for(sent, self._settings.request_timeout_ms / 1000)
            return now

        async def failed(error: ReplicatorError) -> None:
            nonlocal producer
            self._failed("emit", error)
            if producer is not None:
                await close_quietly(producer.stop())
                producer = None

        backoff = Backoff(base=max(self._interval, 1.0))
        try:
            while not stop.is_set():
                emitted = await retrying(
                    emit,
                    stop=stop,
                    what=f"emit heartbeats into {emission.alias}",
                    log=self._log,
                    on_error=failed,
                    backoff=backoff,
                )
                if emitted is None:
                    break  # stopped
                self.last_emitted_ms = emitted
                self._emitted.inc()
                self._recovered("emit")
                await sleep_unless_stopped(stop, self._interval)
        finally:
            if producer is not None:
                await close_quietly(producer.stop())

    async def ensure_topic(self) -> None:
        """Create the heartbeat topic of every cluster the flow writes heartbeats into if it is
        missing (one partition, compacted).

        Called before the flow's feed first lists its topics: a topic appearing later changes
        the feed's subscription, which costs a rebalance."""
        source = self.plan.source
        # The source's first: its feed lists the source's topics (a target that does not answer
        # yet is left to the emitter's retries).
        for emission in sorted(self.emissions, key=lambda e: e.alias != source):
            await self._ensure_topic(emission)

    async def _ensure_topic(self, emission: Emission) -> None:
        admin = await emission.client.admin()
        compacted = {"cleanup.policy": "compact"}
        errors = await ensure_single_partition(
            admin, self.topic, self.plan.replication_factor, compacted
        )
        if errors is None:
            return
        if errors:
            self._log.warning(
                "heartbeat topic not created",
                cluster=emission.alias,
                topic=self.topic,
                errors=errors,
            )
        else:
            self._log.info("heartbeat topic created", cluster=emission.alias, topic=self.topic)

    async def _start_producer(self, emission: Emission) -> RecordProducer:
        await self._ensure_topic(emission)
        client_id = f"replicator-{self.plan.name}-heartbeat"
        # Idempotent where the cluster grants it (heartbeats need no deduplication).
        return await start_producer(emission.client, self._settings, client_id)

    # -- watching the target's copy -------------------------------------------------------------

    async def _watch(self, stop: asyncio.Event) -> None:
        """Read the target's copy: this flow's heartbeats (age, delay) and every origin's."""

        def seen(records: list[Any]) -> None:
            for record in records:
                self._seen(record.headers, record.timestamp)
            self._check_chain()

        await self._read(stop, self._start_watch, seen)

    async def _watch_source(self, stop: asyncio.Event) -> None:
        """Read which origins' heartbeats arrive in the source (identity flows: see above)."""

        async def start() -> LogReader | None:
            return await self._start_reader(self._source, self.plan.source, self.topic, "source")

        def seen(records: list[Any]) -> None:
            now = clock.monotonic()
            for record in records:
                origin = _origin(record.headers, self.topic)
                if origin is not None:
                    self._into_source[origin] = now

        await self._read(stop, start, seen)

    async def _read(
        self,
        stop: asyncio.Event,
        start: Callable[[], Awaitable[LogReader | None]],
        seen: Callable[[list[Any]], None],
    ) -> None:
        """Hand what ``start``'s reader fetches to ``seen`` until ``stop``; a failed reader is
        reported and started again; ``None`` from ``start``: the topic does not exist yet."""
        consumer: LogReader | None = None

        async def fetch() -> list[Any] | None:
            nonlocal consumer
            if consumer is None:
                consumer = await start()
                if consumer is None:
                    return None
            fetched = await consumer.getmany(timeout_ms=_POLL_MS)
            return [record for records in fetched.values() for record in records]

        async def failed(error: ReplicatorError) -> None:
            nonlocal consumer
            self._failed("watch", error)
            if consumer is not None:
                await close_quietly(consumer.stop())
                consumer = None

        backoff = Backoff(base=max(self._interval, 1.0))
        try:
            while not stop.is_set():
                records = await retrying(
                    fetch,
                    stop=stop,
                    what=f"read heartbeats of {self.topic}",
                    log=self._log,
                    on_error=failed,
                    backoff=backoff,
                )
                if stop.is_set():
                    break
                if records is None:  # the topic does not exist yet
                    await sleep_unless_stopped(stop, self._interval)
                    continue
                self._recovered("watch")
                seen(records)
        finally:
            if consumer is not None:
                await close_quietly(consumer.stop())

    def _check_chain(self) -> None:
        if not self._identity or self._watching_since is None:
            return
        after = max(UNFORWARDED_AFTER_INTERVALS * self._interval, _UNFORWARDED_FLOOR_S)
        target = self.plan.legs[0].destination
        found = unforwarded(
            self._into_source,
            self._into_target,
            target,
            self._watching_since,
            clock.monotonic(),
            after,
        )
        if found != self.unforwarded and found:
            self._log.error(
                "identity flows form a chain or a ring: records that reach the source from "
                "these clusters are never copied to the target (a copy is never copied again), "
                "and no flow copies them there; add a flow from each into the target (a mesh), "
                "or name topics by source (NAMING=source-alias)",
                chains=[f"{o} -> {self.plan.source} -> {target}" for o in found],
            )
        elif self.unforwarded and not found:
            self._log.info("every origin reaching the source now reaches the target")
        self.unforwarded = found

    def problems(self) -> list[str]:
        """For ``/readyz``: origins this identity flow's target never gets."""
        target = self.plan.legs[0].destination
        return [
            f"flow {self.plan.name}: records of {origin} reach {self.plan.source} but never "
            f"{target} ({origin} -> {self.plan.source} -> {target}: identity flows never copy "
            f"a copy; add a flow {origin} -> {target}, or use source-alias names)"
            for origin in self.unforwarded
        ]

    async def _start_watch(self) -> LogReader | None:
        assert self.target_topic is not None
        target = self.plan.legs[0].destination
        consumer = await self._start_reader(self._target, target, self.target_topic, "watch")
        if consumer is not None and self._watching_since is None:
            self._watching_since = clock.monotonic()
        return consumer

    async def _start_reader(
        self, client: ClusterClient, alias: str, topic: str, role: str
    ) -> LogReader | None:
        """A reader of ``topic`` in cluster ``alias`` from its newest records; ``None`` while
        the topic does not exist."""
        admin = await client.admin()
        partitions = (await describe_partitions(admin)).get(topic)
        if not partitions:
            return None
        cluster = self._settings.clusters[alias]
        client_id = f"replicator-{self.plan.name}-heartbeat-{role}"
        consumer: LogReader = make_reader(
            cluster, self._settings, client_id, fetch_max_wait_ms=_POLL_MS
        )
        try:
            await consumer.start()
            assigned = [TopicPartition(topic, p["partition"]) for p in partitions]
            consumer.assign(assigned)
            # The newest heartbeats already there count: a restart shows the age at once (one
            # per flow into the cluster is among the last few: it is written every interval).
            ends = await consumer.end_offsets(assigned)
            for tp, end in ends.items():
                consumer.seek(tp, max(0, end - _RECENT))
        except BaseException:
            await close_quietly(consumer.stop())
            raise
        return consumer

    def _seen(self, headers: Any, timestamp_ms: int) -> None:
        try:
            origin = provenance.parse(headers)
        except ProvenanceError:
            return
        if origin is not None and origin.topic == self.topic:
            self._into_target[origin.cluster] = clock.monotonic()
        if origin is None or origin.cluster != self.plan.source or origin.topic != self.topic:
            return  # the target's own heartbeats, or another cluster's
        if self.last_seen_ms is not None and timestamp_ms <= self.last_seen_ms:
            return
        self.last_seen_ms = timestamp_ms
        self.delay_seconds = max(0.0, clock.wall() - timestamp_ms / 1000)
        self._delay.set(self.delay_seconds)

    # -- what /status and /metrics show ---------------------------------------------------------

    @property
    def age_seconds(self) -> float | None:
        """The newest heartbeat's age; ``None`` before the first is seen."""
        if self.last_seen_ms is None:
            return None
        return stale_for(self.last_seen_ms, self._started, clock.wall())

    def refresh(self) -> None:
        self._age.set(stale_for(self.last_seen_ms, self._started, clock.wall()))

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
            "unforwarded": [
                f"{o} -> {self.plan.source} -> {self.plan.legs[0].destination}"
                for o in self.unforwarded
            ],
        }

    def _failed(self, what: str, error: ReplicatorError) -> None:
        """Kept for ``/status`` (:func:`~replicator.kafka.retry.retrying` logs the failure)."""
        message = f"heartbeat {what} failed: {error}"
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
