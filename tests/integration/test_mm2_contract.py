"""MirrorMaker 2's own integration tests, ported to ``replicator mm2 FILE``.

From apache/kafka ``connect/mirror/src/test/java/org/apache/kafka/connect/mirror/integration/``:
``MirrorConnectorsIntegrationBaseTest`` (testReplication both ways and one way,
testReplicationWithEmptyPartition, testOneWayReplicationWithAutoOffsetSync,
testReplicateFromLatest, testNoCheckpointsIfNoRecordsAreMirrored, testRestartReplication,
testOffsetTranslationBehindReplicationFlow),
``IdentityReplicationIntegrationTest`` (those with its policy, and testReplication both ways with
records in both clusters before the first start) and ``DedicatedMirrorIntegrationTest``'s
testMultiNodeCluster, with MM2's cluster aliases (``primary``, ``backup``; ``A`` and a
convoluted ``B``), its properties (``mm2Props``), topic names, group names and counts. What those
tests read of MM2's internals (Connect REST states and task configs, the offset-syncs and
``primary.checkpoints.internal`` topics, ``MirrorClient``) is asserted as a user sees it: remote
topics, their records, the group's committed offsets on the target, heartbeat topics as
``MirrorClient.upstreamClusters()`` and ``replicationHops()`` read their names, ``/status``.
Where this product is deliberately stronger the test says so and asserts the stronger behaviour:
a synced group's position is exact (MM2 allows up to ``offset.lag.max`` records read again) and
nothing is copied twice, a rolling restart under load included.

Elsewhere, and why: config sync (testSyncTopicConfigs, testReplicateSourceDefault,
testReplicateTargetDefault) needs a broker that reports a topic's own configs as such (the
embedded one labels them defaults): ``test_topic_changes.py`` runs it on Apache Kafka. The
exactly-once test's "alter offsets" moves a flow's committed offsets back through Connect's REST
offsets API; here the flow's group is moved back with any Kafka tool, and
``test_flows.py::test_a_flows_committed_offsets_moved_back_copy_nothing_twice`` asserts what
then happens (nothing copied twice: MM2 copies the records again).
testNoCheckpointsIfNoRecordsAreMirrored differs on purpose (a position 0 is checkpointed: it is
exact, and docs/concepts/failover.md says why); more restarts and failover are in
``test_failover.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from replicator.kafka.readers import StoredRecord, partitions_of
from tests.integration.harness import (
    Broker,
    ReplicatorProcess,
    Start,
    Stream,
    _create_topics,
    commit_offsets,
    holds,
    oracle,
    produce_records,
    read,
    run,
    start_clusters,
    wait_settled,
    wait_until,
)
from tests.integration.test_failover import consume
from tests.integration.test_flows import run_topics as topics
from tests.unit.failover.test_checkpoints import read_mm2

NUM_PARTITIONS = 10
NUM_RECORDS_PER_PARTITION = 10
NUM_RECORDS_PRODUCED = NUM_PARTITIONS * NUM_RECORDS_PER_PARTITION  # 100
OFFSET_LAG_MAX = 10
ENV = {"REPLICATOR_LOG_FORMAT": "json", "REPLICATOR_COMMIT_INTERVAL_MS": "200"}
OFFSET_SYNC = (  # what MM2's offset-sync tests add to mm2Props
    "sync.group.offsets.enabled = true",
    "sync.group.offsets.interval.seconds = 1",
    f"offset.lag.max = {OFFSET_LAG_MAX}",
)


COMPACT = {"cleanup.policy": "compact"}
IDENTITY = "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def mm2_props(primary: Broker, backup: Broker, *extra: str) -> str:
    """MM2's ``mm2Props`` (the base test's setup), one way: ``backup->primary.enabled=false``."""
    return "\n".join(
        [
            "clusters = primary, backup",
            f"primary.bootstrap.servers = {primary.bootstrap_servers}",
            f"backup.bootstrap.servers = {backup.bootstrap_servers}",
            "groups = consumer-group-.*",
            "sync.topic.acls.enabled = false",
            "emit.checkpoints.interval.seconds = 1",
            "emit.heartbeats.interval.seconds = 1",
            "refresh.topics.interval.seconds = 1",
            "refresh.groups.interval.seconds = 1",
            "checkpoints.topic.replication.factor = 1",
            "heartbeats.topic.replication.factor = 1",
            "offset-syncs.topic.replication.factor = 1",
            "config.storage.replication.factor = 1",
            "offset.storage.replication.factor = 1",
            "status.storage.replication.factor = 1",
            "replication.factor = 1",
            "primary.offset.flush.interval.ms = 5000",
            "backup.offset.flush.interval.ms = 5000",
            "primary->backup.enabled = true",
            "backup->primary.enabled = false",
            "topics = test-topic-.*, primary.test-topic-.*, backup.test-topic-.*",
            "config.properties.exclude = delete\\\\.retention\\\\..*",
            "sync.topic.configs.interval.seconds = 1",
            *extra,
        ]
    )


def create(broker: Broker, partitions: dict[str, int]) -> None:
    run(_create_topics(broker.bootstrap_servers, partitions, {}))


def produce_messages(
    broker: Broker,
    topic: str,
    partitions: int = NUM_PARTITIONS,
    per_partition: int = NUM_RECORDS_PER_PARTITION,
) -> None:
    """MM2's ``produceMessages(p, topic, n)``: 10 records to each of partitions 0..n-1."""
    records = [
        StoredRecord(topic, p, -1, b"key-%d" % i, b"value-%d" % i, (), int(time.time() * 1000))
        for p in range(partitions)
        for i in range(per_partition)
    ]
    produce_records(broker, topic, records)


