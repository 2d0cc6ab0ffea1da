"""Resuming from the destination: no record written twice after a crash, rebalance or restart.

Every record a leg writes carries its exact origin (cluster, topic, partition, offset), and per
origin partition the destination holds those records in origin order: the leg's producer keeps
one partition's batches in order, retries a failed batch before the next and never expires one.
So the destination itself says where a (source partition, leg) stands: after the *highest*
record of that origin it holds, provided the records of that origin read back run from the
committed offset (or before it) to it; records past a gap (all above the committed offset: the
ones between reached a destination topic deleted since) are not trusted, and the partition
resumes at its committed offset. When a partition starts on a leg (after a crash, a rebalance or a
restart), the sender reads the destination partition's tail before it sends anything
(:meth:`DestinationTail.last_written`) and continues after that record; the records acknowledged
after the last offset commit are skipped, never sent again. A record is skipped only when the
destination holds a run of records of its origin from the committed offset (or before) to a
later record, which by the order above means the record itself is there.

**Records the leg did not write.** An application may read a copy and publish it again into
the same topic with all its headers (Kafka Streams forwards them), so a record carrying the
origin's provenance is not always the leg's own. The leg's own records of an origin ascend; one
below an earlier record (or below the committed offset) is another writer's, and is never taken
as where the leg stands (counted in ``replicator_resume_ignored_total``). The one exception is a
replay: after the source log was replaced, the leg writes it again from the source log start, and
a run of records that begins there is the truth even below the committed offset
(:func:`resume_after`).

**Bounded reads.** The scan goes backwards from the log end in growing chunks and stops once the
records of the origin it found reach back to the committed offset: while the origin writes,
that is the last chunk or two. It never reads below the *destination mark*: a destination
offset below which every record of the origin before the committed source offset was written
(:class:`~replicator.model.offsets.OffsetTracker` keeps it). The committer saves it after each
source commit, in the destination cluster itself, as the committed offset of the destination
partition in the group ``<leg group>.resume``: a plain offset commit, which every broker keeps
(commit metadata is not kept by all). Saved after
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
destination stopped answering) at a rebalance is the one case left where a batch may land after
the new owner read the tail: that is counted as a possible duplicate (at a stop the producer is
closed before the group is left, so nothing it held can land after a takeover)
(``replicator_duplicates_possible_total{reason="unacknowledged_at_release"}``) and documented.

**Placed by key.** A flow that places records by key (``batching.build_placed``) spreads one
source partition over every destination partition, so no single tail says where it stands. Its
resume reads back each destination partition until a record of the origin below the committed
offset (or the log start) and collects the source offsets at or after it that are there
(:meth:`DestinationTail.written_since`); those records are skipped as they come, every other one
is sent. Exact whatever order the partitions' batches landed in.

**A destination that lost records.** A destination partition whose log ends below the saved mark,
or that holds no record of the origin and no mark although the leg committed offsets
(:func:`destination_lost`: the cluster was rebuilt or restored empty), lost what the leg wrote:
it is replayed from the source log start, counted in ``replicator_records_replayed_total``; the
records the source no longer holds are counted in ``replicator_records_lost_total``. A log that
was rolled back rather than replaced (an unclean leader election, a broker restored from an older
copy: Kafka keeps a log's prefix) still holds every record of the origin up to its last one, and
is replayed from there instead (:func:`rolled_back_to`): nothing it holds is written again.

Where the destination cannot say where the leg stands, duplicates are counted instead: a
destination partition replaced (topic deleted and created again) is replayed from the source log
start, and the records of the origin the new log already held are written again
(``replicator_duplicates_written_total``); records past a gap are repeated
(``replicator_duplicates_possible_total{reason="past_a_gap"}``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokafka import TopicPartition

from replicator import clock
from replicator.errors import ClusterUnavailable
from replicator.kafka.clients import GroupOffsets, answered_at, assign_keeping_topics, track_topics
from replicator.kafka.coalesce import Coalescer, Rounds
from replicator.kafka.internals import kafka_client
from replicator.kafka.roles import LogReader
from replicator.model.provenance import Tagger

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
    highest: int | None = None  # the highest (None: the last one is the highest)
    # Where the last ascending run of the origin's records began (None: the lowest): the
    # leg's own records ascend, so a record below an earlier one starts another writer's run
    # (an application that republished a record with its headers) or a replay.
    run_start: int | None = None
    first: int | None = None  # the first record of the origin in the window read
    ascending: bool = True  # its records of the origin ascend all the way (one run)

    def after(self, older: Tail) -> Tail:
        """This window's answer, with the window just before it (``older``) read too."""
        if older.origin_offset is None:
            return dataclasses.replace(self, scanned=self.scanned + older.scanned)
        if self.origin_offset is None:
            return dataclasses.replace(older, scanned=self.scanned + older.scanned)
        assert self.first is not None and older.lowest is not None and self.lowest is not None
        run_start = self.run_start
        joined = older.origin_offset < self.first
        if self.ascending and joined:
            run_start = older.run_start  # the last run goes on into the older window
        return Tail(
            self.origin_offset,
            self.log_end,
            self.scanned + older.scanned,
            self.seconds + older.seconds,
            self.origin_records + older.origin_records,
            min(self.lowest, older.lowest),
            max(self.highest or self.origin_offset, older.highest or older.origin_offset),
            run_start,
            older.first,
            self.ascending and older.ascending and joined,
        )

    @property
    def foreign(self) -> bool:
        """Whether records of the origin follow a higher one: not all were written in order."""
        return self.highest is not None and self.highest != self.origin_offset


