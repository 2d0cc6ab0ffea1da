"""A replication leg: the topics one feed selects on its source cluster, into one destination.

A leg owns everything that is per destination, so that a slow or unreachable destination stalls
only its own leg (contract point 4), each piece in its own module:

- its two connections, through the seam of :mod:`replicator.replication.connections` (on
  aiokafka: :mod:`replicator.replication.kafka_connections`), each retried by the service's one
  retry policy (:mod:`replicator.kafka.retry`): the *source consumer* (group
  ``<prefix>.<source>.<destination>``, holding the leg's committed offsets) and the
  *destination* (its producer and its reader of tails);
- one :class:`LegPartition` (:mod:`replicator.replication.partition`) and one
  :class:`PartitionSender` per assigned source partition;
- the catch-up fetch (:mod:`replicator.replication.catch_up`) for partitions behind the shared
  feed;
- where its newly assigned partitions start (:mod:`replicator.replication.start_positions`,
  with the takeover from a MirrorMaker);
- the offset-reset policy (:mod:`replicator.replication.offset_reset`) and the committer
  (:mod:`replicator.replication.committer`);
- the operator's view (:mod:`replicator.replication.health`).

Every task of the leg (senders, catch-up fetch, committer, destination connection, and its
upkeep: health refresh, destination marks, config sync, :mod:`replicator.replication.upkeep`)
belongs to the leg's own ``TaskGroup``, opened by :meth:`LegRunner.run`. The shared
feed assigns and releases partitions; once :meth:`LegRunner.close_partitions` ran (after stop)
no partition is taken any more, so a rebalance that completes during shutdown starts nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from functools import partial
from typing import Any

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, Leg
from replicator.errors import ClusterUnavailable, ReplicatorError
from replicator.kafka.fetching import FetchSource
from replicator.kafka.retry import retrying
from replicator.lifecycle import (
    IdleWait,
    StopDeadline,
    close_quietly,
)
from replicator.model.handover import Handover
from replicator.model.offsets import OutOfRange
from replicator.replication.accounting import ANSWERED_LATE, Duplicates, Resumptions
from replicator.replication.catch_up import CatchUpFetch
from replicator.replication.committer import Committer
from replicator.replication.connections import LegConnections, LegDestination, LegSource
from replicator.replication.dead_letters import DeadLetters
from replicator.replication.health import LegHealth
from replicator.replication.offset_reset import OffsetResets
from replicator.replication.partition import LegPartition
from replicator.replication.resume import marks_group
from replicator.replication.sender import PartitionSender
from replicator.replication.sending import LegSending
from replicator.replication.start_positions import StartPositions
from replicator.replication.upkeep import refresh_health, refresh_marks, sync_topic_configs
from replicator.telemetry.metrics import Metrics
from replicator.topics.provisioning import TopicProvisioner

log = structlog.get_logger(__name__)

_MARK_SAVE_TIMEOUT_S = 5.0
_SENDER_END_S = 0.2  # at least this long for a drained sender to end before it is cancelled


class LegRunner:
    """Runs one leg: its connections, partitions, senders, catch-up fetch and commits."""

    def __init__(
        self,
        leg: Leg,
        settings: Settings,
        plan: FeedPlan,
        metrics: Metrics,
        connections: LegConnections,
        dead_letters: DeadLetters | None = None,
        stopping: StopDeadline | None = None,
    ) -> None:
        """``connections``: the leg's clients of both clusters
        (:class:`~replicator.replication.kafka_connections.KafkaLegConnections` in the service)."""
        self.leg = leg
        # The service's stop deadline (its own when run alone): waits at stop take what is left.
        self._stopping = stopping or StopDeadline(settings.shutdown_grace_ms / 1000)
        self._settings = settings
        self._rules = plan.rules
        self._preserve_partitions = plan.preserve_partitions
        # Flows: a renamed copy never goes back to the cluster it came from (provenance.py).
        self._home = leg.destination if plan.loop_home else None
        self._home_marks = plan.home_marks
        self._metrics = metrics
        self._dead_letters = dead_letters
        self._connections = connections
        self.group = leg.group_id(plan.leg_group_prefix)
        self._consumer: LegSource | None = None  # the source consumer, once started
        self.destination: LegDestination = connections.destination
        self._topics = TopicProvisioner(
            connections.source_admin,
            connections.destination_admin,
            plan.replication_factor,
            plan.preserve_partitions,
            re.compile(settings.topic_configs_exclude),
            on_grown=lambda topic, added: metrics.partitions_added.labels(leg.name, topic).inc(
                added
            ),
            on_sync_failed=metrics.topic_config_sync_failures.labels(leg.name).inc,
            sync=settings.topic_config_sync,
            defaults_from=settings.topic_config_defaults_from,
        )
        self.partitions: dict[TopicPartition, LegPartition] = {}
        self._senders: dict[TopicPartition, tuple[PartitionSender, asyncio.Task[None]]] = {}
        self.resets = OffsetResets(leg.name, settings.offset_reset_policy, metrics)
        self._log = log.bind(leg=leg.name)
        self._starts = StartPositions(leg, plan, connections, metrics, self._log)
        self.health = LegHealth(self, metrics, settings.send_stall_timeout_ms / 1000)
        # Set by every partition transition: the health census is taken again within a second.
        self._health_due = asyncio.Event()
        self.last_error: str | None = None
        # Duplicates the leg could not prevent, by kind (its senders count them; /status shows).
        self.duplicates = Duplicates(leg.name, metrics)
        connections.count_answered_late(partial(self.duplicates.possible, reason=ANSWERED_LATE))
        # What every sender of this leg shares (its source log is this leg's consumer).
        self._sending = LegSending(
            leg,
            self.destination,
            self._topics,
            metrics,
            self,
            self.duplicates,
            dead_letters,
            self._preserve_partitions,
            self.resets,
            marks_group=marks_group(leg.group_id(plan.leg_group_prefix)),
            ownership=connections.ownership,
        )
        self._catch_up = CatchUpFetch(
            leg.name, self._fetch_source, self.partitions, self.resets, leg.source
        )
        self._committer = Committer(
            leg.name,
            self,  # commits through the source consumer, once started
            metrics,
            settings.request_timeout_ms / 1000,
            self._save_marks,
            group=(leg.group_id(plan.leg_group_prefix), leg.source),
        )
        self._tasks: asyncio.TaskGroup | None = None
        self._running = asyncio.Event()
        self._partitions_closed = asyncio.Event()
        self._closed = False
        self._producer_closed = False  # at a stop, before the feed leaves its group
        self._stop = asyncio.Event()  # the service's stop event, once run() started

    # -- read by the health view ----------------------------------------------------------------

    @property
    def takeover(self) -> dict[str, Any] | None:
        """What the last takeover from a MirrorMaker found (``TAKE_OVER``), for ``/status``."""
        return self._starts.takeover

    @property
    def handovers(self) -> list[Handover]:
        """Where the takeover took partitions over, for the group sync (model/handover.py)."""
        return self._starts.handovers

    @property
    def taking_over(self) -> bool:
        """Until the first assignment is taken (over): translating groups' positions before
        the handovers are known would take MirrorMaker's copies for unread records."""
        return self._starts.taking_over

    @property
    def source_connected(self) -> bool:
        return self._consumer is not None

    @property
    def destination_error(self) -> str | None:
        """The destination cluster's last probe failure (an idle leg learns of an outage here)."""
        return self._connections.destination_error

    @property
    def start_error(self) -> str | None:
        """Why the partitions last assigned cannot start yet (their committed offsets unread),
        or why the leg's offsets cannot be committed."""
        if self._starts.error is not None:
            return self._starts.error
        if self._committer.error is not None:
            return f"offset commits failing: {self._committer.error}"
        return None

    @property
    def destination_up(self) -> bool:
        """Whether the destination is connected and its last probe answered."""
        return self.destination.ready.is_set() and self.destination_error is None

    @property
    def refused_topics(self) -> dict[str, str]:
        return dict(self._topics.refused)

    @property
    def grown_topics(self) -> dict[str, int]:
        """Partitions the leg added to destination topics (their source grew), per topic."""
        return dict(self._topics.grown)

    @property
    def seconds_since_poll(self) -> float:
        last = self._catch_up.last_poll
        return clock.monotonic() - last

    # -- connections ----------------------------------------------------------------------------

    async def log_start(self, tp: TopicPartition) -> int:
        """The first offset ``tp``'s source log still holds (a sender's :class:`SourceLog`)."""
        return int((await self._source().log_starts([tp]))[tp])

    async def outside(self, tp: TopicPartition, position: int) -> OutOfRange | None:
        """Whether ``position`` is outside ``tp``'s source log (a sender's :class:`SourceLog`)."""
        return await self._source().bounds(tp, position)

    def _source(self) -> LegSource:
        """The started source consumer (the catch-up fetch's and the committer's)."""
        if self._consumer is None:
            raise ClusterUnavailable(f"{self.leg.source}: the source consumer is not started")
        return self._consumer

    def _fetch_source(self) -> FetchSource:
        """The started source consumer, as the catch-up fetch reads it."""
        return self._source()

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` to the leg's group (the committer's :class:`OffsetCommits`)."""
        await self._source().commit(offsets)

    async def start_source(self, stop: asyncio.Event) -> bool:
        """Start the source consumer; retry until it is up (``True``) or stop (``False``)."""

        def failed(error: ReplicatorError) -> None:
            self.last_error = f"cannot connect to {self.leg.source}: {error}"

        self._consumer = await retrying(
            self._connections.start_source,
            stop=stop,
            what="reach the source",
            log=self._log,
            on_error=failed,
            interruptible=True,
        )
        if self._consumer is not None:
            self.last_error = None
        return self._consumer is not None

    async def _connect_destination(self, stop: asyncio.Event) -> None:
        async def connect() -> None:
            await self._connections.connect_destination()
            self._metrics.idempotent_producer.labels(self.leg.name).set(
                1 if self.destination.idempotent else 0
            )

        def failed(error: ReplicatorError) -> None:
            self.last_error = f"cannot connect to {self.leg.destination}: {error}"

        await retrying(
            connect,
            stop=stop,
            what="reach the destination",
            log=self._log,
            on_error=failed,
            interruptible=True,  # a frozen destination must not hold a shutdown
        )
        if self.destination.ready.is_set():
            self.last_error = None
            self._log.info("destination connected")

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Own the leg's tasks until stop and :meth:`close_partitions`; then close the clients.

        Requires :meth:`start_source` to have succeeded.
        """
        assert self._consumer is not None, "start_source() first"
        self._stop = stop
        settings = self._settings
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                name = self.leg.name
                tasks.create_task(self._connect_destination(stop), name=f"connect:{name}")
                idle = IdleWait(
                    settings.fetch_max_wait_ms,
                    settings.fetch_idle_max_wait_ms,
                    settings.fetch_longest_wait_ms,
                )
                tasks.create_task(self._catch_up.run(stop, idle), name=f"catch-up:{name}")
                every = settings.commit_interval_ms / 1000
                tasks.create_task(
                    self._committer.run(stop, self.partitions, every), name=f"commit:{name}"
                )
                health = refresh_health(stop, self.health, self._health_due, self.partitions)
                tasks.create_task(health, name=f"health:{name}")
                marks = refresh_marks(stop, self.destination, self.partitions, self._log)
                tasks.create_task(marks, name=f"marks:{name}")
                if settings.topic_config_sync_interval_ms:
                    configs = settings.topic_config_sync_interval_ms / 1000
                    sync = sync_topic_configs(stop, self._topics, configs)
                    tasks.create_task(sync, name=f"configs:{name}")
                self._running.set()
                await stop.wait()
                # Partitions are released (drained, committed) before the clients close.
                await self._partitions_closed.wait()
        finally:
            self._tasks = None
            await self._close_clients()

    def _partition_changed(self, _partition: LegPartition) -> None:
        self._health_due.set()

    def _commit_due(self, partition: LegPartition) -> None:
        self._committer.due(partition)

    async def _save_marks(self, marks: dict[TopicPartition, tuple[int, int]]) -> None:
        """Save destination marks, if the destination is up (briefly: the next commit retries)."""
        if not self.destination.ready.is_set() or self.destination_error is not None:
            raise ClusterUnavailable(f"{self.leg.destination} is not connected")
        within = _MARK_SAVE_TIMEOUT_S
        if self._stopping.started:
            within = min(within, self._stopping.left())
        await self.destination.tail.save_marks(marks, within)

    @property
    def resumptions(self) -> Resumptions:
        """What the leg's partitions found at the destination's tail as they started."""
        return self._sending.resumptions

    @property
    def topic_config_sync(self) -> dict[str, object]:
        """What the config sync did: configs set per topic, and its last failure."""
        return {
            "synced": dict(self._topics.synced),
            "last_error": self._topics.sync_error,
            "denied": self._topics.sync_denied,
        }

    async def _close_clients(self) -> None:
        # Together, within what is left of the stop (a producer whose destination is down
        # would wait for ever to flush; what it holds was not committed, so nothing is lost).
        left = self._stopping.left()
        name = self.leg.name
        connections = self._connections
        closing = [
            close_quietly(connections.close_reader(), left, f"{name} destination reader"),
        ]
        if not self._producer_closed:
            self._producer_closed = True
            producer = connections.close_producer()
            closing.append(close_quietly(producer, left, f"{name} destination producer"))
        if self._consumer is not None:
            closing.append(close_quietly(self._consumer.close(), left, f"{name} source consumer"))
        await asyncio.gather(*closing)
        self._metrics.assigned_partitions.labels(self.leg.name).set(0)
        self._log.info("leg stopped")

    async def close_producer(self) -> None:
        """At a stop, once the partitions are released and before the feed leaves its group:
        close the destination producer (within what is left of the stop), so that no batch it
        still holds can land after another replica took the partitions over and read the
        destination."""
        if self._producer_closed:
            return
        self._producer_closed = True
        await close_quietly(
            self._connections.close_producer(),
            self._stopping.left(),
            f"{self.leg.name} destination producer",
        )

    async def close_partitions(self) -> None:
        """Take no partition any more; release (drain, commit) those still held."""
        self._closed = True
        try:
            await self.release(list(self.partitions))
        finally:
            self._partitions_closed.set()

    # -- partitions (the shared feed assigns and releases them) ---------------------------------

    async def assign(self, partitions: list[TopicPartition]) -> None:
        """Take ``partitions``: read the leg's committed offsets, start one sender each."""
        await self._running.wait()
        consumer = self._consumer
        if self._closed or self._stop.is_set() or consumer is None:
            return  # stop wins over a rebalance
        replicated = [tp for tp in partitions if self._rules.target(tp.topic) is not None]
        for tp in replicated:  # assigned anew: a topic refused before is asked for again
            target = self._rules.target(tp.topic)
            if target is not None:
                self._topics.forget_refusal(target)
        self._assign_consumer(replicated)
        starts = await self._starts.read(consumer, replicated, self._stop)
        if starts is None or self._closed or self._stop.is_set():
            return  # stop came while the offsets were read: start nothing
        for tp, (position, committed) in starts.items():
            self._start(tp, position, committed)
        self._log.info("partitions assigned", partitions=len(self.partitions))

    def _start(self, tp: TopicPartition, position: int | None, committed: bool = False) -> None:
        assert self._tasks is not None and self._consumer is not None
        target = self._rules.target(tp.topic)
        assert target is not None
        settings = self._settings
        partition = LegPartition(
            tp,
            target,
            self.leg.source,
            position,
            settings.partition_queue_max_records,
            settings.partition_queue_max_bytes,
            home=self._home,
            home_marks=self._home_marks,
            committed=committed,
        )
        consumer = self._consumer
        # A position is always set explicitly (the consumer never resets one by itself); the
        # catch-up fetch resumes the partition when it is fed alone.
        consumer.seek(tp, position or 0)
        consumer.pause(tp)

        sender = PartitionSender(self._sending, partition)
        self.partitions[tp] = partition
        partition.watch(self._partition_changed)
        partition.owe_commits_to(self._commit_due)
        partition.watch(self._catch_up.changed)
        name = f"send:{self.leg.name}:{tp.topic}:{tp.partition}"
        self._senders[tp] = (sender, self._tasks.create_task(sender.run(), name=name))

    def out_of_range(self, tp: TopicPartition, found: OutOfRange) -> None:
        """The shared feed found ``tp`` outside the source log: apply the policy to this leg."""
        partition = self.partitions.get(tp)
        if partition is not None:
            self.resets.apply(partition, found)

    async def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Give ``partitions`` up: stop them, drain their senders, commit what was acknowledged."""
        released = [self.partitions.pop(tp) for tp in partitions if tp in self.partitions]
        if not released:
            return
        for partition in released:
            partition.stop()
        grace = self._stopping.for_drain()  # the whole grace at a rebalance
        senders = [self._senders.pop(p.tp) for p in released]
        # At a rebalance another owner starts at once; at a stop the producer is closed before
        # the group is left (close_producer), so nothing unanswered can land after a takeover.
        handed_over = not self._stopping.started
        await asyncio.gather(*(sender.drain(grace, handed_over) for sender, _ in senders))
        # Drained, a sender ends at once, unless it waits for room in the producer behind a
        # batch the destination never answers (up to the request timeout): what it would hand
        # over was not acknowledged, so it is cancelled rather than waited for.
        tasks = [task for _, task in senders]
        _, stuck = await asyncio.wait(
            tasks, timeout=min(max(self._stopping.for_drain(), _SENDER_END_S), 1.0)
        )
        for task in stuck:
            task.cancel()
        if stuck:
            self._log.info("senders waiting on the destination cancelled", partitions=len(stuck))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for partition, result in zip(released, results, strict=True):
            if isinstance(result, Exception):  # a bug: the sender handles every Kafka error
                self._log.error(
                    "partition sender failed",
                    topic=partition.tp.topic,
                    partition=partition.tp.partition,
                    error=repr(result),
                )
        if self._consumer is not None:  # nothing was fetched, so nothing to commit, before
            await self._committer.commit(released, self._stopping.left())
        for partition in released:
            self.health.forget(partition)
        self._health_due.set()
        self._assign_consumer([])
        self._metrics.assigned_partitions.labels(self.leg.name).set(len(self.partitions))

    def _assign_consumer(self, added: list[TopicPartition]) -> None:
        """Assign the source consumer the partitions held plus ``added``, all paused.

        A new assignment forgets every position, so those of the partitions still held are set
        again; the catch-up fetch resumes the ones it feeds at its next round.
        """
        consumer = self._consumer
        if consumer is None:
            return
        consumer.assign(list({*self.partitions, *added}))
        for tp, partition in self.partitions.items():
            consumer.seek(tp, partition.position or 0)
            consumer.pause(tp)
        self._catch_up.reassigned()
