"""Upstream offset tracking: which source offsets are safe to commit.

Records of one source partition are sent in ranges (one range per destination batch). A range is
*acknowledged* when the destination confirmed it with ``acks=all``. The committable offset is the
end of the longest prefix of acknowledged ranges: committing it can never skip a record that has not
reached the destination, whatever order acknowledgements arrive in. Alongside it the tracker keeps
the *destination mark*: a destination offset before which every record of that prefix was
written; the committer saves it after the offset, so that a resume reads the destination only
from there (:mod:`replicator.replication.resume`). Pure, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


class OffsetTracker:
    """Contiguous-acknowledgement tracking for one source partition."""

    def __init__(
        self,
        start: int,
        must_commit: bool = False,
        destination_mark: int | None = None,
        mark_saved: bool = True,
    ) -> None:
        """Track from ``start``; ``must_commit``: ``start`` itself is not committed yet (a
        position moved back, or a resume moved it, which the leg must commit);
        ``destination_mark``: a destination offset before which every record of this partition
        before ``start`` was written (``None``: not known), saved already unless ``must_commit``
        or not ``mark_saved``."""
        self._committable = start
        self._committed: int | None = None if must_commit else start
        # first offset -> (end offset, acknowledged?, destination end of the batch if written)
        # in the order ranges were registered.
        self._ranges: OrderedDict[int, tuple[int, bool, int | None]] = OrderedDict()
        self._last_end = start
        self._mark = destination_mark
        self._mark_saved = destination_mark if mark_saved and not must_commit else None

    @property
    def committable(self) -> int:
        """Every record below this offset has been acknowledged by the destination."""
        return self._committable

    @property
    def destination_mark(self) -> int | None:
        """A destination offset before which every record of the committable prefix was written
        (the end of the last acknowledged batch, or a log end read while nothing was in
        flight); ``None`` if not known."""
        return self._mark

    @property
    def committed(self) -> int | None:
        """The last offset committed to the source cluster (see :meth:`mark_committed`)."""
        return self._committed

    @property
    def pending(self) -> int:
        """Ranges sent (or skipped) but not yet part of the committable prefix."""
        return len(self._ranges)

    @property
    def needs_commit(self) -> bool:
        """Whether the offset moved since the commit, or the mark since it was saved."""
        return (
            self._committed is None
            or self._committable > self._committed
            or self.mark_to_save is not None
        )

    @property
    def mark_to_save(self) -> int | None:
        """The destination mark, when it moved since it was last saved."""
        return self._mark if self._mark != self._mark_saved else None

    @property
    def idle(self) -> bool:
        """Nothing sent is waiting for an acknowledgement."""
        return not self._ranges

    def track(self, first: int, end: int) -> None:
        """Register the range ``[first, end)`` before it is sent; ranges must come in order."""
        if end <= first:
            raise ValueError(f"empty range [{first}, {end})")
        if first < self._last_end:
            raise ValueError(f"range [{first}, {end}) overlaps or precedes offset {self._last_end}")
        self._ranges[first] = (end, False, None)
        self._last_end = end

    def ack(self, first: int, destination_end: int | None = None) -> None:
        """Mark the range starting at ``first`` acknowledged, written before the destination
        offset ``destination_end`` (``None``: nothing was written); advance the prefix."""
        end, _, _ = self._ranges[first]
        self._ranges[first] = (end, True, destination_end)
        while self._ranges:
            head, (head_end, done, written_before) = next(iter(self._ranges.items()))
            if not done:
                break
            del self._ranges[head]
            self._committable = head_end
            if written_before is not None:
                self._raise_mark(written_before)

    def refresh_mark(self, destination_end: int, last_end: int) -> None:
        """The destination's log end was ``destination_end`` while nothing was in flight and
        :attr:`last_end` was ``last_end``: a resume need not read what others wrote before it.

        Ignored if a range was registered since (a batch may be on its way)."""
        if not self._ranges and self._last_end == last_end:
            self._raise_mark(destination_end)

    @property
    def last_end(self) -> int:
        """The end of the last range registered (where the next one must start)."""
        return self._last_end

    def _raise_mark(self, destination_end: int) -> None:
        if self._mark is None or destination_end > self._mark:
            self._mark = destination_end

    def mark_committed(self, offset: int) -> None:
        self._committed = offset if self._committed is None else max(self._committed, offset)

    def mark_saved(self, destination_mark: int) -> None:
        """``destination_mark`` was saved (after the offset it goes with was committed)."""
        self._mark_saved = destination_mark


@dataclass(frozen=True)
class OutOfRange:
    """A source position the log no longer holds, and what that means for the records.

    *Below the log start*: records were deleted (retention, ``DeleteRecords``, unclean leader
    election) before this leg replicated them; exactly ``log_start - position`` are lost. *Beyond
    the log end*: the partition's log is shorter than what was already read, so the topic was
    deleted and recreated (or truncated); its new records start at ``log_start``, and how many
    records of the old log were never replicated cannot be known.
    """

    position: int
    log_start: int
    log_end: int

    @property
    def below_log_start(self) -> bool:
        return self.position < self.log_start

    @property
    def reason(self) -> str:
        return "below_log_start" if self.below_log_start else "beyond_log_end"

    @property
    def lost(self) -> int | None:
        """Records lost for certain; ``None`` when the log was replaced and the loss is unknown."""
        return self.log_start - self.position if self.below_log_start else None

    def __str__(self) -> str:
        if self.below_log_start:
            return (
                f"offset {self.position} was deleted from the source before it was replicated "
                f"(log now starts at {self.log_start}): {self.lost} records lost"
            )
        return (
            f"offset {self.position} is beyond the source log end {self.log_end}: the topic was "
            f"deleted and recreated (or truncated); its log starts at {self.log_start}"
        )


def out_of_range(position: int, log_start: int, log_end: int) -> OutOfRange | None:
    """Whether ``position`` lies outside the log ``[log_start, log_end]``, and how."""
    if log_start <= position <= log_end:
        return None
    return OutOfRange(position, log_start, log_end)
