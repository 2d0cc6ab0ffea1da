"""MirrorMaker 2 files: clusters, flows, policies, per-cluster security, heartbeats."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replicator.config.values import DEFAULT_TOPICS_EXCLUDE, Naming, StartPosition
from replicator.errors import ConfigError
from replicator.mirrormaker import mm2_translation
from tests.unit.mirrormaker.test_support import (
    PLAIN_JAAS,
    SECRET,
    TWO,
    mm2,
    mm2_error,
    notes_by_key,
)


def test_mm2_aliases_are_normalised_and_keep_their_topic_names(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\nus_west->A.enabled=true\n"
        "replication.policy.separator=_\nus_west->A.topics=orders\n",
    )
    env = translation.env
    assert env["REPLICATOR_LOCAL_CLUSTER"] == "us-west"
    assert env["REPLICATOR_CLUSTERS__A__TOPIC_ALIAS"] == "A"
    assert env["REPLICATOR_CLUSTERS__US-WEST__TOPIC_ALIAS"] == "us_west"
    settings = translation.settings()
    assert sorted(settings.flows) == ["a_to_us_west", "us_west_to_a"]
    flow = settings.flows["us_west_to_a"]
    assert (flow.source, flow.target, flow.naming, flow.separator) == (
        "us-west",
        "a",
        Naming.SOURCE_ALIAS,
        "_",
    )
    assert flow.topics_include == "orders"
    assert settings.flows["a_to_us_west"].topics_include == ".*"
    assert settings.flows["a_to_us_west"].topics_exclude == (
        DEFAULT_TOPICS_EXCLUDE + r"|.*[\-\.]internal|.*\.replica|__.*"
    )
    assert settings.clusters["a"].topic_alias == "A"
    (shell,) = translation.shell_notes()
    assert shell.startswith("REPLICATOR_CLUSTERS__US-WEST__*: a '-' in a variable name")


def test_mm2_identity_policy_and_flow_scoped_properties(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\n"
        "replication.policy.class=org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "replication.factor=3\nA->us_west.replication.factor=2\n"
        "topics.exclude=secret.*\nA->us_west.topics.blacklist=audit\n"
        "consumer.auto.offset.reset=earliest\nA->us_west.consumer.auto.offset.reset=latest\n"
        "refresh.topics.interval.seconds=30\nsync.group.offsets.enabled=true\n"
        "emit.heartbeats.enabled=false\ntasks.max=8\nkey.converter=x\n"
        "dedicated.mode.enable.internal.rest=true\nsync.topic.configs.enabled=true\n",
    )
    settings = translation.settings()
    flow = settings.flows["a_to_us_west"]
    assert flow.naming is Naming.IDENTITY
    assert flow.replication_factor == 2
    assert flow.topics_exclude == f"{DEFAULT_TOPICS_EXCLUDE}|secret.*"
    assert flow.start_from is StartPosition.LATEST
    assert settings.metadata_max_age_ms == 30_000
    notes = notes_by_key(translation)
    # MM2's defaults: checkpoints of every group but MM2's excluded ones; offsets synced as asked
    assert settings.sync_group_offsets and settings.sync_groups is not None
    assert re.fullmatch(settings.sync_groups, "orders-app")
    for excluded in ("console-consumer-12", "connect-mm2", "__internal"):
        assert not re.fullmatch(settings.sync_groups, excluded), excluded
    assert "emit.heartbeats.enabled" not in notes  # false: what happens here anyway
    for key in ("tasks.max", "key.converter", "dedicated.mode.enable.internal.rest"):
        assert key in notes, key
    assert "follow their source" in notes["sync.topic.configs.enabled"]


def test_mm2_per_cluster_security(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\nsecurity.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-256\n" + PLAIN_JAAS + "us_west.security.protocol=PLAINTEXT\n"
        "A.consumer.auto.offset.reset=latest\nA.producer.compression.type=lz4\n",
    )
    env = translation.env
    assert env["REPLICATOR_CLUSTERS__A__SASL_MECHANISM"] == "SCRAM-SHA-256"
    assert env["REPLICATOR_CLUSTERS__A__SASL_USERNAME"] == "alice"
    assert env["REPLICATOR_CLUSTERS__US-WEST__SECURITY_PROTOCOL"] == "PLAINTEXT"
    assert "REPLICATOR_CLUSTERS__US-WEST__SASL_USERNAME" not in env
    assert translation.shown_env()["REPLICATOR_CLUSTERS__A__SASL_PASSWORD"] == (
        f"<secret: from {tmp_path / 'mm2.properties'}>"
    )
    settings = translation.settings()
    assert settings.flows["a_to_us_west"].start_from is StartPosition.LATEST
    assert settings.compression.value == "lz4"
    assert SECRET not in "\n".join(translation.notes)


def test_mm2_plain_without_tls_is_refused_naming_the_property(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\nA.security.protocol=SASL_PLAINTEXT\n"
        "A.sasl.mechanism=PLAIN\nA." + PLAIN_JAAS,
    )
    with pytest.raises(ConfigError) as caught:
        translation.settings()
    assert caught.value.variable == f"A.sasl.mechanism (in {tmp_path / 'mm2.properties'})"
    assert "unencrypted" in caught.value.message and SECRET not in str(caught.value)
    allowed = "REPLICATOR_CLUSTERS__A__ALLOW_INSECURE_PLAIN"
    assert allowed in caught.value.message
    settings = translation.with_environment({allowed: "true"}).settings()
    assert settings.clusters["a"].allow_insecure_plain


def test_mm2_conflicting_client_credentials_are_refused(tmp_path: Path) -> None:
    error = mm2_error(
        tmp_path,
        TWO + "A->us_west.enabled=true\nA.consumer.security.protocol=SSL\n"
        "A.producer.security.protocol=PLAINTEXT\n",
    )
    assert "one way for all its clients" in error.message


@pytest.mark.parametrize(
    ("text", "variable", "words"),
    [
        ("A.bootstrap.servers=a:1\n", "clusters", "required"),
        (TWO, "<source>-><target>.enabled", "no flow is enabled"),
        (TWO + "A->us_west.enabled=false\n", "<source>-><target>.enabled", "no flow"),
        (
            "clusters=A,B\nA.bootstrap.servers=a:1\nA->B.enabled=true\n",
            "B.bootstrap.servers",
            "required",
        ),
        (
            TWO + "A->us_west.enabled=true\nreplication.policy.class=com.acme.Policy\n",
            "replication.policy.class",
            "com.acme.Policy is not supported",
        ),
        (TWO + "A->us_west.enabled=true\ntopics=(bad\n", "topics", "not a valid regular"),
        (
            TWO + "A->us_west.enabled=true\nA->us_west.topics.exclude=[x&&[^y]]\n",
            "A->us_west.topics.exclude",
            "Java-only",
        ),
        (
            TWO + "A->us_west.enabled=true\nA.zookeeper.connect=z:1\n",
            "A.zookeeper.connect",
            "ZooKeeper",
        ),
        (
            TWO + "A->us_west.enabled=true\nconfig.providers=file\n",
            "config.providers",
            "not supported",
        ),
        (
            TWO
            + "A->us_west.enabled=true\nA.security.protocol=SASL_SSL\nA.sasl.mechanism=GSSAPI\n",
            "A.sasl.mechanism",
            "GSSAPI",
        ),
        (
            TWO + "A->us_west.enabled=true\nA->us_west.consumer.auto.offset.reset=none\n",
            "A->us_west.consumer.auto.offset.reset",
            "earliest or latest",
        ),
    ],
)
def test_mm2_refusals_name_the_property(
    tmp_path: Path, text: str, variable: str, words: str
) -> None:
    error = mm2_error(tmp_path, text)
    assert error.variable == f"{variable} (in {tmp_path / 'mm2.properties'})"
    assert words in error.message


def test_mm2_notes_for_pairs_and_clusters_without_a_flow(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        "clusters=a,b,c\na.bootstrap.servers=a:1\nb.bootstrap.servers=b:1\n"
        "c.bootstrap.servers=c:1\na->b.enabled=true\nb->a.topics=x\nd->a.enabled=true\n"
        "a->b.emit.heartbeats.enabled=true\nunheard.of=1\n",
    )
    notes = "\n".join(translation.notes)
    assert "b->a.topics (in" in notes and "this flow is not enabled" in notes
    assert "d->a.enabled (in" in notes and "names no pair" in notes
    assert "c takes part in no enabled flow" in notes
    assert "unheard.of (in" in notes and "has no meaning here" in notes
    assert "a->b.emit.heartbeats.enabled (in" in notes
    assert "each flow writes its heartbeats into its target's heartbeats topic" in notes
    assert "REPLICATOR_FLOWS__A_TO_B__HEARTBEATS" not in translation.env  # true: the default
    # No flow b->a: MirrorMaker 2 still writes b->a heartbeats into a, which a->b copies.
    assert translation.env["REPLICATOR_FLOWS__A_TO_B__REVERSE_HEARTBEATS"] == "true"
    assert "no flow b->a is enabled, but MirrorMaker 2 runs its heartbeats" in notes
    assert translation.env["REPLICATOR_HEARTBEAT_PLACEMENT"] == "mirrormaker2"
    assert "REPLICATOR_CLUSTERS__C__BOOTSTRAP_SERVERS" not in translation.env
    translation.settings()


# ---------------------------------------------------------------- heartbeats

HEARTBEATS = "REPLICATOR_FLOWS__{}__HEARTBEATS"
BOTH_WAYS = TWO + "A->us_west.enabled=true\nus_west->A.enabled=true\n"


def test_mm2_heartbeats_off_everywhere_or_for_one_flow(tmp_path: Path) -> None:
    translation = mm2(tmp_path, BOTH_WAYS + "emit.heartbeats.enabled=false\n")
    assert translation.env[HEARTBEATS.format("A_TO_US_WEST")] == "false"
    assert translation.env[HEARTBEATS.format("US_WEST_TO_A")] == "false"
    assert "REPLICATOR_HEARTBEAT_INTERVAL_MS" not in translation.env
    settings = translation.settings()
    assert not any(flow.heartbeats for flow in settings.flows.values())
    assert not any(n.startswith("emit.heartbeats") for n in translation.notes)

    translation = mm2(
        tmp_path,
        BOTH_WAYS + "emit.heartbeats.enabled=true\nus_west->A.emit.heartbeats.enabled=false\n",
    )
    settings = translation.settings()
    assert settings.flows["a_to_us_west"].heartbeats
    assert not settings.flows["us_west_to_a"].heartbeats
    assert translation.origins[HEARTBEATS.format("US_WEST_TO_A")].startswith(
        "us_west->A.emit.heartbeats.enabled (in "
    )


def test_mm2_heartbeat_interval_in_milliseconds(tmp_path: Path) -> None:
    translation = mm2(tmp_path, BOTH_WAYS + "emit.heartbeats.interval.seconds=5\n")
    assert translation.env["REPLICATOR_HEARTBEAT_INTERVAL_MS"] == "5000"
    assert translation.settings().heartbeat_interval_ms == 5000
    where = [n for n in translation.notes if "writes its heartbeats into its target's" in n]
    assert len(where) == 1  # said once
    assert not any("one interval for every flow" in n for n in translation.notes)


def test_mm2_heartbeat_intervals_that_disagree_take_the_smallest(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        BOTH_WAYS + "emit.heartbeats.interval.seconds=10\nus_west->A.emit.heartbeats.interval"
        ".seconds=3\n",
    )
    assert translation.env["REPLICATOR_HEARTBEAT_INTERVAL_MS"] == "3000"
    origin = translation.origins["REPLICATOR_HEARTBEAT_INTERVAL_MS"]
    assert origin.startswith("us_west->A.emit.heartbeats.interval.seconds (in ")
    (note,) = [n for n in translation.notes if "one interval for every flow" in n]
    assert note.startswith(origin + ": ")
    assert "the smallest, 3000 ms, applies to all" in note
    assert "a_to_us_west: 10000 ms" in note and "us_west_to_a: 3000 ms" in note
    translation.settings()


def test_mm2_default_heartbeat_interval_counts_when_another_flow_sets_one(tmp_path: Path) -> None:
    translation = mm2(tmp_path, BOTH_WAYS + "A->us_west.emit.heartbeats.interval.seconds=30\n")
    assert translation.env["REPLICATOR_HEARTBEAT_INTERVAL_MS"] == "1000"
    assert "MirrorMaker 2's default" in translation.origins["REPLICATOR_HEARTBEAT_INTERVAL_MS"]
    assert any("us_west_to_a: 1000 ms (MirrorMaker 2's default)" in n for n in translation.notes)


def test_mm2_negative_heartbeat_interval_turns_heartbeats_off(tmp_path: Path) -> None:
    translation = mm2(tmp_path, BOTH_WAYS + "A->us_west.emit.heartbeats.interval.seconds=-1\n")
    settings = translation.settings()
    assert not settings.flows["a_to_us_west"].heartbeats
    assert settings.flows["us_west_to_a"].heartbeats
    assert "REPLICATOR_HEARTBEAT_INTERVAL_MS" not in translation.env
    assert any("negative: no heartbeats" in n for n in translation.notes)


def test_mm2_heartbeat_interval_of_flows_without_heartbeats_is_noted_as_ignored(
    tmp_path: Path,
) -> None:
    translation = mm2(
        tmp_path,
        BOTH_WAYS + "emit.heartbeats.enabled=false\nemit.heartbeats.interval.seconds=5\n",
    )
    assert "REPLICATOR_HEARTBEAT_INTERVAL_MS" not in translation.env
    notes = notes_by_key(translation)
    assert notes["emit.heartbeats.interval.seconds"].endswith(
        "ignored: no flow it applies to emits heartbeats"
    )


def test_mm2_heartbeats_topic_replication_factor_is_explained(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path, BOTH_WAYS + "heartbeats.topic.replication.factor=1\nreplication.factor=2\n"
    )
    note = notes_by_key(translation)["heartbeats.topic.replication.factor"]
    assert "created where heartbeats are written (if missing) with one partition" in note
    assert "the flow's REPLICATION_FACTOR" in note
    assert "REPLICATOR_HEARTBEAT_INTERVAL_MS" not in translation.env


@pytest.mark.parametrize(
    ("text", "variable", "words"),
    [
        ("emit.heartbeats.enabled=sometimes\n", "emit.heartbeats.enabled", "true or false"),
        ("emit.heartbeats.interval.seconds=0\n", "emit.heartbeats.interval.seconds", "0 would"),
        (
            "A->us_west.emit.heartbeats.interval.seconds=soon\n",
            "A->us_west.emit.heartbeats.interval.seconds",
            "whole number",
        ),
    ],
)
def test_mm2_heartbeat_refusals_name_the_property(
    tmp_path: Path, text: str, variable: str, words: str
) -> None:
    error = mm2_error(tmp_path, BOTH_WAYS + text)
    assert error.variable == f"{variable} (in {tmp_path / 'mm2.properties'})"
    assert words in error.message


def test_mm2_topic_config_sync_properties(tmp_path: Path) -> None:
    base = "clusters=a,b\na.bootstrap.servers=x:1\nb.bootstrap.servers=y:1\na->b.enabled=true\n"
    config = tmp_path / "mm2.properties"
    config.write_text(
        base + "sync.topic.configs.interval.seconds=30\n"
        "config.properties.exclude=min\\\\.insync\\\\.replicas, delete\\\\.retention\\\\..*\n"
    )
    settings = mm2_translation(config).settings()
    assert settings.topic_config_sync_interval_ms == 30_000
    assert settings.topic_configs_exclude == r"min\.insync\.replicas|delete\.retention\..*"
    config.write_text(base + "sync.topic.configs.enabled=false\n")
    assert mm2_translation(config).settings().topic_config_sync_interval_ms == 0
    config.write_text(base + "sync.topic.configs.enabled=maybe\n")
    with pytest.raises(ConfigError) as refused:
        mm2_translation(config)
    assert "sync.topic.configs.enabled" in refused.value.variable


def test_mm2_checkpoint_and_group_sync_properties(tmp_path: Path) -> None:
    translation = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\n"
        "groups=app.*, billing\ngroups.exclude=app-test.*\n"
        "emit.checkpoints.interval.seconds=30\nsync.group.offsets.interval.seconds=10\n"
        "A->us_west.groups=other\n",
    )
    settings = translation.settings()
    assert settings.sync_groups is not None and not settings.sync_group_offsets
    assert settings.sync_groups_interval_ms == 10_000  # one interval for both: the shorter
    for group, synced in (("app-orders", True), ("billing", True), ("app-test-1", False)):
        assert bool(re.fullmatch(settings.sync_groups, group)) is synced, group
    notes = notes_by_key(translation)
    assert "give it without the flow" in notes["A->us_west.groups"]
    off = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\nemit.checkpoints.enabled=false\ngroups=app.*\n",
    )
    assert off.settings().sync_groups is None
    assert "checkpoints are off" in notes_by_key(off)["groups"]
    # MM2's checkpoint connector does not run without offset syncs, whatever else is asked.
    no_syncs = mm2(
        tmp_path,
        TWO + "A->us_west.enabled=true\nemit.offset-syncs.enabled=false\n"
        "sync.group.offsets.enabled=true\n",
    )
    assert no_syncs.settings().sync_groups is None
    assert not no_syncs.settings().sync_group_offsets
    note = notes_by_key(no_syncs)["emit.offset-syncs.enabled"]
    assert "refuses to run its checkpoint connector" in note
    assert "sync.group.offsets.enabled have no effect" in note  # nothing dropped silently


def test_mm2_reverse_heartbeats_follow_the_reverse_directions_properties(tmp_path: Path) -> None:
    """A flow whose reverse direction no flow runs writes that direction's heartbeats into its
    source (as MirrorMaker 2's herder of it does), unless its properties turn them off; both
    directions enabled: each flow writes into its own target only."""
    one_way = "clusters=a,b\na.bootstrap.servers=a:1\nb.bootstrap.servers=b:1\na->b.enabled=true\n"
    for off in ("b->a.emit.heartbeats.enabled=false\n", "emit.heartbeats.enabled=false\n"):
        translation = mm2(tmp_path, one_way + off)
        assert "REPLICATOR_FLOWS__A_TO_B__REVERSE_HEARTBEATS" not in translation.env, off
    both = mm2(tmp_path, one_way + "b->a.enabled=true\n")
    assert not any(k.endswith("__REVERSE_HEARTBEATS") for k in both.env)
    settings = mm2(tmp_path, one_way).settings()
    assert settings.flows["a_to_b"].reverse_heartbeats
    assert settings.heartbeat_placement.value == "mirrormaker2"


def test_mm2_topic_acl_sync_is_on_by_default_as_in_mirror_maker_2(tmp_path: Path) -> None:
    base = (
        "clusters=a,b\na.bootstrap.servers=x:1\nb.bootstrap.servers=y:1\n"
        "a->b.enabled=true\nb->a.enabled=true\n"
    )
    config = tmp_path / "mm2.properties"
    config.write_text(base)
    translated = mm2_translation(config)
    settings = translated.settings()
    assert {name: flow.acl_sync.value for name, flow in settings.flows.items()} == {
        "a_to_b": "mm2",
        "b_to_a": "mm2",
    }
    assert settings.acl_sync_interval_ms == 60_000
    assert any("ALLOW Write left out" in note for note in translated.notes)
    config.write_text(
        base + "b->a.sync.topic.acls.enabled=false\nsync.topic.acls.interval.seconds=5\n"
    )
    settings = mm2_translation(config).settings()
    assert settings.flows["a_to_b"].acl_sync.value == "mm2"
    assert settings.flows["b_to_a"].acl_sync.value == "off"
    assert settings.acl_sync_interval_ms == 5_000
    config.write_text(base + "sync.topic.acls.enabled=false\n")
    assert {f.acl_sync.value for f in mm2_translation(config).settings().flows.values()} == {"off"}
    config.write_text(base + "sync.topic.acls.interval.seconds=-1\n")
    assert {f.acl_sync.value for f in mm2_translation(config).settings().flows.values()} == {"off"}
    config.write_text(base + "sync.topic.acls.interval.seconds=0\n")
    with pytest.raises(ConfigError) as zero:
        mm2_translation(config)
    assert "sync.topic.acls.interval.seconds" in zero.value.variable
    config.write_text(base + "sync.topic.acls.enabled=sometimes\n")
    with pytest.raises(ConfigError) as refused:
        mm2_translation(config)
    assert "sync.topic.acls.enabled" in refused.value.variable
