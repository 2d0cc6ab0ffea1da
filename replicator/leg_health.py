"""What a leg tells operators: readiness problems, ``/status``, its gauges and the transitions
worth a log line (a destination that stopped acknowledging, a leg that caught up again).

:meth:`LegHealth.problems` and :meth:`LegHealth.status` only read; :meth:`LegHealth.refresh` is
the one place that sets the leg's gauges and logs its transitions (the leg calls it every
second, and before each ``/metrics`` answer).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from aiokafka import TopicPartition

from replicator.metrics import Metrics
from replicator.partition import FED_ALONE, LegPartition

if TYPE_CHECKING:
    from replicator.leg import LegRunner

log = structlog.get_logger(__name__)

LogEnd = Callable[[TopicPartition], "int | None"]


class LegHealth:
    """The operator's view of one leg."""

    def __init__(self, runner: LegRunner, metrics: Metrics, stall_after: float) -> None:
        self._runner = runner
        self._metrics = metrics
        self._stall_after = stall_after
        self._stalled: set[TopicPartition] = set()
        self._alone = 0
        self._log = log.bind(leg=runner.leg.name)

    def problems(self, now: float | None = None) -> list[str]:
        """Why this leg is not ready; empty when it is."""
        now = time.monotonic() if now is None else now
        runner, name = self._runner, self._runner.leg.name
        found: list[str] = []
        if not runner.destination.ready.is_set():
            found.append(f"leg {name} not connected: {runner.last_error or 'starting'}")
        elif runner.destination_error is not None:
            found.append(
                f"leg {name}: destination {runner.leg.destination} unreachable: "
                f"{runner.destination_error}"
            )
        for partition in runner.partitions.values():
            where = f"leg {name} {partition.tp.topic}[{partition.tp.partition}]"
            if partition.halted:
                found.append(f"{where} {partition.state}: {partition.last_error}")
            elif partition.stalled(now, self._stall_after):
                age = partition.oldest_unacked_age(now)
                found.append(f"{where} stalled: unacknowledged for {age:.0f}s")
        return found

    def status(self, log_end: LogEnd, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        runner = self._runner
        partitions = []
        for tp, partition in sorted(runner.partitions.items()):
            entry = partition.status(now, self._stall_after)
            end = log_end(tp)
            committed = committed_offset(partition)
            entry["log_end_offset"] = end
            entry["lag"] = None if end is None or committed is None else max(0, end - committed)
            partitions.append(entry)
        states = [entry["state"] for entry in partitions]
        return {
            "leg": runner.leg.name,
            "source": runner.leg.source,
            "destination": runner.leg.destination,
            "group": runner.group,
            "connected": runner.destination.ready.is_set() and runner.destination_error is None,
            # True: retries are deduplicated by the destination; False: it refused a producer id,
            # and batches of unknown outcome resume from its tail instead; None: not connected.
            "idempotent_producer": runner.destination.idempotent,
            # Records written twice that could not be prevented (known), and records whose
            # fate was unknown when their partition was given up (an upper bound).
            "duplicates": {
                kind: runner.duplicates[kind]
                for kind in (
                    "written_destination_replaced",
                    "possible_unacknowledged_at_release",
                    "possible_past_a_gap",
                )
            },
            "assigned_partitions": len(partitions),
            "replicating": sum(
                1 for s in states if s in ("attached", "fetching_alone", "replaying")
            ),
            "stalled_partitions": states.count("stalled"),
            "detached_partitions": sum(
                1 for p in runner.partitions.values() if p.mode in FED_ALONE
            ),
            "last_error": runner.last_error,
            "refused_topics": runner.refused_topics,
            "partitions_added": runner.grown_topics,
            "topic_config_sync": runner.topic_config_sync,
            "offset_resets": list(runner.resets.recent),
            "partitions": partitions,
        }

    def refresh(self, log_end: LogEnd, now: float | None = None) -> None:
        """Set the leg's gauges and log what changed since the last refresh."""
        now = time.monotonic() if now is None else now
        runner, name, metrics = self._runner, self._runner.leg.name, self._metrics
        metrics.leg_ready.labels(name).set(0 if self.problems(now) else 1)
        metrics.assigned_partitions.labels(name).set(len(runner.partitions))
        blocked = {p.target_topic for p in runner.partitions.values() if p.halted}
        metrics.topics_blocked.labels(name).set(len(blocked))
        for tp, partition in runner.partitions.items():
            end, committed = log_end(tp), committed_offset(partition)
            if end is not None and committed is not None:
                metrics.commit_lag.labels(name, partition.target_topic, str(tp.partition)).set(
                    max(0, end - committed)
                )
        stalled = {tp for tp, p in runner.partitions.items() if p.stalled(now, self._stall_after)}
        for tp in sorted(stalled - self._stalled):
            self._log.warning(
                "destination stopped acknowledging",
                topic=tp.topic,
                partition=tp.partition,
                seconds=round(runner.partitions[tp].oldest_unacked_age(now)),
            )
        for tp in sorted(self._stalled - stalled):
            if tp in runner.partitions:
                self._log.info(
                    "destination acknowledging again", topic=tp.topic, partition=tp.partition
                )
        self._stalled = stalled
        alone = sum(1 for p in runner.partitions.values() if p.mode in FED_ALONE)
        if alone and not self._alone:
            self._log.info("leg behind the shared fetch, fetching alone", partitions=alone)
        elif self._alone and not alone and runner.partitions:
            self._log.info("leg caught up: every partition is back on the shared fetch")
        self._alone = alone

    def forget(self, partition: LegPartition) -> None:
        """``partition`` was released: the new owner exports its lag from now on."""
        self._stalled.discard(partition.tp)
        labels = (self._runner.leg.name, partition.target_topic, str(partition.tp.partition))
        with contextlib.suppress(KeyError):  # never exported: no log end was known meanwhile
            self._metrics.commit_lag.remove(*labels)


def committed_offset(partition: LegPartition) -> int | None:
    """The leg's committed offset for a partition: the last commit, else where it started."""
    tracker = partition.tracker
    if tracker is not None and tracker.committed is not None:
        return tracker.committed
    return partition.position if tracker is None else tracker.committable
