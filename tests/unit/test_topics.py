"""Destination topics follow their source: how far a destination topic is grown (pure logic;
the CreatePartitions call itself runs on the Apache Kafka path, test_topic_changes.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replicator.topics import partition_shortfall, partitions_to_add


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_a_destination_is_grown_to_its_source_never_shrunk_never_past_it(
    destination: int, source: int
) -> None:
    total = partitions_to_add(destination, source)
    if destination >= source:
        assert total is None
    else:
        assert total == source
    assert (total is None) == (partition_shortfall("s", source, "d", destination) is None)


def test_the_shortfall_names_both_topics_and_counts() -> None:
    reason = partition_shortfall("orders_REPLICA", 4, "orders", 2)
    assert reason is not None
    assert "orders has 2 partitions" in reason and "orders_REPLICA has 4" in reason
