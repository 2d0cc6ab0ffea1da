"""Building destination batches: ranges, provenance, per-destination starts, full batches."""

from __future__ import annotations

import itertools

from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.kafka.producer import BatchFactory
from replicator.model import provenance
from replicator.model.batching import (
    OutboundBatch,
    Placement,
    Target,
    build,
    build_placed,
    place,
    ranges,
)
from replicator.model.provenance import Marking, Provenance, Tagger
from tests.unit.sample import Record

TAGGER = Tagger("dc1", "orders_REPLICA", 3)
FETCHED_MS = 1_800_000_000_000


new_batch = BatchFactory(64 * 1024, 0)
"""The destination's batches: 64 KiB, uncompressed."""


def contents(
    batch: OutboundBatch,
) -> list[tuple[int, bytes | None, list[tuple[str, bytes | None]]]]:
    """(origin offset, value, headers) of each record in a built batch."""
    batch.builder.close()
    decoded = DefaultRecordBatch(bytes(batch.builder._build()))
    out = []
    for record in decoded:
        origin = provenance.parse(record.headers)
        assert origin is not None
        out.append((origin.offset, record.value, record.headers))
    return out


def test_one_target_gets_every_record_tagged_in_one_range() -> None:
    records = [Record(o, headers=[("trace", b"t%d" % o)]) for o in range(10, 15)]
    target = Target(10, new_batch)
    build(records, 15, TAGGER, [target], FETCHED_MS)
    assert [(b.first, b.end, b.count) for b in target.batches] == [(10, 15, 5)]
    got = contents(target.batches[0])
    assert [offset for offset, _, _ in got] == [10, 11, 12, 13, 14]
    assert got[0][2] == provenance.tagged(
        [("trace", b"t10")], Provenance("dc1", "orders_REPLICA", 3, 10)
    )
    assert target.batches[0].size == 5 * (1 + 10)


def test_each_destination_starts_at_its_own_offset() -> None:
    records = [Record(o) for o in range(100, 110)]
    behind, ahead = Target(100, new_batch), Target(106, new_batch)
    build(records, 110, TAGGER, [behind, ahead], FETCHED_MS)
    assert [(b.first, b.end, b.count) for b in behind.batches] == [(100, 110, 10)]
    assert [(b.first, b.end, b.count) for b in ahead.batches] == [(106, 110, 4)]
    assert [o for o, _, _ in contents(ahead.batches[0])] == [106, 107, 108, 109]


def test_a_full_batch_is_closed_and_the_ranges_stay_contiguous() -> None:
    records = [Record(o, value=b"x" * 200) for o in range(0, 50)]
    target = Target(0, BatchFactory(1024, 0))
    build(records, 50, TAGGER, [target], FETCHED_MS)
    assert len(target.batches) > 3
    assert target.batches[0].first == 0 and target.batches[-1].end == 50
    for before, after in zip(target.batches, target.batches[1:], strict=False):
        assert before.end == after.first
    assert sum(b.count for b in target.batches) == 50
    origins = [o for b in target.batches for o, _, _ in contents(b)]
    assert origins == list(range(50))


def test_loops_and_malformed_records_are_skipped_but_covered_by_the_range() -> None:
    looped = Provenance("dc2", "orders_REPLICA", 0, 7).headers()  # the topic it sits in
    records = [
        Record(0),
        Record(1, headers=list(looped)),
        Record(2, headers=[(provenance.ORIGIN, b"dc2/orders_REPLICA/0")]),
        Record(3),
    ]
    target = Target(0, new_batch)
    build(records, 4, TAGGER, [target], FETCHED_MS)
    assert [(b.first, b.end, b.count) for b in target.batches] == [(0, 4, 2)]
    assert target.marked == {Marking.LOOP: 1, Marking.MALFORMED: 1}
    assert [o for o, _, _ in contents(target.batches[0])] == [0, 3]


def test_derived_records_are_replicated_with_fresh_provenance_and_their_upstream() -> None:
    upstream = Provenance("dc2", "payments_REPLICA", 0, 7)  # read, enriched, published
    forwarded: list[tuple[str, bytes | None]] = [
        ("trace", b"t"),
        *upstream.headers(),
        ("app", b"a"),
    ]
    records = [Record(0), Record(1, headers=forwarded), Record(2)]
    behind, ahead = Target(0, new_batch), Target(1, new_batch)
    build(records, 3, TAGGER, [behind, ahead], FETCHED_MS)
    assert behind.marked == ahead.marked == {Marking.DERIVED: 1}
    for target in (behind, ahead):
        got = {o: headers for o, _, headers in contents(target.batches[0])}
        assert got[1] == [
            ("trace", b"t"),
            ("app", b"a"),
            (provenance.UPSTREAM, b"dc2/payments_REPLICA/0/7"),
            (provenance.ORIGIN, b"dc1/orders_REPLICA/3/1"),
        ]
    assert [o for o, _, _ in contents(behind.batches[0])] == [0, 1, 2]


def test_a_range_with_nothing_to_send_still_advances() -> None:
    records = [Record(5, headers=list(Provenance("dc2", "orders_REPLICA", 0, 1).headers()))]
    target = Target(5, new_batch)
    build(records, 6, TAGGER, [target], FETCHED_MS)
    assert [(b.first, b.end, b.count) for b in target.batches] == [(5, 6, 0)]


