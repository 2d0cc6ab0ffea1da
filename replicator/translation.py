"""Exact consumer-group position translation between clusters, from provenance.

A group's committed position in a partition of cluster A means nothing in cluster B: each
cluster's copy of a topic interleaves the records of every origin in its own order. But every
replicated record names its origin (:mod:`replicator.provenance`), and per origin partition each
cluster holds that origin's records in origin order (the contract's order point). So:

- a position in A says, per origin partition, which prefix of its records the group consumed:
  the **consumed frontier**, the origin offset of the last record of each origin before the
  position (:class:`Frontier`);
- the translated position in B is the **first record of B beyond its origin's frontier**: every
  record before it was consumed in A, and none the group had not consumed is skipped;
- the records B holds at or after that position that lie within their origin's frontier are
  consumed ones the group will read again: the **repeats**, counted exactly (they are the records
  B holds ahead of its first unconsumed one, in B's order).

A record's identity is its provenance when that names a copy of the translated topic (the replica
topic it was published to, the same-named topic of another cluster, or the original of a renamed
copy); any other record, written straight into the topic, is its own origin (cluster alias,
topic, partition, offset), which is also what the provenance of its copies names.

**Bounded reads.** Nothing reads a whole partition in the usual case. The frontier is read
backwards from A's position in growing chunks, only until the last consumed record of each origin
asked for is found (:class:`ConsumedScan`). B is read backwards from its end in growing chunks
until every origin met (and every origin of the frontier) shows a consumed record: by per-origin
order everything before is consumed, so the scan covers B's part the group has not caught up with
plus one chunk. A *sync point* (a checkpoint: an earlier position of A, its frontier and its
translation) bounds both scans from below: records of B before its translation were consumed then
and still are. Without one, an origin consumed in A that B holds no record of (its replication to
B never ran) makes the scan of B read down to B's log start: exact, but a full read.

Pure logic over the :class:`PartitionLog` protocol; :class:`KafkaPartitionLog` reads a real
partition. Used by the ``failover`` command and the continuous checkpoints.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.provenance import ORIGIN, Header, ProvenanceError, decode

Origin = tuple[str, str, int]
"""An origin partition: cluster alias, topic, partition."""

Entry = tuple[int, Origin, int]
"""One record of a partition as translation sees it: position, origin, origin offset."""

_FIRST_CHUNK = 1_000
_PROBE_CHUNK = 200
_MAX_CHUNK = 200_000


@dataclass(frozen=True, slots=True)
class Identities:
    """How the records of one partition are identified: the cluster and topic they are in, and
    the topic names whose provenance marks a record as a copy (not new data)."""

    cluster: str
    topic: str
    partition: int
    copies_of: frozenset[str]

    def of(self, headers: Iterable[Header], offset: int) -> tuple[Origin, int]:
        """The record's origin partition and its offset there."""
        for key, raw in headers:
            if key == ORIGIN and raw is not None:
                try:
                    origin = decode(raw)
                except ProvenanceError:
                    break
                if origin.topic in self.copies_of:
                    return (origin.cluster, origin.topic, origin.partition), origin.offset
                break
        return (self.cluster, self.topic, self.partition), offset


class PartitionLog(Protocol):
    """One partition of one cluster, read as translation needs it."""

    async def bounds(self) -> tuple[int, int]:
        """The log start and log end."""
        ...

    async def read(self, begin: int, end: int) -> list[Entry]:
        """The records at positions ``[begin, end)``, in order."""
        ...


@dataclass(frozen=True, slots=True)
class Frontier:
    """Per origin partition, the origin offset of the last record a group consumed."""

    consumed: dict[Origin, int] = field(default_factory=dict)

    def holds(self, origin: Origin, offset: int) -> bool:
        """Whether the record ``offset`` of ``origin`` was consumed."""
        last = self.consumed.get(origin)
        return last is not None and offset <= last

    def encode(self) -> list[list[str | int]]:
        return [[c, t, p, o] for (c, t, p), o in sorted(self.consumed.items())]

    @classmethod
    def decode(cls, raw: list[list[str | int]]) -> Frontier:
        return cls({(str(c), str(t), int(p)): int(o) for c, t, p, o in raw})


@dataclass(frozen=True, slots=True)
class SyncPoint:
    """An earlier translation of the same group and partition: at ``source_offset`` in A the
    group had consumed ``frontier``, translated to ``target_offset`` in B."""

    source_offset: int
    target_offset: int
    frontier: Frontier


