"""Exact consumer-group position translation between clusters, from provenance.

A group's committed position in a partition of cluster A means nothing in cluster B: each
cluster's copy of a topic interleaves the records of every origin in its own order. But every
replicated record names its origin (:mod:`replicator.model.provenance`), and per origin partition
each cluster holds that origin's records in origin order (the contract's order point). So:

- a position in A says, per origin partition, which prefix of its records the group consumed:
  the **consumed frontier**, the origin offset of the last record of each origin before the
  position (:class:`Frontier`);
- the translated position in B is the **first record of B beyond its origin's frontier**: every
  record before it was consumed in A, and none the group had not consumed is skipped;
- the records B holds at or after that position that lie within their origin's frontier are
  consumed ones the group will read again: the **repeats**, counted exactly.

A record's identity is its provenance when that names a copy of the translated topic (the replica
topic it was published to, the same-named topic of another cluster, or the original of a renamed
copy); any other record, written straight into the topic, is its own origin (cluster alias,
topic, partition, offset), which is also what the provenance of its copies names.

**Every origin of B is known.** An origin that wrote to B's partition only long ago can still hold
records the group never read, so the translation needs, for every origin present in B, its last
record there: the *index* of B's partition (:class:`TargetIndex`). Without a sync point it is built
by reading B's partition once, whole; a **sync point** (the previous checkpoint: an earlier
position in A, its frontier, its translation and B's index at the time) carries it forward, so a
translation from one reads only what B received since, plus, for each origin whose last record in
B was not consumed, a binary search for its first unconsumed record (per origin, B's records are
in origin order, so "every record of the origin before k was consumed" is true up to it and false
after), plus the records between the translated position and the furthest first unconsumed one
(the repeats). A is read from the sync point (whose frontier stands for what is below it), or
from its log start, up to the group's position: the frontier of every origin the group read.

Pure logic over the :class:`PartitionLog` protocol; :class:`KafkaPartitionLog` reads a real
partition. Used by the ``failover`` command and the continuous checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator import clock
from replicator.errors import ClusterUnavailable, ProvenanceError, StaleSyncPoint
from replicator.model.provenance import ORIGIN, Header, decode

Origin = tuple[str, str, int]
"""An origin partition: cluster alias, topic, partition."""


class Entry(NamedTuple):
    """One record of a partition as translation sees it."""

    position: int
    origin: Origin
    offset: int  # in its origin partition


_PROBE_CHUNK = 200
_MAX_CHUNK = 200_000
_STALL_S = 10.0


class Identities:
    """How the records of one partition are identified: the cluster and topic they are in, and
    the topic names whose provenance marks a record as a copy (not new data).

    Every record of a partition read whole goes through :meth:`of`: a provenance's
    ``cluster/topic/partition/`` prefix is parsed once and remembered, only the offset per record.
    """

    __slots__ = ("_copies_of", "_known", "own")

    def __init__(self, cluster: str, topic: str, partition: int, copies_of: frozenset[str]):
        self.own: Origin = (cluster, topic, partition)  # data written straight into it
        self._copies_of = copies_of
        self._known: dict[bytes, Origin | None] = {}  # prefix -> origin (None: not a copy)

    def of(self, headers: Iterable[Header], offset: int) -> tuple[Origin, int]:
        """The record's origin partition and its offset there."""
        for key, raw in headers:
            if key == ORIGIN and raw is not None:
                cut = raw.rfind(b"/")
                prefix, digits = raw[:cut], raw[cut + 1 :]
                if prefix in self._known:
                    origin = self._known[prefix]
                else:
                    origin = self._known[prefix] = self._learn(prefix)
                if origin is not None and _canonical_offset(digits):
                    return origin, int(digits)
                break
        return self.own, offset

    def _learn(self, prefix: bytes) -> Origin | None:
        try:
            found = decode(prefix + b"/0")
        except ProvenanceError:
            return None
        if found.topic not in self._copies_of:
            return None
        return (found.cluster, found.topic, found.partition)


def _canonical_offset(digits: bytes) -> bool:
    """What :func:`~replicator.model.provenance.decode` accepts as an offset: no sign, no leading
    zero, at most 2**63 - 1."""
    if not digits.isdigit() or (len(digits) > 1 and digits[0] == 48):  # 48: b"0"
        return False
    return len(digits) < 19 or (len(digits) == 19 and int(digits) <= 2**63 - 1)


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
        """As JSON: ``[[cluster, topic, partition, offset], ...]``."""
        return [[c, t, p, o] for (c, t, p), o in sorted(self.consumed.items())]

    @classmethod
    def decode(cls, raw: list[list[str | int]]) -> Frontier:
        """The inverse of :meth:`encode`."""
        return cls({(str(c), str(t), int(p)): int(o) for c, t, p, o in raw})


