"""In-memory stand-ins for the Kafka boundary's seams, shipped with the product so that its tests
(and anyone embedding a fetch loop) can drive them without a broker.

:class:`MemorySource` is a :class:`~replicator.kafka.fetching.FetchSource` over source partitions
held in memory: each a log of records (offsets increasing, gaps allowed, as compaction leaves
them) between a log start and a log end. It answers as a consumer does:

- Every assigned partition starts paused, at no position (as a leg leaves the partitions it
  assigns); a fetch reads the resumed ones from their positions, at most ``per_fetch`` records
  of each, and waits up to its timeout (on the event loop's clock) when none has anything (a
  partition resumed while it waits is read too).
- A fetch that reaches the last record moves the position to the log end: offsets past the last
  record up to the end are records the client never hands over (:meth:`MemorySource.markers`:
  transaction markers, aborted records).
- A position below the log start or past the log end is reported in :attr:`Fetched.out_of_range`
  by a fetch that has no records to hand over (records first, as aiokafka does).
- A record scripted undecodable (:meth:`MemorySource.poison`) stops its partition's fetches
  there: the records before it are handed over, the position stays on it, and each fetch that
  reaches it notes it for :meth:`MemorySource.poisoned`.
- Failures are scripted per call (:meth:`MemorySource.fail`, :meth:`MemorySource.fail_bounds`),
  in the product's terms (:mod:`replicator.errors`).

What a loop asked is kept for the tests' oracles: each fetch's partitions and positions
(:attr:`MemorySource.asked`), and each fetch wait set (:attr:`MemorySource.waits`, with the loop
time it was set at).

:class:`MemoryGroupSource` is a :class:`~replicator.kafka.fetching.GroupSource` over the same
logs: a group member that holds nothing until a test rebalances it
(:meth:`MemoryGroupSource.rebalance`): the partitions held are revoked, then the new ones
assigned (by default every partition of a topic the subscribed pattern matches), each at no
position and not paused, as aiokafka hands them to its listener; the callbacks are awaited in
turn. A fetch response tells each partition it read of its log end and when it came.

:class:`IdleFetcher` is aiokafka's own fetcher, its loop running, over a client with no broker
that answers each fetch after the fetch wait with nothing new (as a broker answers idle
partitions in a fetch session): what the loop costs per wake and when idle, with or without
the :mod:`~replicator.kafka.fetch_planner` (``benchmarks.fetch_planning``).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.protocol.metadata import MetadataResponse_v1

from replicator import clock
from replicator.errors import ReplicatorError
from replicator.kafka import internals
from replicator.kafka.clients import FETCHER_IDLE_WAKE_MS
from replicator.kafka.decoding import Poison
from replicator.kafka.fetch_planner import FetchPlanner, install_planner
from replicator.kafka.fetch_sessions import by_topic
from replicator.kafka.fetching import Fetched, Partitions
from replicator.model.offsets import OutOfRange, out_of_range
from replicator.model.records import Chunk, SourceRecord


class MemorySource:
    """Source partitions in memory, read as a consumer reads them (see the module docstring)."""

    def __init__(
        self,
        logs: Mapping[TopicPartition, Sequence[SourceRecord]] | None = None,
        per_fetch: int = 100,
    ) -> None:
        """``logs``: each partition's records (assigned, paused); ``per_fetch``: the most
        records one fetch hands over of a partition."""
        self.per_fetch = per_fetch
        self._logs: dict[TopicPartition, list[SourceRecord]] = {}
        self._starts: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int] = {}
        self._assigned: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self._poisons: dict[TopicPartition, tuple[int, str]] = {}
        self._noted: list[Poison] = []
        self._failures: deque[ReplicatorError] = deque()
        self._bounds_failures: deque[ReplicatorError] = deque()
        self._arrived = asyncio.Event()
        self._gate = asyncio.Event()
        self._gate.set()
        self.holding = 0  # fetches waiting at the gate (hold())
        self.asked: list[dict[TopicPartition, int]] = []  # per fetch: the positions it read
        self.waits: list[tuple[float, int]] = []  # (loop time, wait ms) per set_wait()
        # What the last fetch response told of each partition: (log end, when: ms, increasing).
        self._answers: dict[TopicPartition, tuple[int, int]] = {}
        self._answered_ms = 0
        for tp, records in (logs or {}).items():
            self.append(tp, records)
        self.assign(self._logs)

    # -- the logs -------------------------------------------------------------------------------

    def append(self, tp: TopicPartition, records: Iterable[SourceRecord]) -> None:
        """Append ``records`` to ``tp``'s log (offsets increasing, from its log end)."""
        log = self._logs.setdefault(tp, [])
        for record in records:
            if record.offset < self.log_end(tp):
                raise ValueError(f"offset {record.offset} is below {tp}'s log end")
            log.append(record)
            self._ends[tp] = record.offset + 1
        self._arrived.set()

    def markers(self, tp: TopicPartition, count: int = 1) -> None:
        """Append ``count`` offsets the client never hands over (transaction markers)."""
        self._ends[tp] = self.log_end(tp) + count
        self._arrived.set()

    def delete_before(self, tp: TopicPartition, offset: int) -> None:
        """Retention: ``tp``'s log starts at ``offset``, the records before it are gone."""
        self._logs[tp] = [r for r in self._logs.get(tp, []) if r.offset >= offset]
        self._starts[tp] = offset
        self._ends[tp] = max(self.log_end(tp), offset)

    def replace(self, tp: TopicPartition, records: Sequence[SourceRecord]) -> None:
        """The topic deleted and created again: ``tp``'s log is ``records`` alone."""
        self._logs[tp] = []
        self._starts[tp] = records[0].offset if records else 0
        self._ends[tp] = self._starts[tp]
        self.append(tp, records)

    def log_start(self, tp: TopicPartition) -> int:
        return self._starts.get(tp, 0)

    def log_end(self, tp: TopicPartition) -> int:
        return self._ends.get(tp, self.log_start(tp))

    # -- scripts --------------------------------------------------------------------------------

    def poison(self, tp: TopicPartition, offset: int, error: str = "undecodable") -> None:
        """The record at ``offset`` of ``tp`` cannot be decoded (``error`` says why)."""
        self._poisons[tp] = (offset, error)

    def fail(self, *errors: ReplicatorError) -> None:
        """The next fetches fail with ``errors``, one each, in order."""
        self._failures.extend(errors)

    def fail_bounds(self, *errors: ReplicatorError) -> None:
        """The next reads of log bounds fail with ``errors``, one each, in order."""
        self._bounds_failures.extend(errors)

    def hold(self) -> None:
        """Hold each fetch, once asked and before it reads, until :meth:`release`."""
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Assign exactly ``partitions``, each paused, at no position."""
        self._assigned = set(partitions)
        self._paused = set(self._assigned)
        self._positions = {}
        self._answers = {}

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def position(self, tp: TopicPartition) -> int | None:
        """Where ``tp`` is fetched next (``None``: never sought)."""
        return self._positions.get(tp)

    def fetches_of(self, tp: TopicPartition) -> list[int]:
        """The positions ``tp`` was fetched from, one per fetch that read it."""
        return [asked[tp] for asked in self.asked if tp in asked]

    # -- FetchSource ----------------------------------------------------------------------------

    async def fetch(self, timeout_ms: int) -> Fetched:
        await asyncio.sleep(0)  # a fetch always lets the loop run, even with records at hand
        if not self._gate.is_set():
            self.holding += 1
            try:
                await self._gate.wait()
            finally:
                self.holding -= 1
        if self._failures:
            raise self._failures.popleft()
        self._arrived.clear()
        asked = self._asking()
        fetched, moved = self._read(asked)
        if not (fetched.records or fetched.out_of_range or moved):
            try:  # nothing yet: wait for records, as a consumer's fetch does
                await asyncio.wait_for(self._arrived.wait(), timeout_ms / 1000)
            except TimeoutError:
                pass
            else:
                asked = self._asking()
                fetched = self._read(asked)[0]
        self.asked.append(asked)
        return fetched

    def assignment(self) -> Set[TopicPartition]:
        return frozenset(self._assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_assigned(tp)
        self._positions[tp] = offset

    def pause(self, tp: TopicPartition) -> None:
        self._check_assigned(tp)
        self._paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self._check_assigned(tp)
        if tp in self._paused:
            self._paused.discard(tp)
            self._arrived.set()  # a fetch waiting for records reads it too, as a consumer's does

    def position_after(self, tp: TopicPartition) -> int | None:
        return self._positions.get(tp) if tp in self._assigned else None

    def poisoned(self) -> list[Poison]:
        noted, self._noted = self._noted, []
        return noted

    def set_wait(self, wait_ms: int) -> None:
        self.waits.append((clock.monotonic(), wait_ms))

    async def bounds(self, tp: TopicPartition, position: int) -> OutOfRange | None:
        if self._bounds_failures:
            raise self._bounds_failures.popleft()
        return out_of_range(position, self.log_start(tp), self.log_end(tp))

    # -- internals ------------------------------------------------------------------------------

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._assigned:
            raise LookupError(f"{tp} is not assigned")

    def _asking(self) -> dict[TopicPartition, int]:
        """What a fetch reads now: each assigned, resumed partition with a position, from it."""
        resumed = sorted(self._assigned - self._paused)
        return {tp: at for tp in resumed if (at := self._positions.get(tp)) is not None}

    def _read(self, asked: Mapping[TopicPartition, int]) -> tuple[Fetched, bool]:
        """One read of each partition in ``asked`` from its position; whether one moved."""
        records: dict[TopicPartition, Chunk] = {}
        outside: dict[TopicPartition, int] = {}
        moved = False
        self._answered_ms = max(self._answered_ms + 1, int(clock.monotonic() * 1000))
        for tp, position in asked.items():
            self._answers[tp] = (self.log_end(tp), self._answered_ms)
            if out_of_range(position, self.log_start(tp), self.log_end(tp)) is not None:
                outside[tp] = position
                continue
            taken = self._take(tp, position)
            if taken:
                records[tp] = taken
            moved = moved or self._positions[tp] != position
        if records:
            return Fetched(records), moved
        return Fetched(out_of_range=outside), moved

    def _take(self, tp: TopicPartition, position: int) -> list[SourceRecord]:
        """The records of ``tp`` one fetch hands over from ``position``; the position moved."""
        following = [r for r in self._logs.get(tp, []) if r.offset >= position]
        poison = self._poisons.get(tp)
        if poison is not None and not position <= poison[0] < self.log_end(tp):
            poison = None  # behind the position, or not in the log
        if poison is not None:
            following = [r for r in following if r.offset < poison[0]]
        taken = following[: self.per_fetch]
        if len(following) > self.per_fetch:
            self._positions[tp] = taken[-1].offset + 1
        elif poison is not None:
            self._positions[tp] = poison[0]  # stopped at it: noted, the position stays on it
            self._noted.append(Poison(tp, *poison))
        else:
            self._positions[tp] = self.log_end(tp)  # past the markers after the last record
        return taken


class MemoryGroupSource(MemorySource):
    """Source partitions in memory, read as the shared feed's group consumer reads them (see the
    module docstring); every log is a partition of the cluster, none assigned until a
    rebalance."""

    def __init__(
        self,
        logs: Mapping[TopicPartition, Sequence[SourceRecord]] | None = None,
        per_fetch: int = 100,
    ) -> None:
        super().__init__(logs, per_fetch)
        self.assign(())
        self.subscriptions: list[str] = []  # each pattern subscribed to, in order
        self.listings: list[float | None] = []  # each listing of the topics: its ``within_s``
        self.closed = False
        self._listeners: tuple[Partitions, Partitions] | None = None
        self._metadata_listeners: list[Callable[[], None]] = []

    @property
    def subscribed(self) -> bool:
        return self._listeners is not None

    async def rebalance(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Revoke the partitions held, then assign ``partitions`` (by default every partition
        of a topic the pattern matches), awaiting the listener's callbacks in turn."""
        assert self._listeners is not None, "not subscribed"
        assigned, revoked = self._listeners
        await revoked(sorted(self._assigned))
        if partitions is None:
            pattern = self.subscriptions[-1]
            partitions = [tp for tp in self._logs if re.fullmatch(pattern, tp.topic)]
        self._assigned = set(partitions)
        self._paused = set()
        self._positions = {}
        self._answers = {}
        await assigned(sorted(self._assigned))

    def refresh_metadata(self) -> None:
        """The consumer's metadata was refreshed: its listeners are told."""
        for listener in self._metadata_listeners:
            listener()

    # -- GroupSource ----------------------------------------------------------------------------

    def subscribe(self, pattern: str, assigned: Partitions, revoked: Partitions) -> None:
        self.subscriptions.append(pattern)
        self._listeners = (assigned, revoked)

    async def topics(self, within_s: float | None) -> set[str]:
        self.listings.append(within_s)
        return {tp.topic for tp in self._logs}

    def pace_metadata(self, every_s: float) -> float:
        return every_s

    def on_metadata(self, listener: Callable[[], None]) -> None:
        self._metadata_listeners.append(listener)

    async def seek_to_log_start(self, tp: TopicPartition) -> int:
        self.seek(tp, self.log_start(tp))
        return self.log_start(tp)

    async def seek_to_log_end(self, tp: TopicPartition) -> int:
        self.seek(tp, self.log_end(tp))
        return self.log_end(tp)

    def log_end_seen(self, tp: TopicPartition) -> int | None:
        answer = self._answers.get(tp)
        return None if answer is None else answer[0]

    def answered_at(self, tp: TopicPartition) -> int | None:
        answer = self._answers.get(tp)
        return None if answer is None else answer[1]

    def fetch_sessions(self) -> dict[str, int] | None:
        return None  # every fetch names every partition

    async def close(self) -> None:
        self.closed = True


