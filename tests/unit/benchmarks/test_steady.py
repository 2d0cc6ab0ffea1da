"""The steady state's arithmetic: the pacing of a fixed rate over every partition, the send
time each value carries, and the latency percentiles."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.steady import (
    RATE_CAP,
    Copies,
    Pacer,
    RoundRobin,
    default_rate,
    percentile,
    sent_at,
    sequence_of,
    stamp,
)


def test_the_pacer_hands_out_what_the_elapsed_time_owes() -> None:
    pacer = Pacer(rate=200, seconds=2)
    assert pacer.total == 400
    assert [pacer.due(t) for t in (0.0, 0.01, 0.02, 0.025, 0.5)] == [0, 2, 2, 1, 95]
    assert not pacer.done


def test_a_late_tick_sends_what_was_owed_and_the_window_total_is_exact() -> None:
    pacer = Pacer(rate=1_000, seconds=1.5)
    assert pacer.due(1.0) == 1_000  # a tick a whole second late
    assert pacer.due(1.0) == 0  # nothing twice
    assert pacer.due(9.0) == 500  # never past the window's total
    assert pacer.due(10.0) == 0
    assert pacer.done and pacer.handed == 1_500


def test_a_slow_rate_sends_whole_records_only() -> None:
    pacer = Pacer(rate=3, seconds=1)
    assert [pacer.due(t) for t in (0.2, 0.34, 0.5, 0.67, 1.0)] == [0, 1, 0, 1, 1]
    assert pacer.done


def test_round_robin_spreads_records_evenly_over_every_partition() -> None:
    spread = RoundRobin(partitions=24)
    taken = [i for n in (5, 0, 30, 7, 13) for i in spread.take(n)]
    counts = Counter(taken)
    assert len(taken) == 55
    assert set(counts) == set(range(24))
    assert max(counts.values()) - min(counts.values()) <= 1
    assert taken[:7] == [0, 1, 2, 3, 4, 5, 6]  # each record to the next partition
    assert spread.cursor == 55 % 24


def test_round_robin_costs_the_records_it_hands_out_not_the_partitions() -> None:
    spread = RoundRobin(partitions=6_000)
    assert spread.take(3) == [0, 1, 2]
    spread.cursor = 5_999
    assert spread.take(3) == [5_999, 0, 1]


def test_a_value_carries_its_send_time_and_keeps_its_size() -> None:
    value = stamp(1_795_000_000_123_456_789)
    assert len(value) == 100
    assert sent_at(value) == 1_795_000_000_123_456_789


def test_a_value_carries_its_sequence_number_beside_its_send_time() -> None:
    value = stamp(1_795_000_000_123_456_789, sequence=123_456)
    assert (len(value), sent_at(value), sequence_of(value)) == (
        100,
        1_795_000_000_123_456_789,
        123_456,
    )


def test_copies_count_each_sequence_number_lost_and_duplicated() -> None:
    copies = Copies(total=5)
    assert (copies.lost, copies.duplicated) == (5, 0)
    for sequence in (0, 1, 1, 3, 1, 4):
        copies.add(sequence)
    assert (copies.read, copies.distinct, copies.lost, copies.duplicated) == (6, 4, 1, 2)
    assert list(copies.counts) == [1, 3, 0, 1, 1]


def test_copies_of_one_record_saturate_without_overflow() -> None:
    copies = Copies(total=1)
    for _ in range(300):
        copies.add(0)
    assert copies.counts[0] == 255
    assert (copies.distinct, copies.duplicated) == (1, 299)


@pytest.mark.parametrize("value", [None, b"", b"T1234567", b"x" * 100, b"\x00" * 100])
def test_a_value_without_a_send_time_is_not_timed(value: bytes | None) -> None:
    assert sent_at(value) is None


def test_percentiles_are_nearest_rank() -> None:
    ordered = [float(n) for n in range(1, 101)]
    assert percentile(ordered, 0.5) == 50.0
    assert percentile(ordered, 0.99) == 99.0
    assert percentile(ordered, 1.0) == 100.0
    assert percentile([7.5], 0.5) == percentile([7.5], 0.99) == 7.5
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0


def test_a_percentile_of_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 0.5)


def test_the_default_rate_is_one_record_per_partition_per_second_capped() -> None:
    assert default_rate(24) == 24
    assert default_rate(240) == 240
    assert default_rate(6_000) == RATE_CAP == 1_000