@dataclass(frozen=True, slots=True)
class TargetIndex:
    """What B's partition held below ``end``: the last record of every origin present there."""

    end: int
    last: dict[Origin, Entry] = field(default_factory=dict)

    def encode(self) -> dict[str, object]:
        """As JSON: ``{"end": n, "last": [[cluster, topic, partition, position, offset]]}``."""
        rows = [[c, t, p, e.position, e.offset] for (c, t, p), e in sorted(self.last.items())]
        return {"end": self.end, "last": rows}

    @classmethod
    def decode(cls, raw: dict[str, object]) -> TargetIndex:
        """The inverse of :meth:`encode`."""
        rows = raw["last"]
        assert isinstance(rows, list)
        last = {}
        for c, t, p, at, offset in rows:
            origin = (str(c), str(t), int(p))
            last[origin] = Entry(int(at), origin, int(offset))
        end = raw["end"]
        assert isinstance(end, int)
        return cls(end, last)


@dataclass(frozen=True, slots=True)
class SyncPoint:
    """An earlier translation of the same group and partition: at ``source_offset`` in A the
    group had consumed ``frontier``, translated to ``target_offset`` in B, whose partition then
    held what ``index`` says."""

    source_offset: int
    target_offset: int
    frontier: Frontier
    index: TargetIndex


class ConsumedScan:
    """The consumed frontier of a group at ``position`` in a partition of A: the last record of
    every origin below the position, read from the sync point (or the log start) up to it.

    ``log`` may be ``None`` (the source cannot be read) when ``since`` is at ``position``: the
    sync point's frontier is then the whole answer.
    """

    def __init__(
        self,
        log: PartitionLog | None,
        position: int,
        since: SyncPoint | None = None,
        own: Origin | None = None,
    ) -> None:
        if log is None and (since is None or since.source_offset != position):
            raise ValueError("without the source's log, a sync point at the position is needed")
        self._log = log
        self._position = position
        usable = since is not None and since.source_offset <= position
        self.since = since if usable else None  # a group moved back makes it meaningless
        self._frontier: Frontier | None = None
        self._own = own  # A's own origin: its offsets are positions, consumed below the position
        self.scanned = 0

    def drop_sync_point(self) -> None:
        """Forget the sync point (the target no longer holds what it describes); only before
        :meth:`frontier` was first called. :class:`StaleSyncPoint` without the source's log."""
        assert self._frontier is None
        if self._log is None:
            raise StaleSyncPoint(
                "the target partition was replaced or cut short since the checkpoint"
            )
        self.since = None

    async def frontier(self) -> Frontier:
        if self._frontier is None:
            since = self.since
            consumed = dict(since.frontier.consumed) if since is not None else {}
            if since is None or since.source_offset != self._position:
                assert self._log is not None
                start, end = await self._log.bounds()
                # A position past the log end (the log was cut short): nothing there to read.
                top = min(self._position, end)
                bottom = max(start, since.source_offset) if since is not None else start
                for low, high in _chunks(bottom, top):
                    entries = await self._log.read(low, high)
                    self.scanned += len(entries)
                    for entry in entries:
                        consumed[entry.origin] = entry.offset  # in order: the last one wins
                if self._own is not None and top > 0:
                    # Exact even where retention removed the records: own offsets are positions.
                    consumed[self._own] = max(consumed.get(self._own, -1), top - 1)
            self._frontier = Frontier(consumed)
        return self._frontier


def _chunks(begin: int, end: int) -> Iterator[tuple[int, int]]:
    """``[begin, end)`` in ranges of at most :data:`_MAX_CHUNK` (bounded memory per read)."""
    for low in range(begin, end, _MAX_CHUNK):
        yield low, min(low + _MAX_CHUNK, end)


@dataclass(frozen=True, slots=True)
class Translation:
    """Where a group continues in a partition of B, and what it reads again there."""

    position: int
    repeats: int
    log_end: int
    frontier: Frontier
    index: TargetIndex  # B's partition up to its log end: the next sync point's
    scanned_source: int
    scanned_target: int
    seconds: float
    sync_point_dropped: bool = False  # B no longer holds what the sync point described


async def translate(target: PartitionLog, consumed: ConsumedScan) -> Translation:
    """The position in ``target`` (B) matching the group's position that ``consumed`` reads in A
    (with its sync point, if any: records of B before its target offset were consumed, and its
    index says what B held below its end)."""
    began = clock.monotonic()
    start, end = await target.bounds()
    since = consumed.since
    dropped = since is not None and not await _still_holds(target, since, start, end)
    if dropped:
        consumed.drop_sync_point()
        since = None
    bottom = max(start, since.target_offset) if since is not None else start
    search = _TargetSearch(target, bottom)
    # B's index: every origin present, with its last record (only what B received since the
    # sync point is read; without one, the whole partition).
    last = {o: e for o, e in since.index.last.items() if e.position >= start} if since else {}
    begin = since.index.end if since is not None else start
    for low, high in _chunks(begin, end):
        for entry in await search.read(low, high):
            last[entry.origin] = entry
    frontier = await consumed.frontier()
    first_unconsumed: dict[Origin, int] = {}
    for origin, entry in last.items():
        if entry.position >= bottom and not frontier.holds(origin, entry.offset):
            first_unconsumed[origin] = await search.first_unconsumed(frontier, entry)
    position = min(first_unconsumed.values(), default=end)
    # At and after the position, each origin's consumed records run up to its first unconsumed
    # one (or its last record): the records read again all lie before that.
    reach = max(
        (
            first_unconsumed.get(o, e.position + 1)
            for o, e in last.items()
            if e.position >= position
        ),
        default=position,
    )
    again = await search.read(position, reach)
    repeats = sum(1 for e in again if frontier.holds(e.origin, e.offset))
    return Translation(
        position,
        repeats,
        end,
        frontier,
        TargetIndex(end, last),
        consumed.scanned,
        search.scanned,
        clock.monotonic() - began,
        dropped,
    )


