"""Upstream offset tracking: which source offsets are safe to commit.

Records of one source partition are sent in ranges (one range per destination batch). A range is
*acknowledged* when the destination confirmed it with ``acks=all``. The committable offset is the
end of the longest prefix of acknowledged ranges: committing it can never skip a record that has not
reached the destination, whatever order acknowledgements arrive in. Pure, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


class OffsetTracker:
    """Contiguous-acknowledgement tracking for one source partition."""

    def __init__(self, start: int, must_commit: bool = False) -> None:
        """Track from ``start``; ``must_commit``: ``start`` itself is not committed yet (a
        position moved back, which the leg must commit even though it is lower)."""
        self._committable = start
        self._committed: int | None = None if must_commit else start
        # first offset -> (end offset, acknowledged?) in the order ranges were registered.
        self._ranges: OrderedDict[int, tuple[int, bool]] = OrderedDict()
        self._last_end = start

    @property
    def committable(self) -> int:
        """Every record below this offset has been acknowledged by the destination."""
        return self._committable

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
        return self._committed is None or self._committable > self._committed

    def track(self, first: int, end: int) -> None:
        """Register the range ``[first, end)`` before it is sent; ranges must come in order."""
        if end <= first:
            raise ValueError(f"empty range [{first}, {end})")
        if first < self._last_end:
            raise ValueError(f"range [{first}, {end}) overlaps or precedes offset {self._last_end}")
        self._ranges[first] = (end, False)
        self._last_end = end

    def ack(self, first: int) -> None:
        """Mark the range starting at ``first`` acknowledged; advance the committable prefix."""
        end, _ = self._ranges[first]
        self._ranges[first] = (end, True)
        while self._ranges:
            head, (head_end, done) = next(iter(self._ranges.items()))
            if not done:
                break
            del self._ranges[head]
            self._committable = head_end

    def mark_committed(self, offset: int) -> None:
        self._committed = offset if self._committed is None else max(self._committed, offset)


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
