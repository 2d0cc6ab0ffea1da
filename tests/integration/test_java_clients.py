"""Apache Kafka's own Java tools as the users' side: what they read of the replicator's work.

Kafka's console consumer (the ``kafka-clients`` Java consumer, ``isolation.level=read_committed``)
reads a destination topic and gets every record once, with its headers and the provenance;
``kafka-consumer-groups --describe`` shows each leg's consumer group at the log end (lag 0).
Apache Kafka only (its tools come with its jars).
"""

from __future__ import annotations

import re

import pytest

from replicator.devtools.apache_kafka import kafka_tool
from tests.integration.harness import (
    BACKEND,
    Start,
    create_topics,
    holds,
    produce,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)

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
