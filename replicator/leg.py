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
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from replicator.deadletter import DeadLetters
from replicator.kafka import (
    ClusterClient,
    check_position,
    make_consumer,
    make_producer,
    out_of_range_positions,
    translate,
)
from replicator.lifecycle import Backoff, close_quietly, sleep_unless_stopped
from replicator.metrics import Metrics
from replicator.offsets import OutOfRange, out_of_range
from replicator.sender import PartitionSender, PartitionState
from replicator.settings import OffsetResetPolicy, Settings
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
        dead_letters: DeadLetters | None = None,
    ) -> None:
        self.leg = leg
        self._settings = settings
        self._rules = rules
        self._metrics = metrics
        self._spawn = spawn
        self._dead_letters = dead_letters
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
        # The latest positions found outside the source log, for /status.
        self.offset_resets: deque[dict[str, Any]] = deque(maxlen=20)
        self._replaying: set[TopicPartition] = set()
        # Told when a partition's sender was replaced (the shared feed re-wires its fan-out).
        self.restarted: Callable[[TopicPartition], None] = lambda _: None
        self._log = log.bind(leg=leg.name)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start_source(self, stop: asyncio.Event) -> bool:
        """Start the catch-up consumer (source cluster); retry until up or stopped."""
        backoff = Backoff()
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
                await sleep_unless_stopped(stop, backoff.delay(error.retriable))
        return False

    async def run(self, stop: asyncio.Event) -> None:
        """Connect the destination, then fetch for detached partitions and commit until stop."""
        self._spawn(self._connect_destination(stop), f"connect:{self.leg.name}")
        self._spawn(self._commit_loop(stop), f"commit:{self.leg.name}")
        await self._catch_up_loop(stop)

    async def _connect_destination(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
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
                await sleep_unless_stopped(stop, backoff.delay(error.retriable))
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
        committed = {tp: await self._consumer.committed(tp) for tp in replicated}
        new = [tp for tp, offset in committed.items() if offset is None]
        if new:
            # A partition this leg never committed starts at the oldest record still held (not
            # offset 0, which retention may have deleted long ago: that is no loss to report).
            try:
                committed.update(await self._consumer.beginning_offsets(new))
                self._log.info("no committed offset: starting at log start", partitions=len(new))
            except Exception as exc:  # never lose the assignment over it: start at offset 0
                self._log.warning("log start unknown: starting at offset 0", error=repr(exc))
        for tp in replicated:
            self._start_sender(tp, committed[tp])
        self._metrics.assigned_partitions.labels(self.leg.name).set(len(self.senders))
        self._log.info("partitions assigned", partitions=len(self.senders))

    def _start_sender(self, tp: TopicPartition, next_offset: int | None) -> PartitionSender:
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
            next_offset=next_offset,
            on_detach=self._detached,
            on_attach=self._attached,
            on_room=self._room,
            on_replaced=self._replaced,
            dead_letters=self._dead_letters,
        )
        self.senders[tp] = sender
        # A position is always set explicitly (the consumer never resets one by itself); the
        # shared feed serves the partition while the sender is attached.
        self._consumer.seek(tp, next_offset or 0)
        self._consumer.pause(tp)
        self._tasks[tp] = self._spawn(
            sender.run(), f"send:{self.leg.name}:{tp.topic}:{tp.partition}"
        )
        return sender

    async def out_of_range(self, tp: TopicPartition, found: OutOfRange) -> None:
        """Apply the offset reset policy if this leg's position in ``tp`` is outside the log.

        ``found`` holds the log bounds. Below the log start, the sender skips the deleted records
        (counted as lost). Beyond the log end (the log was replaced or truncated), the sender
        starts again at the log start, and that position is committed.
        """
        sender = self.senders.get(tp)
        if sender is None or not sender.open:
            return
        if sender.next_offset is None:
            return
        mine = out_of_range(sender.next_offset, found.log_start, found.log_end)
        if mine is None:
            return  # this leg's position is still in the log
        found = mine
        self._metrics.offset_resets.labels(self.leg.name, sender.target_topic, found.reason).inc()
        if found.lost:
            self._metrics.records_lost.labels(self.leg.name, sender.target_topic).inc(found.lost)
        policy = self._settings.offset_reset_policy
        event = {
            "topic": tp.topic,
            "partition": tp.partition,
            "reason": found.reason,
            "position": found.position,
            "log_start": found.log_start,
            "log_end": found.log_end,
            "records_lost": found.lost,
            "policy": policy.value,
        }
        self.offset_resets.append({**event, "at": time.time()})
        self._log.error("source offset out of range", **event)
        if policy is OffsetResetPolicy.HALT:
            sender.halt(f"{found} (REPLICATOR_OFFSET_RESET_POLICY=halt)")
            return
        note = f"{found}; resumed at offset {found.log_start}"
        if found.below_log_start:
            sender.skip_to(found.log_start)
            sender.last_error = note
            if not sender.attached:
                self._positions.pop(tp, None)
                self._resume(sender)
            return
        await self._restart_sender(sender, found.log_start, note)

    def _replaced(self, sender: PartitionSender) -> None:
        """The destination acknowledged at a lower offset than before: its log was replaced."""
        if self.senders.get(sender.tp) is sender and sender.tp not in self._replaying:
            self._replaying.add(sender.tp)
            name = f"replay:{self.leg.name}:{sender.tp.topic}:{sender.tp.partition}"
            self._spawn(self._replay(sender), name)

    async def _replay(self, sender: PartitionSender) -> None:
        """Copy the source partition again, from its log start, into the replaced destination.

        The destination topic was deleted (and created again, by the replicator or the broker):
        what this leg had delivered is gone, so it is delivered again. The records sent between
        the deletion and its detection are duplicated, and counted as such by an audit.
        """
        tp = sender.tp
        self._metrics.partitions_replaced.labels(self.leg.name, sender.target_topic).inc()
        self._topics.forget(sender.target_topic)
        try:
            start: int = (await self._consumer.beginning_offsets([tp]))[tp]
        except Exception as exc:
            sender.halt(f"destination partition replaced; source log start unknown: {exc!r}")
            self._replaying.discard(tp)
            return
        self._log.error(
            "destination partition replaced (topic deleted and created again): replaying",
            topic=tp.topic,
            partition=tp.partition,
            target_topic=sender.target_topic,
            replay_from=start,
        )
        note = f"destination {sender.target_topic} was deleted; replayed from offset {start}"
        try:
            await self._restart_sender(sender, start, note)
        finally:
            self._replaying.discard(tp)

    async def _restart_sender(self, sender: PartitionSender, offset: int, note: str) -> None:
        """Replace ``sender`` by a new one starting at ``offset``, and commit that position."""
        tp = sender.tp
        self.senders.pop(tp)
        await self._drain([sender], self._settings.shutdown_grace_ms / 1000)
        self._positions.pop(tp, None)
        await self._commit_offsets({tp: offset})
        if tp in self.senders or tp not in self._consumer.assignment():
            return  # released (and perhaps assigned again) meanwhile: that assignment decides
        self._start_sender(tp, offset).last_error = note
        self.restarted(tp)

    async def release(self, partitions: Iterable[TopicPartition]) -> None:
        """Give ``partitions`` up: drain their senders, commit what was acknowledged."""
        senders = [self.senders.pop(tp) for tp in partitions if tp in self.senders]
        if not senders:
            return
        await self._drain(senders, self._settings.shutdown_grace_ms / 1000)
        await self._commit(senders)
        for sender in senders:  # the new owner exports this partition's lag from now on
            with contextlib.suppress(KeyError):
                self._metrics.commit_lag.remove(
                    self.leg.name, sender.tp.topic, str(sender.tp.partition)
                )
        self._positions.clear()
        with contextlib.suppress(Exception):
            # A new assignment forgets positions and pauses: set them again for the rest.
            self._consumer.assign(list(self.senders))
            for tp, sender in self.senders.items():
                self._consumer.seek(tp, sender.next_offset or 0)
                self._consumer.pause(tp)
                self._room(sender)
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
                positions = out_of_range_positions(exc)
                if positions is not None:
                    await self._fetched_out_of_range(positions)
                    continue
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

    async def _fetched_out_of_range(self, positions: dict[TopicPartition, int]) -> None:
        """The catch-up fetch of a detached partition found its position outside the log.

        Below the log start, this leg alone lost records: the policy applies here. Beyond the
        log end, the log was replaced: the shared feed, which is further on, finds it too and
        resets the partition on every leg, so this leg only stops fetching it meanwhile.
        """
        for tp, position in positions.items():
            with contextlib.suppress(Exception):
                self._consumer.pause(tp)
            self._positions.pop(tp, None)
            try:
                found = await check_position(self._consumer, tp, position)
            except Exception as exc:
                self._log.warning("cannot read the source log bounds", error=str(translate(exc)))
                found = None
            if found is not None and found.below_log_start:
                await self.out_of_range(tp, found)
            elif found is None and (sender := self.senders.get(tp)) is not None:
                self._room(sender)  # in range after all: fetch again

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
        if not await self._commit_offsets(offsets):
            return
        for sender in senders:
            if sender.tp in offsets and sender.tracker is not None:
                sender.tracker.mark_committed(offsets[sender.tp])

    async def _commit_offsets(self, offsets: dict[TopicPartition, int]) -> bool:
        """Commit ``offsets`` to the leg's group; ``False`` if nothing was committed."""
        if not offsets or not self.source_connected:
            return False
        try:
            # Bounded: a commit for a partition being deleted is retried by the client forever.
            await asyncio.wait_for(
                self._consumer.commit(offsets), self._settings.request_timeout_ms / 1000
            )
        except Exception as exc:
            error = translate(exc)
            self._metrics.commits.labels(self.leg.name, "failed").inc()
            self._log.warning("offset commit failed", error=str(error), partitions=len(offsets))
            return False
        self._metrics.commits.labels(self.leg.name, "ok").inc()
        return True

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
            "offset_resets": list(self.offset_resets),
            "partitions": partitions,
        }

    @property
    def seconds_since_poll(self) -> float:
        return time.monotonic() - self.last_poll


def _committed(sender: PartitionSender) -> int | None:
    """The leg's committed offset for a partition: the last commit, else where it started."""
    return sender.tracker.committed if sender.tracker else sender.next_offset
