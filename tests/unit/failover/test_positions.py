"""Exact position translation (failover/positions.py) over in-memory partitions: the property that
nothing unconsumed is skipped and the repeats are exactly the consumed records at or after the
translated position, for any interleaving of origins in either cluster."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.errors import StaleSyncPoint
from replicator.failover import positions
from replicator.failover.positions import (
    ConsumedScan,
    Entry,
    Identities,
    Origin,
    SyncPoint,
    Translation,
    translate,
)
from replicator.model.provenance import ORIGIN

DC1: Origin = ("dc1", "orders_REPLICA", 0)
DC2: Origin = ("dc2", "orders_REPLICA", 0)
DC3: Origin = ("dc3", "orders_REPLICA", 0)


class MemoryLog:
    """A partition held in memory: ``records[i]`` is the (origin, origin offset) at ``start+i``."""

    def __init__(self, records: list[tuple[Origin, int]], start: int = 0) -> None:
        self.records = records
        self.start = start
        self.reads = 0

    async def bounds(self) -> tuple[int, int]:
        return self.start, self.start + len(self.records)

    async def read(self, begin: int, end: int) -> list[Entry]:
        begin = max(begin, self.start)
        self.reads += 1
        return [
            Entry(at, *self.records[at - self.start])
            for at in range(begin, min(end, self.start + len(self.records)))
        ]


def interleave(sources: dict[Origin, int], choices: list[int]) -> list[tuple[Origin, int]]:
    """Each origin's records 0..n-1 in order, merged as ``choices`` pick the next origin."""
    next_of = dict.fromkeys(sources, 0)
    merged: list[tuple[Origin, int]] = []
    order = sorted(sources)
    picks = iter(choices)
    while any(next_of[o] < sources[o] for o in order):
        live = [o for o in order if next_of[o] < sources[o]]
        origin = live[next(picks, 0) % len(live)]
        merged.append((origin, next_of[origin]))
        next_of[origin] += 1
    return merged


def run(a: MemoryLog, position: int, b: MemoryLog, since: SyncPoint | None = None) -> Translation:
    return asyncio.run(translate(b, ConsumedScan(a, position, since)))


def check_exact(a: MemoryLog, position: int, b: MemoryLog, result: Translation) -> None:
    consumed = set(a.records[: position - a.start])
    held = b.records
    at = result.position - b.start
    assert all(r in consumed for r in held[:at]), "a record the group had not consumed is skipped"
    if at < len(held):
        assert held[at] not in consumed, "the position could be later"
    assert result.repeats == sum(1 for r in held[at:] if r in consumed)


@contextmanager
def tiny_chunks() -> Iterator[None]:
    """Reads of a few records at a time, so that small partitions exercise every bound."""
    with mock.patch.multiple(positions, _PROBE_CHUNK=2, _MAX_CHUNK=8):
        yield


def sync_point(result: Translation, source_offset: int) -> SyncPoint:
    return SyncPoint(source_offset, result.position, result.frontier, result.index)


counts = st.integers(min_value=0, max_value=60)


@settings(max_examples=400, deadline=None)
@given(
    dc1=counts,
    dc2=counts,
    dc3=st.integers(min_value=0, max_value=5),
    a_choices=st.lists(st.integers(0, 5), max_size=130),
    b_choices=st.lists(st.integers(0, 5), max_size=130),
    a_lacks=st.tuples(st.integers(0, 10), st.integers(0, 10), st.integers(0, 5)),
    b_lacks=st.tuples(st.integers(0, 10), st.integers(0, 10), st.integers(0, 5)),
    where=st.floats(0, 1),
    sync=st.floats(0, 1),
    cut=st.floats(0, 1),
)
def test_nothing_unconsumed_is_skipped_and_repeats_are_exact(
    dc1: int,
    dc2: int,
    dc3: int,
    a_choices: list[int],
    b_choices: list[int],
    a_lacks: tuple[int, int, int],
    b_lacks: tuple[int, int, int],
    where: float,
    sync: float,
    cut: float,
) -> None:
    """Each cluster holds a prefix of each origin (the rest not replicated there yet), in its
    own interleaving; a checkpoint taken earlier (the group behind, B shorter) is the sync point
    of a later translation."""

    def held(lacks: tuple[int, int, int]) -> dict[Origin, int]:
        return {
            origin: max(0, n - lack)
            for origin, n, lack in zip((DC1, DC2, DC3), (dc1, dc2, dc3), lacks, strict=True)
        }

    a = MemoryLog(interleave(held(a_lacks), a_choices))
    b = MemoryLog(interleave(held(b_lacks), b_choices))
    position = round(where * len(a.records))
    with tiny_chunks():
        result = run(a, position, b)
        check_exact(a, position, b, result)
        # A checkpoint taken earlier, when B held less: the same answer from it.
        earlier = round(sync * position)
        shorter = MemoryLog(b.records[: round(cut * len(b.records))])
        first = run(a, earlier, shorter)
        check_exact(a, earlier, shorter, first)
        point = sync_point(first, earlier)
        again = run(a, position, b, point)
        assert (again.position, again.repeats) == (result.position, result.repeats)
        # With the source gone, the checkpoint alone answers for the position it was taken at.
        alone = asyncio.run(translate(b, ConsumedScan(None, earlier, point)))
        check_exact(a, earlier, b, alone)
        # A group moved back before the sync point: the sync point is not used.
        if earlier > 0:
            back = run(a, earlier - 1, b, point)
            check_exact(a, earlier - 1, b, back)
        # B replaced by a shorter log since: the sync point no longer describes it.
        if point.index.end > 0:
            replaced = MemoryLog(b.records[: point.index.end - 1])
            fresh = run(a, position, replaced, point)
            assert fresh.sync_point_dropped
            check_exact(a, position, replaced, fresh)


