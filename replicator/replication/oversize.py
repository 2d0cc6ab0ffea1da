"""The oversize policy: a record larger than the destination topic accepts.

Batches are built to the destination topic's ``max.message.bytes``; a single record larger than
that cannot be sent at all. ``REPLICATOR_RECORD_TOO_LARGE_POLICY`` decides: ``halt`` the partition
on that leg (nothing past the record is committed), or park the record in the local dead-letter
topic (:mod:`replicator.replication.dead_letters`) and go on, counted in
``replicator_records_dead_lettered_total`` and noted on the partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replicator.errors import ReplicatorError
from replicator.kafka.producer import batch_records
from replicator.kafka.retry import Backoff, retrying
from replicator.model.batching import OutboundBatch
from replicator.replication.partition import LegPartition
from replicator.replication.sending import LegSending

_RETRY_BACKOFF_S = 0.5


@dataclass(frozen=True, slots=True)
class TooLarge:
    """What became of a record too large: ``parked`` (the range counts as done), else the
    partition halts for ``halt`` (or, if that is ``None``, it closed meanwhile)."""

    parked: bool
    halt: str | None = None


class OversizePolicy:
    """Applies ``REPLICATOR_RECORD_TOO_LARGE_POLICY`` to one leg's records too large."""

    __slots__ = ("_dead_letters", "_leg", "_metrics")

    def __init__(self, sending: LegSending) -> None:
        self._leg = sending.leg
        self._metrics = sending.metrics
        self._dead_letters = sending.dead_letters  # None: halt

    async def apply(
        self, partition: LegPartition, batch: OutboundBatch, limit: int | None, log: Any
    ) -> TooLarge:
        """Park the batch's record in the dead-letter topic (retried until it is, or the
        partition closes), or say why the partition halts."""
        size = batch.builder.size()
        target = partition.target_topic
        reason = (
            f"record at source offset {batch.first} is {size} bytes as a batch; "
            f"{self._leg.destination}/{target} accepts {limit} (max.message.bytes)"
        )
        self._metrics.send_errors.labels(self._leg.name, target, "RecordTooLarge").inc()
        dead_letters = self._dead_letters
        if dead_letters is None:
            return TooLarge(False, f"{reason}; REPLICATOR_RECORD_TOO_LARGE_POLICY=halt")
        records = batch_records(batch.builder)
        destination = f"{self._leg.destination}/{target}"

        def failed(error: ReplicatorError) -> None:
            partition.report(f"cannot park a record in the dead-letter topic: {error}")

        async def park() -> bool:
            await dead_letters.park(records, destination, reason)
            return True

        parked = await retrying(
            park,
            stop=partition.closed,
            what="park a record in the dead-letter topic",
            log=log,
            on_error=failed,
            backoff=Backoff(base=_RETRY_BACKOFF_S, ceiling=_RETRY_BACKOFF_S * 8),
        )
        if parked is None and partition.closed.is_set():
            # Stopping: the offset stays uncommitted, the record is parked next time.
            return TooLarge(False)
        self._metrics.records_dead_lettered.labels(self._leg.name, target).inc(len(records))
        note = f"{reason}; parked in dead-letter topic {dead_letters.topic}"
        partition.parked(len(records), note)
        log.warning(
            "record too large for the destination, parked in the dead-letter topic",
            offset=batch.first,
            size=size,
            limit=limit,
            dead_letter_topic=dead_letters.topic,
        )
        return TooLarge(True)
