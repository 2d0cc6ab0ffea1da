"""Destination topics follow their source: when a destination topic falls short of its source's
partitions and which configs it takes (pure logic; the CreatePartitions and AlterConfigs calls
run on the Apache Kafka path, test_topic_changes.py)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from replicator.config.values import DEFAULT_TOPIC_CONFIGS_EXCLUDE, ConfigSync, DefaultsFrom
from replicator.kafka.admin import ConfigEntry
from replicator.topics.configs import (
    NEVER_LOWERED,
    REPLICATED_CONFIGS,
    as_kafka_reports,
    config_changes,
    creation_configs,
    mirrored_config_changes,
)
from replicator.topics.provisioning import partition_shortfall


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_a_destination_falls_short_only_with_fewer_partitions_than_its_source(
    destination: int, source: int
) -> None:
    # (How far a short destination is grown: test_provisioning.py, through the provisioner.)
    assert (partition_shortfall("s", source, "d", destination) is None) == (destination >= source)


def test_the_shortfall_names_both_topics_and_counts() -> None:
    reason = partition_shortfall("orders_REPLICA", 4, "orders", 2)
    assert reason is not None
    assert "orders has 2 partitions" in reason and "orders_REPLICA has 4" in reason


EXCLUDE = re.compile(DEFAULT_TOPIC_CONFIGS_EXCLUDE)


def changes(
    source: dict[str, str],
    destination: dict[str, str],
    seen: dict[str, str] | None = None,
    effective: dict[str, str] | None = None,
    exclude: re.Pattern[str] = EXCLUDE,
) -> dict[str, str]:
    return config_changes(source, destination, {**(effective or {}), **destination}, seen, exclude)


def test_a_destination_takes_what_it_lacks_but_never_the_excluded_configs() -> None:
    source = {
        "cleanup.policy": "compact",
        "retention.ms": "86400000",
        "min.insync.replicas": "2",
        "message.timestamp.type": "LogAppendTime",
        "delete.retention.ms": "1000",
        "preallocate": "true",  # not a replicated config at all
    }
    assert changes(source, {}) == {
        "cleanup.policy": "compact",
        "retention.ms": "86400000",
        "delete.retention.ms": "1000",
    }
    # MM2's own integration test excludes delete.retention.ms through the setting.
    own = re.compile(DEFAULT_TOPIC_CONFIGS_EXCLUDE + r"|delete\.retention\..*")
    assert "delete.retention.ms" not in changes(source, {}, exclude=own)


def test_what_the_destination_was_given_is_kept_until_the_source_changes_it() -> None:
    source = {"cleanup.policy": "compact", "compression.type": "zstd"}
    destination = {"cleanup.policy": "delete", "compression.type": "lz4"}  # an operator's
    assert changes(source, destination, seen=None) == {}  # after a start: nothing seen change
    assert changes(source, destination, seen=dict(source)) == {}
    changed = {**source, "compression.type": "gzip"}
    assert changes(changed, destination, seen=dict(source)) == {"compression.type": "gzip"}


def test_limits_are_only_raised_above_the_destinations_effective_value() -> None:
    seen = {"retention.ms": "1", "retention.bytes": "1", "max.message.bytes": "1"}
    source = {"retention.ms": "3600000", "retention.bytes": "1000", "max.message.bytes": "1024"}
    destination = {"retention.ms": "-1", "retention.bytes": "5000", "max.message.bytes": "2048"}
    assert changes(source, destination, seen) == {}
    # No override on the destination, but a larger broker default: not lowered either.
    assert changes({"retention.ms": "3600000"}, {}, effective={"retention.ms": "604800000"}) == {}
    assert changes({"retention.ms": "-1"}, {"retention.ms": "5"}, {"retention.ms": "5"}) == {
        "retention.ms": "-1"
    }


values = st.integers(-1, 10**12).map(str)
configs = st.dictionaries(st.sampled_from(sorted(REPLICATED_CONFIGS)), values)


@given(configs, configs, configs, st.none() | configs)
def test_changes_never_touch_an_excluded_config_nor_lower_a_limit(
    source: dict[str, str],
    destination: dict[str, str],
    effective: dict[str, str],
    seen: dict[str, str] | None,
) -> None:
    effective = {**effective, **destination}
    found = config_changes(source, destination, effective, seen, EXCLUDE)
    for name, value in found.items():
        assert not EXCLUDE.fullmatch(name)
        assert source[name] == value != destination.get(name)
        if name in destination:  # an override is replaced only when the source changed it
            assert seen is not None and seen.get(name) != value
        if name in NEVER_LOWERED and name in effective:
            have, want = int(effective[name]), int(value)
            assert have >= 0 and (want < 0 or want > have)


# -- mirror sync (MirrorMaker 2's) -------------------------------------------------------------


def test_mirror_sync_follows_the_source_down_and_removes_what_it_removed() -> None:
    source = {"retention.bytes": "1000", "cleanup.policy": "compact"}
    destination = {"retention.bytes": "2000", "segment.ms": "600000", "cleanup.policy": "compact"}
    found = mirrored_config_changes(source, {}, destination, EXCLUDE, DefaultsFrom.TARGET)
    # Lowered as the source is; segment.ms, at its default on the source, loses its override.
    assert found == {"retention.bytes": "1000", "segment.ms": None}


def test_mirror_sync_with_defaults_from_the_source_sets_the_sources_default() -> None:
    effective = {"retention.ms": "604800000", "segment.ms": "604800000"}
    destination = {"retention.ms": "86400000"}
    found = mirrored_config_changes({}, effective, destination, EXCLUDE, DefaultsFrom.SOURCE)
    assert found == {"retention.ms": "604800000", "segment.ms": "604800000"}


def test_mirror_sync_never_touches_an_excluded_config() -> None:
    destination = {"min.insync.replicas": "2"}  # excluded by default, as in MirrorMaker 2
    source = {"min.insync.replicas": "1"}
    assert mirrored_config_changes(source, {}, destination, EXCLUDE, DefaultsFrom.TARGET) == {}


@given(
    st.dictionaries(st.sampled_from(sorted(REPLICATED_CONFIGS)), st.sampled_from(["1", "2", "-1"])),
    st.dictionaries(st.sampled_from(sorted(REPLICATED_CONFIGS)), st.sampled_from(["1", "2", "-1"])),
)
def test_mirror_sync_leaves_the_copied_configs_equal_to_the_source(
    source: dict[str, str], destination: dict[str, str]
) -> None:
    """Applied, the changes make every copied config not excluded the source's override (or
    none where the source has none), and a second round changes nothing."""
    found = mirrored_config_changes(source, {}, destination, EXCLUDE, DefaultsFrom.TARGET)
    after = {**destination, **{k: v for k, v in found.items() if v is not None}}
    for name, value in found.items():
        if value is None:
            del after[name]
    copied = {n for n in REPLICATED_CONFIGS if not EXCLUDE.fullmatch(n)}
    assert {n: v for n, v in after.items() if n in copied} == {
        n: v for n, v in source.items() if n in copied
    }
    assert mirrored_config_changes(source, {}, after, EXCLUDE, DefaultsFrom.TARGET) == {}


# -- what a destination topic is created with --------------------------------------------------

# Apache Kafka 4.3's DescribeConfigs answer for a topic created with retention.ms set (measured;
# the configs no replicated name needs are left out): every topic config is listed, each with
# its source: 1 set on the topic, 3 a broker-wide dynamic default, 5 Kafka's built-in default.
KAFKA_ANSWER = [
    ConfigEntry("cleanup.policy", "delete", False, 5, False),
    ConfigEntry("compression.type", "producer", False, 5, False),
    ConfigEntry("delete.retention.ms", "86400000", False, 5, False),
    ConfigEntry("max.compaction.lag.ms", "9223372036854775807", False, 5, False),
    ConfigEntry("max.message.bytes", "1048588", False, 5, False),
    ConfigEntry("message.timestamp.type", "CreateTime", False, 5, False),
    ConfigEntry("min.compaction.lag.ms", "0", False, 5, False),
    ConfigEntry("min.insync.replicas", "1", False, 3, False),
    ConfigEntry("preallocate", "false", False, 5, False),
    ConfigEntry("retention.bytes", "-1", False, 5, False),
    ConfigEntry("retention.ms", "86400000", False, 1, False),
    ConfigEntry("segment.bytes", "1073741824", False, 5, False),
    ConfigEntry("segment.ms", "604800000", False, 5, False),
]
# The embedded broker's (Tansu 0.6.0) answer for the same topic: only what was set on the topic,
# labelled a default (measured).
EMBEDDED_ANSWER = [ConfigEntry("retention.ms", "86400000", False, 5, False)]


def test_a_destination_is_created_with_what_was_set_on_its_source_never_the_defaults() -> None:
    """Kafka lists every config with its source: only the topic's own are copied, so that the
    destination cluster's defaults and broker-wide settings apply to the rest (copying the
    source's defaults would pin them there as overrides)."""
    answer = as_kafka_reports(KAFKA_ANSWER)
    assert answer == KAFKA_ANSWER
    assert creation_configs(answer, EXCLUDE) == {"retention.ms": "86400000"}
    assert creation_configs(answer, re.compile(r"retention\.ms")) == {}