def test_a_group_that_read_nothing_is_translated_to_the_first_record() -> None:
    """An origin present in B only at its very start (review: once skipped)."""
    a = MemoryLog([(DC1, i) for i in range(2000)])
    b = MemoryLog([(DC2, 0)] + [(DC1, i) for i in range(2000)])
    result = run(a, 0, b)
    assert (result.position, result.repeats) == (0, 0)


def test_an_origin_that_went_quiet_long_ago_is_not_skipped() -> None:
    """dc2 wrote 5 records, then dc1 5,000; dc2's reached A in the middle of the burst and the
    group stopped before them: in B they lie far below the tail."""
    b = MemoryLog([(DC2, i) for i in range(5)] + [(DC1, i) for i in range(5000)])
    a = MemoryLog([(DC1, i) for i in range(2500)] + [(DC2, i) for i in range(5)])
    a.records += [(DC1, i) for i in range(2500, 5000)]
    result = run(a, 1700, b)
    check_exact(a, 1700, b, result)
    assert result.position == 0 and result.repeats == 1700


def test_from_a_sync_point_only_what_b_received_since_and_a_search_are_read() -> None:
    a = MemoryLog(interleave({DC1: 50_000, DC2: 50_000}, [0, 1, 1, 0] * 25_000))
    whole = interleave({DC1: 50_000, DC2: 50_000}, [0] * 500 + [1, 0] * 60_000)
    earlier = run(a, 40_000, MemoryLog(whole[:60_000]))  # a checkpoint, B shorter then
    point = sync_point(earlier, 40_000)
    for position in (50_000, 99_000, 100_000):  # half way, lagging 1%, caught up
        fresh = run(a, position, MemoryLog(whole))  # no sync point: B read whole
        assert fresh.scanned_target >= 100_000
        result = run(a, position, MemoryLog(whole), point)
        check_exact(a, position, MemoryLog(whole), result)
        assert (result.position, result.repeats) == (fresh.position, fresh.repeats)
        # B's 40,000 new records, a binary search per origin, and the repeats (dc1 runs 500
        # ahead in B): not the group's lag, not the partition.
        assert result.scanned_target < 45_000, (position, result.scanned_target)
        assert result.scanned_source == position - 40_000  # what the group read since


def test_an_origin_the_group_never_read_in_a_is_read_from_its_first_record_in_b() -> None:
    # dc2's records reached B but never A: the group consumed none of them.
    a = MemoryLog([(DC1, i) for i in range(100)])
    b = MemoryLog(interleave({DC1: 100, DC2: 10}, [0] * 40 + [1] + [0] * 200))
    result = run(a, 100, b)
    check_exact(a, 100, b, result)
    assert b.records[result.position] == (DC2, 0)
    assert result.repeats == 60


def test_identity_of_records_copies_and_own_data() -> None:
    ids = Identities("dc1", "orders", 2, frozenset({"orders", "orders_REPLICA"}))
    assert ids.of([(ORIGIN, b"dc2/orders_REPLICA/2/17")], 5) == (("dc2", "orders_REPLICA", 2), 17)
    assert ids.of([(ORIGIN, b"dc2/orders/2/9")], 5) == (("dc2", "orders", 2), 9)
    # written straight into the topic: its own origin (what its copies' provenance names)
    assert ids.of([("trace", b"x")], 5) == (("dc1", "orders", 2), 5)
    # derived from another topic, or unreadable: data of this topic
    assert ids.of([(ORIGIN, b"dc2/payments_REPLICA/0/3")], 6) == (("dc1", "orders", 2), 6)
    assert ids.of([(ORIGIN, b"not provenance")], 7) == (("dc1", "orders", 2), 7)


