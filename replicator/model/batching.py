"""Destination batches: source records tagged with provenance, packed per destination.

One pass over a partition's fetched records builds the batches of every destination that needs
them: each record is checked for provenance once (the loop rule of ``provenance.py``), tagged
once, and appended to each destination's batch; records that carried provenance are counted per
outcome (loop, derived, malformed) in each target's ``marked``. A destination may need the
records from a later offset than another (its own progress), so each has its own start. Every
batch covers a contiguous range of source offsets, skipped records included, which is what the
offset tracker commits.

A flow told not to preserve partition numbers, writing to a topic with another partition count,
*places* records by key instead (:func:`build_placed`): a record goes to the destination
partition Kafka's producer would choose for its key (murmur2), a keyless one to its source
offset modulo the count (spread, and the same on every attempt, which is what lets a resume
find it). All destination partitions' batches of one chunk share their boundaries, so each
source range is one unit of acknowledgement.

Records fetched by the native path (:mod:`replicator.model.native`) stay bytes: both builds
hand them to the native code, which makes the same batches, decision for decision, byte for
byte; the loops here are its reference. Pure, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka.partitioner import murmur2

from replicator.model import native, provenance
from replicator.model.provenance import Marking, Tagger
from replicator.model.records import Chunk, SourceRecord


@dataclass(slots=True)
class OutboundBatch:
    """A closed destination batch and the source offsets ``[first, end)`` it covers."""

    builder: Any  # aiokafka BatchBuilder; None-free: a batch with count 0 is never sent
    first: int
    end: int
    count: int
    size: int  # key and value bytes of the records in it
    oldest_ms: int  # when its first record was appended to the source (see build)
    # The destination partition (placed by key); ``None``: the source partition's number.
    partition: int | None = None


class BatchMaker(Protocol):
    """Makes a destination's batches (``replicator.kafka.internals.BatchFactory``) of at most
    ``limit`` bytes, compressed with ``codec`` (aiokafka's codec number, 0: none)."""

    limit: int
    codec: int

    def __call__(self) -> Any: ...

    def raw_keys(self) -> Any:
        """A batch that takes header keys kept as their bytes (not UTF-8), which a batch of
        :meth:`__call__` refuses (``TypeError``; its append then added nothing)."""
        ...


@dataclass(slots=True)
class Target:
    """One destination of a build: where its records start and how to make its batches."""

    start: int
    new_batch: BatchMaker
    batches: list[OutboundBatch] = field(default_factory=list)
    marked: Counter[Marking] = field(default_factory=Counter)  # records that carried provenance


_Appended = tuple[int, bytes | None, bytes | None, list[provenance.Header]]
"""What a batch is given of a record: its timestamp, key, value and headers (tagged)."""


@dataclass(slots=True)
class _Open:
    """The open batch of each target of a :func:`build`, as parallel lists indexed like the
    targets (the hot loop reads them as locals)."""

    builders: list[Any]
    appends: list[Any]
    firsts: list[int]
    counts: list[int]
    sizes: list[int]
    oldest: list[int]

    @classmethod
    def of(cls, targets: list[Target]) -> _Open:
        count = len(targets)
        builders = [t.new_batch() for t in targets]
        return cls(
            builders,
            [b.append for b in builders],
            [t.start for t in targets],
            [0] * count,
            [0] * count,
            [0] * count,
        )

    def close(self, i: int, target: Target, at: int) -> None:
        """Close target ``i``'s batch at offset ``at`` (exclusive) into its ``batches``."""
        target.batches.append(
            OutboundBatch(
                self.builders[i],
                self.firsts[i],
                at,
                self.counts[i],
                self.sizes[i],
                self.oldest[i],
            )
        )

    def restart(self, i: int, target: Target, offset: int, raw_keys: bool) -> None:
        """Target ``i``'s batch was full (or refused a header key kept as bytes) at ``offset``:
        close it there and open a new one (one that takes such keys if ``raw_keys``)."""
        if self.firsts[i] < offset:
            self.close(i, target, offset)
        maker = target.new_batch
        self.builders[i] = maker.raw_keys() if raw_keys else maker()
        self.appends[i] = self.builders[i].append
        self.firsts[i], self.counts[i], self.sizes[i] = offset, 0, 0

    def first_append(self, i: int, target: Target, offset: int, record: _Appended) -> None:
        """Append ``record`` to target ``i``'s new batch at ``offset``; a batch that was full
        and does not take its header keys kept as bytes is made again, one that does."""
        timestamp, key, value, tags = record
        try:
            self.appends[i](timestamp=timestamp, key=key, value=value, headers=tags)
        except (TypeError, UnicodeEncodeError):  # full, and then refusing that key
            self.restart(i, target, offset, True)
            self.appends[i](timestamp=timestamp, key=key, value=value, headers=tags)

    def finish(self, targets: list[Target], end: int) -> None:
        """Close every target's batch at ``end`` (a batch that would cover nothing is dropped)."""
        for i, target in enumerate(targets):
            if self.firsts[i] < end:
                self.close(i, target, end)


def _count_mark(targets: list[Target], starts: list[int], mark: Marking, offset: int) -> None:
    """Count a record that carried provenance in each target that gets its offset."""
    for i, target in enumerate(targets):
        if offset >= starts[i]:
            target.marked[mark] += 1


def build(
    records: Chunk,
    end: int,
    tagger: Tagger,
    targets: list[Target],
    fetched_ms: int,
) -> None:
    """Fill each target's ``batches`` with the records at or after its ``start``, up to ``end``.

    Each batch's ``oldest_ms`` (what replication latency is measured from) is its first record's
    log-append time when the source topic uses ``LogAppendTime``; with ``CreateTime`` (the
    producer's clock, which may be any age) it is ``fetched_ms``, when the replicator read it.
    The hot loop of the replicator: no avoidable Python work per record (what happens once per
    batch, or only to records that carried provenance, is in functions of its own).
    """
    if native.is_record_set(records):
        _build_native(records, end, tagger, targets, fetched_ms)
    else:
        assert isinstance(records, Sequence)
        _build_decoded(records, end, tagger, targets, fetched_ms)


def _build_decoded(
    records: Sequence[SourceRecord],
    end: int,
    tagger: Tagger,
    targets: list[Target],
    fetched_ms: int,
) -> None:
    """:func:`build` over decoded records (the reference)."""
    open_ = _Open.of(targets)
    appends, counts, sizes, oldest = open_.appends, open_.counts, open_.sizes, open_.oldest
    starts = [t.start for t in targets]
    low = min(starts)
    aligned = all(s == low for s in starts)
    tag, retag, untagged = tagger.tag, tagger.retag, provenance.untagged
    indices = range(len(targets))
    for record in records:
        offset = record.offset
        if offset < low:
            continue
        headers = record.headers
        if headers and not untagged(headers):
            # Rare: the record carries provenance. The loop rule decides (provenance.py).
            mark, retagged = retag(headers, offset)
            _count_mark(targets, starts, mark, offset)
            if retagged is None:
                continue
            tags = retagged
        else:
            tags = tag(headers, offset)
        key, value, timestamp = record.key, record.value, record.timestamp
        size = (len(key) if key else 0) + (len(value) if value else 0)
        for i in indices:
            if not aligned and offset < starts[i]:
                continue
            try:
                added = appends[i](timestamp=timestamp, key=key, value=value, headers=tags)
                raw_keys = False
            except (TypeError, UnicodeEncodeError):  # a header key kept as bytes (kafka.decoding)
                added, raw_keys = None, True
            if added is None:
                # Full (or refusing that key): close it at this record, carry on in a new one.
                open_.restart(i, targets[i], offset, raw_keys)
                open_.first_append(i, targets[i], offset, (timestamp, key, value, tags))
            if not counts[i]:
                oldest[i] = timestamp if record.timestamp_type else fetched_ms
            counts[i] += 1
            sizes[i] += size
    open_.finish(targets, end)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a partition's records go when placed by key: ``partitions`` destination partitions,
    and the source offsets at or after its position that the destination already holds (found
    by the resume: skipped, never written twice). Immutable: a resume or a rewind makes a new
    one, which the partition holds."""

    partitions: int
    written: frozenset[int] = frozenset()


def place(key: bytes | None, offset: int, partitions: int) -> int:
    """The destination partition of a record: by key as Kafka's producer places it, a keyless
    record by its source offset (spread evenly, and the same on every attempt)."""
    if key is None:
        return offset % partitions
    return (int(murmur2(key)) & 0x7FFFFFFF) % partitions


@dataclass(slots=True)
class Placed:
    """What :func:`build_placed` made of a chunk: batches (consecutive ones with the same range
    form one unit), records that carried provenance, and records the destination already held."""

    batches: list[OutboundBatch] = field(default_factory=list)
    marked: Counter[Marking] = field(default_factory=Counter)
    already_written: int = 0


@dataclass(slots=True)
class _Chunk:
    """The open batches of a :func:`build_placed`, one per destination partition, all from the
    source offset ``first``."""

    result: Placed
    first: int
    new_batch: BatchMaker
    builders: dict[int, Any] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    oldest: dict[int, int] = field(default_factory=dict)

    def open(self, d: int, oldest_ms: int, raw_keys: bool = False) -> Any:
        """A new batch for destination partition ``d`` (one that takes header keys kept as
        bytes if ``raw_keys``)."""
        builder = self.builders[d] = self.new_batch.raw_keys() if raw_keys else self.new_batch()
        self.counts[d] = self.sizes[d] = 0
        self.oldest[d] = oldest_ms
        return builder

    def close(self, at: int) -> None:
        """Close every open batch at ``at`` (one empty batch when none is open)."""
        result, first = self.result, self.first
        if not self.builders:
            result.batches.append(OutboundBatch(None, first, at, 0, 0, 0))
        for d, builder in sorted(self.builders.items()):
            result.batches.append(
                OutboundBatch(
                    builder, first, at, self.counts[d], self.sizes[d], self.oldest[d], partition=d
                )
            )
        self.builders.clear()
        self.counts.clear()
        self.sizes.clear()
        self.oldest.clear()

    def restart(self, d: int, offset: int, oldest_ms: int, raw_keys: bool) -> Any:
        """Destination ``d``'s batch was full (or refused a header key kept as bytes) at
        ``offset``: every destination's batch ends there, and ``d`` has a new one."""
        if self.first < offset:
            self.close(offset)
            self.first = offset
        return self.open(d, oldest_ms, raw_keys)

    def first_append(self, d: int, oldest_ms: int, record: _Appended) -> None:
        """Append ``record`` to destination ``d``'s new batch; a batch that was full and does
        not take its header keys kept as bytes is made again, one that does."""
        timestamp, key, value, tags = record
        try:
            self.builders[d].append(timestamp=timestamp, key=key, value=value, headers=tags)
        except (TypeError, UnicodeEncodeError):  # full, and then refusing that key
            builder = self.open(d, oldest_ms, raw_keys=True)
            builder.append(timestamp=timestamp, key=key, value=value, headers=tags)

    def finish(self, end: int) -> None:
        """Close the chunk at ``end`` (nothing when it would cover nothing)."""
        if self.first < end:
            self.close(end)


def build_placed(
    records: Chunk,
    start: int,
    end: int,
    tagger: Tagger,
    placement: Placement,
    new_batch: BatchMaker,
    fetched_ms: int,
) -> Placed:
    """Batches of the records from ``start`` to ``end``, each to the partition its key gives.

    When one destination's batch is full, every open batch closes at that record, so all of a
    range's batches cover the same source offsets ``[first, end)``; a range with no record to
    write is one empty batch.
    """
    if native.is_record_set(records):
        return _build_placed_native(records, start, end, tagger, placement, new_batch, fetched_ms)
    assert isinstance(records, Sequence)
    result = Placed()
    count, written = placement.partitions, placement.written
    chunk = _Chunk(result, start, new_batch)
    builders, counts, sizes = chunk.builders, chunk.counts, chunk.sizes
    for record in records:
        offset = record.offset
        if offset < start:
            continue
        headers = record.headers
        if headers and not provenance.untagged(headers):
            mark, retagged = tagger.retag(headers, offset)
            result.marked[mark] += 1
            if retagged is None:
                continue
            tags = retagged
        else:
            tags = tagger.tag(headers, offset)
        if offset in written:
            result.already_written += 1
            continue
        key, value, timestamp = record.key, record.value, record.timestamp
        d = place(key, offset, count)
        builder = builders.get(d)
        if builder is None:
            builder = chunk.open(d, timestamp if record.timestamp_type else fetched_ms)
        try:
            added = builder.append(timestamp=timestamp, key=key, value=value, headers=tags)
            raw_keys = False
        except (TypeError, UnicodeEncodeError):  # a header key kept as bytes (kafka.decoding)
            added, raw_keys = None, True
        if added is None:
            oldest_ms = timestamp if record.timestamp_type else fetched_ms
            chunk.restart(d, offset, oldest_ms, raw_keys)
            chunk.first_append(d, oldest_ms, (timestamp, key, value, tags))
        counts[d] += 1
        sizes[d] += (len(key) if key else 0) + (len(value) if value else 0)
    chunk.finish(end)
    return result


# -- the native path: the same builds over records kept as bytes ----------------------------------

_MARKS = (Marking.DERIVED, Marking.LOOP, Marking.MALFORMED)  # the order of the native counts


def _compiled(tagger: Tagger) -> Any:
    """``tagger``'s native form (made once per tagger)."""
    found = tagger.compiled
    if found is None:
        found = tagger.compiled = native.native().Tagger(*tagger.spec())
    return found


def _count(marked: Counter[Marking], counts: tuple[int, int, int]) -> None:
    for mark, count in zip(_MARKS, counts, strict=True):
        if count:
            marked[mark] += count


def _build_native(
    records: native.RecordSet, end: int, tagger: Tagger, targets: list[Target], fetched_ms: int
) -> None:
    specs = [(t.start, t.new_batch.limit, t.new_batch.codec) for t in targets]
    built = native.native().build(
        records, end, _compiled(tagger), specs, fetched_ms, native.compress
    )
    for target, (closed, counts) in zip(targets, built, strict=True):
        target.batches.extend(
            OutboundBatch(batch, first, last, count, size, oldest)
            for batch, first, last, count, size, oldest, _ in closed
        )
        _count(target.marked, counts)


def _build_placed_native(
    records: native.RecordSet,
    start: int,
    end: int,
    tagger: Tagger,
    placement: Placement,
    new_batch: BatchMaker,
    fetched_ms: int,
) -> Placed:
    closed, counts, already_written = native.native().build_placed(
        records,
        start,
        end,
        _compiled(tagger),
        placement.partitions,
        placement.written,
        new_batch.limit,
        new_batch.codec,
        fetched_ms,
        native.compress,
    )
    result = Placed(already_written=already_written)
    result.batches.extend(
        OutboundBatch(batch, first, last, count, size, oldest, partition=d)
        for batch, first, last, count, size, oldest, d in closed
    )
    _count(result.marked, counts)
    return result


def ranges(batches: list[OutboundBatch]) -> list[list[OutboundBatch]]:
    """Consecutive batches covering the same source range, grouped: placed by key, a range has
    one batch per destination partition it touches; otherwise each batch is its own range."""
    groups: list[list[OutboundBatch]] = []
    for batch in batches:
        if groups and (groups[-1][0].first, groups[-1][0].end) == (batch.first, batch.end):
            groups[-1].append(batch)
        else:
            groups.append([batch])
    return groups
