"""The offset-reset policy: what a leg does when a partition's position is outside the source log.

A position is never reset silently (contract point 1). Below the log start, records were deleted
before this leg replicated them: the partition skips to the log start and the loss is counted.
Beyond the log end, the log was replaced (topic deleted and created again, or truncated): the
partition starts again at the new log start, and that position is committed. With
``REPLICATOR_OFFSET_RESET_POLICY=halt`` either case halts the partition instead. Each case is
counted (``replicator_offset_resets_total``), logged and kept for ``/status``. No I/O.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import structlog

from replicator import clock
from replicator.config.values import OffsetResetPolicy
from replicator.model.offsets import OutOfRange, out_of_range
from replicator.replication.partition import LegPartition
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)


class OffsetResets:
    """Applies the reset policy of one leg and remembers the latest resets."""

    def __init__(self, leg: str, policy: OffsetResetPolicy, metrics: Metrics) -> None:
        self._leg = leg
        self._policy = policy
        self._metrics = metrics
        self.recent: deque[dict[str, Any]] = deque(maxlen=20)  # for /status
        self._log = log.bind(leg=leg)

    def apply(self, partition: LegPartition, found: OutOfRange) -> None:
        """Apply the policy if ``partition``'s own position lies outside ``found``'s log bounds.

        ``found`` was seen at one position (the shared feed's, or this leg's): what counts is
        where this partition stands, which may still be inside the log.
        """
        if not partition.open or partition.position is None:
            return
        mine = out_of_range(partition.position, found.log_start, found.log_end)
        if mine is None:
            return
        topic = partition.target_topic
        self._metrics.offset_resets.labels(self._leg, topic, mine.reason).inc()
        if mine.lost:
            self._metrics.records_lost.labels(self._leg, topic).inc(mine.lost)
        event = {
            "topic": partition.tp.topic,
            "partition": partition.tp.partition,
            "reason": mine.reason,
            "position": mine.position,
            "log_start": mine.log_start,
            "log_end": mine.log_end,
            "records_lost": mine.lost,
            "policy": self._policy.value,
        }
        self.recent.append({**event, "at": clock.wall()})
        self._log.error("source offset out of range", **event)
        if self._policy is OffsetResetPolicy.HALT:
            partition.halt(f"{mine} (REPLICATOR_OFFSET_RESET_POLICY=halt)")
            return
        note = f"{mine}; resumed at offset {mine.log_start}"
        if mine.below_log_start:
            partition.skip_to(mine.log_start, note)
        else:
            partition.rewind(mine.log_start, note)
