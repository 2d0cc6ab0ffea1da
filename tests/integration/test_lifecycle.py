"""Topics appearing at runtime, destination topic provisioning, and restart without loss."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from replicator.topics import describe_partitions
from tests.integration.harness import (
    Start,
    admin_client,
    count,
    create_topics,
    holds,
    produce,
    read,
    replicator_env,
    start_clusters,
    wait_until,
)


def test_topic_created_at_runtime_is_picked_up_within_seconds(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        create_topics(brokers["dc1"], late_REPLICA=2)
        produce(brokers["dc1"], "late_REPLICA", 50, partitions=2)
        took = wait_until(
            lambda: count(brokers["dc2"], "late") == 50 and count(brokers["dc1"], "late") == 50,
            30,
            "runtime topic replicated",
            dc1.log,
        )
        print(f"runtime topic replicated everywhere {took:.1f}s after its first records")
        assert dc1.stop() == 0


def test_destination_topic_gets_source_partitions_and_configs(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(
            brokers["dc1"],
            configs={"retention.ms": "3600000", "max.message.bytes": "2097152"},
            audit_REPLICA=5,
        )
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        produce(brokers["dc1"], "audit_REPLICA", 25, partitions=5)
        wait_until(lambda: count(brokers["dc2"], "audit") == 25, 30, "audit replicated", dc1.log)

        async def inspect() -> tuple[int, dict[str, str]]:
            admin = await admin_client(brokers["dc2"].bootstrap_servers)
            try:
                partitions = (await describe_partitions(admin))["audit"]
                responses = await admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, "audit")]
                )
            finally:
                await admin.close()
            configs = {e[0]: e[1] for r in responses for res in r.resources for e in res[4]}
            return len(partitions), configs

        partitions, configs = asyncio.run(inspect())
        assert partitions == 5
        assert configs.get("retention.ms") == "3600000"
        assert configs.get("max.message.bytes") == "2097152"
        # Same partition number on the destination as on the source.
        assert Counter(r.partition for r in read(brokers["dc2"], "audit")) == {
            p: 5 for p in range(5)
        }
        assert dc1.stop() == 0


def test_destination_with_fewer_partitions_blocks_only_that_topic(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], narrow_REPLICA=3, wide_REPLICA=2)
        create_topics(brokers["dc2"], narrow=1)
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_serving()
        produce(brokers["dc1"], "narrow_REPLICA", 30, partitions=3)
        produce(brokers["dc1"], "wide_REPLICA", 20, partitions=2)
        wait_until(lambda: count(brokers["dc2"], "wide") == 20, 30, "wide replicated", dc1.log)
        # The local leg is unaffected: narrow reaches dc1's own real topic.
        wait_until(lambda: count(brokers["dc1"], "narrow") == 30, 30, "narrow on dc1", dc1.log)
        status, body = dc1.get("/readyz")
        assert status == 503
        assert any("narrow" in p and "partitions" in p for p in body["problems"]), body
        assert count(brokers["dc2"], "narrow") == 0
        _, status_body = dc1.get("/status")
        remote = next(leg for leg in status_body["legs"] if leg["leg"] == "dc1->dc2")
        assert "narrow" in remote["refused_topics"]
        assert dc1.metric("replicator_topics_blocked", leg="dc1->dc2") == 1
        assert dc1.stop() == 0


def test_sigterm_during_a_stream_then_restart_loses_and_repeats_nothing(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=3)
        env = replicator_env("dc1", brokers)
        first = replicators("dc1", env)
        first.wait_ready()
        chunks, per_chunk = 20, 200

        def stream() -> None:
            for chunk in range(chunks):
                produce(brokers["dc1"], "orders_REPLICA", per_chunk, partitions=3, tag=f"-{chunk}")
                time.sleep(0.1)

        producer = threading.Thread(target=stream)
        producer.start()
        wait_until(holds(brokers["dc2"], "orders", per_chunk), 30, "stream flowing", first.log)
        # Stopped mid-stream: in-flight batches are drained and committed, the rest is left.
        assert first.stop() == 0
        assert '"stop requested, draining"' in first.log()
        stopped_at = {alias: count(b, "orders") for alias, b in brokers.items()}
        producer.join()
        assert all(n < chunks * per_chunk for n in stopped_at.values()), stopped_at

        second = replicators("dc1", env)
        second.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", chunks * per_chunk), 30, "the rest", second.log)
        time.sleep(2)
        for broker in brokers.values():
            values = Counter(r.value for r in read(broker, "orders"))
            assert len(values) == chunks * per_chunk, broker.alias
            assert set(values.values()) == {1}, f"duplicates on {broker.alias}"
        print(f"stopped mid-stream at {stopped_at}; resumed with no loss and no duplicate")
        assert second.stop() == 0
