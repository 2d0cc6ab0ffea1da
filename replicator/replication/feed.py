"""A source feed: one fetch of a source cluster, fanned out to every leg of its feed plan.

The ``_REPLICA`` mode's feed reads the local cluster's replica topics for every cluster's leg;
each MirrorMaker-style flow has a feed of its own (its source, its one leg). One consumer (group
``<prefix>.<source>``, or the flow's group) subscribes to the selected topics and owns the
partition assignment; replicas of the same datacenter share the partitions through it. Each
fetched chunk of a partition is handed to a :class:`PartitionFanout`, which builds, in one pass
over the records, the batches of every leg's :class:`LegPartition` that is attached and continues
exactly where the chunk starts. A leg that cannot keep up (its queue is full: destination slow or
down) is detached and fetched for by its own catch-up fetch, so the feed never waits for the
slowest destination longer than ``REPLICATOR_DETACH_AFTER_MS``. Committed offsets stay per leg.

On assignment the feed starts each partition at the lowest position of the legs (a leg that is
further on waits for the feed to reach it). A stop request wins over a rebalance at any moment:
an assignment that completes after it starts nothing, and on stop every leg drains and commits
before the feed leaves its group. A position the source log no longer holds (retention, a topic
deleted and recreated) is never reset silently: each leg applies ``REPLICATOR_OFFSET_RESET_POLICY``
and counts it, then the feed starts the partition again.

The group consumer is read through the :class:`~replicator.kafka.fetching.GroupSource` seam, and
each leg through what the feed needs of it (:class:`FeedLeg`, which
:class:`~replicator.replication.leg.LegRunner` is): the unit tests drive the feed through an
in-memory source (:class:`~replicator.kafka.testing.MemoryGroupSource`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, Leg
from replicator.config.values import StartPosition
from replicator.errors import InstanceFenced, ReplicatorError
from replicator.kafka.decoding import Poison, undecodable_reason
from replicator.kafka.fetching import GroupSource, start_group_source
from replicator.kafka.membership import MembershipLease
from replicator.kafka.retry import retrying
from replicator.kafka.translation import denial
from replicator.lifecycle import IdleWait, StopDeadline, close_quietly, wait_any
from replicator.model.offsets import OutOfRange
from replicator.model.records import Chunk
from replicator.replication.fanout import PartitionFanout
from replicator.replication.fetch_round import FetchRound
from replicator.replication.partition import LegPartition
from replicator.telemetry.metrics import Metrics
from replicator.topics.watching import TopicWatch

log = structlog.get_logger(__name__)

_SWEEP_BATCH = 256
_IDLE_HOLD_S = 10.0
_YIELD_EVERY = 500  # partitions started between turns of the event loop


class FeedLeg(Protocol):
    """What the feed needs of each leg it feeds (a :class:`~replicator.replication.leg.
    LegRunner`)."""

    @property
    def leg(self) -> Leg: ...

    @property
    def partitions(self) -> Mapping[TopicPartition, LegPartition]:
        """The leg's partitions, by source partition (those it was assigned and holds)."""
        ...

    @property
    def destination_up(self) -> bool:
        """Whether the destination is connected and answers."""
        ...

    async def assign(self, partitions: list[TopicPartition]) -> None:
        """Take ``partitions`` (each then in :attr:`partitions`, unless stop came first)."""
        ...

    async def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Give ``partitions`` up: drain and commit them."""
        ...

    def out_of_range(self, tp: TopicPartition, found: OutOfRange) -> None:
        """The feed found ``tp`` outside the source log: apply the policy on this leg."""
        ...

    async def close_producer(self) -> None:
        """At a stop, before the feed leaves its group: close the destination producer."""
        ...


L = TypeVar("L", bound=FeedLeg)


class SourceFeed(Generic[L]):
    """The shared fetch of one source cluster's selected topics (one :class:`FeedPlan`)."""

    def __init__(
        self,
        settings: Settings,
        plan: FeedPlan,
        metrics: Metrics,
        legs: list[L],
        stopping: StopDeadline | None = None,
        connect: Callable[[], Awaitable[GroupSource]] | None = None,
        lease: MembershipLease | None = None,
    ) -> None:
        """``connect``: a started group consumer of the source (by default, aiokafka's, its
        membership told to ``lease``: see :mod:`replicator.kafka.membership`)."""
        self._settings = settings
        self._stopping = stopping or StopDeadline(settings.shutdown_grace_ms / 1000)
        self.plan = plan
        self._rules = plan.rules
        self._metrics = metrics
        self.legs = legs
        self.group = plan.group
        self._new_source = connect or self._start_source
        self.lease = lease
        self._source: GroupSource | None = None
        self._fanouts: dict[TopicPartition, PartitionFanout] = {}
        # The held fanouts (PartitionFanout.hold), oldest hold first: every hold lasts at most
        # detach_after, so the first one is the next to end. Changed by _hold and _unhold only.
        self._held: dict[TopicPartition, PartitionFanout] = {}
        # Partitions whose state changed since the feed last looked (see LegPartition.watch):
        # holds and settling are decided for those only, not for every partition every fetch.
        self._changed: set[TopicPartition] = set()
        self._woken: set[TopicPartition] = set()
        self._holds_changed = asyncio.Event()
        self._sweep_order: list[TopicPartition] = []
        self._sweep_at = 0
        self._tasks: asyncio.TaskGroup | None = None
        self._stop = asyncio.Event()
        self._detach_after = settings.detach_after_ms / 1000
        self.topics = TopicWatch(plan.rules, metrics, plan.source, plan.name)
        self._listing_every = settings.metadata_max_age_ms / 1000
        self._listing_interval = self._listing_every  # longer for a cluster of very many partitions
        self._next_listing = 0.0
        self._metadata_refreshed = False
        self.joined = False
        self._assigning = 0  # partitions of an assignment not yet handed to every leg
        self._taking: asyncio.Task[None] | None = None  # handing them over
        self._connect_error: str | None = None
        self._fetched: list[TopicPartition] = []  # the partitions of this round's records
        self._log = log.bind(feed=plan.name, source=plan.source)
        # Joining the group needs Read on it; fetching, Read on the topics.
        self._round = FetchRound(
            self._group_source,
            self,
            what="fetch",
            failure="fetch failed",
            log=self._log,
            denied=self._failure,
        )

    def _failure(self, exc: BaseException) -> ReplicatorError:
        """A failed fetch in the feed's terms: an ACL denial naming what it refused, or, once
        another process took this replica's identity, that (whatever the client raised)."""
        self._check_fenced()
        return denial(
            exc, cluster=self.plan.source, topic=("Read", None), group=("Read", self.group)
        )

    def _check_fenced(self) -> None:
        """Raise :class:`InstanceFenced` once the group fenced this replica's identity: it
        never writes again (its lease ended) and the service stops, saying why."""
        if self.lease is not None and self.lease.fenced is not None:
            raise InstanceFenced(self.lease.fenced)

    @property
    def last_error(self) -> str | None:
        """Why the feed cannot connect, or why its last fetch failed."""
        return self._connect_error if self._source is None else self._round.last_error

    @property
    def last_poll(self) -> float:
        """When the source last answered a fetch."""
        return self._round.last_poll

    @property
    def connected(self) -> bool:
        return self._source is not None

    async def run(self, stop: asyncio.Event) -> None:
        """Join the group and fan records out until ``stop``; then release every partition."""
        self._stop = stop
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                source = await self._connect(stop)
                if source is not None:
                    tasks.create_task(self._release_holds(stop), name=f"holds:{self.plan.name}")
                    await self._fetch_loop(stop, source)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # Cancelled from inside (a client library cancelling its own call): the service
            # must not go on without its feed as if nothing happened.
            self._log.exception("source feed cancelled unexpectedly")
            raise RuntimeError("the source feed was cancelled unexpectedly") from exc
        finally:
            self._tasks = None
            await self._release(list(self._fanouts))
            if self._stopping.started:  # producers closed before another replica takes over
                await asyncio.gather(*(leg.close_producer() for leg in self.legs))
            if self._source is not None:
                left = self._stopping.left()
                await close_quietly(self._source.close(), left, "source feed consumer")
            self._log.info("source feed stopped")

    def _start_source(self) -> Awaitable[GroupSource]:
        cluster = self._settings.clusters[self.plan.source]
        client_id = f"replicator-{self.plan.name}-{self.plan.source}-feed"
        return start_group_source(cluster, self._settings, self.group, client_id, self.lease)

    async def _connect(self, stop: asyncio.Event) -> GroupSource | None:
        def failed(error: ReplicatorError) -> None:
            self._connect_error = f"cannot connect to {self.plan.source}: {error}"

        source = await retrying(
            self._new_source,
            stop=stop,
            what="reach the source",
            log=self._log,
            on_error=failed,
            interruptible=True,
        )
        if source is None:
            return None
        self._source = source
        await self._list_topics(source, subscribe=True)
        self._connect_error = None
        self._log.info("source feed connected", group=self.group)
        return source

    def _group_source(self) -> GroupSource:
        assert self._source is not None, "fetching before the feed connected"
        return self._source

    async def _fetch_loop(self, stop: asyncio.Event, source: GroupSource) -> None:
        settings = self._settings
        idle = IdleWait(
            settings.fetch_max_wait_ms,
            settings.fetch_idle_max_wait_ms,
            settings.fetch_longest_wait_ms,
        )
        while not stop.is_set():
            self._check_fenced()
            idle.fetching(len(self._fanouts))
            if self._metadata_refreshed or clock.monotonic() >= self._next_listing:
                await self._list_topics(source)
            if await self._round.run(stop, idle) is None:
                return  # stopped
            await self._settle(source)

    # -- what a round brought (RoundReader) -----------------------------------------------------

    async def out_of_range(self, positions: dict[TopicPartition, int]) -> None:
        for tp, position in positions.items():
            await self._out_of_range(tp, position)

    def take(self, tp: TopicPartition, records: Chunk, fetched_ms: int) -> None:
        """Fan ``records`` out to the legs (settled with the partitions that changed)."""
        self._changed.add(tp)
        fanout = self._fanouts.get(tp)
        if fanout is not None:
            fanout.deliver(records, fetched_ms)
            self._fetched.append(tp)

    def reading(self) -> Iterable[tuple[TopicPartition, int]]:
        """The partitions this round fanned out (the sweep looks at the others in turn)."""
        fetched, self._fetched = self._fetched, []
        return [(tp, fanout.position) for tp in fetched if (fanout := self._fanouts.get(tp))]

    def pass_over(self, tp: TopicPartition, position: int) -> None:
        fanout = self._fanouts.get(tp)
        if fanout is not None:
            fanout.pass_over(position)

    async def _settle(self, source: GroupSource) -> None:
        """Settle every partition a fetch or a change touched, and those the sweep looks at."""
        touched, self._changed = self._changed, set()  # changes while the sweep waits: next
        touched |= await self._sweep(source)
        for tp in touched:
            fanout = self._fanouts.get(tp)
            if fanout is not None:
                fanout.settle()
                self._hold(fanout)

    async def _sweep(self, source: GroupSource) -> set[TopicPartition]:
        """Every partition is looked at in turn, a bounded slice per fetch: a log shorter than
        a position already reached (some brokers do not answer OFFSET_OUT_OF_RANGE to a fetch
        past the end, and a leg may be further on), and anything a change did not announce. Few
        partitions: all of them at every fetch. The partitions looked at are returned."""
        looked: set[TopicPartition] = set()
        for tp in self._sweep_slice():
            fanout = self._fanouts.get(tp)
            if fanout is None:
                continue
            looked.add(tp)
            self._pass_over(source, fanout)
            beyond = fanout.beyond_log_end(source.log_end_seen(tp), source.answered_at(tp))
            if beyond is not None:
                await self._out_of_range(tp, beyond)
        return looked

    def _pass_over(self, source: GroupSource, fanout: PartitionFanout) -> None:
        """Move ``fanout`` past what the consumer read without handing it over (a fetch that
        ended in a transaction marker, or aborted records): looked at for the partitions of
        each fetch and in the sweep, which reaches a partition whose fetch held nothing else."""
        position = source.position_after(fanout.tp)
        if position is not None and position > fanout.position:
            fanout.pass_over(position)

    def _sweep_slice(self) -> list[TopicPartition]:
        """The next ``_SWEEP_BATCH`` partitions in a round over all of them."""
        if self._sweep_at >= len(self._sweep_order):
            self._sweep_order, self._sweep_at = list(self._fanouts), 0
        taken = self._sweep_order[self._sweep_at : self._sweep_at + _SWEEP_BATCH]
        self._sweep_at += _SWEEP_BATCH
        return taken

    async def _list_topics(self, source: GroupSource, subscribe: bool = False) -> None:
        """List the cluster's topics; subscribe to exactly the replicated ones when they change.

        The subscription is built from the rules' answer for each listing (never from the
        user's regexes), so the group is assigned exactly the partitions the legs replicate.
        """
        self._metadata_refreshed = False
        self._next_listing = clock.monotonic() + 2 * self._listing_interval
        try:
            topics = await source.topics(None if subscribe else 2 * self._listing_interval)
        except ReplicatorError as exc:
            self.topics.listing_failed(str(exc))
            changed = False
        else:
            changed = self.topics.listed(topics)
            self._listing_interval = source.pace_metadata(self._listing_every)
        if subscribe or changed:
            source.subscribe(self.topics.subscription_pattern, self._assigned, self._revoked)
        if subscribe:
            source.on_metadata(self._on_metadata)

    def _on_metadata(self) -> None:
        self._metadata_refreshed = True

    # -- backpressure ---------------------------------------------------------------------------

    def _hold(self, fanout: PartitionFanout) -> None:
        """Pause ``fanout``'s partition while a leg it waits for has no room (or is starting)."""
        if not fanout.hold(clock.monotonic()):
            return
        self._pause(fanout.tp)
        self._held[fanout.tp] = fanout
        self._holds_changed.set()

    def _unhold(self, fanout: PartitionFanout, resume: bool = True) -> None:
        """``fanout`` held no more; its partition resumed (``resume``) if it is still fed."""
        if not fanout.unhold():
            return
        del self._held[fanout.tp]
        if resume and self._fanouts.get(fanout.tp) is fanout:
            self._resume(fanout.tp)

    def _partition_changed(self, partition: LegPartition) -> None:
        """A leg's partition changed (room freed, started, detached...): look at it again."""
        tp = partition.tp
        self._changed.add(tp)
        if tp in self._held:
            self._woken.add(tp)
            self._holds_changed.set()

    async def _release_holds(self, stop: asyncio.Event) -> None:
        """Resume held partitions once every leg they wait for has room; after ``detach_after``
        seconds, stop waiting for the legs still full (they fetch alone) and resume.

        One task for every hold: woken by the partitions that changed, and at the oldest hold's
        deadline; it looks at those partitions only.
        """
        detach_after = self._detach_after
        while not stop.is_set():
            oldest = next(iter(self._held.values()), None)
            left = None if oldest is None else oldest.hold_ends(detach_after) - clock.monotonic()
            if left is None or left > 0:
                await wait_any([self._holds_changed, stop], _IDLE_HOLD_S if left is None else left)
            self._holds_changed.clear()
            woken, self._woken = self._woken, set()
            for tp in woken:
                held = self._held.get(tp)
                if held is not None and not held.blocking():
                    self._unhold(held)
            now = clock.monotonic()
            for held in list(self._held.values()):
                if held.hold_ends(detach_after) > now:
                    break
                held.give_up(held.blocking())
                self._unhold(held)

    # -- positions outside the log --------------------------------------------------------------

    async def _out_of_range(self, tp: TopicPartition, position: int) -> None:
        """The source log no longer holds ``position``: apply the policy on every leg."""
        source = self._source
        fanout = self._fanouts.get(tp)
        if source is None or fanout is None or tp not in source.assignment():
            return
        try:
            found = await source.bounds(tp, position)
        except ReplicatorError as exc:
            self._log.warning("cannot read the source log bounds", error=str(exc))
            return
        if self._fanouts.get(tp) is not fanout:
            return  # released meanwhile
        if found is None:
            source.seek(tp, position)  # in range after all: carry on
            return
        for leg in self.legs:
            leg.out_of_range(tp, found)
        if self._fanouts.get(tp) is fanout:  # not released or assigned again meanwhile
            self._drop_fanout(tp)
            await self._start_fanout(tp)

    # -- rebalance (called by the group consumer) -----------------------------------------------

    async def _revoked(self, revoked: list[TopicPartition]) -> None:
        await self.taken()
        await self._release(revoked)

    async def _assigned(self, assigned: list[TopicPartition]) -> None:
        """The group's assignment: every partition paused at once, then handed to the legs by a
        task of the feed's own, so that the group consumer's callback returns at once.

        The group client sends no heartbeat until its assignment callback returns: a callback
        that took the assignment over (reading thousands of committed offsets and log bounds,
        preparing each partition) lasted past the session timeout at 10,002 partitions (10.8 s
        against 10 s), the member was dropped from the group, and every rebalance after that
        ended the same way. A revocation waits for the task (:meth:`taken`)."""
        source = self._source
        if source is None:
            return
        for tp in assigned:
            source.seek(tp, 0)  # a position keeps the consumer quiet; fetching waits for it
            source.pause(tp)
        if self._stop.is_set():
            self._log.info(
                "assignment after stop was requested: not started", partitions=len(assigned)
            )
            return
        self.joined = True
        partitions = [tp for tp in assigned if self._rules.target(tp.topic) is not None]
        for leg in self.legs:
            self._metrics.rebalances.labels(leg.leg.name).inc()
        # Not ready until the legs hold them: a partition assigned is a partition to start.
        self._assigning = len(partitions)
        if self._tasks is None:  # not running: nothing else would take it
            await self._take(partitions)
            return
        self._taking = self._tasks.create_task(self._take(partitions), name="take assignment")

    async def taken(self) -> None:
        """Until the last assignment is handed to the legs, if it is not (a failure to take it
        over is the feed's task group's to raise)."""
        if self._taking is not None:
            await asyncio.wait([self._taking])

    async def _take(self, partitions: list[TopicPartition]) -> None:
        """Hand ``partitions`` to every leg, then start fetching each from where the legs need
        it (a pass over thousands yields to the event loop now and then)."""
        try:
            await asyncio.gather(*(leg.assign(partitions) for leg in self.legs))
            for number, tp in enumerate(partitions, 1):
                if self._stop.is_set():
                    return  # the legs release what they took when they close
                await self._start_fanout(tp)
                if number % _YIELD_EVERY == 0:
                    await asyncio.sleep(0)
        finally:
            self._assigning = 0
        self._log.info("partitions assigned", partitions=len(partitions))

    async def _start_fanout(self, tp: TopicPartition) -> None:
        """Fan ``tp`` out to the legs' partitions, from the lowest position one of them needs."""
        source = self._source
        assert source is not None
        partitions = [leg.partitions[tp] for leg in self.legs if tp in leg.partitions]
        starts = [p.position for p in partitions if p.open]
        if not starts:
            self._fanouts[tp] = PartitionFanout(tp, partitions, 0)
            self._pause(tp)  # halted on every leg: nothing to fetch (after a reset, say)
            return
        if all(offset is not None for offset in starts):
            position = min(o for o in starts if o is not None)
            source.seek(tp, position)
        elif self.plan.start_from is StartPosition.LATEST:
            position = await source.seek_to_log_end(tp)
        else:
            position = await source.seek_to_log_start(tp)
        for partition in partitions:
            partition.place(position)
        fanout = PartitionFanout(tp, partitions, position, self._preparing)
        self._fanouts[tp] = fanout
        for partition in partitions:
            partition.watch(self._partition_changed)
        source.resume(tp)
        self._hold(fanout)

    def _preparing(self, partition: LegPartition) -> bool:
        """Whether the leg of a starting ``partition`` can prepare it now (its destination is
        connected and answers): local delivery never waits for a remote that is down."""
        return any(
            leg.destination_up for leg in self.legs if leg.partitions.get(partition.tp) is partition
        )

    def _drop_fanout(self, tp: TopicPartition) -> None:
        fanout = self._fanouts.pop(tp, None)
        if fanout is not None:
            self._unhold(fanout, resume=False)

    def undecodable(self, poison: Poison) -> None:
        """A fetch stopped at a record the client cannot decode, after handing over those before
        it: the legs there halt at it (once what they queued is sent); never fetched again here
        (a leg still behind reaches it with its own fetch; the round paused it)."""
        tp = poison.tp
        fanout = self._fanouts.get(tp)
        if fanout is None:
            return
        self._unhold(fanout, resume=False)
        reason = undecodable_reason(poison)
        halted = [p for p in fanout.partitions if p.undecodable(poison.offset, reason)]
        if halted:
            self._log.error(
                "a source record cannot be decoded: its partition halts at it",
                topic=tp.topic,
                partition=tp.partition,
                offset=poison.offset,
                error=poison.error,
                legs=len(halted),
            )

    def _pause(self, tp: TopicPartition) -> None:
        if self._source is not None and tp in self._source.assignment():
            self._source.pause(tp)

    def _resume(self, tp: TopicPartition) -> None:
        if self._source is not None and tp in self._source.assignment():
            self._source.resume(tp)

    async def _release(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        for tp in partitions:
            self._drop_fanout(tp)
        await asyncio.gather(*(leg.release(partitions) for leg in self.legs))
        self._log.info("partitions released", partitions=len(partitions))

    # -- what the legs and health checks need ---------------------------------------------------

    def log_end(self, tp: TopicPartition) -> int | None:
        """The source partition's log-end offset, as last seen in a fetch response."""
        return None if self._source is None else self._source.log_end_seen(tp)

    def problems(self) -> list[str]:
        if not self.connected:
            return [f"source feed not connected: {self.last_error or 'starting'}"]
        if not self.joined:
            why = f": {self.last_error}" if self.last_error else ""
            return [f"source feed has not joined its consumer group {self.group} yet{why}"]
        if self._assigning:
            return [f"source feed: {self._assigning} partitions assigned, handing them to the legs"]
        if self.last_error is not None:  # a fetch failing since it joined (a grant revoked)
            return [f"source feed: {self.last_error}"]
        return []

    def status(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "connected": self.connected,
            "joined": self.joined,
            "assigned_partitions": len(self._fanouts),
            "last_error": self.last_error,
            # Requests, full ones, partitions listed, forgotten and answered, sessions reset.
            "fetch_sessions": None if self._source is None else self._source.fetch_sessions(),
            # Static identity, the lease the producers write under, times a batch waited it out.
            "membership": None if self.lease is None else self.lease.status(),
        }

    @property
    def seconds_since_poll(self) -> float:
        return clock.monotonic() - self.last_poll
