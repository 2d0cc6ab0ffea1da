"""Destination topics follow their source: how far a destination topic is grown and which
configs it takes (pure logic; the CreatePartitions and AlterConfigs calls run on the Apache Kafka
path, test_topic_changes.py)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from replicator.settings import DEFAULT_TOPIC_CONFIGS_EXCLUDE
from replicator.topics import (
    NEVER_LOWERED,
    REPLICATED_CONFIGS,
    config_changes,
    partition_shortfall,
    partitions_to_add,
)


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


EXCLUDE = re.compile(DEFAULT_TOPIC_CONFIGS_EXCLUDE)


def test_a_destination_follows_its_source_but_never_the_excluded_configs() -> None:
    source = {
        "cleanup.policy": "compact",
        "retention.ms": "86400000",
        "min.insync.replicas": "2",
        "message.timestamp.type": "LogAppendTime",
        "delete.retention.ms": "1000",
        "preallocate": "true",  # not a replicated config at all
    }
    destination = {"cleanup.policy": "delete", "retention.ms": "3600000"}
    assert config_changes(source, destination, EXCLUDE) == {
        "cleanup.policy": "compact",
        "retention.ms": "86400000",  # raised
        "delete.retention.ms": "1000",
    }
    # MM2's own integration test excludes delete.retention.ms through the setting.
    own = re.compile(DEFAULT_TOPIC_CONFIGS_EXCLUDE + r"|delete\.retention\..*")
    assert "delete.retention.ms" not in config_changes(source, destination, own)


def test_limits_given_to_the_destination_are_never_lowered() -> None:
    source = {"retention.ms": "3600000", "retention.bytes": "1000", "max.message.bytes": "1024"}
    destination = {"retention.ms": "-1", "retention.bytes": "5000", "max.message.bytes": "2048"}
    assert config_changes(source, destination, EXCLUDE) == {}
    assert config_changes({"retention.ms": "-1"}, {"retention.ms": "5"}, EXCLUDE) == {
        "retention.ms": "-1"
    }


values = st.integers(-1, 10**12).map(str)


@given(
    st.dictionaries(st.sampled_from(sorted(REPLICATED_CONFIGS)), values),
    st.dictionaries(st.sampled_from(sorted(REPLICATED_CONFIGS)), values),
)
def test_changes_never_touch_an_excluded_config_nor_lower_a_limit(
    source: dict[str, str], destination: dict[str, str]
) -> None:
    changes = config_changes(source, destination, EXCLUDE)
    for name, value in changes.items():
        assert not EXCLUDE.fullmatch(name)
        assert source[name] == value != destination.get(name)
        if name in NEVER_LOWERED and name in destination:
            have, want = int(destination[name]), int(value)
            assert have >= 0 and (want < 0 or want > have)
    for name, value in source.items():  # everything else already agrees, or is kept on purpose
        if name not in changes and not EXCLUDE.fullmatch(name):
            assert destination.get(name) == value or name in NEVER_LOWERED
