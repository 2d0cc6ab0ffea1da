"""What a leg counts about the records it handles, beyond those it copies.

- :class:`Duplicates`: the records written twice that could not be prevented, and those that may
  have been, counted once per leg (metrics and ``/status``);
- :func:`count_marked`: the records whose provenance kept them from being copied (the loop rule)
  or marked them derived, counted and said (a flow's copies and derived data once per partition,
  anything else skipped at every batch);
- :class:`Resumptions`: the partitions that resumed from the destination's tail since the leg
  last said so, said once per leg (with "every assigned partition started"), not per partition.
"""

from __future__ import annotations

from collections import Counter
from enum import Flag, auto
from typing import Any

from replicator.config.topology import Leg
from replicator.model.batching import OutboundBatch
from replicator.model.provenance import Marking
from replicator.telemetry.metrics import Metrics


class Resumptions:
    """What a leg's partitions found at the destination's tail as they (re)started, since the
    last :meth:`take`: how many resumed, how many of them after records the destination already
    held (and how many records were so not written twice), and the slowest read of a tail.
    Thousands of partitions starting together make one log line, not thousands."""

    EXAMPLES = 3

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._resumed = 0
        self._after_written = 0
        self._records = 0
        self._slowest = 0.0
        self._examples: list[str] = []

    def resumed(self, where: str, already_written: int, seconds: float) -> None:
        """A partition (named ``where``) resumed from the destination's tail, read in
        ``seconds``, skipping ``already_written`` records the destination held."""
        self._resumed += 1
        self._slowest = max(self._slowest, seconds)
        if already_written:
            self._after_written += 1
            self._records += already_written
            if len(self._examples) < self.EXAMPLES:
                self._examples.append(where)

    @property
    def pending(self) -> bool:
        """Whether a partition resumed since the last :meth:`take`."""
        return self._resumed > 0

    def take(self) -> dict[str, Any]:
        """What was counted since the last call, as log fields (none if nothing resumed);
        counting starts again."""
        if not self._resumed:
            return {}
        fields: dict[str, Any] = {
            "resumed_from_destination": self._resumed,
            "slowest_tail_read_s": round(self._slowest, 3),
        }
        if self._after_written:
            fields |= {
                "resumed_after_records_written": self._after_written,
                "records_not_written_twice": self._records,
                "examples": self._examples,
            }
        self._reset()
        return fields


# A produce request answered long after the source group's lease ran out: its records may have
# landed after a new owner read the destination (:mod:`replicator.kafka.membership`).
ANSWERED_LATE = "answered_after_the_lease"


class Duplicates:
    """A leg's duplicates, counted once: the records written twice that could not be prevented
    (``replicator_duplicates_written_total``) and those that may have been
    (``replicator_duplicates_possible_total``), with the tally ``/status`` shows by kind."""

    KINDS = (
        "written_destination_replaced",
        "possible_unacknowledged_at_release",
        "possible_past_a_gap",
        "possible_answered_after_the_lease",  # ANSWERED_LATE
    )

    def __init__(self, leg: str, metrics: Metrics) -> None:
        self._leg = leg
        self._metrics = metrics
        self._counts: Counter[str] = Counter()

    def written(self, topic: str, records: int, reason: str) -> None:
        """``records`` of ``topic`` were written twice (``reason``: destination_replaced)."""
        self._metrics.duplicates_written.labels(self._leg, topic, reason).inc(records)
        self._counts[f"written_{reason}"] += records

    def possible(self, topic: str, records: int, reason: str) -> None:
        """``records`` of ``topic`` may be written twice (``reason``: unacknowledged_at_release,
        past_a_gap)."""
        self._metrics.duplicates_possible.labels(self._leg, topic, reason).inc(records)
        self._counts[f"possible_{reason}"] += records

    def shown(self) -> dict[str, int]:
        """Each kind's count, for ``/status``."""
        return {kind: self._counts.get(kind, 0) for kind in self.KINDS}

    def total(self) -> int:
        return sum(self._counts.values())

    def __getitem__(self, kind: str) -> int:
        return self._counts.get(kind, 0)


class Said(Flag):
    """What a partition has said once already (a flag word: one per partition and leg)."""

    NOTHING = 0
    COPIES = auto()  # a flow's skipped copies
    DERIVED = auto()  # derived records


def count_marked(
    leg: Leg,
    target: str,
    metrics: Metrics,
    marked: Counter[Marking],
    batches: list[OutboundBatch],
    said: Said,
    log: Any,
) -> Said:
    """Count the records of ``batches`` that carried provenance; log skips per batch, derived
    data and a flow's copies once (``said``: what was said before; returned with what is now)."""
    skipped = {mark: n for mark, n in marked.items() if not mark.replicated}
    for mark, n in skipped.items():
        metrics.records_skipped.labels(leg.name, target, mark).inc(n)
    derived = marked.get(Marking.DERIVED, 0)
    if derived:
        metrics.records_derived.labels(leg.name, target).inc(derived)
    if skipped and leg.flow is not None and set(skipped) == {Marking.LOOP}:
        # A flow reads the copies other replicators wrote into its source all the time
        # (same-name active-active): normal, counted, said once per partition.
        if Said.COPIES not in said:
            said |= Said.COPIES
            log.info(
                "copies from other clusters are not copied again (loop rule); counted in "
                'replicator_records_skipped_total{reason="loop"}',
                loop=skipped[Marking.LOOP],
            )
    elif skipped:
        log.warning(
            "records not replicated (loop rule)",
            **{str(mark): n for mark, n in skipped.items()},
            first_offset=batches[0].first if batches else None,
            end_offset=batches[-1].end if batches else None,
        )
    if derived and Said.DERIVED not in said:
        said |= Said.DERIVED  # derived data is normal for this topic: say it once
        log.info(
            "derived records replicated: they carried another topic's provenance, kept as "
            "replicator-upstream",
            derived=derived,
        )
    return said