def test_a_broker_listing_only_a_topics_own_configs_as_defaults_is_read_as_kafka_reports() -> None:
    answer = as_kafka_reports(EMBEDDED_ANSWER)
    assert answer == [ConfigEntry("retention.ms", "86400000", False, 1, False)]
    assert creation_configs(answer, EXCLUDE) == {"retention.ms": "86400000"}
    assert as_kafka_reports([]) == []  # a topic with nothing set: nothing copied


def test_read_only_and_sensitive_configs_are_never_copied() -> None:
    answer = [
        *[e for e in KAFKA_ANSWER if e.name not in ("cleanup.policy", "segment.bytes")],
        ConfigEntry("cleanup.policy", "compact", True, 1, False),
        ConfigEntry("segment.bytes", None, False, 1, True),
    ]
    assert creation_configs(answer, EXCLUDE) == {"retention.ms": "86400000"}


def test_mirror_sync_with_source_defaults_creates_a_topic_as_its_first_round_sets_it() -> None:
    created = creation_configs(KAFKA_ANSWER, EXCLUDE, ConfigSync.MIRROR, DefaultsFrom.SOURCE)
    wanted = {
        e.name: e.value
        for e in KAFKA_ANSWER
        if e.value is not None and e.name in REPLICATED_CONFIGS and not EXCLUDE.fullmatch(e.name)
    }
    assert "min.insync.replicas" not in wanted  # excluded by default, as in MirrorMaker 2
    assert created == wanted
    overrides = {"retention.ms": "86400000"}
    assert mirrored_config_changes(overrides, wanted, created, EXCLUDE, DefaultsFrom.SOURCE) == {}
    # Defaults from the target: only what was set, as with raise-only.
    assert creation_configs(KAFKA_ANSWER, EXCLUDE, ConfigSync.MIRROR) == overrides