async def _still_holds(target: PartitionLog, since: SyncPoint, start: int, end: int) -> bool:
    """Whether B's partition still holds what the sync point saw: not cut short, and the index's
    highest record is still there, the same (a partition deleted and created again, then grown
    past the old end, fails this)."""
    if since.index.end > end or since.target_offset > since.index.end:
        return False
    if not since.index.last:
        return since.index.end <= start
    anchor = max(since.index.last.values(), key=lambda e: e.position)
    if anchor.position < start:
        return True  # retention removed everything the sync point knew of: nothing to trust
    found = await target.read(anchor.position, anchor.position + 1)
    return found == [anchor]


class _TargetSearch:
    """Reads of B's partition for one translation (counted), never below ``bottom`` (below it,
    every record was consumed)."""

    def __init__(self, target: PartitionLog, bottom: int) -> None:
        self._target = target
        self._bottom = bottom
        self.scanned = 0

    async def read(self, begin: int, end: int) -> list[Entry]:
        entries = await self._target.read(max(begin, self._bottom), end)
        self.scanned += len(entries)
        return entries

    async def last_before(self, origin: Origin, limit: int, floor: int) -> Entry | None:
        """The last record of ``origin`` in ``[floor, limit)`` (read backwards in growing
        chunks), if any."""
        top, chunk = limit, _PROBE_CHUNK
        while top > floor:
            begin = max(floor, top - chunk)
            for entry in reversed(await self.read(begin, top)):
                if entry.origin == origin:
                    return entry
            top, chunk = begin, min(chunk * 4, _MAX_CHUNK)
        return None

    async def first_unconsumed(self, frontier: Frontier, last: Entry) -> int:
        """The position of the first record of ``last``'s origin the group had not consumed,
        given that ``last``, its last record in B, is such a record.

        Binary search on "every record of the origin below k was consumed": true at the bottom,
        false just past ``last``; the answer is the record where it turns false.
        """
        origin = last.origin
        low, high = self._bottom, last.position + 1  # true at low, false at high
        while high - low > 1:
            middle = (low + high) // 2
            found = await self.last_before(origin, middle, low)
            if found is None or frontier.holds(origin, found.offset):
                low = middle  # nothing of the origin in [low, middle), or consumed
            else:
                high = found.position + 1
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
            high = None
            deadline = clock.monotonic() + _STALL_S
            while high is None:  # the high watermark of a fetch answer: the true log end
                await consumer.getmany(tp, timeout_ms=self._FETCH_WAIT_MS, max_records=1)
                high = consumer.highwater(tp)
                if high is None and clock.monotonic() > deadline:
                    raise ClusterUnavailable(f"no fetch answer for {tp.topic}/{tp.partition}")
            consumer.pause(tp)
            self._bounds = (start, max(listed, int(high)))
        return self._bounds

    async def read(self, begin: int, end: int) -> list[Entry]:
        """The records in ``[begin, end)``; :class:`ClusterUnavailable` when the reads stop
        progressing below the log end (a partial answer could make a record look absent)."""
        consumer, tp, identify = self._consumer, self._tp, self._identities.of
        entries: list[Entry] = []
        if begin >= end:
            return entries
        consumer.seek(tp, begin)
        consumer.resume(tp)
        try:
            stalled_at, progress = clock.monotonic(), begin
            while True:
                wanted = max(1, end - await consumer.position(tp))
                batches = await consumer.getmany(
                    tp, timeout_ms=self._FETCH_WAIT_MS, max_records=min(wanted, 50_000)
                )
                for record in batches.get(tp, ()):
                    if record.offset >= end:
                        break
                    origin, offset = identify(record.headers, record.offset)
                    entries.append(Entry(record.offset, origin, offset))
                position = await consumer.position(tp)
                high = consumer.highwater(tp)
                if position >= end or (high is not None and position >= high):
                    return entries
                if position != progress:
                    stalled_at, progress = clock.monotonic(), position
                elif clock.monotonic() - stalled_at > _STALL_S:
                    raise ClusterUnavailable(
                        f"reading {tp.topic}/{tp.partition} made no progress at {position} "
                        f"for {_STALL_S:.0f}s"
                    )
        finally:
            # An assigned consumer keeps fetching in the background: nothing between reads.
            consumer.pause(tp)