class ConsumedScan:
    """The consumed frontier of a group at ``position`` in a partition of A, read backwards on
    demand: only as far as the origins asked for need (or down to a sync point).

    ``log`` may be ``None`` (the source cannot be read) when ``since`` is at ``position``: the
    sync point's frontier is then the whole answer.
    """

    def __init__(
        self, log: PartitionLog | None, position: int, since: SyncPoint | None = None
    ) -> None:
        if log is None and (since is None or since.source_offset != position):
            raise ValueError("without the source's log, a sync point at the position is needed")
        self._log = log
        self._position = position
        usable = since is not None and since.source_offset <= position
        self.since = since if usable else None  # a group moved back makes it meaningless
        self._found: dict[Origin, int] = {}
        self._low = position  # read down to here
        self._bottom: int | None = None  # the lowest position worth reading
        self._chunk = _FIRST_CHUNK
        self.scanned = 0

    async def frontier(self, origins: Iterable[Origin] = ()) -> Frontier:
        """The frontier, with every origin in ``origins`` resolved (found, or known absent)."""
        wanted = set(origins)
        if self._bottom is None:
            if self.since is not None and self.since.source_offset == self._position:
                self._bottom = self._position  # the sync point is at the position: no read
            else:
                assert self._log is not None
                start, _ = await self._log.bounds()
                floor = self.since.source_offset if self.since is not None else start
                self._bottom = max(start, floor)
                await self._read_back()  # one chunk: the origins the group read last
        while self._low > self._bottom and not wanted <= self._found.keys():
            await self._read_back()
        return self._current()

    def _current(self) -> Frontier:
        consumed = dict(self.since.frontier.consumed) if self.since is not None else {}
        consumed.update(self._found)  # what was read wins over the older sync point
        return Frontier(consumed)

    async def _read_back(self) -> None:
        assert self._bottom is not None
        if self._low <= self._bottom:
            return
        assert self._log is not None
        begin = max(self._bottom, self._low - self._chunk)
        entries = await self._log.read(begin, self._low)
        self.scanned += len(entries)
        for _, origin, offset in reversed(entries):
            self._found.setdefault(origin, offset)  # the last one before the position wins
        self._low, self._chunk = begin, min(self._chunk * 4, _MAX_CHUNK)


@dataclass(frozen=True, slots=True)
class Translation:
    """Where a group continues in a partition of B, and what it reads again there."""

    position: int
    repeats: int
    log_end: int
    frontier: Frontier
    scanned_source: int
    scanned_target: int
    seconds: float


async def translate(target: PartitionLog, consumed: ConsumedScan) -> Translation:
    """The position in ``target`` (B) matching the group's position that ``consumed`` reads in A
    (with its sync point, if any: records of B before its target offset were consumed)."""
    began = time.monotonic()
    since = consumed.since
    start, end = await target.bounds()
    bottom = min(max(start, since.target_offset) if since is not None else start, end)
    search = _TargetSearch(target, consumed, bottom)
    frontier = await consumed.frontier()
    # The tail: back from the end until the last record of every origin met (and of every
    # origin of the frontier) is known; the first unconsumed record of each is then either in
    # the tail already, or found by a binary search below it.
    last: dict[Origin, Entry] = {}
    tail: list[Entry] = []
    top, chunk = end, _FIRST_CHUNK
    while top > bottom and (top == end or not frontier.consumed.keys() <= last.keys()):
        begin = max(bottom, top - chunk)
        entries = await search.read(begin, top)
        for entry in reversed(entries):
            last.setdefault(entry[1], entry)
        if not last.keys() <= frontier.consumed.keys():
            frontier = await consumed.frontier(last.keys())
        tail[:0] = entries
        top, chunk = begin, min(chunk * 4, _MAX_CHUNK)
    unconsumed: dict[Origin, int] = {}  # the first unconsumed record of each origin, if any
    while True:
        for origin, entry in last.items():
            if origin not in unconsumed and not frontier.holds(origin, entry[2]):
                unconsumed[origin] = await search.first_unconsumed(frontier, tail, entry)
        position = min(unconsumed.values(), default=end)
        # Past the position, each origin's consumed records run up to its first unconsumed one
        # (or its last record): the records read again all lie before that.
        reach = max(
            (unconsumed.get(o, e[0] + 1) for o, e in last.items() if e[0] >= position),
            default=position,
        )
        entries = await search.read(position, reach)
        unknown = {o for _, o, _ in entries if o not in last}
        if not unknown:
            break
        # An origin with no record in the tail: its last record lies below it.
        frontier = await consumed.frontier(last.keys() | unknown)
        for origin in unknown:
            found = await search.last_before(origin, end)
            assert found is not None
            last[origin] = found
    repeats = sum(1 for _, origin, offset in entries if frontier.holds(origin, offset))
    return Translation(
        position,
        repeats,
        end,
        frontier,
        consumed.scanned,
        search.scanned,
        time.monotonic() - began,
    )


