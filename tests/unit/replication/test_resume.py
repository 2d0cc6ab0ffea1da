"""Where a partition resumes: the destination mark, the tail's answer, the tracker's bounds."""

from __future__ import annotations

import asyncio
import dataclasses

from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from replicator.model.offsets import OffsetTracker
from replicator.model.provenance import LEGACY_HEADERS, ORIGIN, Header, Provenance, Tagger
from replicator.replication.resume import (
    Tail,
    _Window,
    destination_lost,
    resume_after,
    rolled_back_to,
)
from replicator.replication.states import Mode
from tests.unit.replication.test_partition import partition
from tests.unit.sample import Record as Sample

TP = TopicPartition("t", 0)
TAGGER = Tagger("dc1", "t", 0)


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


def legacy(cluster: str, topic: str, partition_: int, offset: int) -> list[Header]:
    """The four headers a pre-0.1.0 development build wrote, byte for byte."""
    values = (cluster, topic, str(partition_), str(offset))
    return [(name, v.encode("ascii")) for name, v in zip(LEGACY_HEADERS, values, strict=True)]


@given(
    cluster=st.sampled_from(["dc1", "dc10"]),
    topic=st.sampled_from(["orders_REPLICA", "o"]),
    partition_=st.sampled_from([1, 11]),
    offset=st.integers(0, 2**62),
)
def test_records_of_a_pre_0_1_build_give_their_origin_offset_to_the_resume(
    cluster: str, topic: str, partition_: int, offset: int
) -> None:
    """An upgrade resumes after what an earlier build wrote (its four headers), never replays."""
    mine = (cluster, topic, partition_) == ("dc1", "orders_REPLICA", 1)
    headers = [("h", b"v"), *legacy(cluster, topic, partition_, offset)]
    assert Tagger("dc1", "orders_REPLICA", 1).origin_offset(headers) == (offset if mine else None)


def test_incomplete_or_unreadable_legacy_headers_give_no_origin_offset() -> None:
    tagger = Tagger("dc1", "t", 0)
    whole = legacy("dc1", "t", 0, 5)
    assert tagger.origin_offset(whole) == 5
    assert tagger.origin_offset(whole[:3]) is None  # the offset header missing
    assert tagger.origin_offset([*whole[:3], (LEGACY_HEADERS[3], b"5x")]) is None
    assert tagger.origin_offset([*whole[:3], (LEGACY_HEADERS[3], None)]) is None
    # A record carrying today's header is read by it alone.
    assert tagger.origin_offset([*whole, *Provenance("dc1", "t", 0, 9).headers()]) == 9


def test_resume_continues_after_the_last_record_the_destination_holds() -> None:
    assert resume_after(100, tail(149)) == 150  # acknowledged after the last commit
    assert resume_after(100, tail(None)) == 100  # nothing of this origin since the mark
    assert resume_after(None, tail(7)) == 8  # no commit, no known log start
    # The source log was replaced after the commit and replayed from its start (0): the tail
    # is the truth.
    assert resume_after(5_000, tail(99), log_start=0) == 100
    # Without a replay from the log start, a tail below the committed offset is not trusted.
    assert resume_after(5_000, tail(99)) == 5_000
    assert resume_after(5_000, tail(99), log_start=40) == 100  # the replay began at 40 or before
    assert resume_after(5_000, tail(99, lowest=41), log_start=40) == 5_000


def found(offsets: list[int]) -> Tail:
    """The tail of a destination partition holding records of the origin at ``offsets``, in
    destination order, read in one window (as :class:`_Window` reads them)."""
    loop = asyncio.new_event_loop()
    try:
        window = _Window(TP, TAGGER, 0, None, None, loop.create_future())
        window.take(
            [Sample(i, headers=[(ORIGIN, f"dc1/t/0/{o}".encode())]) for i, o in enumerate(offsets)]
        )
        window.finished(len(offsets), len(offsets), 0.0, answered_at=1)
        return window.done.result()
    finally:
        loop.close()


