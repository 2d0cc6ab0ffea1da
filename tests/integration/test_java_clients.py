"""Apache Kafka's own Java tools as the users' side: what they read of the replicator's work.

Kafka's console consumer (the ``kafka-clients`` Java consumer, ``isolation.level=read_committed``)
reads a destination topic and gets every record once, with its headers and the provenance;
``kafka-consumer-groups --describe`` shows each leg's consumer group at the log end (lag 0);
MirrorMaker 2's own client library (``java/MirrorClientReport.java``, run as a single-file Java
program) finds ``replicator mm2``'s heartbeats and translates a group's offsets from its
checkpoints exactly.
Apache Kafka only (its tools come with its jars).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from replicator.devtools.apache_kafka import kafka_tool
from tests.integration.harness import (
    BACKEND,
    Start,
    commit_offsets,
    create_topics,
    holds,
    produce,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)
from tests.integration.test_mm2_contract import (
    NUM_PARTITIONS,
    NUM_RECORDS_PRODUCED,
    checkpointed,
    create,
    mm2_props,
    produce_messages,
    start_mm2,
)

JAVA = Path(__file__).parent / "java"

pytestmark = pytest.mark.skipif(
    BACKEND != "kafka", reason="Apache Kafka's Java tools come with the Apache Kafka backend"
)


def test_a_java_consumer_reads_every_record_and_kafka_consumer_groups_shows_lag_0(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=2)
        process = replicators("dc1", replicator_env("dc1", brokers))
        process.wait_ready()
        sent = produce(brokers["dc1"], "orders_REPLICA", 200, partitions=2)
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 200), 60, broker.alias, process.log)
        wait_settled(process)

        out = kafka_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            *("--bootstrap-server", brokers["dc2"].bootstrap_servers),
            *("--topic", "orders", "--from-beginning", "--max-messages", "200"),
            *("--timeout-ms", "30000", "--isolation-level", "read_committed"),
            *("--property", "print.headers=true", "--property", "print.partition=true"),
            *("--property", "headers.separator=|", "--property", "print.value=true"),
            *("--group", "java-reader"),
        )
        lines = [line for line in out.splitlines() if line.startswith("Partition:")]
        assert len(lines) == 200, out[-2000:]
        # Partition:1 <tab> trace-id:t3|app:orders-service|replicator:dc1/orders_REPLICA/1/1
        # <tab> dc1-3
        seen = {}
        for line in lines:
            partition, headers, value = line.split("\t")
            tags = dict(h.split(":", 1) for h in headers.split("|"))
            seen[value] = (int(partition.removeprefix("Partition:")), tags["replicator"])
        assert len(seen) == 200, "a record read twice"
        for record in sent:
            assert record.value is not None
            origin = f"dc1/orders_REPLICA/{record.partition}/{record.offset}"
            assert seen[record.value.decode()] == (record.partition, origin)

        described = kafka_tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            *("--bootstrap-server", brokers["dc1"].bootstrap_servers),
            *("--describe", "--group", "replicator.dc1.dc2"),
        )
        rows = [
            line.split()
            for line in described.splitlines()
            if re.match(r"^replicator\.dc1\.dc2\s+orders_REPLICA\s", line)
        ]
        assert sorted(int(r[2]) for r in rows) == [0, 1], described
        for row in rows:
            current, end, lag = row[3], row[4], row[5]
            assert current == end and lag == "0", described
        assert sum(int(r[4]) for r in rows) == 200, described
        assert process.stop() == 0


def test_mirror_maker_2s_own_client_reads_the_checkpoints_and_heartbeats_exactly(
    replicators: Start, tmp_path: Path
) -> None:
    """MirrorMaker 2's client library (``MirrorClient``, ``RemoteClusterUtils.translateOffsets``)
    on the target of ``replicator mm2``: the source found upstream one hop away, its remote
    topic listed, and a group's positions translated exactly (each partition at its own offset,
    so a partition mixed up or a position approximated would show)."""
    group, remote = "consumer-group-java", "primary.test-topic-1"
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create(primary, {"test-topic-1": NUM_PARTITIONS})
        node = start_mm2(replicators, tmp_path, mm2_props(primary, backup))
        produce_messages(primary, "test-topic-1")
        wait_until(holds(backup, remote, NUM_RECORDS_PRODUCED), 60, remote, node.log)
        at = {p: p for p in range(NUM_PARTITIONS)}  # partition p read up to offset p
        commit_offsets(
            primary, group, {TopicPartition("test-topic-1", p): o for p, o in at.items()}
        )
        wait_until(
            checkpointed(backup, "primary", group, {(remote, p): o for p, o in at.items()}),
            60,
            "checkpoints",
            node.log,
        )

        out = kafka_tool(str(JAVA / "MirrorClientReport.java"), backup.bootstrap_servers,
                         "primary", group)  # fmt: skip
        lines = out.splitlines()
        assert "upstream [primary]" in lines, out
        assert "hops 1" in lines, out
        assert f"remote-topics [primary.heartbeats, {remote}]" in lines, out  # as MM2 lists them
        for what in ("checkpoint", "translated"):
            got = {int(line.split()[2]): int(line.split()[3])
                   for line in lines if line.startswith(f"{what} {remote} ")}  # fmt: skip
            assert got == at, out
        assert node.stop() == 0