def resume_after(position: int | None, tail: Tail, log_start: int | None = None) -> int | None:
    """Where a starting partition continues, given its position, the destination's tail and
    the source log start (when known).

    After the highest record of its origin the destination holds, when the records read run
    from ``position`` or before it up to it (a higher result: records were acknowledged after
    the commit). At ``position`` when the window holds none, or only records past a gap (their
    origin offsets all above ``position``: the records between are not in the destination, for
    instance they reached a destination topic that was deleted since): those are repeated,
    never skipped.

    The leg writes the records of an origin in ascending order, so a record of the origin below
    an earlier one was not written by the leg in order: an application that read a copy and
    published it again with its headers, or a replay of the source log after it was replaced.
    Only a replay, a run that begins at the source log start, moves a partition back below its
    position (its last record is the truth); anything else below the position is never taken
    as where the leg stands (the committed offset says the destination acknowledged up to it).
    """
    last = tail.origin_offset
    if last is None:
        return position
    if position is not None and (tail.lowest is None or tail.lowest > position):
        return position
    run_start = tail.run_start if tail.run_start is not None else tail.lowest
    replay = log_start is not None and run_start is not None and run_start <= log_start
    if tail.foreign and not replay:
        assert tail.highest is not None
        last = tail.highest
    if position is not None and last + 1 < position and not replay:
        return position
    return last + 1


def destination_lost(tail: Tail, mark: int | None, committed: int | None) -> str | None:
    """Why destination partition ``tail`` holds less of the origin than the leg delivered
    (``None``: nothing says it does); the partition is then replayed from what the source holds.

    - Its log ends below ``mark``, the destination offset the leg's committed records reached:
      the log was replaced or truncated (topic deleted and created again, a broker restored
      without its data).
    - No mark was ever saved, yet the leg committed source offset ``committed`` and the whole
      partition holds no record of the origin: the cluster lost its groups with its data (a
      rebuilt cluster, a lost volume). The leg saves a mark at its first commit of every
      partition, so a partition it committed always has one while the cluster keeps its groups.
    """
    if mark is not None and tail.log_end < mark:
        return (
            f"its log ends at offset {tail.log_end}, below offset {mark} which the records "
            "already committed had reached (its log was replaced or truncated)"
        )
    if mark is None and committed is not None and committed > 0 and tail.origin_offset is None:
        return (
            f"it holds no record of this origin and no mark, while source offsets up to "
            f"{committed} were committed as written there (the cluster lost its data and "
            "groups: rebuilt, or restored empty)"
        )
    return None


class SavedMark(NamedTuple):
    """A destination mark as saved: the destination offset, and the source offset committed
    with it (``None``: not recorded, as by versions that saved none)."""

    offset: int
    covers: int | None


def rolled_back_to(tail: Tail, covers: int | None) -> int | None:
    """Where a destination partition that lost records (:func:`destination_lost`) still holds
    every record of the origin before: the source offset after the last one it holds, when its
    log was rolled back (truncated to an earlier end: an unclean leader election, a restore
    from an older copy) rather than replaced; ``None``: replay from the source log start.

    ``tail`` is read without a floor (the mark is past the log end), and ``covers`` is the
    source offset committed with the mark the log fell below. Every record the leg wrote of
    the origin below the mark comes before ``covers``, and a rolled-back log is a prefix of the
    old one, so it holds an ascending run of the leg's records that ends before ``covers``. A
    replaced log holds only what reached it after its creation: records at or past ``covers``,
    or none; records of another writer (``foreign``) or out of order say nothing either way.
    """
    last = tail.origin_offset
    if last is None or covers is None or tail.foreign or not tail.ascending:
        return None
    return last + 1 if last < covers else None


def marks_group(leg_group: str) -> str:
    """The group, in the destination cluster, whose committed offsets are the leg's marks."""
    return f"{leg_group}.resume"


