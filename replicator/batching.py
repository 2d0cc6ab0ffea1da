"""Destination batches: source records tagged with provenance, packed per destination.

One pass over a partition's fetched records builds the batches of every destination that needs
them: each record is checked for provenance once (the loop rule of ``provenance.py``), tagged
once, and appended to each destination's batch; records that carried provenance are counted per
outcome (loop, derived, malformed) in each target's ``marked``. A destination may need the
records from a later offset than another (its own progress), so each has its own start. Every
batch covers a contiguous range of source offsets, skipped records included, which is what the
offset tracker commits. Pure, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from replicator import provenance
from replicator.provenance import Marking, Tagger
from replicator.records import SourceRecord


@dataclass(slots=True)
class OutboundBatch:
    """A closed destination batch and the source offsets ``[first, end)`` it covers."""

    builder: Any  # aiokafka BatchBuilder; None-free: a batch with count 0 is never sent
    first: int
    end: int
    count: int
    size: int  # key and value bytes of the records in it
    oldest_ms: int  # when its first record was appended to the source (see build)


@dataclass(slots=True)
class Target:
    """One destination of a build: where its records start and how to make its batches."""

    start: int
    new_batch: Callable[[], Any]
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
            if appends[i](timestamp=timestamp, key=key, value=value, headers=tags) is None:
                # Full: close it at this record and carry on in a new one.
                targets[i].batches.append(
                    OutboundBatch(builders[i], firsts[i], offset, counts[i], sizes[i], oldest[i])
                )
                builders[i] = targets[i].new_batch()
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
