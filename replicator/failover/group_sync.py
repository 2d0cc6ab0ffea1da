"""Continuous checkpoints of consumer groups, for failover (``REPLICATOR_SYNC_GROUPS``).

Every ``REPLICATOR_SYNC_GROUPS_INTERVAL_MS`` the replicator lists the consumer groups of each
source it syncs from (:func:`sync_pairs`: its local cluster into every other in the ``_REPLICA``
mode, each flow's source into its target, as MirrorMaker 2's checkpoints go), and for each group
matching the regex (never its own groups) translates its positions into the target
(:class:`~replicator.failover.group_positions.GroupTranslator`, each partition from its previous
checkpoint as the sync point, so a round reads only what the group consumed and the target
received since) and appends the checkpoints to the target's checkpoints topic. With
``REPLICATOR_SYNC_GROUP_OFFSETS=true`` it also commits the translated positions there for groups
with no active member in the target (as MirrorMaker 2 does: a group that consumed in the source
and closed is synced too) and only forward (:func:`forward_only`): an active group is never
touched, a group is never moved back. A position a sync committed is tagged (:data:`SYNCED`)
and never synced onward from there (:func:`reached_by_consumers`): with flows both ways it is
no progress of the group's, and syncing it back would undo a reset made meanwhile where it came
from. A checkpoint is written only when it changed
(:func:`unchanged`); each round's translation is still the next round's sync point.

Per group and pair: the age of the newest checkpoint and its repeats (metrics and ``/status``
``checkpoints``); a failing round is counted per pair, shown, logged once per change, and retried
at the next interval.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from replicator import clock
from replicator.config.settings import Settings
from replicator.config.topology import feeds_for
from replicator.errors import Stopped, TopicRefused
from replicator.failover import checkpoints
from replicator.failover.checkpoints import Checkpoint
from replicator.failover.group_positions import GroupTranslator, PartitionMove, active_members
from replicator.kafka.clients import ClusterClient, GroupOffsets
from replicator.kafka.producer import make_producer
from replicator.kafka.translation import said
from replicator.lifecycle import close_quietly, sleep_unless_stopped, unless_stopped
from replicator.model.handover import Handover
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)


SYNCED = "replicator group sync"
"""The metadata the group sync commits a translated position with: a position the sync moved
the group to, not one a consumer of the group reached there."""


def reached_by_consumers(
    written: list[Checkpoint], committed: dict[TopicPartition, tuple[int, str] | None]
) -> list[Checkpoint]:
    """The checkpoints of ``written`` whose position in the source a consumer of the group
    committed (``committed``: the group's offsets there, with their metadata): not those a sync
    committed there (:data:`SYNCED`), which are no progress of the group's."""
    kept = []
    for checkpoint in written:
        entry = committed.get(TopicPartition(checkpoint.topic, checkpoint.partition))
        if entry is None or entry[1] != SYNCED or entry[0] != checkpoint.source_offset:
            kept.append(checkpoint)
    return kept


def unchanged(checkpoint: Checkpoint, previous: Checkpoint | None) -> bool:
    """Whether ``checkpoint`` says what ``previous`` (the newest kept) said: the same position in
    the source, translated to the same position in the target (then it is not written again)."""
    return previous is not None and (
        checkpoint.source_offset,
        checkpoint.target_topic,
        checkpoint.target_offset,
        checkpoint.repeats,
    ) == (previous.source_offset, previous.target_topic, previous.target_offset, previous.repeats)


@dataclass
class GroupCheckpoint:
    """The newest checkpoint round of one group into one cluster."""

    at: float  # wall clock, seconds
    partitions: int
    repeats: int
    offsets_synced: int = 0
    # Partitions where the group stands among a MirrorMaker's copies (before the flow took
    # them over): not checkpointed here, the MirrorMaker's checkpoint stands.
    behind_takeover: int = 0


Pair = tuple[str, str]
"""A source cluster whose groups are translated, and the cluster they are translated into."""


def sync_pairs(settings: Settings) -> list[Pair]:
    """Where groups are translated: the local cluster into every other (the ``_REPLICA`` mode),
    and each flow's source into its target (as MirrorMaker 2's checkpoints go)."""
    pairs: dict[Pair, None] = {}
    if settings.replica_mode:
        local = settings.local_cluster
        pairs.update((p, None) for p in ((local, r) for r in settings.remote_clusters))
    for flow in sorted(settings.flows.values(), key=lambda f: (f.source, f.target)):
        pairs[(flow.source, flow.target)] = None
    return list(pairs)


class Takeovers(Protocol):
    """What the group sync needs of the flows that take partitions over from a MirrorMaker."""

    def handovers(self) -> Iterable[Handover]:
        """Those this process's flows made since it started (the topic holds the earlier)."""
        ...

    def taking_over(self, source: str, target: str) -> bool:
        """Whether a flow from ``source`` into ``target`` has yet to take its partitions over."""
        ...


class GroupSync:
    """Translates the synced groups of each pair's source into its target, on an interval."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        clusters: dict[str, ClusterClient],
        takeovers: Takeovers | None = None,
    ) -> None:
        assert settings.sync_groups is not None
        self._takeovers = takeovers
        self._settings = settings
        self._metrics = metrics
        self._clusters = clusters
        self._pattern = re.compile(settings.sync_groups)
        self._pairs = sync_pairs(settings)
        own = {plan.group for plan in feeds_for(settings)} | {settings.group_prefix}
        self._own_prefixes = tuple(f"{g}." for g in own)
        self._own = own
        self._latest: dict[tuple[str, Pair], GroupCheckpoint] = {}
        self._errors: dict[Pair, str | None] = dict.fromkeys(self._pairs)
        self._topic_ready: set[str] = set()
        # Each pair's MirrorMaker 2 checkpoints topic, once created (REPLICATOR_MM2_CHECKPOINTS).
        self._mm2_topics: dict[Pair, str] = {}
        self._kept: dict[Pair, checkpoints.Kept] = {}  # the latest, per pair

    def synced(self, group: str) -> bool:
        """Whether ``group`` is one whose positions are kept in the other clusters."""
        if group in self._own or group.startswith(self._own_prefixes):
            return False
        return self._pattern.fullmatch(group) is not None

    async def run(self, stop: asyncio.Event) -> None:
        interval = self._settings.sync_groups_interval_ms / 1000
        while not stop.is_set():
            began = clock.monotonic()
            try:
                # A round can take long (many groups, a cluster slow to answer): stop cuts it short.
                await unless_stopped(self.sync_round(), stop)
            except Stopped:
                return
            except Exception as exc:  # sync_round catches what it expects
                log.error("checkpoint round failed", error=said(exc))
            await sleep_unless_stopped(stop, max(0.0, interval - (clock.monotonic() - began)))

    async def sync_round(self) -> None:
        """One round: every synced group of every pair (a pair, or a group, failing alone)."""
        groups: dict[str, list[str] | str] = {}
        for source in dict.fromkeys(source for source, _ in self._pairs):
            try:
                admin = await self._clusters[source].admin()
                listed = await admin.list_consumer_groups()
                groups[source] = sorted(name for name, _ in listed if self.synced(name))
            except Exception as exc:
                groups[source] = f"listing the groups of {source}: {said(exc)}"
        for pair in self._pairs:
            found = groups[pair[0]]
            if isinstance(found, str):
                self._failed(pair, found)
                continue
            try:
                failures = await self._sync_pair(pair, found)
            except Exception as exc:
                self._failed(pair, said(exc))
                continue
            if failures:
                self._failed(pair, "; ".join(f"{g}: {e}" for g, e in sorted(failures.items())))
                continue
            if self._errors[pair] is not None:
                log.info("checkpoints recovered", source=pair[0], cluster=pair[1])
            self._errors[pair] = None

    async def _ensure_topic(self, cluster: str, topic: str) -> None:
        """Create a checkpoints topic in ``cluster`` unless it exists."""
        admin = await self._clusters[cluster].admin()
        factor = self._settings.destination_replication_factor
        errors = await checkpoints.ensure_topic(admin, topic, factor)
        if errors:
            raise TopicRefused(f"checkpoints topic {topic} not created in {cluster}: {errors}")

    async def _sync_pair(self, pair: Pair, groups: list[str]) -> dict[str, str]:
        """Checkpoint every group of ``groups`` from the pair's source into its target; the
        groups that failed, with why (the others are done)."""
        source, target = pair
        settings = self._settings
        await self._ensure_topics(pair)
        kept = await self._kept_for(pair)
        if kept is None:
            return {}
        # One partition at a time: these reads share the event loop with replication.
        translator = GroupTranslator(settings, source, target, workers=1)
        # No idempotence needed: a checkpoint written twice is the same key, the newest wins.
        producer = make_producer(
            settings.clusters[target],
            settings,
            f"replicator-checkpoints-{target}",
            enable_idempotence=False,
        )
        reader = translator.reader(source, "positions")
        failures: dict[str, str] = {}
        try:
            await producer.start()
            await reader.start()
            for group in groups:
                problem = await self._sync_group(pair, group, kept, translator, reader, producer)
                if problem is not None:
                    failures[group] = problem
        finally:
            await close_quietly(reader.stop())
            await close_quietly(producer.stop())
        return failures

    async def _ensure_topics(self, pair: Pair) -> None:
        """The pair's checkpoints topics in its target (MirrorMaker 2's too, if asked), created
        once."""
        source, target = pair
        settings = self._settings
        if target not in self._topic_ready:
            await self._ensure_topic(target, settings.checkpoints_topic)
            self._topic_ready.add(target)
        if settings.mm2_checkpoints and pair not in self._mm2_topics:
            mm2_topic = checkpoints.mm2_topic(settings, source, target)
            await self._ensure_topic(target, mm2_topic)
            self._mm2_topics[pair] = mm2_topic

    async def _kept_for(self, pair: Pair) -> checkpoints.Kept | None:
        """What is kept for the pair (sync points and handovers), the handovers of this
        process's flows added; ``None`` while a flow of the pair has yet to take over."""
        source, target = pair
        if pair not in self._kept:
            # What earlier runs kept (sync points): read once; this object keeps it since.
            timeout = self._settings.request_timeout_ms / 1000
            self._kept[pair] = await checkpoints.read_latest(
                self._settings, source, target, timeout * 3
            )
        kept = self._kept[pair]
        if self._takeovers is not None:
            if self._takeovers.taking_over(source, target):
                log.info("checkpoints wait for the takeover", source=source, cluster=target)
                return None
            for handover in self._takeovers.handovers():
                if (handover.source, handover.target) == pair:
                    kept.handovers[(handover.topic, handover.partition)] = handover
        return kept

    async def _sync_group(
        self,
        pair: Pair,
        group: str,
        kept: checkpoints.Kept,
        translator: GroupTranslator,
        reader: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
    ) -> str | None:
        """Translate and checkpoint one group; why it failed, or ``None``."""
        previous = kept.checkpoints.setdefault(group, {})
        try:
            jobs, _ = await translator.jobs(reader, group, None, previous, kept.handovers)
            moves = await translator.translate(jobs, live=True)
            latest = await self._record(pair, group, moves, previous, producer, reader)
        except Exception as exc:
            return said(exc)
        problems = [
            f"{m.topic}/{m.partition}: {m.problem}"
            for m in moves
            if m.problem and not m.behind_takeover
        ]
        # The newest translation is the next round's sync point, written or not.
        previous.update(((c.topic, c.partition), c) for c in latest)
        return "; ".join(problems) if problems else None

    async def _record(
        self,
        pair: Pair,
        group: str,
        moves: list[PartitionMove],
        previous: dict[tuple[str, int], Checkpoint],
        producer: AIOKafkaProducer,
        reader: AIOKafkaConsumer,
    ) -> list[Checkpoint]:
        """Write the group's checkpoints that changed since ``previous`` (and sync its offsets,
        if asked); every checkpoint of this round, written or not."""
        source, target = pair
        now = clock.wall()
        at_ms = int(now * 1000)
        fresh = (m.checkpoint(group, source, target, at_ms) for m in moves)
        latest = [c for c in fresh if c is not None]
        changed = [c for c in latest if not unchanged(c, previous.get((c.topic, c.partition)))]
        if changed:
            await checkpoints.write(producer, self._settings.checkpoints_topic, changed)
            if pair in self._mm2_topics:
                await checkpoints.write_mm2(producer, self._mm2_topics[pair], changed)
            self._metrics.checkpoints_written.labels(group, source, target).inc(len(changed))
        behind = sum(m.behind_takeover for m in moves)
        if not latest and not behind:
            return latest
        repeats = sum(c.repeats for c in latest)
        synced = 0
        if self._settings.sync_group_offsets and latest:
            synced = await self._commit_forward(
                pair, group, latest, reader, progressed=bool(changed)
            )
        first = (group, pair) not in self._latest
        self._latest[(group, pair)] = GroupCheckpoint(now, len(latest), repeats, synced, behind)
        self._metrics.checkpoint_repeats.labels(group, source, target).set(repeats)
        if first:
            log.info(
                "checkpoints kept",
                group=group,
                source=source,
                cluster=target,
                partitions=len(latest),
                behind_takeover=behind,
            )
        return latest

    async def _commit_forward(
        self,
        pair: Pair,
        group: str,
        written: list[Checkpoint],
        source_reader: AIOKafkaConsumer,
        progressed: bool,
    ) -> int:
        """Commit the translated positions of a group with no active member in the target,
        where they are ahead of what it has there; the partitions committed (tagged
        :data:`SYNCED`).

        As MirrorMaker 2 does, whether or not the group has members in the source (a batch
        consumer that ran and closed, a group whose datacenter went down), provided its
        position there moved since the previous checkpoint (``progressed``) or it has members
        there, and only the positions a consumer of the group committed there
        (:func:`reached_by_consumers`): a position a sync committed in the source (flows both
        ways, one replicator or two) is not synced back, so a group reset backwards in the
        target is not undone by its copy in the source."""
        source, target = pair
        if not progressed and not await active_members(self._clusters[source], group):
            return 0
        if await active_members(self._clusters[target], group):
            return 0
        tps_a = [TopicPartition(c.topic, c.partition) for c in written]
        in_source = await GroupOffsets(source_reader, group).fetch_with_metadata(tps_a)
        own = reached_by_consumers(written, in_source)
        if not own:
            return 0
        reader = GroupTranslator(self._settings, source, target).reader(target, "sync")
        try:
            await reader.start()
            offsets = GroupOffsets(reader, group)
            tps = {TopicPartition(c.target_topic, c.partition): c.target_offset for c in own}
            committed = await offsets.fetch(list(tps))
            ahead = forward_only(tps, committed)
            if ahead:
                await offsets.commit(ahead, dict.fromkeys(ahead, SYNCED))
                self._metrics.group_offsets_synced.labels(group, source, target).inc(len(ahead))
            return len(ahead)
        finally:
            await close_quietly(reader.stop())

    def _failed(self, pair: Pair, error: str) -> None:
        self._metrics.checkpoint_failures.labels(*pair).inc()
        if self._errors.get(pair) != error:
            log.warning("checkpoints failed", source=pair[0], cluster=pair[1], error=error)
        self._errors[pair] = error

    def refresh(self) -> None:
        """Bring the age gauges up to now (before an exposition)."""
        now = clock.wall()
        for (group, (source, target)), latest in self._latest.items():
            self._metrics.checkpoint_age.labels(group, source, target).set(now - latest.at)

    def status(self) -> dict[str, Any]:
        now = clock.wall()
        groups: dict[str, dict[str, Any]] = {}
        for (group, (source, target)), latest in sorted(self._latest.items()):
            groups.setdefault(group, {})[f"{source}->{target}"] = {
                "age_s": round(now - latest.at, 1),
                "partitions": latest.partitions,
                "repeats": latest.repeats,
                "offsets_synced": latest.offsets_synced,
                "behind_takeover": latest.behind_takeover,
            }
        return {
            "pattern": self._pattern.pattern,
            "interval_s": self._settings.sync_groups_interval_ms / 1000,
            "groups": groups,
            "errors": {f"{s}->{t}": e for (s, t), e in self._errors.items() if e is not None},
        }


def forward_only(
    translated: dict[TopicPartition, int], committed: dict[TopicPartition, int | None]
) -> dict[TopicPartition, int]:
    """The translated positions ahead of the group's committed ones (or where it has none):
    a synced group is never moved back."""
    ahead = {}
    for tp, at in translated.items():
        before = committed.get(tp)
        if before is None or at > before:
            ahead[tp] = at
    return ahead