def test_gaps_in_source_offsets_are_covered() -> None:
    records = [Record(0), Record(4), Record(9)]  # compacted log
    target = Target(0, new_batch)
    build(records, 10, TAGGER, [target], FETCHED_MS)
    assert [(b.first, b.end, b.count) for b in target.batches] == [(0, 10, 3)]


def test_null_keys_values_and_header_values_are_kept() -> None:
    records = [Record(0, key=None, value=None, headers=[("h", None)])]
    target = Target(0, new_batch)
    build(records, 1, TAGGER, [target], FETCHED_MS)
    ((_, value, headers),) = contents(target.batches[0])
    assert value is None and headers[0] == ("h", None)


def test_latency_starts_at_log_append_time_or_when_fetched() -> None:
    """CreateTime is the producer's clock (any age): latency counts from the fetch instead."""
    created = [Record(0, timestamp=1_000), Record(1, timestamp=2_000)]
    appended = [Record(0, timestamp=1_000, timestamp_type=1), Record(1, timestamp=2_000)]
    for records, expected in ((created, FETCHED_MS), (appended, 1_000)):
        target = Target(0, new_batch)
        build(records, 2, TAGGER, [target], FETCHED_MS)
        assert [b.oldest_ms for b in target.batches] == [expected]


# -- placed by key --------------------------------------------------------------------------


def decoded(batch: OutboundBatch) -> list[tuple[int, bytes | None]]:
    """(origin offset, key) of each record in a placed batch."""
    batch.builder.close()
    out = []
    for record in DefaultRecordBatch(bytes(batch.builder._build())):
        origin = provenance.parse(record.headers)
        assert origin is not None
        out.append((origin.offset, record.key))
    return out


def test_placement_is_kafkas_for_keys_and_spreads_keyless_records() -> None:
    # Kafka's producer: murmur2 of the key, positive, modulo the partitions (Utils.murmur2
    # gives -973932308 for "21" and -790332482 for "foobar").
    assert place(b"21", 0, 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert place(b"foobar", 5, 4) == (-790332482 & 0x7FFFFFFF) % 4
    assert [place(None, offset, 3) for offset in range(6)] == [0, 1, 2, 0, 1, 2]


def test_placed_records_go_to_their_keys_partition_in_one_range() -> None:
    records = [Record(o, key=b"k%d" % (o % 5)) for o in range(100, 120)]
    placed = build_placed(records, 100, 120, TAGGER, Placement(3), new_batch, FETCHED_MS)
    assert {(b.first, b.end) for b in placed.batches} == {(100, 120)}
    assert sum(b.count for b in placed.batches) == 20
    for batch in placed.batches:
        assert batch.partition is not None
        for offset, key in decoded(batch):
            assert place(key, offset, 3) == batch.partition


def test_what_the_destination_already_holds_is_skipped_and_counted() -> None:
    records = [Record(o, key=b"k%d" % o) for o in range(10)]
    placement = Placement(2, frozenset({3, 4, 9}))
    placed = build_placed(records, 0, 10, TAGGER, placement, new_batch, FETCHED_MS)
    offsets = sorted(o for b in placed.batches for o, _ in decoded(b))
    assert offsets == [0, 1, 2, 5, 6, 7, 8]
    assert placed.already_written == 3


def test_a_range_with_nothing_to_write_is_one_empty_batch() -> None:
    loop = Record(7, headers=list(provenance.tagged([], Provenance("dc2", "orders_REPLICA", 3, 1))))
    placed = build_placed([loop], 7, 8, TAGGER, Placement(4), new_batch, FETCHED_MS)
    assert [(b.first, b.end, b.count, b.partition) for b in placed.batches] == [(7, 8, 0, None)]
    assert placed.marked == {Marking.LOOP: 1}


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.binary(min_size=1, max_size=6)), max_size=80),
    partitions=st.integers(1, 5),
    start=st.integers(0, 10),
    written=st.sets(st.integers(0, 100), max_size=10),
)
def test_placed_batches_hold_every_record_once_in_order_with_shared_boundaries(
    keys: list[bytes | None], partitions: int, start: int, written: set[int]
) -> None:
    records = [Record(o, key=k, value=b"v" * 40) for o, k in enumerate(keys)]
    end = max(len(keys), start)
    placement = Placement(partitions, frozenset(written))
    placed = build_placed(records, start, end, TAGGER, placement, BatchFactory(400, 0), 0)
    spans = [(g[0].first, g[0].end) for g in ranges(placed.batches)]
    # Contiguous ranges from start to end: each is one unit of acknowledgement.
    if end > start:
        assert spans[0][0] == start and spans[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    seen: list[int] = []
    for batch in placed.batches:
        got = decoded(batch) if batch.count else []
        assert len(got) == batch.count
        assert all(batch.first <= o < batch.end for o, _ in got)
        assert all(place(k, o, partitions) == batch.partition for o, k in got)
        seen.extend(o for o, _ in got)
    expected = [o for o in range(start, len(keys)) if o not in written]
    assert sorted(seen) == expected and len(seen) == len(set(seen))
    assert placed.already_written == len([o for o in range(start, len(keys)) if o in written])