def test_an_origin_seen_only_between_the_searched_positions_is_searched_too() -> None:
    """dc3's records (never in A) lie below the tail that is read first; one of them sits among
    the records read again, so dc3 is searched too, and its first record comes earlier."""
    b_records = [(DC2, i) for i in range(2000)] + [(DC1, i) for i in range(1990)]
    b_records += [(DC3, 0)] + [(DC1, i) for i in range(1990, 2001)]
    b_records += [(DC3, i) for i in range(1, 10)] + [(DC2, 2000)]
    b_records += [(o, i) for i in range(2001, 3000) for o in (DC2, DC1)]
    a = MemoryLog(interleave({DC1: 3000, DC2: 3000}, [0, 1] * 3000))
    b = MemoryLog(b_records)
    result = run(a, 4000, b)
    check_exact(a, 4000, b, result)
    assert (result.position, result.repeats) == (3990, 10)  # at dc3's first; dc1 1990..1999


def test_a_target_recreated_and_grown_past_the_checkpoint_is_not_trusted() -> None:
    a = MemoryLog([(DC1, i) for i in range(10)])
    old = run(a, 10, MemoryLog([(DC1, i) for i in range(10)]))
    point = sync_point(old, 10)
    recreated = MemoryLog([(DC3, i) for i in range(5)] + [(DC1, i) for i in range(10)])
    result = run(a, 10, recreated, point)
    assert result.sync_point_dropped
    assert (result.position, result.repeats) == (0, 10)
    with pytest.raises(StaleSyncPoint):  # and without the source, it cannot be translated
        asyncio.run(translate(recreated, ConsumedScan(None, 10, point)))


def test_the_sources_own_records_count_as_consumed_even_once_retention_removed_them() -> None:
    own: Origin = ("dc1", "orders", 0)
    # A holds its own records (offsets are positions) from 500 on; the group is at 900.
    a = MemoryLog([(own, i) for i in range(500, 1000)], start=500)
    b = MemoryLog([(own, i) for i in range(1000)])
    result = asyncio.run(translate(b, ConsumedScan(a, 900, own=own)))
    assert (result.position, result.repeats) == (900, 0)


@pytest.mark.parametrize("seed", range(150))
def test_checkpoint_chains_with_retention_on_either_side(seed: int) -> None:
    """Checkpoints taken one after another while both sides grow (A's group moving on, or back),
    B's log start moving up; nothing unconsumed is ever skipped, and while A has lost nothing to
    retention the answer is exact. The same from each checkpoint alone against a later B."""
    rnd = random.Random(seed)
    origins = [DC1, DC2, DC3, ("dc4", "orders_REPLICA", 0)][: rnd.randint(1, 4)]
    full = {o: rnd.randint(0, 25) for o in origins}
    a_all = interleave({o: max(0, n - rnd.randint(0, 8)) for o, n in full.items()}, _picks(rnd))
    b_all = interleave({o: max(0, n - rnd.randint(0, 8)) for o, n in full.items()}, _picks(rnd))
    steps = rnd.randint(1, 4)
    lengths = sorted(rnd.randint(0, len(b_all)) for _ in range(steps))
    since: SyncPoint | None = None
    a_start = b_start = 0
    with tiny_chunks():
        for step in range(steps):
            position = rnd.randint(0, len(a_all) + 3)
            if rnd.random() < 0.3:
                b_start = rnd.randint(b_start, lengths[step])
            if rnd.random() < 0.2:
                a_start = rnd.randint(a_start, max(a_start, min(position, len(a_all))))
            a = MemoryLog(a_all[a_start:], a_start)
            b = MemoryLog(b_all[b_start : lengths[step]], b_start)
            result = run(a, position, b, since)
            _check_against(a_all, position, b, result, exact=a_start == 0)
            point = sync_point(result, position)
            if step + 1 < steps:
                later = MemoryLog(b_all[b_start : lengths[step + 1]], b_start)
                alone = asyncio.run(translate(later, ConsumedScan(None, position, point)))
                _check_against(a_all, position, later, alone, exact=a_start == 0)
            since = point


def _picks(rnd: random.Random) -> list[int]:
    return [rnd.randint(0, 5) for _ in range(200)]


def _check_against(
    a_all: list[tuple[Origin, int]], position: int, b: MemoryLog, result: Translation, exact: bool
) -> None:
    """Like :func:`check_exact`, with what the group consumed taken from A's whole history."""
    consumed = set(a_all[:position])
    at = result.position - b.start
    assert all(r in consumed for r in b.records[:at]), "a record the group had not consumed"
    if exact:
        first = next((i for i, r in enumerate(b.records) if r not in consumed), len(b.records))
        assert at == first, (at, first)
        assert result.repeats == sum(1 for r in b.records[at:] if r in consumed)
