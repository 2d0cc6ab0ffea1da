"""The shared source feed: one fetch of the local cluster, fanned out to every leg.

One consumer (group ``<prefix>.<source>``) subscribes to the replica topics and owns the
partition assignment; replicas of the same datacenter share the partitions through it. Each
fetched chunk of a partition is handed to a :class:`PartitionFanout`, which builds, in one pass
over the records, the batches of every leg whose sender is attached and continues exactly where
the chunk starts. A leg that cannot keep up (its queue is full: destination slow or down) is
detached and fetches for itself with its catch-up consumer, so the feed never waits for the
slowest destination. Committed offsets stay per leg, in each leg's own group.

On assignment the feed starts each partition at the lowest committed offset of the legs (a leg
that is further on waits for the feed to reach it); on revocation and shutdown every leg drains
and commits its senders before the partitions are given up. A position the source log no longer
holds (records deleted by retention, a topic deleted and recreated) is never reset silently: each
leg applies ``REPLICATOR_OFFSET_RESET_POLICY`` and counts it, then the feed starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from replicator import batching
from replicator.kafka import (
    check_position,
    lacks_position,
    make_consumer,
    out_of_range_positions,
    translate,
)
from replicator.leg import LegRunner
from replicator.lifecycle import Backoff, close_quietly, sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.records import SourceRecord
from replicator.sender import PartitionSender
from replicator.settings import Settings
from replicator.topic_watch import TopicWatch
from replicator.topology import TopicRules

log = structlog.get_logger(__name__)

_FETCH_TIMEOUT_MS = 200
_CONNECT_BACKOFF_S = 2.0


class PartitionFanout:
    """One source partition's records, built into batches for every attached leg at once.

    Backpressure: while an attached leg's queue is full, the feed pauses this partition, so the
    legs move together at the pace of the slowest healthy one. A leg that stays full for longer
    than ``detach_after`` seconds is detached (it fetches for itself) and the feed goes on for
    the others: one slow or unreachable destination delays the others by that much, once.
    """

    def __init__(
        self,
        tp: TopicPartition,
        senders: list[PartitionSender],
        position: int,
        pause: Callable[[TopicPartition], None],
        resume: Callable[[TopicPartition], None],
        detach_after: float,
    ) -> None:
        self.tp = tp
        self.senders = senders
        self.position = position
        self._pause = pause
        self._resume = resume
        self._detach_after = detach_after
        self._paused_since: float | None = None
        self._polled_ms: int | None = None
        self._suspect: int | None = None
        for sender in senders:
            sender.feed_waiting = self.check

    def deliver(self, records: list[SourceRecord]) -> None:
        start, end = self.position, records[-1].offset + 1
        self.position = end
        joining = [s for s in self.senders if s.joins(start, end)]
        if joining:
            targets = [s.target() for s in joining]
            # Every leg tags a partition's records alike: build with the first leg's tagger.
            batching.build(records, end, joining[0].tagger, targets)
            for sender, target in zip(joining, targets, strict=True):
                sender.take_built(target, end)
        if self._paused_since is None and any(
            s.attached and s.open and not s.has_room for s in self.senders
        ):
            self._paused_since = time.monotonic()
            self._pause(self.tp)

    def beyond_log_end(self, log_end: int | None, polled_ms: int | None) -> int | None:
        """A position (of the feed or a leg) past the log end, seen in two fetches in a row.

        ``log_end`` and ``polled_ms`` come from the latest fetch response for the partition. A
        position is only judged against a response fetched after it was reached, so a leg that
        fetched further on its own, after the feed's last response, is never mistaken for one
        beyond the end.
        """
        if log_end is None or polled_ms is None or polled_ms == self._polled_ms:
            return None
        self._polled_ms = polled_ms
        suspect, self._suspect = self._suspect, None
        if suspect is not None and suspect > log_end:
            return suspect
        positions = [s.next_offset for s in self.senders if s.open and s.next_offset is not None]
        furthest = max([self.position, *positions]) if positions else None
        if furthest is not None and furthest > log_end:
            self._suspect = furthest
        return None

    def check(self) -> None:
        """Resume once every attached leg has room; detach legs that stayed full too long."""
        if self._paused_since is None:
            return
        full = [s for s in self.senders if s.attached and s.open and not s.has_room]
        if full and time.monotonic() - self._paused_since > self._detach_after:
            for sender in full:
                sender.detach()
            full = []
        if not full:
            self._paused_since = None
            self._resume(self.tp)


class SourceFeed(ConsumerRebalanceListener):  # type: ignore[misc]
    """The shared fetch of the local cluster's replica topics."""

    def __init__(
        self, settings: Settings, rules: TopicRules, metrics: Metrics, legs: list[LegRunner]
    ) -> None:
        self._settings = settings
        self._rules = rules
        self._metrics = metrics
        self._legs = legs
        self.group = f"{settings.group_prefix}.{settings.local_cluster}"
        self._make_consumer: Callable[[], AIOKafkaConsumer] = partial(
            make_consumer,
            settings.clusters[settings.local_cluster],
            settings,
            self.group,
            f"replicator-{settings.local_cluster}-feed",
        )
        self._consumer = self._make_consumer()
        self._fanouts: dict[TopicPartition, PartitionFanout] = {}
        self.topics = TopicWatch(rules, metrics, settings.local_cluster)
        self._listing_interval = settings.metadata_max_age_ms / 1000
        self._next_listing = 0.0
        for leg in legs:
            leg.restarted = self._rewire
        self.connected = False
        self.joined = False
        self.last_error: str | None = None
        self.last_poll = time.monotonic()
        self._log = log.bind(feed=settings.local_cluster)

    async def run(self, stop: asyncio.Event) -> None:
        """Join the group and fan records out until ``stop``; then release every partition."""
        try:
            if await self._connect(stop):
                await self._fetch_loop(stop)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # Cancelled from inside (a client library cancelling its own call): the service
            # must not go on without its feed as if nothing happened.
            self._log.exception("source feed cancelled unexpectedly")
            raise RuntimeError("the source feed was cancelled unexpectedly") from exc
        finally:
            await self._release(list(self._fanouts))
            if self.connected:
                grace = max(self._settings.shutdown_grace_ms / 1000, 1.0)
                await close_quietly(self._consumer.stop(), grace)
            self._log.info("source feed stopped")

    async def _connect(self, stop: asyncio.Event) -> bool:
        backoff = Backoff()
        while not stop.is_set():
            try:
                await self._consumer.start()
            except Exception as exc:
                error = translate(exc)
                self.last_error = f"cannot connect to {self._settings.local_cluster}: {error}"
                self._log.warning("cannot reach the source, retrying", error=str(error))
                await close_quietly(self._consumer.stop())
                self._consumer = self._make_consumer()
                await sleep_unless_stopped(stop, backoff.delay(error.retriable))
                continue
            await self._list_topics(subscribe=True)
            self.connected = True
            self.last_error = None
            self._log.info("source feed connected", group=self.group)
            return True
        return False

    async def _fetch_loop(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        while not stop.is_set():
            if time.monotonic() >= self._next_listing:
                await self._list_topics()
            try:
                fetched = await consumer.getmany(timeout_ms=_FETCH_TIMEOUT_MS)
            except Exception as exc:
                positions = out_of_range_positions(exc)
                if positions is not None:
                    for tp, position in positions.items():
                        await self._out_of_range(tp, position)
                    continue
                if lacks_position(exc):
                    continue
                error = translate(exc)
                self.last_error = f"fetch failed: {error}"
                self._log.warning("fetch failed", error=str(error), retriable=error.retriable)
                await sleep_unless_stopped(stop, _CONNECT_BACKOFF_S)
                continue
            self.last_poll = time.monotonic()
            for tp, records in fetched.items():
                fanout = self._fanouts.get(tp)
                if fanout is not None and records:
                    fanout.deliver(records)
            for tp, fanout in list(self._fanouts.items()):
                # A log shorter than a position already reached: some brokers do not answer
                # OFFSET_OUT_OF_RANGE to a fetch past the end, and a leg may be further on.
                beyond = fanout.beyond_log_end(self._highwater(tp), self._polled_ms(tp))
                if beyond is not None:
                    await self._out_of_range(tp, beyond)
            for fanout in self._fanouts.values():
                fanout.check()

    async def _list_topics(self, subscribe: bool = False) -> None:
        """List the cluster's topics; subscribe to exactly the replicated ones when they change.

        The subscription is built from the rules' answer for each listing (never from the
        user's regexes), so the group is assigned exactly the partitions the legs replicate.
        """
        self._next_listing = time.monotonic() + self._listing_interval
        try:
            topics = await self._consumer.topics()
        except Exception as exc:
            self.topics.listing_failed(str(translate(exc)))
            changed = False
        else:
            changed = self.topics.listed(topics)
        if subscribe or changed:
            self._consumer.subscribe(pattern=self.topics.subscription_pattern, listener=self)

    async def _out_of_range(self, tp: TopicPartition, position: int) -> None:
        """The source log no longer holds ``position``: apply the policy on every leg."""
        fanout = self._fanouts.get(tp)
        if fanout is None or tp not in self._consumer.assignment():
            return
        try:
            found = await check_position(self._consumer, tp, position)
        except Exception as exc:
            self._log.warning("cannot read the source log bounds", error=str(translate(exc)))
            return
        if self._fanouts.get(tp) is not fanout:
            return  # released meanwhile
        if found is None:
            self._consumer.seek(tp, position)  # in range after all: carry on
            return
        await asyncio.gather(*(leg.out_of_range(tp, found) for leg in self._legs))
        if self._fanouts.get(tp) is fanout:  # not released or assigned again meanwhile
            await self._start_fanout(tp)

    # -- rebalance (called by aiokafka) ---------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._release(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.joined = True
        partitions = [tp for tp in assigned if self._rules.target(tp.topic) is not None]
        for tp in set(assigned) - set(partitions):
            self._consumer.seek(tp, 0)  # never fetched; a position keeps the consumer quiet
            self._consumer.pause(tp)
        for leg in self._legs:
            self._metrics.rebalances.labels(leg.leg.name).inc()
        await asyncio.gather(*(leg.assign(partitions) for leg in self._legs))
        for tp in partitions:
            await self._start_fanout(tp)
        self._log.info("partitions assigned", partitions=len(partitions))

    async def _start_fanout(self, tp: TopicPartition) -> None:
        """Fan ``tp`` out to the legs' senders, from the lowest position one of them needs."""
        senders = self._senders(tp)
        starts = [s.next_offset for s in senders if s.open]
        if not starts:
            self._consumer.pause(tp)  # halted on every leg: nothing to fetch
        elif all(offset is not None for offset in starts):
            self._consumer.seek(tp, min(o for o in starts if o is not None))
        else:
            await self._consumer.seek_to_beginning(tp)
        position = 0
        if starts:
            position = await self._consumer.position(tp)
            self._consumer.resume(tp)
        self._fanouts[tp] = PartitionFanout(
            tp,
            senders,
            position,
            self._pause,
            self._resume,
            self._settings.detach_after_ms / 1000,
        )

    def _rewire(self, tp: TopicPartition) -> None:
        """A leg replaced its sender for ``tp``: fan out to the new one (which starts behind the
        feed, so it detaches and catches up on its own first)."""
        fanout = self._fanouts.get(tp)
        if fanout is not None:
            fanout.senders = self._senders(tp)
            for sender in fanout.senders:
                sender.feed_waiting = fanout.check

    def _senders(self, tp: TopicPartition) -> list[PartitionSender]:
        """Every leg's sender for ``tp``."""
        return [leg.senders[tp] for leg in self._legs if tp in leg.senders]

    def _pause(self, tp: TopicPartition) -> None:
        if tp in self._consumer.assignment():
            self._consumer.pause(tp)

    def _resume(self, tp: TopicPartition) -> None:
        if tp in self._consumer.assignment():
            self._consumer.resume(tp)

    async def _release(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        for tp in partitions:
            self._fanouts.pop(tp, None)
        await asyncio.gather(*(leg.release(partitions) for leg in self._legs))
        self._log.info("partitions released", partitions=len(partitions))

    # -- what the legs and health checks need ---------------------------------------------------

    def log_end(self, tp: TopicPartition) -> int | None:
        """The source partition's log-end offset, as last seen in a fetch response."""
        return self._highwater(tp) if self.connected else None

    def _polled_ms(self, tp: TopicPartition) -> int | None:
        with contextlib.suppress(Exception):
            polled: int | None = self._consumer.last_poll_timestamp(tp)
            return polled
        return None

    def _highwater(self, tp: TopicPartition) -> int | None:
        with contextlib.suppress(Exception):
            end: int | None = self._consumer.highwater(tp)
            return end
        return None

    def problems(self) -> list[str]:
        if not self.connected:
            return [f"source feed not connected: {self.last_error or 'starting'}"]
        if not self.joined:
            return ["source feed has not joined its consumer group yet"]
        return []

    def status(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "connected": self.connected,
            "joined": self.joined,
            "assigned_partitions": len(self._fanouts),
            "last_error": self.last_error,
        }

    @property
    def seconds_since_poll(self) -> float:
        return time.monotonic() - self.last_poll
