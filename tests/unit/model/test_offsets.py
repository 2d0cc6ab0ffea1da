"""Contiguous-acknowledgement offset tracking."""

from __future__ import annotations

import pytest

from replicator.model.offsets import OffsetTracker, out_of_range


def test_in_order_acknowledgements_advance_the_committable_offset() -> None:
    tracker = OffsetTracker(start=100)
    tracker.track(100, 110)
    tracker.track(110, 125)
    assert tracker.committable == 100 and not tracker.needs_commit
    tracker.ack(100)
    assert tracker.committable == 110
    tracker.ack(110)
    assert tracker.committable == 125 and tracker.pending == 0


def test_out_of_order_acknowledgement_never_skips_an_unacknowledged_range() -> None:
    tracker = OffsetTracker(start=0)
    for first in (0, 10, 20, 30):
        tracker.track(first, first + 10)
    tracker.ack(20)
    tracker.ack(10)
    assert tracker.committable == 0
    tracker.ack(0)
    assert tracker.committable == 30
    tracker.ack(30)
    assert tracker.committable == 40


def test_gaps_between_ranges_are_offsets_the_log_does_not_hold() -> None:
    tracker = OffsetTracker(start=0)
    tracker.track(0, 5)
    tracker.track(8, 9)  # offsets 5-7 compacted away or transaction markers
    tracker.ack(0)
    tracker.ack(8)
    assert tracker.committable == 9


def test_commit_bookkeeping() -> None:
    tracker = OffsetTracker(start=0)
    tracker.track(0, 3)
    tracker.ack(0)
    assert tracker.needs_commit
    tracker.mark_committed(3)
    assert tracker.committed == 3 and not tracker.needs_commit
    tracker.mark_committed(1)  # a stale commit report never moves it back
    assert tracker.committed == 3


@pytest.mark.parametrize(("first", "end"), [(5, 5), (3, 2), (8, 12)])
def test_invalid_or_overlapping_ranges_are_rejected(first: int, end: int) -> None:
    tracker = OffsetTracker(start=0)
    tracker.track(0, 10)
    with pytest.raises(ValueError, match="range"):
        tracker.track(first, end)


def test_a_position_inside_the_log_is_in_range() -> None:
    assert out_of_range(100, log_start=0, log_end=100) is None
    assert out_of_range(0, log_start=0, log_end=0) is None


def test_a_position_below_the_log_start_counts_the_records_lost() -> None:
    found = out_of_range(40, log_start=100, log_end=500)
    assert found is not None
    assert (found.reason, found.lost) == ("below_log_start", 60)
    assert "was deleted from the source before it was replicated" in str(found)
    assert "60 records lost" in str(found)


def test_a_position_beyond_the_log_end_is_a_replaced_log_with_an_unknown_loss() -> None:
    found = out_of_range(5000, log_start=0, log_end=120)
    assert found is not None
    assert (found.reason, found.lost) == ("beyond_log_end", None)
    assert "is beyond the source log end" in str(found) and "recreated" in str(found)