class _TargetSearch:
    """Reads of the target partition for one translation (counted), above ``bottom``."""

    def __init__(self, target: PartitionLog, consumed: ConsumedScan, bottom: int) -> None:
        self._target = target
        self._bottom = bottom
        self.scanned = 0

    async def read(self, begin: int, end: int) -> list[Entry]:
        entries = await self._target.read(max(begin, self._bottom), end)
        self.scanned += len(entries)
        return entries

    async def last_before(self, origin: Origin, limit: int) -> Entry | None:
        """The last record of ``origin`` below ``limit`` (read backwards in growing chunks)."""
        top, chunk = limit, _PROBE_CHUNK
        while top > self._bottom:
            begin = max(self._bottom, top - chunk)
            for entry in reversed(await self.read(begin, top)):
                if entry[1] == origin:
                    return entry
            top, chunk = begin, min(chunk * 4, _MAX_CHUNK)
        return None

    async def first_unconsumed(self, frontier: Frontier, tail: list[Entry], last: Entry) -> int:
        """The position of the first record of ``last``'s origin the group had not consumed,
        given that ``last``, its last record, is such a record.

        Within the tail when the tail shows one of its consumed records too; else a binary
        search below the tail on "every record of the origin before k was consumed", which per
        origin order is true up to that position and false after it.
        """
        origin = last[1]
        mine = [e for e in tail if e[1] == origin] or [last]
        for earlier, later in itertools.pairwise(mine):
            if frontier.holds(origin, earlier[2]) and not frontier.holds(origin, later[2]):
                return later[0]
        if frontier.holds(origin, mine[0][2]):  # pragma: no cover - the loop found it
            raise AssertionError("the origin's records are out of order")
        low, high = self._bottom, mine[0][0] + 1  # true at low, false at high
        while high - low > 1:
            middle = (low + high) // 2
            found = await self.last_before(origin, middle)
            if found is None or frontier.holds(origin, found[2]):
                low = middle
            else:
                high = found[0] + 1
        return high - 1


class KafkaPartitionLog:
    """A :class:`PartitionLog` over one partition of a cluster, read by a consumer of no group
    (one partition at a time per consumer).

    The log end comes from fetch answers (the high watermark), which some brokers give right
    where their ListOffsets answer does not.
    """

    _FETCH_WAIT_MS = 20

    def __init__(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, identities: Identities
    ) -> None:
        self._consumer = consumer
        self._tp = tp
        self._identities = identities
        self._bounds: tuple[int, int] | None = None

    async def bounds(self) -> tuple[int, int]:
        if self._bounds is None:
            consumer, tp = self._consumer, self._tp
            consumer.assign([tp])
            start = int((await consumer.beginning_offsets([tp]))[tp])
            listed = int((await consumer.end_offsets([tp]))[tp])
            consumer.seek(tp, listed)
            await consumer.getmany(tp, timeout_ms=self._FETCH_WAIT_MS)
            high = consumer.highwater(tp)
            self._bounds = (start, max(listed, int(high) if high is not None else listed))
        return self._bounds

    async def read(self, begin: int, end: int) -> list[Entry]:
        consumer, tp, identify = self._consumer, self._tp, self._identities.of
        entries: list[Entry] = []
        if begin >= end:
            return entries
        consumer.seek(tp, begin)
        stalled_at = time.monotonic()
        progress = begin
        while True:
            wanted = max(1, end - await consumer.position(tp))
            batches = await consumer.getmany(
                tp, timeout_ms=self._FETCH_WAIT_MS, max_records=min(wanted, 50_000)
            )
            for record in batches.get(tp, ()):
                if record.offset >= end:
                    break
                origin, offset = identify(record.headers, record.offset)
                entries.append((record.offset, origin, offset))
            position = await consumer.position(tp)
            if position >= end:
                return entries
            if position != progress:
                stalled_at, progress = time.monotonic(), position
            elif time.monotonic() - stalled_at > 2.0:
                # Offsets that hold no record up to the end (compacted, or a broker's gap).
                return entries
