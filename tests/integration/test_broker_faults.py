"""Broker faults with persistent logs, on Apache Kafka: a destination broker restarted with its
data, the source broker restarted, and the partition leader killed in a three-node destination
cluster under load (``acks=all``, ``min.insync.replicas=2``). Every record reaches every
destination once, in order. The embedded broker keeps nothing across a restart and runs one
node: these run on Apache Kafka only.
"""

from __future__ import annotations

import shutil
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from replicator.devtools.apache_kafka import ApacheKafkaCluster, Node
from tests.fault_figures import FAULT_SUMMARY, FaultFigures
from tests.integration.harness import (
    BACKEND,
    Broker,
    Start,
    Stream,
    create_topics,
    default_timings_env,
    holds_distinct,
    kafka_cluster,
    oracle,
    peak_rss_mb,
    produce,
    read,
    replicator_env,
    run,
    start_clusters,
    wait_settled,
    wait_until,
)

pytestmark = pytest.mark.skipif(
    BACKEND != "kafka", reason="brokers restarted with their logs, three nodes: Apache Kafka only"
)


def check_exact(source: Broker, destinations: dict[str, Broker], scenario: str, rss: float) -> None:
    records = read(source, "orders_REPLICA")
    for alias, broker in destinations.items():
        report = oracle(records, read(broker, "orders"), "dc1")
        print(f"{scenario}: {alias}: {report}")
        FAULT_SUMMARY.append(
            FaultFigures(
                f"{scenario} ({alias})",
                report.source_records,
                len(report.missing),
                report.duplicates,
                rss,
                "",
            )
        )
        assert not report.missing and not report.out_of_order, f"{alias}: {report}"
        assert not report.duplicates, f"{alias}: {report}"


