"""A destination's answers other than an acknowledgement, and what each makes of a partition.

- An unknown outcome (no answer, an answer a broker gives after appending the batch, a batch
  queued behind such a one), the topic gone, the producer's state lost
  (:class:`~replicator.errors.OutcomeUnknown` and its kinds): the partition restarts and resumes
  from the destination's tail, so nothing is written twice or lost.
- A denied write (an ACL, credentials): nothing was appended (a broker authorizes before it
  writes) and an operator can grant it at any time, so the partition is not halted: it restarts
  after a delay that grows to a minute (its sender waits), naming the denial meanwhile in
  ``/readyz`` and ``/status``.
- A refusal for good (too large, invalid, a policy) or a record the client cannot decode: the
  partition halts, on that leg alone.

Each is counted in ``replicator_send_errors_total{error}`` and logged once per restart or halt.
Answers of an abandoned position (an older tracker) are not this module's: the sender drops them.
"""

from __future__ import annotations

from typing import Any

from replicator.errors import (
    OutcomeUnknown,
    OwnershipUnsure,
    ProducerStateLost,
    ReplicatorError,
    TopicGone,
)
from replicator.kafka.translation import denial
from replicator.replication.partition import LegPartition
from replicator.replication.sending import LegSending


class Outcomes:
    """Applies one leg's answers to its partitions (made when one comes: they are rare)."""

    __slots__ = ("_leg", "_metrics", "_topics")

    def __init__(self, sending: LegSending) -> None:
        self._leg = sending.leg
        self._metrics = sending.metrics
        self._topics = sending.topics

    def uncertain(self, partition: LegPartition, error: OutcomeUnknown, log: Any) -> None:
        """Resume from the destination's tail (a topic gone is prepared again first)."""
        if isinstance(error, TopicGone):
            self._topics.forget(partition.target_topic)  # created again if need be
            what = "the destination partition does not exist (any more)"
        elif isinstance(error, ProducerStateLost):
            what = "the destination lost the producer's state (restored or rebuilt)"
        elif isinstance(error, OwnershipUnsure):
            what = "the source group's lease ran out before a batch went out (nothing written)"
        else:
            what = "a batch's outcome is unknown"
        if partition.restart(f"{what} ({error.kind}): resuming from the destination"):
            self._count(partition, error.kind)
            log.warning(
                f"{what}: reading the destination to resume without writing a record twice "
                "or losing one",
                error=str(error),
                resume_from=partition.position,
            )

    def denied(self, partition: LegPartition, error: ReplicatorError, log: Any) -> None:
        """Restart from the destination (after the sender's delay), naming the denial (an ACL
        missing: Write on the destination topic)."""
        destination = self._leg.destination
        error = denial(error, destination, topic=("Write", partition.target_topic))
        note = f"destination {destination} denied the write: {error}"
        if partition.restart(note):
            self._count(partition, type(error).__name__)
            log.warning(
                "the destination denied the write: waiting, then resuming from the destination",
                error=str(error),
            )

    def refused(self, partition: LegPartition, error: ReplicatorError) -> str:
        """Counted; the reason the partition halts."""
        self._count(partition, type(error).__name__)
        return f"destination refused a batch: {error}"

    def undecodable(self, partition: LegPartition) -> None:
        """Counted once per partition and leg (the partition halts at the record)."""
        self._metrics.records_undecodable.labels(self._leg.name, partition.tp.topic).inc()
        self._count(partition, "UndecodableRecord")

    def _count(self, partition: LegPartition, error: str) -> None:
        self._metrics.send_errors.labels(self._leg.name, partition.target_topic, error).inc()
