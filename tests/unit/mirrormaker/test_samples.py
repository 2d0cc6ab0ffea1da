"""The samples: MirrorMaker 1's documentation, the Go mirror maker's README, an MM2 file."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.config.values import DEFAULT_TOPICS_EXCLUDE, Naming, StartPosition
from replicator.mirrormaker import mirror_maker_translation, mm2_translation
from tests.unit.mirrormaker import test_support as support
from tests.unit.mirrormaker.test_support import GO_ARGS, MM1_ARGS, SAMPLES, refusal

FLOW1 = "REPLICATOR_FLOWS__KAFKA_SOURCE_SERVER1_6667_TO_KAFKA_TARGET_SERVER1_6667__"
FLOW2 = "REPLICATOR_FLOWS__KAFKA_SOURCE_SERVER1_6667_2_TO_KAFKA_TARGET_SERVER1_6667__"


@pytest.fixture
def mm1_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return support.mm1_fixed(tmp_path, monkeypatch)


def test_the_cloudera_sample_as_written_is_refused_naming_bootstrap_servers_and_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(SAMPLES / "mm1")
    error = refusal(mirror_maker_translation, MM1_ARGS)
    assert error.variable == "bootstrap.servers (in sourceCluster1Consumer.config)"
    assert "kafka-source-server3-6667 is not host:port" in error.message


def test_the_cloudera_sample_with_real_hosts(mm1_fixed: Path) -> None:
    translation = mirror_maker_translation(MM1_ARGS)
    env = translation.env
    assert list(env)[:2] == ["REPLICATOR_LOCAL_CLUSTER", "REPLICATOR_REPLICA_MODE"]
    assert env["REPLICATOR_LOCAL_CLUSTER"] == "kafka-target-server1-6667"
    assert env["REPLICATOR_REPLICA_MODE"] == "false"
    assert env["REPLICATOR_CLUSTERS__KAFKA-SOURCE-SERVER1-6667__BOOTSTRAP_SERVERS"] == (
        "kafka-source-server1:6667,kafka-source-server2:6667,kafka-source-server3:6667"
    )
    assert env["REPLICATOR_CLUSTERS__KAFKA-TARGET-SERVER1-6667__BOOTSTRAP_SERVERS"] == (
        "kafka-target-server1:6667,kafka-target-server2:6667,kafka-target-server3:6667"
    )
    for flow, source in (
        (FLOW1, "kafka-source-server1-6667"),
        (FLOW2, "kafka-source-server1-6667-2"),
    ):
        assert env[flow + "SOURCE"] == source
        assert env[flow + "TARGET"] == "kafka-target-server1-6667"
        assert env[flow + "NAMING"] == "identity"
        assert env[flow + "TOPICS_INCLUDE"] == ".*"
        assert env[flow + "GROUP_ID"] == "dp-MirrorMaker-group"
        assert env[flow + "START_FROM"] == "latest"  # Kafka's default auto.offset.reset
    assert env["REPLICATOR_BATCH_MAX_BYTES"] == "1024"  # batch.size=100, raised
    notes = "\n".join(translation.notes)
    for expected in (
        "acks (in targetClusterProducer.config): raised to all (from 1)",
        "batch.size (in targetClusterProducer.config): raised to 1024 (from 100)",
        "client.id (in targetClusterProducer.config): not used",
        "client.id (in sourceCluster1Consumer.config): not used",
        "exclude.internal.topics (in sourceCluster2Consumer.config): internal topics are always",
        "mirror.topics.whitelist (in sourceCluster1Consumer.config): the command line's",
        "--num.streams: partitions are the unit of concurrency",
        "--consumer.config: the sources are aggregated",
        "bootstrap.servers (in sourceCluster2Consumer.config): the same brokers and group as "
        "sourceCluster1Consumer.config",
        "--preserve.partitions (absent): records keep their source partition number",
    ):
        assert expected in notes
    settings = translation.settings()
    assert settings.local_cluster == "kafka-target-server1-6667"
    assert not settings.replica_mode
    assert sorted(settings.clusters) == [
        "kafka-source-server1-6667",
        "kafka-source-server1-6667-2",
        "kafka-target-server1-6667",
    ]
    first = settings.flows["kafka_source_server1_6667_to_kafka_target_server1_6667"]
    assert first.group_id == "dp-MirrorMaker-group"
    assert first.start_from is StartPosition.LATEST
    assert first.topics_exclude == DEFAULT_TOPICS_EXCLUDE
    assert settings.batch_max_bytes == 1024


def test_the_go_mirror_maker_sample(mm1_fixed: Path) -> None:
    translation = mirror_maker_translation(GO_ARGS)
    env = translation.env
    assert env[FLOW1 + "NAMING"] == "prefix"
    assert env[FLOW1 + "PREFIX"] == "dc1_"
    assert env["REPLICATOR_PARTITION_QUEUE_MAX_RECORDS"] == "10000"
    settings = translation.settings()
    assert settings.flows["kafka_source_server1_6667_2_to_kafka_target_server1_6667"].naming is (
        Naming.PREFIX
    )
    assert settings.partition_queue_max_records == 10000
    assert any(n.startswith("--queue.size: bounds the records") for n in translation.notes)
    assert not any(n.startswith("--preserve.partitions") for n in translation.notes)  # given


def test_the_go_mirror_maker_single_dash_spelling(mm1_fixed: Path) -> None:
    single = [a.replace("--", "-", 1) if a.startswith("--") else a for a in GO_ARGS]
    assert mirror_maker_translation(single).env == mirror_maker_translation(GO_ARGS).env


def test_zookeeper_era_files_are_refused_naming_zk_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(SAMPLES / "zk")
    args = ["--consumer.config", "sourceClusterConsumer.config"]
    args += ["--producer.config", "targetClusterProducer.config", "--whitelist", ".*"]
    error = refusal(mirror_maker_translation, args)
    assert error.variable == "zk.connect (in sourceClusterConsumer.config)"
    assert "bootstrap.servers" in error.message


def test_the_mm2_sample() -> None:
    translation = mm2_translation(SAMPLES / "connect-mirror-maker.properties")
    env = translation.env
    flow = "REPLICATOR_FLOWS__SOURCE_TO_DESTINATION__"
    assert env["REPLICATOR_LOCAL_CLUSTER"] == "destination"
    assert env["REPLICATOR_REPLICA_MODE"] == "false"
    assert env["REPLICATOR_CLUSTERS__SOURCE__BOOTSTRAP_SERVERS"] == (
        "localhost:9092,localhost:9092"
    )
    assert env[flow + "SOURCE"] == "source"
    assert env[flow + "TARGET"] == "destination"
    assert env[flow + "NAMING"] == "source-alias"
    assert env[flow + "TOPICS_INCLUDE"] == "toa.evehicles-latest-dev"
    assert env[flow + "TOPICS_EXCLUDE"] == f"{DEFAULT_TOPICS_EXCLUDE}|.*.internal|__.*"
    assert env[flow + "REPLICATION_FACTOR"] == "3"
    assert flow + "GROUP_ID" not in env
    notes = "\n".join(translation.notes)
    assert "'*.internal' is not a regular expression (a glob?): read as '.*.internal'" in notes
    for key in (
        "groups",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset-syncs.topic.replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
        "config.storage.replication.factor",
    ):
        assert sum(n.startswith(f"{key} (in ") for n in translation.notes) == 1, key
    settings = translation.settings()
    assert settings.flows["source_to_destination"].replication_factor == 3
    assert settings.flows["source_to_destination"].start_from is StartPosition.EARLIEST
