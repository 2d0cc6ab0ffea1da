"""The recovery point of a lost origin: the newest record of it a cluster holds, and what is not.

Through the :class:`ReadBack` seam, with an in-memory cluster (``MemoryCluster``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from replicator.failover.recovery_point import (
    Newest,
    RecoveryReport,
    newest_of_origins,
    recovery_point,
    still_to_count,
    verdict,
)
from replicator.kafka.readers import StoredRecord
from replicator.model.provenance import Tagger

ORDERS = TopicPartition("orders", 0)


class MemoryCluster:
    """Partitions as lists of records (a log start may be above 0); counts the reads asked."""

    def __init__(self, logs: dict[TopicPartition, list[StoredRecord]], start: int = 0) -> None:
        self.logs = logs
        self.start = start
        self.reads = 0

    async def bounds(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: (self.start, len(self.logs[tp])) for tp in partitions if tp in self.logs}

    async def read(
        self, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, list[StoredRecord]]:
        self.reads += 1
        return {tp: self.logs[tp][begin:end] for tp, (begin, end) in ranges.items()}


def record(tp: TopicPartition, offset: int, origin: str | None, at: int) -> StoredRecord:
    """A record at ``offset`` of ``tp``: a copy of ``origin``'s offset ``at`` (None: local)."""
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if origin is not None:
        tagger = Tagger(origin, tp.topic + "_REPLICA", tp.partition)
        headers = tuple(tagger.tag([], at))
    return StoredRecord(tp.topic, tp.partition, offset, None, b"v", headers, 1_000 + at)


def interleaved(tp: TopicPartition, pattern: Sequence[str | None]) -> list[StoredRecord]:
    """Records of several origins in one partition, each origin's offsets ascending."""
    next_of: dict[str | None, int] = {}
    out = []
    for offset, origin in enumerate(pattern):
        at = next_of.get(origin, 0)
        next_of[origin] = at + 1
        out.append(record(tp, offset, origin, at))
    return out


def newest(cluster: MemoryCluster, *tps: TopicPartition) -> dict[TopicPartition, Newest | None]:
    origins = {tp: Tagger("dc1", tp.topic + "_REPLICA", tp.partition) for tp in tps}
    return asyncio.run(newest_of_origins(cluster, origins))


def test_the_newest_record_of_the_origin_is_found_among_the_others() -> None:
    log = interleaved(ORDERS, ["dc1", "dc2", "dc1", None, "dc2", "dc2"])
    found = newest(MemoryCluster({ORDERS: log}), ORDERS)[ORDERS]
    assert found is not None
    assert (found.origin_offset, found.timestamp_ms) == (1, 1_001)


def test_an_origin_far_back_is_found_by_growing_windows_every_partition_in_the_same_reads() -> None:
    payments = TopicPartition("payments", 3)
    # dc1 wrote 5 records, then 30,000 records of dc2 arrived in orders; payments is all dc1.
    cluster = MemoryCluster(
        {
            ORDERS: interleaved(ORDERS, ["dc1"] * 5 + ["dc2"] * 30_000),
            payments: interleaved(payments, ["dc1"] * 50),
        }
    )
    found = newest(cluster, ORDERS, payments)
    assert found[ORDERS] == Newest(4, 1_004, 30_005)
    assert found[payments] == Newest(49, 1_049, 50)
    # Windows of 1,000, 4,000, 16,000, 64,000 records: four reads for both partitions together.
    assert cluster.reads == 4


def test_a_partition_that_holds_nothing_of_the_origin_says_none_after_reading_to_its_start() -> (
    None
):
    cluster = MemoryCluster({ORDERS: interleaved(ORDERS, ["dc2"] * 2_500)})
    assert newest(cluster, ORDERS) == {ORDERS: None}
    assert cluster.reads == 2  # 1,000 then the 1,500 left down to the log start


def test_a_destination_topic_the_cluster_lacks_reads_nothing() -> None:
    cluster = MemoryCluster({})
    assert newest(cluster, ORDERS) == {ORDERS: None}
    assert cluster.reads == 0


@given(st.lists(st.sampled_from(["dc1", "dc2", "dc3", None]), max_size=3_000))
def test_the_newest_is_the_highest_origin_offset_held(pattern: list[str | None]) -> None:
    found = newest(MemoryCluster({ORDERS: interleaved(ORDERS, pattern)}), ORDERS)[ORDERS]
    held = pattern.count("dc1")
    assert (found.origin_offset if found else None) == (held - 1 if held else None)