async def _produce_keyed(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(count):  # one at a time, each acknowledged, as MM2's test sends them
            await producer.send_and_wait(topic, key=b"key-%d" % i, value=b"message-%d" % i)
    finally:
        await producer.stop()


def produce_keyed(broker: Broker, topic: str, count: int = NUM_RECORDS_PRODUCED) -> None:
    """MM2's ``produceMessages(p, topic)``: ``count`` records keyed ``key-<i>``, valued
    ``message-<i>``, placed by the default partitioner (murmur2 of the key, as Java's), stamped
    by the producer."""
    run(_produce_keyed(broker.bootstrap_servers, topic, count))


def upstream_clusters(broker: Broker) -> dict[str, int]:
    """What ``MirrorClient.upstreamClusters()`` and ``replicationHops()`` read: each cluster a
    heartbeat topic name says the cluster's data came through, with its fewest hops."""
    hops: dict[str, int] = {}
    for topic in topics(broker):
        parts = topic.split(".")
        if parts[-1] != "heartbeats" or len(parts) < 2:
            continue
        for depth, alias in enumerate(reversed(parts[:-1]), start=1):
            hops[alias] = min(hops.get(alias, depth), depth)
    return hops


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    """``group``'s committed offsets of ``topic`` (read as a consumer: no member joins)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = await partitions_of(consumer, topic)
        return {tp.partition: await consumer.committed(tp) for tp in tps}
    finally:
        await consumer.stop()


def committed(broker: Broker, group: str, topic: str) -> dict[int, int | None]:
    return run(_committed(broker.bootstrap_servers, group, topic))


def log_ends(broker: Broker, topic: str) -> dict[int, int]:
    """Each partition's end, counted by reading (the embedded broker's ListOffsets is off)."""
    ends: dict[int, int] = {}
    for record in read(broker, topic):
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return ends


def start_mm2(replicators: Start, tmp: Path, text: str) -> ReplicatorProcess:
    config = tmp / "connect-mirror-maker.properties"
    config.write_text(text)
    process = replicators("backup", ENV, ("mm2", str(config)))
    process.wait_ready()
    return process


def test_one_way_replication_with_offset_sync_as_mm2_tests_it(
    replicators: Start, tmp_path: Path
) -> None:
    """testReplication (one way), testOneWayReplicationWithAutoOffsetSync and
    testReplicationWithEmptyPartition on one pair of clusters."""
    synced = "consumer-group-testOneWayReplicationWithAutoOffsetSync"
    empty = "consumer-group-testReplicationWithEmptyPartition"
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create(primary, {"test-topic-1": NUM_PARTITIONS})
        create(primary, {"test-topic-with-empty-partition": NUM_PARTITIONS})
        create(backup, {"test-topic-1": NUM_PARTITIONS})
        produce_messages(primary, "test-topic-1")
        produce_messages(backup, "test-topic-1")  # backup's own records: never copied back
        produce_messages(primary, "test-topic-with-empty-partition", NUM_PARTITIONS - 1)
        # The groups consume everything on primary, commit, and close (no member anywhere).
        assert len(consume(primary, "test-topic-1", synced)) == NUM_RECORDS_PRODUCED
        assert len(consume(primary, "test-topic-with-empty-partition", empty)) == 90
        start_mm2(
            replicators,
            tmp_path,
            mm2_props(primary, backup, *OFFSET_SYNC),
        )

        # testReplication: the remote topics and every record, once.
        remote = "primary.test-topic-1"
        wait_until(lambda: remote in topics(backup), 30, remote)
        wait_until(lambda: len(read(backup, remote)) >= NUM_RECORDS_PRODUCED, 30, "records")
        assert len(read(primary, "test-topic-1")) == NUM_RECORDS_PRODUCED
        copies = read(backup, remote)
        assert len({str(r.provenance) for r in copies}) == len(copies) == NUM_RECORDS_PRODUCED
        assert len(read(backup, "test-topic-1")) == NUM_RECORDS_PRODUCED
        assert "backup.test-topic-1" not in topics(primary)  # one way
        # Heartbeats, and what MirrorClient makes of them on backup.
        for broker, topic in (
            (primary, "heartbeats"),
            (backup, "heartbeats"),
            (backup, "primary.heartbeats"),
        ):
            wait_until(holds(broker, topic, 1), 30, f"{topic} in {broker.alias}")
        assert upstream_clusters(backup) == {"primary": 1}  # upstreamClusters, replicationHops

        # testOneWayReplicationWithAutoOffsetSync: the group's position synced to backup. MM2
        # allows it up to offset.lag.max behind; here it is exact: nothing is read again.
        ends = log_ends(backup, remote)
        wait_until(lambda: committed(backup, synced, remote) == ends, 30, "offsets synced")
        assert consume(backup, remote, synced) == []  # no redelivery (MM2: fewer than 10)

        # testReplicationWithEmptyPartition: 10 partitions on backup too, the empty one's
        # position is 0, and the group reads nothing again there.
        empty_remote = "primary.test-topic-with-empty-partition"
        wait_until(lambda: len(read(backup, empty_remote)) >= 90, 30, empty_remote)
        wait_until(
            lambda: committed(backup, empty, empty_remote).get(NUM_PARTITIONS - 1) == 0,
            30,
            "the empty partition's position",
        )
        assert len(committed(backup, empty, empty_remote)) == NUM_PARTITIONS
        assert consume(backup, empty_remote, empty) == []

        # testReplication's new topic: created on primary, mirrored with its records.
        create(primary, {"test-topic-2": NUM_PARTITIONS})
        wait_until(lambda: "primary.test-topic-2" in topics(backup), 60, "primary.test-topic-2")
        produce_messages(primary, "test-topic-2", partitions=1)
        wait_until(lambda: len(read(backup, "primary.test-topic-2")) >= 10, 60, "its records")
        assert len(read(backup, "primary.test-topic-2")) == NUM_RECORDS_PER_PARTITION


def remote_consumer_offsets(
    broker: Broker, source: str, group: str, monotonic: bool = True
) -> dict[tuple[str, int], int]:
    """What ``MirrorClient.remoteConsumerOffsets(group, source)`` returns: ``group``'s newest
    translated position per partition, from ``<source>.checkpoints.internal`` in MM2's format.
    ``monotonic``: each partition's positions, in order, never go back (MM2's
    assertMonotonicCheckpoints; a group moved back in the source is moved back here too)."""
    found: dict[tuple[str, int], int] = {}
    for record in read(broker, f"{source}.checkpoints.internal"):
        assert record.key is not None and record.value is not None
        name, topic, partition, _, downstream, _ = read_mm2(record.key, record.value)
        if name == group:
            if monotonic:
                assert downstream >= found.get((topic, partition), 0), (topic, partition)
            found[(topic, partition)] = downstream
    return found


def checkpointed(
    broker: Broker,
    source: str,
    group: str,
    positions: dict[tuple[str, int], int],
    monotonic: bool = True,
) -> Callable[[], bool]:
    """A predicate: MirrorClient would read exactly ``positions`` for ``group``."""
    return lambda: remote_consumer_offsets(broker, source, group, monotonic) == positions


def test_two_way_replication_as_mm2_tests_it(replicators: Start, tmp_path: Path) -> None:
    """testReplication, both ways: each cluster's records in the other's remote topic once,
    heartbeats and upstream clusters both ways, no cycle, checkpoints in MM2's topic and format
    read as MirrorClient reads them (MM2 asserts a failed-over position in (0, 100]; here it is
    exactly each partition's end: nothing is read again), and new topics on either side."""
    group = "consumer-group-testReplication"
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        for broker in (primary, backup):
            create(broker, {"test-topic-1": NUM_PARTITIONS})
            produce_messages(broker, "test-topic-1")
            assert len(consume(broker, "test-topic-1", group)) == NUM_RECORDS_PRODUCED
        start_mm2(
            replicators,
            tmp_path,
            mm2_props(primary, backup).replace(
                "backup->primary.enabled = false", "backup->primary.enabled = true"
            ),
        )
        for broker, remote, origin in (
            (backup, "primary.test-topic-1", "primary"),
            (primary, "backup.test-topic-1", "backup"),
        ):
            wait_until(holds(broker, remote, NUM_RECORDS_PRODUCED), 60, remote)
            copies = read(broker, remote)
            tags = {(o.cluster, o.partition, o.offset) for r in copies if (o := r.provenance)}
            assert len(copies) == len(tags) == NUM_RECORDS_PRODUCED
            assert {cluster for cluster, _, _ in tags} == {origin}
            assert len(read(broker, "test-topic-1")) == NUM_RECORDS_PRODUCED  # its own, alone
        for broker, topic in (
            (primary, "heartbeats"),
            (backup, "heartbeats"),
            (backup, "primary.heartbeats"),
            (primary, "backup.heartbeats"),
        ):
            wait_until(holds(broker, topic, 1), 30, f"{topic} in {broker.alias}")
        assert upstream_clusters(backup) == {"primary": 1}
        assert upstream_clusters(primary) == {"backup": 1}
        assert not [t for t in topics(primary) if t.startswith("primary.")]  # no cycle
        assert not [t for t in topics(backup) if t.startswith("backup.")]

        # The failover and the failback positions, as MirrorClient reads the checkpoints.
        for broker, source, remote in (
            (backup, "primary", "primary.test-topic-1"),
            (primary, "backup", "backup.test-topic-1"),
        ):
            ends = {(remote, p): end for p, end in log_ends(broker, remote).items()}
            assert len(ends) == NUM_PARTITIONS
            wait_until(
                checkpointed(broker, source, group, ends),
                30,
                f"{group}'s checkpoints in {source}.checkpoints.internal",
            )

        # New topics on either side are mirrored with their records.
        for broker, other, topic, remote in (
            (primary, backup, "test-topic-2", "primary.test-topic-2"),
            (backup, primary, "test-topic-3", "backup.test-topic-3"),
        ):
            create(broker, {topic: NUM_PARTITIONS})
            wait_until(holds_topic(other, remote), 60, remote)
            produce_messages(broker, topic, partitions=1)
            wait_until(holds(other, remote, NUM_RECORDS_PER_PARTITION), 60, f"{remote}'s records")
            assert len(read(other, remote)) == NUM_RECORDS_PER_PARTITION


def test_identity_replication_from_latest_as_mm2_tests_it(
    replicators: Start, tmp_path: Path
) -> None:
    """IdentityReplicationIntegrationTest's testReplication with testReplicateFromLatest:
    topics keep their names, heartbeats still arrive as primary.heartbeats, and with
    primary.consumer.auto.offset.reset=latest nothing written before the start is copied."""
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create(primary, {"test-topic-1": NUM_PARTITIONS, "test-topic-sentinel": 1})
        create(backup, {"test-topic-1": NUM_PARTITIONS})
        # Before the start, not copied. Each partition's last record in a batch of its own:
        # the embedded broker answers ListOffsets(LATEST) with the last batch's base + 1.
        produce_messages(primary, "test-topic-1", per_partition=NUM_RECORDS_PER_PARTITION - 1)
        produce_messages(primary, "test-topic-1", per_partition=1)
        start_mm2(
            replicators,
            tmp_path,
            mm2_props(
                primary,
                backup,
                "replication.policy.class = "
                "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
                "primary.consumer.auto.offset.reset = latest",
            ).replace(
                "topics = test-topic-.*, primary.test-topic-.*, backup.test-topic-.*",
                "topics = test-topic-.*",
            ),
        )
        # The sentinel proves the flow polls before the records that count are written.
        sentinel = StoredRecord("test-topic-sentinel", 0, -1, None, b"sentinel-value", (), 0)

        def sentinel_copied() -> bool:
            produce_records(primary, "test-topic-sentinel", [sentinel])
            return len(read(backup, "test-topic-sentinel")) > 0

        wait_until(sentinel_copied, 30, "the sentinel")
        produce_messages(primary, "test-topic-1")
        wait_until(lambda: len(read(backup, "test-topic-1")) >= NUM_RECORDS_PRODUCED, 30, "records")
        copied = read(backup, "test-topic-1")
        origins = [r.provenance for r in copied]
        assert all(o is not None and o.cluster == "primary" for o in origins)
        # Every copy is of a record written after the start (each partition's offsets 10-19).
        assert sorted((o.partition, o.offset) for o in origins if o is not None) == [
            (p, NUM_RECORDS_PER_PARTITION + i)
            for p in range(NUM_PARTITIONS)
            for i in range(NUM_RECORDS_PER_PARTITION)
        ]
        assert "primary.test-topic-1" not in topics(backup)  # identity: the same name
        # The identity policy still names remote heartbeats by their source (MM2 does).
        wait_until(lambda: len(read(backup, "primary.heartbeats")) > 0, 30, "primary.heartbeats")
        assert upstream_clusters(backup) == {"primary": 1}


def identity_both_ways(primary: Broker, backup: Broker, *extra: str) -> str:
    """IdentityReplicationIntegrationTest's properties (its policy, ``topics = test-topic-.*``),
    both ways (``backup->primary.enabled = true``)."""
    return (
        mm2_props(primary, backup, IDENTITY, *extra)
        .replace(
            "topics = test-topic-.*, primary.test-topic-.*, backup.test-topic-.*",
            "topics = test-topic-.*",
        )
        .replace("backup->primary.enabled = false", "backup->primary.enabled = true")
    )


def create_as_mm2_tests_do(primary: Broker, backup: Broker) -> None:
    """The topics MM2's base test creates before the start (``createTopics``): primary's
    test-topic-1 compacted (to see its config synced), the others with the defaults."""
    run(_create_topics(primary.bootstrap_servers, {"test-topic-1": NUM_PARTITIONS}, COMPACT))
    create(primary, {"test-topic-no-checkpoints": 1, "heartbeats": 1})
    create(backup, {"test-topic-1": NUM_PARTITIONS, "heartbeats": 1})


def test_identity_both_ways_a_first_start_takes_no_targets_records_for_copies(
    replicators: Start, tmp_path: Path
) -> None:
    """IdentityReplicationIntegrationTest's testReplication, both ways: 100 keyed records in
    each cluster's test-topic-1 before the first start (the same keys and values in both, as
    MM2's test writes them), no MirrorMaker ever run. Each cluster's records are copied into
    the other's test-topic-1 exactly once, beside its own, none back again; the takeover
    (``replicator mm2`` takes over from MirrorMaker 2) finds nothing of it, takes none of a
    target's own records for copies, and says so: every partition by START_FROM."""
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_as_mm2_tests_do(primary, backup)
        produce_keyed(primary, "test-topic-1")
        produce_keyed(backup, "test-topic-1")
        own = {b.alias: read(b, "test-topic-1") for b in (primary, backup)}
        assert [len(records) for records in own.values()] == [NUM_RECORDS_PRODUCED] * 2
        node = start_mm2(replicators, tmp_path, identity_both_ways(primary, backup))
        for broker in (primary, backup):
            wait_until(
                holds(broker, "test-topic-1", 2 * NUM_RECORDS_PRODUCED),
                60,
                f"{broker.alias}'s test-topic-1",
                node.log,
            )
        wait_settled(node)
        for broker, other in ((primary, backup), (backup, primary)):
            records = read(broker, "test-topic-1")
            assert len(records) == 2 * NUM_RECORDS_PRODUCED  # exactly: none twice, none back
            assert [r for r in records if r.provenance is None] == own[broker.alias]
            copies = {}
            for r in records:
                if (origin := r.provenance) is not None:
                    assert (origin.cluster, origin.topic, origin.partition) == (
                        other.alias,
                        "test-topic-1",
                        r.partition,
                    )
                    copies[(origin.partition, origin.offset)] = (r.key, r.value, r.timestamp)
            assert len(copies) == NUM_RECORDS_PRODUCED
            assert copies == {
                (r.partition, r.offset): (r.key, r.value, r.timestamp) for r in own[other.alias]
            }
        # The takeover: every leg started every partition by START_FROM, and said why.
        _, status = node.get("/status")
        takeovers = [leg["takeover"] for leg in status["legs"] if leg["takeover"]]
        assert len(takeovers) == 2, status["legs"]
        for takeover in takeovers:
            assert takeover["from"].startswith("MirrorMaker 2 (mm2-offsets."), takeover
            assert takeover["partitions"]["confirmed_by_the_target"] == 0, takeover
            assert takeover["partitions"]["at_its_saved_position"] == 0, takeover
            assert takeover["offsets_topic_on_the_target"] is False, takeover
            assert list(takeover["which"]) == ["by_start_from"], takeover
            assert takeover["which"]["by_start_from"].get("test-topic-1") == "0-9", (
                takeover,
                [line for line in node.log().splitlines() if "take over" in line],
            )
        for outcome in ("confirmed_by_the_target", "at_its_saved_position"):
            metric = node.metric("replicator_partitions_taken_over_total", outcome=outcome)
            assert metric == 0, (outcome, metric)
        log = node.log()
        assert "took over from" not in log and "found_by_the_target_only" not in log
        assert log.count("never ran on the target") >= 2, log[-3000:]


def remote_name(topic: str, identity: bool) -> str:
    """MM2's ``remoteTopicName(topic, "primary")`` under either policy."""
    return topic if identity else f"primary.{topic}"


def one_way(primary: Broker, backup: Broker, identity: bool, *extra: str) -> str:
    """MM2's base test properties one way, with IdentityReplicationIntegrationTest's policy and
    topics when ``identity``."""
    if not identity:
        return mm2_props(primary, backup, *extra)
    return mm2_props(primary, backup, IDENTITY, *extra).replace(
        "topics = test-topic-.*, primary.test-topic-.*, backup.test-topic-.*",
        "topics = test-topic-.*",
    )


def warm_up(primary: Broker, backup: Broker, group: str) -> None:
    """MM2's ``warmUpConsumer``: the group joins test-topic-1 in each cluster and commits its
    positions there (in primary, after reading what it holds)."""
    consume(primary, "test-topic-1", group)
    consume(backup, "test-topic-1", group)


def checkpoints_of(broker: Broker, group: str, topic: str) -> dict[int, int]:
    """``MirrorClient.remoteConsumerOffsets(group, "primary")`` for ``topic``'s partitions
    (every checkpoint in the order written, so none goes back: assertMonotonicCheckpoints)."""
    return {
        p: offset
        for (t, p), offset in remote_consumer_offsets(broker, "primary", group).items()
        if t == topic
    }


@pytest.mark.parametrize("identity", [False, True], ids=["default", "identity"])
def test_no_checkpoints_if_no_records_are_mirrored_as_mm2_tests_it(
    replicators: Start, tmp_path: Path, identity: bool
) -> None:
    """testNoCheckpointsIfNoRecordsAreMirrored, with either policy: the group commits each
    partition's end in primary (test-topic-1 partition 0 after 100 keyed records, and the empty
    test-topic-no-checkpoints at 0), then 100 records are written to test-topic-no-checkpoints
    and the group commits its end, 100. MM2 asserts a translated offset exists for test-topic-1
    and none for the empty topic until records were mirrored; here every position is exact and,
    different on purpose (docs/concepts/failover.md, Checkpoints), the empty partition is
    checkpointed at 0 (the group has read nothing there: a failover starts it at the first
    record, not by its auto.offset.reset); once mirrored, at 100."""
    group = "consumer-group-no-checkpoints"
    remote = remote_name("test-topic-1", identity)
    empty = remote_name("test-topic-no-checkpoints", identity)
    tp1 = TopicPartition("test-topic-1", 0)
    tp2 = TopicPartition("test-topic-no-checkpoints", 0)
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_as_mm2_tests_do(primary, backup)
        produce_keyed(primary, "test-topic-1")
        warm_up(primary, backup, group)
        node = start_mm2(replicators, tmp_path, one_way(primary, backup, identity))
        wait_until(holds_topic(backup, remote), 30, remote, node.log)
        wait_until(holds_topic(backup, empty), 30, empty, node.log)
        wait_until(holds(backup, remote, NUM_RECORDS_PRODUCED), 30, f"{remote}'s records")
        end = log_ends(primary, "test-topic-1")[0]

        commit_offsets(primary, group, {tp1: end, tp2: 0})

        def first_partitions() -> tuple[int | None, dict[int, int]]:
            return checkpoints_of(backup, group, remote).get(0), checkpoints_of(
                backup, group, empty
            )

        wait_until(
            lambda: first_partitions() == (end, {0: 0}),
            30,
            "test-topic-1 at its end, the empty topic at 0",
            lambda: f"{first_partitions()}\n{node.log()[-4000:]}",
        )

        # 100 records in one partition, committed at once, as MM2's test does: maybe before
        # they are copied (the checkpoint then follows the copies as they arrive).
        produce_keyed(primary, "test-topic-no-checkpoints")
        commit_offsets(primary, group, {tp1: end, tp2: NUM_RECORDS_PRODUCED})
        wait_until(
            lambda: checkpoints_of(backup, group, empty) == {0: NUM_RECORDS_PRODUCED},
            30,
            f"the empty topic's checkpoint at {NUM_RECORDS_PRODUCED}",
            lambda: f"{checkpoints_of(backup, group, empty)}\n{node.log()[-4000:]}",
        )
        assert checkpoints_of(backup, group, remote).get(0) == end
        assert len(read(backup, empty)) == NUM_RECORDS_PRODUCED


def partial_offsets(records: list[StoredRecord], fraction: float) -> dict[TopicPartition, int]:
    """MM2's ``partialOffsets(allRecords, fraction)``: per partition, the offset of the record
    at ``fraction`` of what the partition holds."""
    by_partition: dict[int, list[int]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record.offset)
    return {
        TopicPartition("test-topic-1", p): offsets[int(len(offsets) * fraction)]
        for p, offsets in by_partition.items()
    }


@pytest.mark.parametrize(
    ("identity", "both_ways"),
    [(False, True), (True, False), (True, True)],
    ids=["default-both-ways", "identity-one-way", "identity-both-ways"],
)
def test_offset_translation_behind_replication_flow_as_mm2_tests_it(
    replicators: Start, tmp_path: Path, identity: bool, both_ways: bool
) -> None:
    """testOffsetTranslationBehindReplicationFlow: MM2's base test runs it both ways
    (``backup->primary.enabled = true``), IdentityReplicationIntegrationTest one way; and
    identity both ways, as issue 51 ran it. 100 keyed records, the group warmed up at their
    ends in primary (12, 9, 9, ... per partition; in backup at what it holds), 99 rounds more
    (10,000 records, all copied), then the group moved to 90 % of each partition and back to
    10 %. MM2 asserts the checkpoints advance with it, never go back meanwhile, and rewind when
    it rewinds; here each is exact once the copies are in (the group's own offset: the target
    holds the source's records alone, from offset 0; a checkpoint taken while the copies are
    still on their way trails them, docs/concepts/failover.md). Both ways, the group's synced
    position in backup is never synced back over the rewind in primary (it is the sync's,
    tagged, not the group's progress)."""
    group = "consumer-group-lagging-behind"
    remote = remote_name("test-topic-1", identity)
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_as_mm2_tests_do(primary, backup)
        props = one_way(primary, backup, identity, *OFFSET_SYNC)
        if both_ways:
            props = props.replace(
                "backup->primary.enabled = false", "backup->primary.enabled = true"
            )
        node = start_mm2(replicators, tmp_path, props)
        produce_keyed(primary, "test-topic-1")
        warm_up(primary, backup, group)  # at once, as MM2's test: maybe before the copies
        initial = log_ends(primary, "test-topic-1")
        assert sum(initial.values()) == NUM_RECORDS_PRODUCED
        wait_until(
            lambda: checkpoints_of(backup, group, remote) == initial,
            30,
            f"the initial checkpoints at {initial}",
            lambda: f"{checkpoints_of(backup, group, remote)}\n{node.log()[-4000:]}",
        )

        iterations = 100
        for _ in range(1, iterations):
            produce_keyed(primary, "test-topic-1")
        total = iterations * NUM_RECORDS_PRODUCED
        wait_until(holds(backup, remote, total), 120, f"{total} records", node.log)
        assert len(read(backup, remote)) == total
        records = read(primary, "test-topic-1")
        assert len(records) == total

        partial = partial_offsets(records, 0.9)
        commit_offsets(primary, group, partial)
        expected = {tp.partition: offset for tp, offset in partial.items()}
        assert all(initial[p] < expected[p] for p in expected)
        wait_until(
            lambda: checkpoints_of(backup, group, remote) == expected,  # monotonic, read so
            30,
            "the checkpoints at 90 %",
            lambda: f"{checkpoints_of(backup, group, remote)}\n{node.log()[-4000:]}",
        )

        final = partial_offsets(records, 0.1)
        commit_offsets(primary, group, final)
        rewound = {tp.partition: offset for tp, offset in final.items()}
        assert all(rewound[p] < expected[p] for p in expected)

        def newest() -> dict[int, int]:
            found = remote_consumer_offsets(backup, "primary", group, monotonic=False)
            return {p: offset for (t, p), offset in found.items() if t == remote}

        wait_until(
            lambda: newest() == rewound,
            30,
            "the checkpoints rewound to 10 %",
            lambda: f"{newest()}\n{node.log()[-4000:]}",
        )


def properties_file(props: dict[str, str]) -> str:
    """``props`` as a Java ``.properties`` file: a key's space, ``:``, ``=`` and ``\\`` escaped
    (they would end the key), a value's ``\\`` escaped."""
    escaped = str.maketrans({c: "\\" + c for c in " :=\\"})
    return "".join(
        f"{k.translate(escaped)} = {v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items()
    )


def holds_topic(broker: Broker, topic: str) -> Callable[[], bool]:
    return lambda: topic in topics(broker)


def flow_partitions(process: ReplicatorProcess) -> int | None:
    """The source partitions a node's flows hold (``None``: not answering, or a flow not
    joined, as in a rebalance)."""
    try:
        _, status = process.get("/status")
    except (OSError, ValueError):
        return None
    feeds = [flow["source_feed"] for flow in status["flows"].values()]
    if not feeds or not all(feed and feed.get("joined") for feed in feeds):
        return None
    return sum(int(feed["assigned_partitions"]) for feed in feeds)


def shared(nodes: list[ReplicatorProcess], partitions: int) -> Callable[[], bool]:
    """A predicate: each of ``nodes`` holds some of the flow's partitions, all ``partitions``
    together (no rebalance under way)."""

    def check() -> bool:
        held = [flow_partitions(node) for node in nodes]
        return all(held) and sum(h or 0 for h in held) == partitions

    return check


def held_by(nodes: list[ReplicatorProcess]) -> str:
    """What each node says of its share of the flow's partitions (for a failure message)."""
    return "\n".join(
        f"node {i}: {flow_partitions(node)} partitions; {node.log()[-1500:]}"
        for i, node in enumerate(nodes)
    )


def test_three_nodes_share_a_flow_and_survive_a_rolling_restart_as_mm2_tests_it(
    replicators: Start, tmp_path: Path
) -> None:
    """DedicatedMirrorIntegrationTest's testMultiNodeCluster: three nodes on one file (its
    cluster B has a convoluted alias, written with the file's escapes), one topic created per
    node and copied, then a rolling restart with a new refresh.topics.interval.seconds. MM2
    asserts the new task configuration through Connect's REST API; here each node reports the
    interval it runs in /status. As MM2's test, each step settles (the others hold the stopped
    node's partitions, then the three share them) before the next: the embedded broker's group
    coordinator, unlike Kafka's, can hand a joining member partitions another member still
    writes (docs/guarantees.md). Stronger than MM2's test: records written all through the
    restart arrive on B exactly once and in order, and the three nodes share the partitions."""
    b = "B- ._~:/?#[]@!$&'()*+;=\"<>%{}|\\^`618"
    ab, ba = f"A->{b}", f"{b}->A"
    with start_clusters("A", "B") as brokers:
        props = {
            "dedicated.mode.enable.internal.rest": "true",
            "listeners": "http://localhost:0",
            "refresh.topics.interval.seconds": "1",
            "clusters": f"A, {b}",
            "A.bootstrap.servers": brokers["A"].bootstrap_servers,
            f"{b}.bootstrap.servers": brokers["B"].bootstrap_servers,
            f"{b}.exactly.once.source.support": "enabled",
            "A.consumer.isolation.level": "read_committed",
            f"{ab}.enabled": "true",
            f"{ab}.topics": "^test-topic-.*",
            f"{ab}.offset-syncs.topic.location": "target",
            f"{ba}.enabled": "false",
            f"{ba}.emit.heartbeats.enabled": "false",
            "replication.factor": "1",
            "checkpoints.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
            "A.scheduled.rebalance.max.delay.ms": "1000",
            f"{b}.scheduled.rebalance.max.delay.ms": "1000",
        }
        config = tmp_path / "mm2.properties"
        config.write_text(properties_file(props))
        nodes = [replicators("B", ENV, ("mm2", str(config))) for _ in range(3)]
        for node in nodes:
            node.wait_ready()
        sent: dict[str, list[StoredRecord]] = {}
        for i in range(len(nodes)):  # one topic per node, each copied once it exists
            topic = f"test-topic-{i}"
            create(brokers["A"], {topic: 1})
            wait_until(holds_topic(brokers["B"], f"A.{topic}"), 30, f"A.{topic}")
            produce_messages(brokers["A"], topic, partitions=1)
            wait_until(holds(brokers["B"], f"A.{topic}", 10), 30, f"A.{topic}'s records")
            sent[topic] = read(brokers["A"], topic)

        # The rolling restart, with records written all the while to a topic of 6 partitions.
        create(brokers["A"], {"test-topic-load": 6})
        wait_until(holds_topic(brokers["B"], "A.test-topic-load"), 30, "A.test-topic-load")
        config.write_text(properties_file({**props, "refresh.topics.interval.seconds": "2"}))
        with Stream(brokers["A"], "test-topic-load", partitions=6, per_tick=20) as stream:
            for i, node in enumerate(nodes):
                # As MM2's test: the others take the node's work before the next node comes up.
                assert node.stop() == 0, node.log()
                others = [n for n in nodes if n is not node]
                wait_until(
                    shared(others, 9),
                    60,
                    f"node {i}'s partitions taken over",
                    lambda: held_by(nodes),
                )
                nodes[i] = replicators("B", ENV, ("mm2", str(config)))
                nodes[i].wait_ready()
                wait_until(shared(nodes, 9), 60, f"node {i} back in the group")
        assert not stream.errors, stream.errors
        sent["test-topic-load"] = read(brokers["A"], "test-topic-load")
        assert len(sent["test-topic-load"]) == stream.produced > 0

        for topic, records in sent.items():
            wait_until(holds(brokers["B"], f"A.{topic}", len(records)), 60, f"A.{topic}")
        wait_settled(*nodes)  # anything written twice is there by then
        for topic, records in sent.items():
            check = oracle(records, read(brokers["B"], f"A.{topic}"), "a")
            assert not check.missing and check.duplicates == 0 and not check.out_of_order, check
        # The new configuration is what every node runs, and the three share the 9 partitions.
        for node in nodes:
            _, status = node.get("/status")
            notes = status["translation_notes"]
            assert any("listed again" in n and "every 2 s" in n for n in notes), notes
        assert shared(nodes, 9)()  # the three still share the 9 partitions


def test_checkpoints_follow_a_group_across_a_restart_as_mm2_tests_it(
    replicators: Start, tmp_path: Path
) -> None:
    """testRestartReplication, one way, checkpoints read as MirrorClient reads them. Stronger
    than MM2: every position is exact (MM2 allows offset.lag.max behind), the restarted node
    syncs on from its checkpoints."""
    remote = "primary.test-topic-1"
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create(primary, {"test-topic-1": NUM_PARTITIONS})
        node = start_mm2(
            replicators,
            tmp_path,
            mm2_props(primary, backup, *OFFSET_SYNC),
        )
        produce_messages(primary, "test-topic-1")
        wait_until(holds(backup, remote, NUM_RECORDS_PRODUCED), 30, remote)

        # Synced, the node restarted, more records, synced on.
        group = "consumer-group-restart"
        assert len(consume(primary, "test-topic-1", group)) == NUM_RECORDS_PRODUCED
        ends = log_ends(backup, remote)
        wait_until(lambda: committed(backup, group, remote) == ends, 30, "synced before")
        assert node.stop() == 0, node.log()
        node = replicators("backup", ENV, node.args)
        node.wait_ready()
        produce_messages(primary, "test-topic-1")
        assert len(consume(primary, "test-topic-1", group)) == NUM_RECORDS_PRODUCED
        wait_until(holds(backup, remote, 2 * NUM_RECORDS_PRODUCED), 30, remote)
        ends = log_ends(backup, remote)
        assert set(ends.values()) == {2 * NUM_RECORDS_PER_PARTITION}
        wait_until(lambda: committed(backup, group, remote) == ends, 30, "synced after")
        positions = {(remote, p): end for p, end in ends.items()}
        wait_until(checkpointed(backup, "primary", group, positions), 30, "checkpoints after")
