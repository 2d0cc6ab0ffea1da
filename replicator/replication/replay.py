"""Replaying a source partition into a destination partition that lost what the leg delivered.

A destination topic deleted (and created again, by the replicator or the broker), or a partition
that lost records (truncated, a cluster rebuilt empty: :func:`~replicator.replication.resume.
destination_lost`): what this leg had delivered is gone, so it is delivered again from the
source log start, counted as replayed; what the source no longer holds is counted as lost. A log
rolled back to an earlier end still holds the origin's records before the :class:`Loss`'s
``begin`` (:func:`~replicator.replication.resume.rolled_back_to`): the replay starts there. A
source position past the source log end means the source was replaced too: an offset reset
(:mod:`replicator.replication.offset_reset`), not a replay.

:class:`Replay` decides where the replay starts and rewinds the partition (:meth:`Replay.rewind`);
the sender then prepares the destination again and waits (:func:`saved`) until the rewound
position is committed before sending, so a restart replays too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replicator.kafka.translation import said
from replicator.lifecycle import sleep_unless_stopped
from replicator.replication.partition import LegPartition
from replicator.replication.preparing import Loss
from replicator.replication.sending import LegSending

_SAVE_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Rewound:
    """The partition was rewound: replay from ``start``, said by ``note``."""

    start: int
    note: str


@dataclass(frozen=True, slots=True)
class Halted:
    """The replay cannot be made: halt the partition for ``reason``."""

    reason: str


class Replay:
    """Rewinds one leg's partitions for a replay."""

    __slots__ = ("_sending",)

    def __init__(self, sending: LegSending) -> None:
        self._sending = sending

    async def rewind(self, partition: LegPartition, loss: Loss, log: Any) -> Rewound | Halted:
        """Count the replay and rewind ``partition`` to where it starts (or apply the offset
        reset policy, when the source was replaced too)."""
        sending, cause, begin = self._sending, loss.cause, loss.begin
        leg, target, metrics = sending.leg.name, partition.target_topic, sending.metrics
        metrics.partitions_replaced.labels(leg, target).inc()
        sending.topics.forget(target)
        try:
            log_start = await sending.source.log_start(partition.tp)
        except Exception as exc:
            return Halted(f"{cause}; source log start unknown: {exc!r}")
        tracker = partition.tracker
        reached = tracker.committable if tracker is not None else (partition.position or 0)
        outside = None
        if sending.resets is not None:
            try:
                outside = await sending.source.outside(partition.tp, reached)
            except Exception as exc:  # unknown: replayed as below
                log.warning(
                    "whether the source position is outside the source log is unknown: "
                    "replayed from the source log start",
                    error=said(exc),
                )
        if outside is not None and not outside.below_log_start and sending.resets is not None:
            # The source log was replaced too (the position is past its end): an offset reset,
            # counted and handled by the leg's policy (start again at the log start, or halt).
            log.error(f"{cause}; the source position is past the source log end")
            sending.resets.apply(partition, outside)
            return Rewound(begin, f"{cause}; {outside}")
        # Past the position, records the source no longer holds are the offset reset's. From
        # ``begin``: the destination still holds every record of the origin before it.
        start = max(begin, min(log_start, reached))
        replayed, unreplayable = reached - start, max(0, min(log_start, reached) - begin)
        metrics.records_replayed.labels(leg, target).inc(replayed)
        if unreplayable:
            metrics.records_lost.labels(leg, target).inc(unreplayable)
        log.error(
            f"{cause}: replaying",
            target_topic=target,
            replay_from=start,
            records_replayed=replayed,
            lost_at_most=unreplayable,
        )
        note = f"{cause}; replayed from source offset {start} ({replayed} records)"
        if unreplayable:
            note += f"; the {unreplayable} records before it are no longer in the source"
        partition.rewind(start, note)
        return Rewound(start, note)


async def saved(partition: LegPartition, note: str) -> None:
    """Wait until the rewound position and the replaced log's end (the mark) are saved: a
    restart then replays too, rather than resuming after records that only reached the new log
    because they were in flight when the topic was deleted."""
    partition.report(f"{note}; saving the replay's position before sending")
    while partition.open and (tracker := partition.tracker) is not None:
        if not tracker.needs_commit:
            break
        await sleep_unless_stopped(partition.closed, _SAVE_POLL_S)
    partition.report(note)
