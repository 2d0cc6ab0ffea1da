"""The states of a source partition on a leg, and what its queue holds.

:class:`Mode` says who feeds a partition (or why nobody does), :class:`Halt` why it halted,
:class:`Fit` what a chunk of the shared feed means for it; :class:`Work` is one entry of its
queue. The transitions between them are :class:`~replicator.replication.partition.LegPartition`'s.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum, StrEnum

from replicator.model.batching import OutboundBatch
from replicator.model.provenance import Marking


class Mode(StrEnum):
    """Who feeds a partition, or why nobody does."""

    STARTING = "starting"
    ATTACHED = "attached"
    ALONE = "fetching_alone"
    REPLAYING = "replaying"
    HALTED = "halted"
    STOPPED = "stopped"


class Halt(StrEnum):
    """Why a partition halted: what ``/status`` shows as its state."""

    BLOCKED = "blocked"  # the destination topic cannot hold it (too few partitions)
    FAILED = "failed"  # the destination refused it for good, or the reset policy is halt


class Fit(Enum):
    """What a chunk ``[start, end)`` of the shared feed means for one partition."""

    JOIN = "join"  # it continues where the partition stands: build its batches from it
    AHEAD = "ahead"  # the partition is further on: nothing in this chunk for it yet
    BEHIND = "behind"  # the feed went past an attached partition: it must fetch alone
    NONE = "none"  # not fed by the shared feed now (starting, halted, stopped, no room)


FED_ALONE = frozenset({Mode.ALONE, Mode.REPLAYING})
OPEN = frozenset({Mode.STARTING, Mode.ATTACHED, Mode.ALONE, Mode.REPLAYING})


def resume_position(committed: int | None, log_start: int | None) -> int | None:
    """Where a newly assigned partition resumes: the leg's committed offset, else the log start.

    A partition this leg never committed starts at the oldest record still held (not offset 0,
    which retention may have deleted long ago: that is no loss to report); ``None`` when neither
    is known (the feed then starts it at the log start itself).
    """
    return committed if committed is not None else log_start


@dataclass(frozen=True, slots=True)
class Work:
    """A queue entry: the batches built for a range of source offsets, as the records entered
    the queue (by the shared feed for every leg at once, or by :meth:`LegPartition.take_chunk`
    and :meth:`LegPartition.take_fetched`, one builder); the sender only sends them."""

    records: int  # what the range holds, for the queue's room
    size: int
    batches: list[OutboundBatch]
    epoch: int
    marked: Counter[Marking] | None = None  # records that carried provenance, by marking
    already_written: int = 0  # placed by key: records a resume found written, skipped
    # The record at ``start`` cannot be decoded: the sender halts the partition there, after
    # everything queued before it (:meth:`LegPartition.undecodable`).
    start: int = 0
    poison: str | None = None
