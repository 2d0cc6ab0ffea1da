"""Resuming from the destination: no record written twice after a crash, rebalance or restart.

Every record a leg writes carries its exact origin (cluster, topic, partition, offset), and per
origin partition the destination holds those records in origin order: the leg's producer keeps
one partition's batches in order, retries a failed batch before the next and never expires one.
So the destination itself says where a (source partition, leg) stands: after the *last* record
of that origin it holds, provided the records of that origin read back run from the committed
offset (or before it) to that last one; records past a gap (all above the committed offset: the
ones between reached a destination topic deleted since) are not trusted, and the partition
resumes at its committed offset. When a partition starts on a leg (after a crash, a rebalance or a
restart), the sender reads the destination partition's tail before it sends anything
(:meth:`DestinationTail.last_written`) and continues after that record; the records acknowledged
after the last offset commit are skipped, never sent again. A record is skipped only when the
destination holds a run of records of its origin from the committed offset (or before) to a
later record, which by the order above means the record itself is there.

**Bounded reads.** The scan goes backwards from the log end in growing chunks and stops once the
records of the origin it found reach back to the committed offset: while the origin writes,
that is the last chunk or two. It never reads below the *destination mark*: a destination
offset below which every record of the origin before the committed source offset was written
(:class:`~replicator.offsets.OffsetTracker` keeps it). The committer saves it after each source
commit, in the destination cluster itself, as the committed offset of the destination partition
in the group ``<leg group>.resume``: a plain offset commit, which every broker keeps (commit
metadata is not kept by all). Saved after
the source commit, a mark can only be older than the offset, never newer: an older mark means
a longer read, never a missed record. An idle origin's mark is raised to the destination's log
end while nothing is in flight, so records other origins wrote meanwhile are not read again.
Without any mark (the partition's first start) the scan is bounded only by the origin's records
reaching the position (``benchmarks/resume.py`` measures each case).

**Ownership fencing.** Two owners of the same (source partition, leg) never interleave writes:
the group gives a partition to its new owner only after the old owner's rebalance callback
returned, and that callback (``LegRunner.release``) stops the partition and waits for the
batches it handed to the producer; only then does the new owner read the tail. An old owner that
cannot get its in-flight batches acknowledged within ``REPLICATOR_SHUTDOWN_GRACE_MS`` (its
destination stopped answering) is the one case left where a batch may land after the new owner
read the tail: that is counted as a possible duplicate
(``replicator_duplicates_possible_total{reason="unacknowledged_at_release"}``) and documented.

**Placed by key.** A flow that places records by key (``batching.build_placed``) spreads one
source partition over every destination partition, so no single tail says where it stands. Its
resume reads back each destination partition until a record of the origin below the committed
offset (or the log start) and collects the source offsets at or after it that are there
(:meth:`DestinationTail.written_since`); those records are skipped as they come, every other one
is sent. Exact whatever order the partitions' batches landed in.

Where the destination cannot say where the leg stands, duplicates are counted instead: a
destination partition replaced (topic deleted and created again) is replayed from the source log
start, and the records of the origin the new log already held are written again
(``replicator_duplicates_written_total``); records past a gap are repeated
(``replicator_duplicates_possible_total{reason="past_a_gap"}``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.coalesce import Coalescer, Rounds
from replicator.errors import ClusterUnavailable
from replicator.kafka import GroupOffsets, answered_at, assign_keeping_topics, track_topics
from replicator.provenance import Tagger

_FIRST_CHUNK = 1_000
_MAX_CHUNK = 200_000
_FETCH_WAIT_MS = 20
_NO_PROGRESS_S = 2.0


@dataclass(frozen=True, slots=True)
class Tail:
    """What the end of a destination partition says about one origin partition."""

    origin_offset: int | None  # the last record of the origin in the window read, if any
    log_end: int  # the destination partition's log end when it was read
    scanned: int  # records read
    seconds: float
    origin_records: int = 0  # records of the origin in the window read
    lowest: int | None = None  # the lowest origin offset among them


def resume_after(position: int | None, tail: Tail) -> int | None:
    """Where a starting partition continues, given its position and the destination's tail.

    After the last record of its origin the destination holds, when the records read run from
    ``position`` or before it up to that last one (a higher result: records were acknowledged
    after the commit; a lower one: the source log was replaced and replayed after the commit).
    At ``position`` when the window holds none, or only records past a gap (their origin offsets
    all above ``position``: the records between are not in the destination, for instance they
    reached a destination topic that was deleted since): those are repeated, never skipped.
    """
    if tail.origin_offset is None:
        return position
    if position is not None and (tail.lowest is None or tail.lowest > position):
        return position
    return tail.origin_offset + 1


def marks_group(leg_group: str) -> str:
    """The group, in the destination cluster, whose committed offsets are the leg's marks."""
    return f"{leg_group}.resume"


