"""What every partition sender of one leg shares, made once per leg (:class:`LegSending`), and
the seam to the source log it reads when a destination must be refilled (:class:`SourceLog`).

A sender is one per assigned partition and leg: what is the same for all of them (the leg, its
destination, topics, metrics, dead letters, duplicates, policies) is held once here rather than
in each, and the modules around the sender (:mod:`~replicator.replication.preparing`,
:mod:`~replicator.replication.replay`, :mod:`~replicator.replication.outcomes`,
:mod:`~replicator.replication.oversize`) take it with the partition they act on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import TopicPartition

from replicator.config.topology import Leg
from replicator.kafka.membership import AlwaysOwned
from replicator.kafka.retry import SharedWarnings
from replicator.model.offsets import OutOfRange
from replicator.replication.accounting import Duplicates, Resumptions
from replicator.replication.connections import Ownership
from replicator.replication.destination import DeadLetterSink, Destination, TopicPreparer
from replicator.replication.offset_reset import OffsetResets
from replicator.telemetry.metrics import Metrics


class SourceLog(Protocol):
    """The source partitions' logs, as far as a sender asks (rarely: a resume, a replay)."""

    async def log_start(self, tp: TopicPartition) -> int:
        """The first offset ``tp``'s log still holds."""
        ...

    async def outside(self, tp: TopicPartition, position: int) -> OutOfRange | None:
        """Whether ``position`` is outside ``tp``'s log (``None``: inside)."""
        ...


TAIL_READS_AT_ONCE = 1_000  # a leg's partitions reading their destination's tail together


@dataclass(frozen=True, slots=True)
class LegSending:
    """One leg's senders' shared parts."""

    leg: Leg
    destination: Destination
    topics: TopicPreparer
    metrics: Metrics
    source: SourceLog
    duplicates: Duplicates  # the leg's duplicates it could not prevent (counted once)
    dead_letters: DeadLetterSink | None = None  # None: a record too large halts
    preserve_partitions: bool = True  # else records are placed by key
    resets: OffsetResets | None = None  # a replay past the source log end is an offset reset
    marks_group: str | None = None  # the leg's destination marks' group (named in a denial)
    # Whether a partition's destination may be read yet (no previous owner can still write it).
    ownership: Ownership = field(default_factory=AlwaysOwned)
    # What the leg's partitions found at the destination's tail as they started (said once).
    resumptions: Resumptions = field(default_factory=Resumptions)
    # Its partitions' warnings that the destination cannot be prepared yet: one per 30 s.
    preparing_warnings: SharedWarnings = field(default_factory=SharedWarnings)
    # Its partitions reading their destination's tail at once, at most: the reads of those
    # waiting are asked together once they may (each wave a few requests). Unbounded, 10,002
    # partitions starting on a 2-core machine asked all at once and most timed out (30 s), to
    # be asked again, three or four times, before every partition started (318 s).
    tail_reads: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(TAIL_READS_AT_ONCE)
    )