@pytest.mark.parametrize(
    ("restarted", "timings"),
    [("destination", "shortened"), ("source", "shortened"), ("source", "defaults")],
)
def test_a_broker_restarted_with_its_log_mid_stream_loses_and_repeats_nothing(
    replicators: Start, restarted: str, timings: str
) -> None:
    """``timings``: the harness's shortened ones (10 s session, 200 ms commits, 1 s metadata
    age), or every one at the product's default (the source broker holds the group's
    coordinator: the group must come back at the 45 s session too)."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=3)
        if timings == "defaults":
            env = default_timings_env("dc1", brokers, REPLICATOR_INSTANCE_ID="dc1-0")
        else:
            env = replicator_env("dc1", brokers)
        process = replicators("dc1", env)
        process.wait_ready()
        cluster = brokers["dc2" if restarted == "destination" else "dc1"]
        assert isinstance(cluster, ApacheKafkaCluster)
        # The source's own producers would fail over its restart too: they stop first.
        with Stream(local, "orders_REPLICA", 3, per_tick=30):
            wait_until(holds_distinct(brokers["dc2"], "orders", 200), 60, "flowing", process.log)
            if restarted == "destination":
                cluster.restart()
                time.sleep(3)
        if restarted == "source":
            cluster.restart()
            with Stream(local, "orders_REPLICA", 3, per_tick=30):
                time.sleep(3)
        total = len(read(local, "orders_REPLICA"))
        for alias, broker in brokers.items():
            wait_until(holds_distinct(broker, "orders", total), 120, alias, process.log)
        wait_settled(process)
        scenario = f"{restarted} broker restarted" + (
            ", default timings" if timings == "defaults" else ""
        )
        check_exact(local, brokers, scenario, peak_rss_mb(process))
        process.wait_ready()
        assert process.stop() == 0


async def _create_replicated(bootstrap: str, topic: str, partitions: int) -> None:
    """``topic`` with three replicas (the cluster's min.insync.replicas is 2)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 3)])
    finally:
        await admin.close()


async def _leader(bootstrap: str, topic: str, partition: int) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        for found in described["partitions"]:
            if found["partition"] == partition:
                return int(found["leader"])
    finally:
        await admin.close()
    raise AssertionError(f"{topic}-{partition} has no leader")


def test_the_destination_leader_killed_under_load_in_a_three_node_cluster(
    replicators: Start,
) -> None:
    """dc2 is three nodes (replication factor 3, min.insync.replicas 2); the leader of a
    partition the replicator writes to is SIGKILLed mid-stream, a new leader is elected from the
    in-sync replicas, and the node returns later. Nothing acknowledged is lost (acks=all), and
    the idempotent producer's retries write nothing twice."""
    dc2 = kafka_cluster("dc2", nodes_count=3)
    try:
        dc2.start()
        with start_clusters("dc1") as brokers:
            local = brokers["dc1"]
            create_topics(local, orders_REPLICA=3)
            run(_create_replicated(dc2.bootstrap_servers, "orders", 3))
            env = replicator_env("dc1", {**brokers, "dc2": dc2})
            process = replicators("dc1", env)
            process.wait_ready()
            with Stream(local, "orders_REPLICA", 3, per_tick=30):
                wait_until(holds_distinct(dc2, "orders", 200), 60, "flowing", process.log)
                leader_id = run(_leader(dc2.bootstrap_servers, "orders", 0))
                leader: Node = next(n for n in dc2.nodes if n.node_id == leader_id)
                dc2.kill_node(leader)
                killed_at = time.monotonic()
                time.sleep(8)  # fenced after the broker session timeout (4 s), a new leader
                dc2.start_node(leader)
                time.sleep(3)
            total = len(read(local, "orders_REPLICA"))
            destinations: dict[str, Broker] = {"dc1": local, "dc2": dc2}
            for alias, broker in destinations.items():
                wait_until(holds_distinct(broker, "orders", total), 120, alias, process.log)
            recovered = time.monotonic() - killed_at
            wait_settled(process, timeout=90)
            check_exact(
                local,
                destinations,
                f"dc2 leader killed (3 nodes), back after {recovered:.0f} s",
                peak_rss_mb(process),
            )
            assert process.stop() == 0
    finally:
        dc2.remove()


def test_a_destination_restored_from_an_older_copy_is_refilled_exactly(
    replicators: Start,
) -> None:
    """dc2's broker is restored from a copy of its data taken 300 records earlier (a backup, or
    what an unclean leader election does to a partition: acknowledged records gone, the log
    and the producer's state rolled back together). The idempotent producer's next batch is
    refused (OutOfOrderSequenceNumber: dc2 knows the producer at an older sequence); the
    partitions read dc2's tail, find it below the marks they committed, and write what dc2
    lost: every record once, in order, the refusals and the refilled partitions counted.
    (A producer whose state dc2 merely expired, ``producer.id.expiration.ms``, is accepted
    again by Apache Kafka 4 as a new one: nothing to recover there.)"""
    with start_clusters("dc1", "dc2") as brokers:
        local, dc2 = brokers["dc1"], brokers["dc2"]
        assert isinstance(dc2, ApacheKafkaCluster)
        create_topics(local, orders_REPLICA=3)
        process = replicators("dc1", replicator_env("dc1", brokers, idempotence="true"))
        process.wait_ready()
        produce(local, "orders_REPLICA", 300, partitions=3)
        wait_until(holds_distinct(dc2, "orders", 300), 60, "first records", process.log)
        wait_settled(process)
        backup = dc2.directory.parent / f"{dc2.directory.name}-backup"
        dc2.stop()
        shutil.copytree(dc2.directory, backup)
        dc2.start()
        produce(local, "orders_REPLICA", 300, partitions=3, tag="-b")
        wait_until(holds_distinct(dc2, "orders", 600), 60, "after the copy", process.log)
        wait_settled(process)
        dc2.stop()
        shutil.rmtree(dc2.directory)
        shutil.move(backup, dc2.directory)
        dc2.start()
        assert len(read(dc2, "orders")) == 300, "restored: the copy's 300 records"
        produce(local, "orders_REPLICA", 300, partitions=3, tag="-c")
        for alias, broker in brokers.items():
            wait_until(holds_distinct(broker, "orders", 900), 90, alias, process.log)
        wait_settled(process)
        check_exact(local, brokers, "destination restored from an older copy", peak_rss_mb(process))
        refused = sum(
            process.metric("replicator_send_errors_total", leg="dc1->dc2", error=name)
            for name in ("OutOfOrderSequenceNumber", "UnknownProducerId")
        )
        replaced = process.metric("replicator_destination_partitions_replaced_total")
        replayed = process.metric("replicator_records_replayed_total", leg="dc1->dc2")
        assert (replaced, replayed) == (3, 300), (replaced, replayed)  # what the copy lacked
        assert refused >= 1, process.log()
        assert process.metric("replicator_records_lost_total") == 0
        assert process.get("/readyz")[0] == 200
        assert process.stop() == 0
