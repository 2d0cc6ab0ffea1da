"""The root service: one ``asyncio.TaskGroup`` owning every task of one replicator.

Start order (enforced in :meth:`ReplicatorService.run` and :meth:`_replicate`):
  1. HTTP server, so ``/livez`` and ``/readyz`` answer while the rest starts;
  2. heartbeat and cluster probes (reachability of every cluster, for ``/readyz``);
  3. one :class:`LegRunner` per leg of every feed (the ``_REPLICA`` mode's feed has one per
     destination, local first; each MirrorMaker-style flow is a feed with one leg): its source
     consumer, then, in the leg's own TaskGroup, its destination producer, catch-up fetch,
     committer and senders;
  4. one :class:`SourceFeed` per feed, which joins its group and fans records out to its legs;
  5. with ``REPLICATOR_SYNC_GROUPS``, the consumer groups' checkpoints (:class:`GroupSync`);
  6. with an ACL sync policy, each leg's topic ACLs kept on its target (:class:`AclSyncs`).
Stop is the reverse, and wins over a rebalance at any moment: the first SIGTERM/SIGINT sets the
stop event; the feed stops fetching, every leg drains in-flight sends within the grace period and
commits what was acknowledged, the feed leaves its group (an assignment completing meanwhile
starts nothing), each leg releases what it still holds and closes its clients; then probes end,
admin clients close and the HTTP server stops last. A second signal cancels everything at once.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import structlog

from replicator import clock
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, TopicSelection, colliding_flow_names, feeds_for
from replicator.config.values import OversizePolicy, TakeOver
from replicator.errors import Stopped
from replicator.failover.group_sync import GroupSync
from replicator.kafka.clients import ClusterClient, membership_lease
from replicator.kafka.membership import MembershipLease
from replicator.kafka.retry import Backoff
from replicator.lifecycle import StopDeadline, sleep_unless_stopped, unless_stopped
from replicator.model import native
from replicator.model.handover import Handover
from replicator.replication.dead_letters import DeadLetters
from replicator.replication.feed import SourceFeed
from replicator.replication.health import PartitionQuery
from replicator.replication.heartbeats import FlowHeartbeat
from replicator.replication.kafka_connections import KafkaLegConnections
from replicator.replication.leg import LegRunner
from replicator.service.http import HttpServer
from replicator.telemetry.metrics import Metrics
from replicator.topics.acl_syncs import AclSyncs

log = structlog.get_logger(__name__)

_HEARTBEAT_S = 0.5
_PROBE_INTERVAL_S = 5.0
_LOOP_STALL_S = 10.0
_FETCH_STALL_S = 120.0


class ReplicatorService:
    """Runs the ``_REPLICA`` mode (every replica topic of the local cluster to every cluster)
    and the configured flows, each feed with its own legs."""

    def __init__(
        self, settings: Settings, metrics: Metrics | None = None, notes: tuple[str, ...] = ()
    ) -> None:
        self.settings = settings
        # What a MirrorMaker configuration was translated into (the tool recognised, each
        # default that applied): shown in /status as given.
        self.notes = notes
        self.metrics = metrics or Metrics()
        self.data_path = native.active()
        for path in (native.NATIVE, native.PYTHON):
            self.metrics.data_path.labels(path=path).set(1 if path == self.data_path else 0)
        self.plans = feeds_for(settings)
        self.clusters = {
            alias: ClusterClient(alias, cluster, settings.client_timings(), settings.idempotence)
            for alias, cluster in sorted(settings.clusters.items())
        }
        self.stop_event = asyncio.Event()
        self._tick = clock.monotonic()
        self._signals = 0
        self._main: asyncio.Task[Any] | None = None
        self.legs: list[LegRunner] = []
        self.dead_letters = (
            DeadLetters(settings.dead_letters(), self.clusters[settings.local_cluster])
            if settings.record_too_large_policy is OversizePolicy.DEAD_LETTER
            else None
        )
        self.feeds: list[SourceFeed[LegRunner]] = []
        self.leases: list[MembershipLease] = []  # one per feed, in the order of the feeds
        self.heartbeats = {
            plan.name: FlowHeartbeat(
                settings,
                plan,
                self.metrics,
                self.clusters[plan.source],
                self.clusters[plan.legs[0].destination],
            )
            for plan in self.plans
            if plan.rules.heartbeat_topic is not None
        }
        self.group_sync = (
            GroupSync(settings, self.metrics, self.clusters, self) if settings.sync_groups else None
        )
        self.acl_syncs = AclSyncs(
            settings, self.plans, self.metrics, self.clusters, self._selection
        )
        self.http = HttpServer(self, settings.http_host, settings.http_port)
        # Set at the first stop request; every wait of the stop takes what is left of it.
        self.stopping = StopDeadline(settings.shutdown_grace_ms / 1000)

    def request_stop(self) -> None:
        """Begin a graceful stop (what the first SIGTERM does)."""
        self.stopping.start()
        self.stop_event.set()

    async def run(self) -> None:
        self._main = asyncio.current_task()
        self._install_signal_handlers()
        await self.http.start()
        log.info(
            "replicator starting",
            local_cluster=self.settings.local_cluster,
            # Its static identity in each group (None: a dynamic member, restarts wait out
            # the old member's session); unique per replica, or the newer stops the older.
            instance_id=self.settings.instance_id,
            data_path=self.data_path,
            http_port=self.http.port,
            feeds={
                plan.name: {
                    "source": plan.source,
                    "destinations": [leg.destination for leg in plan.legs],
                    "topic_rules": plan.rules.describe(),
                }
                for plan in self.plans
            },
        )
        if self.data_path != native.NATIVE:
            log.warning("records are built into batches in Python", reason=self._path_reason())
        for warning in colliding_flow_names(self.settings):
            log.warning(warning)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._heartbeat(), name="heartbeat")
                for client in self.clusters.values():
                    group.create_task(self._probe(client), name=f"probe:{client.alias}")
                group.create_task(self._replicate(), name="replicate")
                if self.group_sync is not None:
                    group.create_task(self.group_sync.run(self.stop_event), name="group-sync")
                if self.acl_syncs.legs:
                    group.create_task(self.acl_syncs.run(self.stop_event), name="acl-sync")
        finally:
            await asyncio.gather(*(c.close() for c in self.clusters.values()))
            await self.http.stop()
            log.info("replicator stopped")

    async def _replicate(self) -> None:
        """Legs first (they hold the committed offsets), then the feeds; stop in reverse.

        Each leg owns its tasks in its own TaskGroup (nested in ``legs`` here). On stop each feed
        stops fetching, releases its partitions (every leg drains and commits them) and leaves
        its group; then each leg closes its partitions (any a late rebalance gave it), its
        TaskGroup ends and it closes its clients.
        """
        stop = self.stop_event
        for plan in self.plans:
            # The feed's group membership: the legs' producers write only while it runs.
            lease = membership_lease(self.settings, plan.group)
            self.leases.append(lease)
            runners = [
                LegRunner(
                    leg,
                    self.settings,
                    plan,
                    self.metrics,
                    KafkaLegConnections(
                        leg,
                        self.settings,
                        plan,
                        self.clusters[leg.source],
                        self.clusters[leg.destination],
                        lease,
                    ),
                    self.dead_letters,
                    self.stopping,
                )
                for leg in plan.legs
            ]
            self.legs.extend(runners)
            self.feeds.append(
                SourceFeed(self.settings, plan, self.metrics, runners, self.stopping, lease=lease)
            )
        try:
            await self._ensure_heartbeat_topics()
            for leg in self.legs:
                if not await leg.start_source(stop):
                    return
            async with asyncio.TaskGroup() as legs:
                for leg in self.legs:
                    legs.create_task(leg.run(stop), name=f"leg:{leg.leg.name}")
                try:
                    async with asyncio.TaskGroup() as feeds:
                        for feed in self.feeds:
                            feeds.create_task(feed.run(stop), name=f"feed:{feed.plan.name}")
                        for name, heartbeat in self.heartbeats.items():
                            feeds.create_task(heartbeat.run(stop), name=f"heartbeat:{name}")
                finally:
                    self.stopping.start()
                    stop.set()  # a feed only ends on stop, or on a failure that stops all
                    await asyncio.gather(*(leg.close_partitions() for leg in self.legs))
        finally:
            if self.dead_letters is not None:
                await self.dead_letters.close(self.stopping.left())

    async def _ensure_heartbeat_topics(self) -> None:
        """Heartbeat topics exist before the feeds list their sources (else a rebalance follows
        soon after start); a source that does not answer yet is left to the emitter's retries."""
        beats = list(self.heartbeats.values())
        results = await asyncio.gather(
            *(asyncio.wait_for(beat.ensure_topic(), _PROBE_INTERVAL_S) for beat in beats),
            return_exceptions=True,
        )
        for beat, result in zip(beats, results, strict=True):
            if isinstance(result, Exception):
                log.info(
                    "heartbeat topic not checked yet: the emitter retries",
                    flow=beat.plan.name,
                    error=repr(result),
                )

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError):  # not the main thread
                return

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("stop requested, draining", signal=sig.name)
            self.request_stop()
        else:
            log.warning("second signal, forcing exit", signal=sig.name)
            if self._main is not None:
                self._main.cancel()

    async def _heartbeat(self) -> None:
        while not self.stop_event.is_set():
            self._tick = clock.monotonic()
            await sleep_unless_stopped(self.stop_event, _HEARTBEAT_S)

    async def _probe(self, client: ClusterClient) -> None:
        was_down: bool | None = None
        backoff = Backoff(base=_PROBE_INTERVAL_S)
        while not self.stop_event.is_set():
            try:  # not waited for at shutdown
                await unless_stopped(client.probe(), self.stop_event)
            except Stopped:
                return
            down = client.error is not None
            # Said once per outage: the cause may read differently from one probe to the next
            # (no answer, then refused at bootstrap); /status and /readyz show the latest.
            if down != was_down:
                if not down:
                    log.info("cluster reachable", cluster=client.alias)
                else:
                    log.warning("cluster unreachable", cluster=client.alias, error=client.error)
                was_down = down
            await sleep_unless_stopped(self.stop_event, backoff.delay(client.retriable))

    # -- what /livez, /readyz, /status and /metrics show ----------------------------------------

    def liveness_problems(self) -> list[str]:
        problems = []
        stalled = clock.monotonic() - self._tick
        if stalled > _LOOP_STALL_S:
            problems.append(f"event loop blocked for {stalled:.0f}s")
        for feed in self.feeds:
            if feed.joined and feed.seconds_since_poll > _FETCH_STALL_S:
                problems.append(
                    f"source feed {feed.plan.name} has not polled for "
                    f"{feed.seconds_since_poll:.0f}s"
                )
        for runner in self.legs:
            if runner.source_connected and runner.seconds_since_poll > _FETCH_STALL_S:
                problems.append(
                    f"leg {runner.leg.name} has not polled for {runner.seconds_since_poll:.0f}s"
                )
        return problems

    def readiness_problems(self, local_only: bool = False) -> list[str]:
        """Why the service is not ready; ``local_only`` leaves out remote clusters and legs."""
        local = self.settings.local_cluster
        problems = [
            f"cluster {alias} unreachable: {client.error}"
            for alias, client in self.clusters.items()
            if client.error is not None and (alias == local or not local_only)
        ]
        if not self.feeds:
            problems.append("starting")
        for feed in self.feeds:
            problems.extend(feed.problems())
        for runner in self.legs:
            if runner.leg.destination == local or not local_only:
                problems.extend(runner.health.problems())
        for heartbeat in self.heartbeats.values():  # identity flows in a chain or a ring
            problems.extend(heartbeat.problems())
        return problems

    def status(self, detail: PartitionQuery | None = None) -> dict[str, Any]:
        """What ``/status`` shows: each leg summarised, with the partitions ``detail`` asks for."""
        replica = self.replica_feed
        return {
            "local_cluster": self.settings.local_cluster,
            "stopping": self.stop_event.is_set(),
            "data_path": {"path": self.data_path, "reason": self._path_reason()},
            "translation_notes": list(self.notes),
            "clusters": {
                alias: {"reachable": client.error is None, "error": client.error}
                for alias, client in self.clusters.items()
            },
            "topics": replica.topics.status() if replica else None,
            "source_feed": replica.status() if replica else None,
            "flows": {
                feed.plan.name: {
                    "source": feed.plan.source,
                    "target": feed.plan.legs[0].destination,
                    "topics": feed.topics.status(),
                    "source_feed": feed.status(),
                    "heartbeat": beat.status()
                    if (beat := self.heartbeats.get(feed.plan.name))
                    else None,
                }
                for feed in self.feeds
                if feed.plan.is_flow
            },
            "legs": [
                leg.health.status(feed.log_end, detail=detail)
                for feed in self.feeds
                for leg in feed.legs
            ],
            "partition_detail": detail.shown() if detail is not None else None,
            "checkpoints": self.group_sync.status() if self.group_sync is not None else None,
            "acl_sync": self.acl_syncs.status() if self.acl_syncs.legs else None,
        }

    def _selection(self, plan: FeedPlan) -> TopicSelection | None:
        """The latest topic selection of ``plan``'s feed (``None``: not listed yet)."""
        feed = next((feed for feed in self.feeds if feed.plan is plan), None)
        return feed.topics.selection if feed is not None else None

    def _path_reason(self) -> str:
        """Why this process runs its data path (for the log and ``/status``)."""
        if self.data_path == native.PYTHON and native.available():
            return "REPLICATOR_DATA_PATH=python"
        return native.reason()

    def handovers(self) -> list[Handover]:
        """Where this process's flows took partitions over from a MirrorMaker."""
        return [h for feed in self.feeds for leg in feed.legs for h in leg.handovers]

    def taking_over(self, source: str, target: str) -> bool:
        """Whether a leg from ``source`` into ``target`` has yet to take its partitions over
        (or its feed has yet to start)."""
        taking = [
            p
            for p in self.plans
            if p.source == source
            and p.take_over is not TakeOver.NONE
            and any(leg.destination == target for leg in p.legs)
        ]
        if not taking:
            return False
        mine = [
            runner
            for feed in self.feeds
            for runner in feed.legs
            if (runner.leg.source, runner.leg.destination) == (source, target)
        ]
        return not mine or any(runner.taking_over for runner in mine)

    @property
    def replica_feed(self) -> SourceFeed[LegRunner] | None:
        """The ``_REPLICA`` mode's feed (``None`` when the mode is off or not started yet)."""
        return next((feed for feed in self.feeds if not feed.plan.is_flow), None)

    def metrics_exposition(self) -> bytes:
        for heartbeat in self.heartbeats.values():
            heartbeat.refresh()
        if self.group_sync is not None:
            self.group_sync.refresh()
        self.acl_syncs.refresh()
        for feed in self.feeds:
            for leg in feed.legs:
                leg.health.refresh(feed.log_end)
        return self.metrics.exposition()
