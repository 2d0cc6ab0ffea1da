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
source range is one unit of acknowledgement. Pure, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka.partitioner import murmur2

from replicator.model import provenance
from replicator.model.provenance import Marking, Tagger
from replicator.model.records import SourceRecord


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
    """Makes a destination's batches (``replicator.kafka.internals.BatchFactory``)."""

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


def build(
    records: Sequence[SourceRecord],
    end: int,
    tagger: Tagger,
    targets: list[Target],
    fetched_ms: int,
) -> None:
    """Fill each target's ``batches`` with the records at or after its ``start``, up to ``end``.

    Each batch's ``oldest_ms`` (what replication latency is measured from) is its first record's
    log-append time when the source topic uses ``LogAppendTime``; with ``CreateTime`` (the
    producer's clock, which may be any age) it is ``fetched_ms``, when the replicator read it.
    The hot loop of the replicator: no avoidable Python work per record.
    """
    count = len(targets)
    builders = [t.new_batch() for t in targets]
    appends = [b.append for b in builders]
    starts = [t.start for t in targets]
    firsts = list(starts)
    counts = [0] * count
    sizes = [0] * count
    oldest = [0] * count
    low = min(starts)
    aligned = all(s == low for s in starts)
    tag, retag, untagged = tagger.tag, tagger.retag, provenance.untagged
    indices = range(count)
    for record in records:
        offset = record.offset
        if offset < low:
            continue
        headers = record.headers
        if headers and not untagged(headers):
            # Rare: the record carries provenance. The loop rule decides (provenance.py).
            mark, retagged = retag(headers, offset)
            for i in indices:
                if offset >= starts[i]:
                    targets[i].marked[mark] += 1
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
                if firsts[i] < offset:
                    targets[i].batches.append(
                        OutboundBatch(
                            builders[i], firsts[i], offset, counts[i], sizes[i], oldest[i]
                        )
                    )
                maker = targets[i].new_batch
                builders[i] = maker.raw_keys() if raw_keys else maker()
                appends[i] = builders[i].append
                firsts[i], counts[i], sizes[i] = offset, 0, 0
                appends[i](timestamp=timestamp, key=key, value=value, headers=tags)
            if not counts[i]:
                oldest[i] = timestamp if record.timestamp_type else fetched_ms
            counts[i] += 1
            sizes[i] += size
    for i in indices:
        if firsts[i] < end:
            targets[i].batches.append(
                OutboundBatch(builders[i], firsts[i], end, counts[i], sizes[i], oldest[i])
            )


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


def build_placed(
    records: Sequence[SourceRecord],
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
    result = Placed()
    count, written = placement.partitions, placement.written
    builders: dict[int, Any] = {}
    counts: dict[int, int] = {}
    sizes: dict[int, int] = {}
    oldest: dict[int, int] = {}
    first = start

    def close(at: int) -> None:
        if not builders:
            result.batches.append(OutboundBatch(None, first, at, 0, 0, 0))
        for d, builder in sorted(builders.items()):
            result.batches.append(
                OutboundBatch(builder, first, at, counts[d], sizes[d], oldest[d], partition=d)
            )
        builders.clear()
        counts.clear()
        sizes.clear()
        oldest.clear()

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
            builder = builders[d] = new_batch()
            counts[d] = sizes[d] = 0
            oldest[d] = timestamp if record.timestamp_type else fetched_ms
        try:
            added = builder.append(timestamp=timestamp, key=key, value=value, headers=tags)
            raw_keys = False
        except (TypeError, UnicodeEncodeError):  # a header key kept as bytes (kafka.decoding)
            added, raw_keys = None, True
        if added is None:
            if first < offset:
                close(offset)  # full (or refusing that key): every destination's batch ends here
                first = offset
            builder = builders[d] = new_batch.raw_keys() if raw_keys else new_batch()
            counts[d] = sizes[d] = 0
            oldest[d] = timestamp if record.timestamp_type else fetched_ms
            builder.append(timestamp=timestamp, key=key, value=value, headers=tags)
        counts[d] += 1
        sizes[d] += (len(key) if key else 0) + (len(value) if value else 0)
    if first < end:
        close(end)
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
