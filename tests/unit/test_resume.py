"""Where a partition resumes: the destination mark, the tail's answer, the tracker's bounds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replicator.offsets import OffsetTracker
from replicator.partition import Mode
from replicator.provenance import ORIGIN, Provenance, Tagger
from replicator.resume import Tail, resume_after
from tests.unit.test_partition import partition


def tail(origin_offset: int | None, log_end: int = 500, lowest: int | None = 0) -> Tail:
    """A tail whose records of the origin run from ``lowest`` to ``origin_offset``."""
    lowest = None if origin_offset is None else lowest
    return Tail(origin_offset, log_end, scanned=10, seconds=0.01, lowest=lowest)


@given(
    cluster=st.sampled_from(["dc1", "dc10", "d"]),
    topic=st.sampled_from(["orders_REPLICA", "orders", "o"]),
    partition_=st.sampled_from([1, 11, 0]),
    offset=st.integers(0, 2**62),
)
def test_only_the_partitions_own_provenance_gives_an_origin_offset(
    cluster: str, topic: str, partition_: int, offset: int
) -> None:
    """``dc1/orders_REPLICA/1/`` is not a prefix of ``dc10/...`` nor of ``.../11/...``."""
    header = Provenance(cluster, topic, partition_, offset).headers()
    mine = (cluster, topic, partition_) == ("dc1", "orders_REPLICA", 1)
    expected = offset if mine else None
    assert Tagger("dc1", "orders_REPLICA", 1).origin_offset([("h", b"v"), *header]) == expected


def test_a_record_without_provenance_or_with_a_bad_offset_has_no_origin_offset() -> None:
    tagger = Tagger("dc1", "t", 0)
    assert tagger.origin_offset([("h", b"dc1/t/0/5")]) is None
    assert tagger.origin_offset([(ORIGIN, b"dc1/t/0/5x")]) is None
    assert tagger.origin_offset([(ORIGIN, None)]) is None


def test_resume_continues_after_the_last_record_the_destination_holds() -> None:
    assert resume_after(100, tail(149)) == 150  # acknowledged after the last commit
    assert resume_after(100, tail(None)) == 100  # nothing of this origin since the mark
    assert resume_after(None, tail(7)) == 8  # no commit, no known log start
    # The source log was replaced after the commit and replayed: the tail is the truth.
    assert resume_after(5_000, tail(99)) == 100


def test_records_past_a_gap_are_repeated_never_taken_as_written() -> None:
    """Records of the origin that do not run from the position (the ones between reached a
    destination topic deleted since) leave the position where it is."""
    assert resume_after(0, tail(390, lowest=374)) == 0
    assert resume_after(100, tail(149, lowest=101)) == 100  # record 100 is missing
    assert resume_after(100, tail(149, lowest=100)) == 150
    assert resume_after(100, tail(149, lowest=95)) == 150  # an older mark: read from before


def test_a_resumed_partition_skips_what_the_destination_holds_and_commits_the_move() -> None:
    p = partition(position=100, mode=Mode.STARTING)
    assert p.resumed(tail(149, log_end=900)) == 50
    assert p.position == 150 and p.skipped_at_resume == 50
    tracker = p.tracker
    assert tracker is not None
    assert tracker.committable == 150 and tracker.needs_commit
    assert tracker.destination_mark == 900 and p.destination_mark == 900


def test_a_resume_with_nothing_past_the_commit_moves_nothing() -> None:
    p = partition(position=100, mode=Mode.STARTING)
    assert p.resumed(tail(None, log_end=900)) == 0
    assert p.position == 100 and p.tracker is not None and not p.tracker.needs_commit


def test_only_a_starting_partition_resumes() -> None:
    p = partition(position=100)
    assert p.mode is Mode.ATTACHED
    assert p.resumed(tail(149)) == 0 and p.position == 100


def test_the_mark_follows_the_acknowledged_prefix_only() -> None:
    tracker = OffsetTracker(0, destination_mark=40)
    tracker.track(0, 10)
    tracker.track(10, 20)
    tracker.ack(10, destination_end=70)  # out of order: not part of the prefix yet
    assert tracker.destination_mark == 40 and not tracker.needs_commit
    tracker.ack(0, destination_end=60)
    assert tracker.committable == 20 and tracker.destination_mark == 70
    tracker.mark_committed(20)
    assert tracker.needs_commit and tracker.mark_to_save == 70  # saved after the offset
    tracker.mark_saved(70)
    assert not tracker.needs_commit and tracker.mark_to_save is None


def test_a_skipped_range_keeps_the_mark() -> None:
    tracker = OffsetTracker(0, destination_mark=40)
    tracker.track(0, 10)
    tracker.ack(0, None)
    assert tracker.committable == 10 and tracker.destination_mark == 40


def test_an_idle_partitions_mark_is_raised_and_committed() -> None:
    tracker = OffsetTracker(0, destination_mark=40)
    tracker.refresh_mark(1_000, tracker.last_end)
    assert tracker.destination_mark == 1_000 and tracker.needs_commit
    tracker.mark_saved(1_000)
    assert not tracker.needs_commit


def test_a_mark_is_not_raised_past_a_batch_on_its_way() -> None:
    """A log end read while a batch was in flight, or after one was sent, is not a bound."""
    tracker = OffsetTracker(0, destination_mark=40)
    last_end = tracker.last_end
    tracker.track(0, 10)  # sent after the idle check
    tracker.refresh_mark(1_000, last_end)
    assert tracker.destination_mark == 40
    tracker.ack(0, destination_end=50)
    tracker.refresh_mark(1_000, last_end)  # idle again, but a batch went out since the check
    assert tracker.destination_mark == 50
    tracker.refresh_mark(1_000, tracker.last_end)
    assert tracker.destination_mark == 1_000