def report(
    newest_found: dict[TopicPartition, Newest | None],
    origin_ends: dict[TopicPartition, tuple[int, int]],
    origin_error: str | None = None,
) -> RecoveryReport:
    """The report, the origin's records past what is held counted as if all were data."""
    ranges = still_to_count("_REPLICA", origin_ends, newest_found)
    not_here = {tp: end - start for tp, (start, end) in ranges.items()}
    return recovery_point(
        "dc1", "dc2", "_REPLICA", origin_ends, newest_found, not_here, 10_000, origin_error
    )


def test_what_the_origin_holds_past_the_newest_record_here_is_counted() -> None:
    replica = TopicPartition("orders_REPLICA", 0)
    made = report({ORDERS: Newest(149, 4_000, 300)}, {replica: (0, 200)})
    (point,) = made.points
    assert (point.topic, point.destination_topic, point.held_up_to) == (
        "orders_REPLICA",
        "orders",
        150,
    )
    assert (point.origin_log_end, point.missing, point.newest_age_s) == (200, 50, 6.0)
    assert (made.missing, made.expired, made.complete) == (50, 0, False)
    assert verdict(made) == (
        "dc1 answered: 50 records of its replica topics (1 partitions) are not in dc2 yet; "
        "dc1's replicator copies them when it runs."
    )


def test_the_count_is_of_what_the_origin_read_says_not_of_offsets() -> None:
    # Transaction markers and aborted records take offsets but are never copied: the count
    # read on the origin (committed data only) is what is missing, not the offsets.
    replica = TopicPartition("orders_REPLICA", 0)
    held = {ORDERS: Newest(149, 4_000, 300)}
    assert still_to_count("_REPLICA", {replica: (0, 200)}, held) == {replica: (150, 200)}
    made = recovery_point(
        "dc1", "dc2", "_REPLICA", {replica: (0, 200)}, held, {replica: 0}, 0, None
    )
    assert (made.missing, made.complete) == (0, True)
    assert verdict(made) == "dc1 answered: dc2 holds every record of its replica topics."


def test_an_origin_that_does_not_answer_leaves_the_count_unknown_and_says_the_age() -> None:
    made = report({ORDERS: Newest(149, 4_000, 300)}, {}, origin_error="dc1 does not answer")
    (point,) = made.points
    assert (point.held_up_to, point.origin_log_end, point.missing) == (150, None, None)
    assert (made.missing, made.complete) == (None, False)
    assert made.oldest_newest_age_s == 6.0
    assert verdict(made).startswith("dc1 does not answer. dc2 holds dc1's records below")
    assert "at most 6.0 s old" in verdict(made)


def test_nothing_held_here_counts_the_whole_origin_log_from_its_start() -> None:
    replica = TopicPartition("orders_REPLICA", 1)
    only_there = TopicPartition("refunds_REPLICA", 0)  # its destination topic is not here at all
    made = report({TopicPartition("orders", 1): None}, {replica: (40, 100), only_there: (0, 7)})
    assert [(p.topic, p.partition, p.held_up_to, p.missing, p.expired) for p in made.points] == [
        ("orders_REPLICA", 1, None, 60, 0),
        ("refunds_REPLICA", 0, None, 7, 0),
    ]
    assert made.missing == 67


def test_records_the_origin_no_longer_holds_and_that_never_arrived_are_lost() -> None:
    # Held here up to offset 10; the origin's retention removed everything below 500.
    replica = TopicPartition("orders_REPLICA", 0)
    made = report({ORDERS: Newest(9, 4_000, 10)}, {replica: (500, 520)})
    (point,) = made.points
    assert (point.missing, point.expired) == (20, 490)
    assert (made.expired, made.complete) == (490, False)
    assert verdict(made).endswith(
        "490 records are lost: dc1's retention removed them before dc2 had them."
    )
    caught_up = recovery_point(
        "dc1", "dc2", "_REPLICA", {replica: (500, 520)}, {ORDERS: Newest(519, 0, 1)}, {}, 0, None
    )
    assert (caught_up.missing, caught_up.expired, caught_up.complete) == (0, 0, True)


def test_a_partition_the_answering_origin_lacks_has_nothing_missing() -> None:
    made = report({ORDERS: Newest(9, 4_000, 10)}, {})
    assert (made.points[0].missing, made.missing, made.complete) == (0, 0, True)