class _IdleAnswer:
    """A fetch answer naming no partition."""

    topics: list[Any] = []
    API_VERSION = 11


class IdleFetcher:
    """aiokafka's fetcher (as :func:`~replicator.kafka.clients.make_consumer` configures it)
    over ``partitions`` partitions of topics of 100, led in turn by ``nodes`` nodes, each at
    offset 0, all but ``unpaused`` of them paused; its client answers every fetch after
    ``wait_ms`` with nothing new. ``planned``: the fetch planner decides its wakes."""

    def __init__(
        self, partitions: int, unpaused: int, wait_ms: int, planned: bool, nodes: int = 3
    ) -> None:
        self.partitions, self.unpaused, self.wait_ms = partitions, unpaused, wait_ms
        self.planned, self.nodes = planned, nodes
        self.fetches = 0
        self.parts: internals.FetcherParts | None = None
        self.planner: FetchPlanner | None = None

    async def start(self) -> None:
        nodes = self.nodes
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")  # never connected
        client.send = self._answer
        tps = [TopicPartition(f"t{n // 100}", n % 100) for n in range(self.partitions)]
        listed = [
            (0, topic, False, [(0, p, p % nodes, [p % nodes], [p % nodes]) for p in partitions])
            for topic, partitions in by_topic(tps)
        ]
        brokers = [(node, "127.0.0.1", 9, None) for node in range(nodes)]
        client.cluster.update_metadata(MetadataResponse_v1(brokers, 0, listed))
        subscription = SubscriptionState()
        fetcher = Fetcher(
            client,
            subscription,
            fetch_max_wait_ms=self.wait_ms,
            fetcher_timeout=FETCHER_IDLE_WAKE_MS / 1000,
            auto_offset_reset="none",
            isolation_level="read_committed",
        )
        self.parts = parts = internals.fetcher_parts_of(fetcher, subscription)
        subscription.assign_from_user(tps)
        if self.planned:
            self.planner = install_planner(parts)
        for n, tp in enumerate(tps):
            subscription.seek(tp, 0)
            if n >= self.unpaused:
                subscription.pause(tp)

    async def _answer(self, node: int, request: Any) -> _IdleAnswer:
        self.fetches += 1
        await asyncio.sleep(self.wait_ms / 1000)
        return _IdleAnswer()

    async def wake(self) -> None:
        """One wake's decisions and the wait on its futures, as the fetcher's loop makes them
        (its requests not sent)."""
        assert self.parts is not None
        assignment = self.parts.subscription.subscription.assignment
        if self.planner is not None:
            actions = self.planner.plan(assignment)
        else:
            actions = internals.aiokafka_actions(self.parts, assignment)
        woken = asyncio.get_running_loop().create_future()
        await asyncio.wait({woken, *actions[4]}, timeout=0)

    async def close(self) -> None:
        if self.parts is not None:
            await self.parts.fetcher.close()