def test_a_record_an_application_republished_with_its_headers_never_positions_a_resume() -> None:
    """The leg writes an origin's records in ascending order: one below an earlier record (an
    application read a copy and published it again, forwarding its headers) is not its own."""
    flow = list(range(480, 500))
    # After the leg's records: the highest one says where it stands.
    assert resume_after(500, found([*flow, 250]), log_start=0) == 500
    assert resume_after(490, found([*flow, 250]), log_start=0) == 500  # acknowledged after it
    # Alone past the destination mark: below the committed offset, not a replay: ignored.
    assert resume_after(500, found([250]), log_start=0) == 500
    assert resume_after(500, found([250, 251, 252]), log_start=0) == 500
    # The leg went on after the republished record: its run continues through it.
    assert resume_after(500, found([*flow, 250, 500, 501]), log_start=0) == 502
    # A replay of a replaced source log (from its start) after the old records: the truth.
    assert resume_after(500, found([*flow, 0, 1, 2]), log_start=0) == 3
    assert found([*flow, 250]).foreign and not found(flow).foreign


@given(
    st.lists(st.integers(0, 60), max_size=40),
    st.lists(st.integers(1, 15), min_size=1, max_size=6),
)
def test_windows_read_newest_first_say_what_one_window_says(
    offsets: list[int], cuts: list[int]
) -> None:
    """The scan reads the tail back in chunks, newest first (:meth:`Tail.after`): the answer
    is the one a single read of the whole would give."""
    whole = found(offsets)
    chunks: list[list[int]] = []  # newest first, as the scan reads them
    rest = list(offsets)
    for cut in cuts:
        chunks.insert(0, rest[:cut])
        rest = rest[cut:]
    chunks.insert(0, rest)
    combined: Tail | None = None
    for chunk in chunks:
        window = found(chunk)
        combined = window if combined is None else combined.after(window)
    assert combined is not None
    fields = ("origin_offset", "origin_records", "lowest", "highest", "run_start", "first",
              "ascending")  # fmt: skip
    assert {f: getattr(combined, f) for f in fields} == {f: getattr(whole, f) for f in fields}


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


def test_a_rolled_back_log_is_told_from_a_replaced_one() -> None:
    """Below the mark: records of the origin ascending and all before the offset the mark
    covers are what a rolled-back log kept (replayed after them); any at or past it, out of
    order, another writer's, or none: a replaced log (replayed from the source log start)."""
    assert rolled_back_to(tail(29, log_end=30), covers=60) == 30
    assert rolled_back_to(tail(59, log_end=60), covers=60) == 60
    assert rolled_back_to(tail(60, log_end=5, lowest=56), covers=60) is None
    assert rolled_back_to(tail(None, log_end=0), covers=60) is None
    assert rolled_back_to(tail(29, log_end=30), covers=None) is None
    out_of_order = dataclasses.replace(tail(29, log_end=30), ascending=False)
    assert rolled_back_to(out_of_order, covers=60) is None
    foreign = dataclasses.replace(tail(29, log_end=30), highest=40)
    assert foreign.foreign and rolled_back_to(foreign, covers=60) is None


def test_a_destination_log_below_the_saved_mark_lost_records() -> None:
    """A log that ends below the mark the committed records reached was replaced or truncated;
    one at or above it, whatever it holds, did not lose what the leg wrote."""
    assert destination_lost(tail(None, log_end=0), mark=200, committed=200) is not None
    assert destination_lost(tail(99, log_end=150), mark=200, committed=200) is not None
    assert destination_lost(tail(None, log_end=200), mark=200, committed=200) is None
    assert destination_lost(tail(199, log_end=900), mark=200, committed=200) is None


def test_no_mark_and_no_record_of_a_committed_origin_means_a_destination_rebuilt() -> None:
    """No mark is saved (the cluster lost its groups) and the whole partition holds no record of
    an origin the leg committed: lost. Anything else is a partition never committed, or one
    whose records are still there (a resume finds them)."""
    assert destination_lost(tail(None, log_end=0), mark=None, committed=200) is not None
    assert destination_lost(tail(None, log_end=50), mark=None, committed=200) is not None
    assert destination_lost(tail(None, log_end=0), mark=None, committed=None) is None
    assert destination_lost(tail(None, log_end=0), mark=None, committed=0) is None
    assert destination_lost(tail(150, log_end=300), mark=None, committed=200) is None


def test_a_resume_without_a_saved_mark_saves_one_at_the_first_commit() -> None:
    """So that a committed partition always has a mark while its destination keeps its groups,
    and a missing one says the destination lost them."""
    fresh = OffsetTracker(200, destination_mark=350, mark_saved=False)
    assert fresh.needs_commit and fresh.mark_to_save == 350
    fresh.mark_saved(350)
    assert not fresh.needs_commit
    known = OffsetTracker(200, destination_mark=350)
    assert not known.needs_commit and known.mark_to_save is None
