"""Continuous checkpoints of consumer groups, for failover (``REPLICATOR_SYNC_GROUPS``).

Every ``REPLICATOR_SYNC_GROUPS_INTERVAL_MS`` the replicator lists the consumer groups of its
local cluster, and for each one matching the regex (never its own groups) translates its
positions into every other cluster (:class:`~replicator.failover.GroupTranslator`, each partition
from its previous checkpoint as the sync point, so a round reads little more than what the group
consumed since) and appends the checkpoints to that cluster's checkpoints topic. With
``REPLICATOR_SYNC_GROUP_OFFSETS=true`` it also commits the translated positions there for groups
with no active member, and only forward: an active group is never touched, a group is never
moved back.

Per group and cluster: the age of the newest checkpoint and its repeats (metrics and ``/status``
``checkpoints``); a failing round is counted per cluster, shown, logged once per change, and
retried at the next interval.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

import structlog
from aiokafka import AIOKafkaProducer, TopicPartition

from replicator import checkpoints
from replicator.checkpoints import Checkpoint
from replicator.failover import GroupTranslator, PartitionMove, active_members
from replicator.kafka import ClusterClient, GroupOffsets, translate
from replicator.lifecycle import close_quietly, sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.producer import make_producer
from replicator.settings import Settings
from replicator.topology import feeds_for

log = structlog.get_logger(__name__)


@dataclass
class GroupCheckpoint:
    """The newest checkpoint round of one group into one cluster."""

    at: float  # wall clock, seconds
    partitions: int
    repeats: int
    offsets_synced: int = 0


class GroupSync:
    """Translates the local cluster's synced groups into every other cluster, on an interval."""

    def __init__(
        self, settings: Settings, metrics: Metrics, clusters: dict[str, ClusterClient]
    ) -> None:
        assert settings.sync_groups is not None
        self._settings = settings
        self._metrics = metrics
        self._clusters = clusters
        self._pattern = re.compile(settings.sync_groups)
        self._local = settings.local_cluster
        self._targets = [a for a in sorted(settings.clusters) if a != self._local]
        own = {plan.group for plan in feeds_for(settings)} | {settings.group_prefix}
        self._own_prefixes = tuple(f"{g}." for g in own)
        self._own = own
        self._latest: dict[tuple[str, str], GroupCheckpoint] = {}
        self._errors: dict[str, str | None] = dict.fromkeys(self._targets)
        self._topic_ready: set[str] = set()

    def synced(self, group: str) -> bool:
        """Whether ``group`` is one whose positions are kept in the other clusters."""
        if group in self._own or group.startswith(self._own_prefixes):
            return False
        return self._pattern.fullmatch(group) is not None

    async def run(self, stop: asyncio.Event) -> None:
        interval = self._settings.sync_groups_interval_ms / 1000
        while not stop.is_set():
            began = time.monotonic()
            await self.sync_round()
            await sleep_unless_stopped(stop, max(0.0, interval - (time.monotonic() - began)))

    async def sync_round(self) -> None:
        """One round: every synced group into every other cluster (a cluster failing alone)."""
        try:
            admin = await self._clusters[self._local].admin()
            groups = sorted(
                name for name, _ in await admin.list_consumer_groups() if self.synced(name)
            )
        except Exception as exc:
            for target in self._targets:
                self._failed(target, f"listing the groups of {self._local}: {translate(exc)}")
            return
        for target in self._targets:
            try:
                await self._sync_into(target, groups)
            except Exception as exc:
                self._failed(target, str(translate(exc)) or type(exc).__name__)
            else:
                if self._errors[target] is not None:
                    log.info("checkpoints recovered", cluster=target)
                self._errors[target] = None

    async def _sync_into(self, target: str, groups: list[str]) -> None:
        settings = self._settings
        topic = settings.checkpoints_topic
        timeout = settings.request_timeout_ms / 1000
        if target not in self._topic_ready:
            admin = await self._clusters[target].admin()
            errors = await checkpoints.ensure_topic(
                admin, topic, settings.destination_replication_factor
            )
            if errors:
                raise RuntimeError(f"checkpoints topic {topic} not created: {errors}")
            self._topic_ready.add(target)
        translator = GroupTranslator(settings, self._local, target)
        # No idempotence needed: a checkpoint written twice is the same key, the newest wins.
        producer = make_producer(
            settings.clusters[target],
            settings,
            f"replicator-checkpoints-{target}",
            enable_idempotence=False,
        )
        await producer.start()
        reader = translator.reader(self._local, "positions")
        previous = translator.reader(target, "checkpoints")
        await reader.start()
        await previous.start()
        try:
            for group in groups:
                latest = await checkpoints.read_latest(previous, topic, group, self._local, timeout)
                jobs = await translator.jobs(reader, group, None, latest)
                moves = await translator.translate(jobs, live=True)
                await self._record(target, group, moves, producer)
        finally:
            await close_quietly(previous.stop())
            await close_quietly(reader.stop())
            await close_quietly(producer.stop())

    async def _record(
        self, target: str, group: str, moves: list[PartitionMove], producer: AIOKafkaProducer
    ) -> None:
        now = time.time()
        at_ms = int(now * 1000)
        kept = (m.checkpoint(group, self._local, target, at_ms) for m in moves)
        written = [c for c in kept if c is not None]
        if not written:
            return
        await checkpoints.write(producer, self._settings.checkpoints_topic, written)
        self._metrics.checkpoints_written.labels(group, target).inc(len(written))
        repeats = sum(c.repeats for c in written)
        synced = 0
        if self._settings.sync_group_offsets:
            synced = await self._commit_forward(target, group, written)
        first = (group, target) not in self._latest
        self._latest[(group, target)] = GroupCheckpoint(now, len(written), repeats, synced)
        self._metrics.checkpoint_repeats.labels(group, target).set(repeats)
        if first:
            log.info("checkpoints kept", group=group, cluster=target, partitions=len(written))

    async def _commit_forward(self, target: str, group: str, written: list[Checkpoint]) -> int:
        """Commit the translated positions for a group nobody consumes with in ``target``, where
        they are ahead of what it has there; the partitions committed."""
        if await active_members(self._clusters[target], group):
            return 0
        translator = GroupTranslator(self._settings, self._local, target)
        reader = translator.reader(target, "sync")
        await reader.start()
        try:
            offsets = GroupOffsets(reader._client, group)
            tps = {TopicPartition(c.target_topic, c.partition): c.target_offset for c in written}
            committed = await offsets.fetch(list(tps))
            ahead = {tp: at for tp, at in tps.items() if at > _or_minus_one(committed[tp])}
            if ahead:
                await offsets.commit(ahead)
                self._metrics.group_offsets_synced.labels(group, target).inc(len(ahead))
            return len(ahead)
        finally:
            await close_quietly(reader.stop())

    def _failed(self, target: str, error: str) -> None:
        self._metrics.checkpoint_failures.labels(target).inc()
        if self._errors.get(target) != error:
            log.warning("checkpoints failed", cluster=target, error=error)
        self._errors[target] = error

    def refresh(self) -> None:
        """Bring the age gauges up to now (before an exposition)."""
        now = time.time()
        for (group, target), latest in self._latest.items():
            self._metrics.checkpoint_age.labels(group, target).set(now - latest.at)

    def status(self) -> dict[str, Any]:
        now = time.time()
        groups: dict[str, dict[str, Any]] = {}
        for (group, target), latest in sorted(self._latest.items()):
            groups.setdefault(group, {})[target] = {
                "age_s": round(now - latest.at, 1),
                "partitions": latest.partitions,
                "repeats": latest.repeats,
                "offsets_synced": latest.offsets_synced,
            }
        return {
            "pattern": self._pattern.pattern,
            "interval_s": self._settings.sync_groups_interval_ms / 1000,
            "groups": groups,
            "errors": {t: e for t, e in self._errors.items() if e is not None},
        }


def _or_minus_one(offset: int | None) -> int:
    return -1 if offset is None else offset