class DestinationTail:
    """Reads the end of a leg's destination partitions (a consumer of no group), and keeps the
    leg's destination marks (the offsets of the marks group, which nobody joins).

    Many partitions start at once: their questions are asked together. Saved marks come from one
    OffsetFetch and log bounds from one ListOffsets per broker for every partition asking
    (:mod:`replicator.coalesce`); the windows being read share the reader's fetches
    (:class:`_SharedReads`), so N starting partitions cost a handful of requests per round, not N.
    """

    def __init__(self, consumer: AIOKafkaConsumer, timeout: float, marks_group: str) -> None:
        self._consumer = consumer
        self._timeout = timeout
        self._client = consumer._client
        self._marks = GroupOffsets(self._client, marks_group)
        self._saved: Coalescer[TopicPartition, int | None] = Coalescer(self._marks.fetch)
        self._bounds: Coalescer[TopicPartition, tuple[int, int]] = Coalescer(self._log_bounds)
        self._reads = _SharedReads(consumer)

    async def last_written(
        self,
        tp: TopicPartition,
        origin: Tagger,
        floor: int | None,
        position: int | None = None,
        whole: bool = False,
    ) -> Tail:
        """The last record of ``origin`` in destination partition ``tp``, at or after ``floor``,
        read back until a record of the origin at or below ``position`` shows the run is whole
        (``whole``: read everything down to ``floor``, counting the origin's records).

        :class:`ClusterUnavailable` if the destination does not answer within the timeout.
        """
        try:
            scan = self._scan(tp, origin, floor, position, whole)
            return await asyncio.wait_for(scan, self._timeout)
        except TimeoutError as exc:
            raise ClusterUnavailable(f"reading the end of {tp.topic}/{tp.partition}") from exc

    async def written_since(
        self, tp: TopicPartition, origin: Tagger, position: int
    ) -> tuple[set[int], Tail]:
        """The source offsets at or after ``position`` of ``origin``'s records in destination
        partition ``tp``, read back until a record of the origin below ``position`` (or the log
        start)."""
        found: set[int] = set()
        try:
            # Whole once a record of the origin at or below position - 1 is found.
            scan = self._scan(tp, origin, None, position - 1, False, (found, position))
            tail = await asyncio.wait_for(scan, self._timeout)
        except TimeoutError as exc:
            raise ClusterUnavailable(f"reading the end of {tp.topic}/{tp.partition}") from exc
        return found, tail

    async def saved_mark(self, tp: TopicPartition) -> int | None:
        """The destination mark last saved for destination partition ``tp``, if any."""
        return await asyncio.wait_for(self._saved.get(tp), self._timeout)

    async def save_marks(self, marks: dict[TopicPartition, int], timeout: float) -> None:
        """Save destination marks (after the source offsets they go with were committed)."""
        await asyncio.wait_for(self._marks.commit(marks), timeout)

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Log-end offsets as the broker lists them (a lower bound on some brokers, which is all
        a destination mark needs)."""
        await track_topics(self._client, {tp.topic for tp in partitions})
        ends = await asyncio.wait_for(self._consumer.end_offsets(partitions), self._timeout)
        return {tp: int(end) for tp, end in ends.items()}

    async def _log_bounds(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Any]:
        """Log start and listed end of each partition: one ListOffsets per broker for each."""
        await track_topics(self._client, {tp.topic for tp in partitions})
        starts = await self._consumer.beginning_offsets(partitions)
        ends = await self._consumer.end_offsets(partitions)
        return {tp: (int(starts[tp]), int(ends[tp])) for tp in partitions}

    async def _scan(
        self,
        tp: TopicPartition,
        origin: Tagger,
        floor: int | None,
        position: int | None,
        whole: bool,
        collect: tuple[set[int], int] | None = None,
    ) -> Tail:
        began = time.monotonic()
        log_start, listed_end = await self._bounds.get(tp)
        low = log_start if floor is None else min(max(floor, log_start), listed_end)
        # The first chunk reads up to the high watermark of the fetch answers: the listed end
        # can lag behind it on some brokers.
        upper: int | None = None
        top, chunk = listed_end, _FIRST_CHUNK
        last: int | None = None
        lowest: int | None = None
        log_end, scanned, counted = listed_end, 0, 0
        while True:
            begin = max(low, top - chunk)
            window = await self._reads.read(tp, origin, begin, upper, collect)
            scanned += window.scanned
            counted += window.origin_records
            if upper is None:
                log_end = window.log_end
            if last is None:
                last = window.origin_offset  # the later window's last record wins
            if window.lowest is not None:
                lowest = window.lowest if lowest is None else min(lowest, window.lowest)
            whole_run = lowest is not None and (position is None or lowest <= position)
            if (whole_run and not whole) or begin <= low:
                seconds = time.monotonic() - began
                return Tail(last, log_end, scanned, seconds, counted, lowest)
            upper, top, chunk = begin, begin, min(chunk * 4, _MAX_CHUNK)


@dataclass(slots=True)
class _Window:
    """One partition's range ``[begin, upper)`` being read (``upper=None``: to the log end seen
    in the fetch answers); with ``collect`` (a set, a threshold), the origin offsets at or above
    the threshold are added to the set."""

    tp: TopicPartition
    origin: Tagger
    begin: int
    upper: int | None
    collect: tuple[set[int], int] | None
    done: asyncio.Future[Tail]
    started: bool = False
    last: int | None = None
    lowest: int | None = None
    read: int = 0
    counted: int = 0
    progress: int = -1
    progress_at: float = 0.0
    # When the reader last had a fetch answer for the partition as this window began: the high
    # watermark is trusted only from a later answer (an earlier window's may be stale).
    answered_at: int | None = None

    def take(self, records: list[Any]) -> None:
        for record in records:
            if record.offset < self.begin:
                continue
            if self.upper is not None and record.offset >= self.upper:
                break
            self.read += 1
            offset = self.origin.origin_offset(record.headers)
            if offset is not None:
                self.last = offset
                self.lowest = offset if self.lowest is None else min(self.lowest, offset)
                self.counted += 1
                if self.collect is not None and offset >= self.collect[1]:
                    self.collect[0].add(offset)

    def finished(
        self, position: int, end: int | None, now: float, answered_at: int | None = None
    ) -> bool:
        """Whether the window is read, given the reader's position and the high watermark.

        Offsets that hold no record up to the end (a gap some brokers leave where writes to a
        deleted topic were acknowledged) never answer: read as empty. Missing a record of the
        origin here can only make the resume start earlier (a repeat, never a loss).
        """
        if position != self.progress:
            self.progress, self.progress_at = position, now
        if answered_at is None or answered_at == self.answered_at:
            end = None  # no answer since the window began: its log end is not known yet
        stop_at = self.upper if self.upper is not None else end
        stuck = end is not None and now - self.progress_at > _NO_PROGRESS_S
        if (stop_at is not None and position >= stop_at) or stuck:
            log_end = end if end is not None else position
            self.done.set_result(
                Tail(self.last, log_end, self.read, 0.0, self.counted, self.lowest)
            )
            return True
        return False


class _SharedReads:
    """Every window being read, served by the same fetches of one reader consumer.

    The caller that finds no fetch running makes the next one for every open window (each at its
    own position; the reader's assignment only grows while reads go on, since each new topic in
    it costs a metadata request, and starts afresh after an idle moment); the answer is dealt
    out to the windows, and each finished one answers its caller. The reader's fetch answers
    are bounded (:func:`replicator.kafka.make_reader`), so one round holds at most that many
    bytes.
    """

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer
        self._open: dict[TopicPartition, _Window] = {}
        self._partition_locks: dict[TopicPartition, asyncio.Lock] = {}
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._open_before = False  # reads went on since the last idle moment
        self._rounds = Rounds()

    async def read(
        self,
        tp: TopicPartition,
        origin: Tagger,
        begin: int,
        upper: int | None,
        collect: tuple[set[int], int] | None,
    ) -> Tail:
        # Two windows of one partition cannot share the reader's one position (partitions
        # placed by key read the same destination partitions): they take turns.
        async with self._partition_locks.setdefault(tp, asyncio.Lock()):
            future: asyncio.Future[Tail] = asyncio.get_running_loop().create_future()
            window = _Window(tp, origin, begin, upper, collect, future)
            self._open[tp] = window
            try:
                await self._rounds.until(future, self._fetch, lambda: len(self._open))
                return future.result()
            finally:
                del self._open[tp]
                if not self._open:
                    # An assigned consumer keeps fetching in the background: read nothing
                    # between scans (a partition may be deleted meanwhile).
                    self._consumer.pause(*self._assigned)
                    self._open_before = False

    async def _fetch(self) -> None:
        consumer = self._consumer
        windows = [w for w in self._open.values() if not w.done.done()]
        wanted = frozenset(w.tp for w in windows)
        if not wanted <= self._assigned:
            # Assigned anew only to add partitions (each new topic costs a metadata request):
            # while reads go on the assignment grows, and starts afresh after an idle moment.
            assigned = wanted | self._assigned if self._open_before else wanted
            # Forgets every position (each is set below); the metadata keeps every topic.
            assign_keeping_topics(consumer, assigned)
            self._assigned = assigned
            for tp in assigned - wanted:
                consumer.seek(tp, 0)  # a position keeps a paused partition quiet
            consumer.pause(*(assigned - wanted))
            for window in windows:
                window.started = False
        self._open_before = True
        now = time.monotonic()
        for window in windows:
            if not window.started:
                consumer.seek(window.tp, window.progress if window.progress >= 0 else window.begin)
                window.progress, window.progress_at = max(window.progress, window.begin), now
                window.answered_at = answered_at(consumer, window.tp)
                window.started = True
        consumer.resume(*wanted)
        batches = await consumer.getmany(*wanted, timeout_ms=_FETCH_WAIT_MS)
        now = time.monotonic()
        for window in windows:
            if window.done.done():
                continue
            window.take(batches.get(window.tp, []))
            position = await consumer.position(window.tp)
            end, answered = consumer.highwater(window.tp), answered_at(consumer, window.tp)
            if window.finished(position, end, now, answered):
                consumer.pause(window.tp)