class DestinationTail:
    """Reads the end of a leg's destination partitions (a consumer of no group), and keeps the
    leg's destination marks (the offsets of the marks group, which nobody joins).

    Many partitions start at once: their questions are asked together. Saved marks come from one
    OffsetFetch and log bounds from one ListOffsets per broker for every partition asking
    (:mod:`replicator.kafka.coalesce`); the windows being read share the reader's fetches
    (:class:`_SharedReads`), so N starting partitions cost a handful of requests per round, not N.
    """

    def __init__(self, consumer: LogReader, timeout: float, marks_group: str) -> None:
        self._consumer = consumer
        self._timeout = timeout
        self._client = kafka_client(consumer)
        self._marks = GroupOffsets(consumer, marks_group)
        self._saved: Coalescer[TopicPartition, tuple[int, str] | None] = Coalescer(
            self._marks.fetch_with_metadata
        )
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

    async def saved_mark(self, tp: TopicPartition, position: int | None = None) -> SavedMark | None:
        """The destination mark last saved for destination partition ``tp``, if any, and if it
        bounds the records of ``position`` on: a mark saved with a later source offset than
        ``position`` (the committed offsets were moved back since) does not, and is not used."""
        saved = await asyncio.wait_for(self._saved.get(tp), self._timeout)
        if saved is None:
            return None
        mark, text = saved
        covers = int(text) if text.isdigit() else None
        if position is not None and covers is not None and position < covers:
            return None
        return SavedMark(mark, covers)

    async def save_marks(
        self, marks: dict[TopicPartition, tuple[int, int]], timeout: float
    ) -> None:
        """Save destination marks (after the source offsets they go with were committed), each
        with the source offset it was saved for (in the commit's metadata)."""
        offsets = {tp: mark for tp, (mark, _) in marks.items()}
        covers = {tp: str(offset) for tp, (_, offset) in marks.items()}
        await asyncio.wait_for(self._marks.commit(offsets, covers), timeout)

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
        began = clock.monotonic()
        log_start, listed_end = await self._bounds.get(tp)
        low = log_start if floor is None else min(max(floor, log_start), listed_end)
        # The first chunk reads up to the high watermark of the fetch answers: the listed end
        # can lag behind it on some brokers.
        upper: int | None = None
        top, chunk = listed_end, _FIRST_CHUNK
        read: Tail | None = None  # what the windows read so far say, newest first
        log_end = listed_end
        while True:
            begin = max(low, top - chunk)
            window = await self._reads.read(tp, origin, begin, upper, collect)
            if upper is None:
                log_end = window.log_end
            read = window if read is None else read.after(window)
            lowest = read.lowest
            whole_run = lowest is not None and (position is None or lowest <= position)
            if (whole_run and not whole) or begin <= low:
                seconds = clock.monotonic() - began
                return dataclasses.replace(read, log_end=log_end, seconds=seconds)
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
    highest: int | None = None
    first: int | None = None
    run_start: int | None = None  # where the last ascending run of the origin's records began
    ascending: bool = True
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
                if self.last is None:
                    self.first = self.run_start = self.highest = offset
                elif offset <= self.last:
                    self.run_start = offset  # not in order after the last: another run begins
                    self.ascending = False
                self.last = offset
                self.highest = max(self.highest or 0, offset)
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
                Tail(
                    self.last,
                    log_end,
                    self.read,
                    0.0,
                    self.counted,
                    self.lowest,
                    self.highest,
                    self.run_start,
                    self.first,
                    self.ascending,
                )
            )
            return True
        return False


class _SharedReads:
    """Every window being read, served by the same fetches of one reader consumer.

    The caller that finds no fetch running makes the next one for every open window (each at its
    own position; the reader's assignment only grows while reads go on, since each new topic in
    it costs a metadata request, and starts afresh after an idle moment); the answer is dealt
    out to the windows, and each finished one answers its caller. The reader's fetch answers
    are bounded (:func:`replicator.kafka.clients.make_reader`), so one round holds at most that many
    bytes.
    """

    def __init__(self, consumer: LogReader) -> None:
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
        now = clock.monotonic()
        for window in windows:
            if not window.started:
                consumer.seek(window.tp, window.progress if window.progress >= 0 else window.begin)
                window.progress, window.progress_at = max(window.progress, window.begin), now
                window.answered_at = answered_at(consumer, window.tp)
                window.started = True
        consumer.resume(*wanted)
        batches = await consumer.getmany(*wanted, timeout_ms=_FETCH_WAIT_MS)
        now = clock.monotonic()
        for window in windows:
            if window.done.done():
                continue
            window.take(batches.get(window.tp, []))
            position = await consumer.position(window.tp)
            end, answered = consumer.highwater(window.tp), answered_at(consumer, window.tp)
            if window.finished(position, end, now, answered):
                consumer.pause(window.tp)
