"""The product beside Apache Kafka's own MirrorMakers, on the same configuration and input.

Each test starts two identical pairs of Apache Kafka clusters, writes the same topics (partition
counts, configs) and the same records (keys, values, headers, timestamps, partitions) into both,
gives the same ``connect-mirror-maker.properties`` (or MirrorMaker 1 command line and files) to
MirrorMaker itself on one pair and to ``replicator mm2 FILE`` (``replicator mirror-maker ARGS``)
on the other, only the bootstrap servers differing, and compares the results: the topics on each
cluster (each tool's internal topics aside, named in the messages), their partition counts and
synced configs, every record (key, value, application headers, timestamp, partition, order),
the heartbeats in MirrorMaker 2's format, the checkpoints and synced group offsets as
MirrorMaker 2's own client library reads them. The product's provenance headers
(:data:`replicator.model.provenance.HEADER_NAMES`) are its own and set aside. Every difference
is asserted as such, with what each tool does.

MirrorMaker 2 runs in dedicated mode on Kafka 4.3.1's jars, MirrorMaker 1 from Kafka 3.9.1's
(:mod:`replicator.devtools.mirror_makers`). Apache Kafka backend only.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import murmur2

from replicator.devtools.apache_kafka import kafka_tool
from replicator.devtools.mirror_makers import (
    MirrorMakerProcess,
    mm2_test_properties,
    properties_text,
    start_mm1,
    start_mm2,
)
from replicator.kafka.readers import StoredRecord, cluster_partitions, read_topics
from replicator.mirrormaker.mm1 import server_alias
from replicator.model.provenance import HEADER_NAMES
from tests.integration.harness import (
    BACKEND,
    Broker,
    ReplicatorProcess,
    Start,
    _create_topics,
    admin_client,
    configs_set,
    produce_records,
    read,
    run,
    start_clusters,
    topic_overrides,
    wait_until,
)
from tests.integration.test_failover import consume
from tests.integration.test_flows import run_topics
from tests.integration.test_mirror_maker import heartbeat
from tests.integration.test_mm2_contract import committed, remote_consumer_offsets

pytestmark = pytest.mark.skipif(
    BACKEND != "kafka", reason="MirrorMaker itself runs from Apache Kafka's jars: kafka backend"
)

JAVA = Path(__file__).parent / "java"
ENV = {
    "REPLICATOR_LOG_FORMAT": "json",
    "REPLICATOR_COMMIT_INTERVAL_MS": "200",
    "REPLICATOR_METADATA_MAX_AGE_MS": "1000",
}
MM2, PRODUCT = "MirrorMaker", "replicator"
SIDES = (MM2, PRODUCT)
# Each tool's own topics, which the other has no reason to have: MirrorMaker 2's Connect storage
# and offset syncs (named with the policy's separator), the product's checkpoints.
INTERNAL = re.compile(
    r"__.*|mm2-(configs|offsets|status)\.[^.]+\.internal|mm2-offset-syncs[._][^._]+[._]internal"
    r"|replicator-checkpoints"
)
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


# -- the same input on both pairs ---------------------------------------------------------------


@dataclass(frozen=True)
class Topic:
    """One source topic as both pairs get it: its records are produced into the partitions
    given, keyless every ``keyless`` record (0: never), with the test's timestamps."""

    name: str
    partitions: int
    records: int
    configs: tuple[tuple[str, str], ...] = ()
    keyless: int = 0

    def input(self, base: int) -> list[StoredRecord]:
        return [
            StoredRecord(
                self.name,
                i % self.partitions,
                -1,
                None if self.keyless and i % self.keyless == 0 else f"key-{i % 7}".encode(),
                f"{self.name}-{i}".encode(),
                (("trace-id", f"t{i}".encode()), ("app", b"side-by-side"), ("empty", None)),
                base + i * 10,
            )
            for i in range(self.records)
        ]


def write_input(broker: Broker, topics: list[Topic], base: int) -> None:
    """Create ``topics`` with their configs and produce their records, in order."""
    for topic in topics:
        run(
            _create_topics(
                broker.bootstrap_servers, {topic.name: topic.partitions}, dict(topic.configs)
            )
        )
        produce_records(broker, topic.name, topic.input(base))


def app_headers(record: StoredRecord) -> tuple[tuple[str, bytes | None], ...]:
    """The record's headers without the product's own provenance headers."""
    return tuple(h for h in record.headers if h[0] not in HEADER_NAMES)


def content(record: StoredRecord) -> tuple[object, ...]:
    """What a copy must keep of a record: key, value, application headers, timestamp."""
    return (record.key, record.value, app_headers(record), record.timestamp)


# -- what each cluster holds --------------------------------------------------------------------


@dataclass
class Snapshot:
    """One cluster as the comparison sees it."""

    topics: set[str]
    partitions: dict[str, int]
    configs: dict[str, dict[str, str]]
    records: dict[str, list[StoredRecord]]

    @property
    def internal(self) -> list[str]:
        return sorted(t for t in self.topics if INTERNAL.fullmatch(t))

    @property
    def user_topics(self) -> set[str]:
        return {t for t in self.topics if not INTERNAL.fullmatch(t)}


async def _snapshot(bootstrap: str) -> Snapshot:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = {t: len(p) for t, p in (await cluster_partitions(consumer)).items()}
    finally:
        await consumer.stop()
    admin = await admin_client(bootstrap)
    try:
        configs = {t: await topic_overrides(admin, t) for t in sorted(partitions)}
    finally:
        await admin.close()
    users = sorted(t for t in partitions if not INTERNAL.fullmatch(t))
    return Snapshot(set(partitions), partitions, configs, await read_topics(bootstrap, users))


def snapshot(broker: Broker) -> Snapshot:
    return run(_snapshot(broker.bootstrap_servers))


def holds_all(broker: Broker, topic: str, records: int) -> Callable[[], bool]:
    """A predicate: ``topic`` exists on ``broker`` and holds at least ``records``."""
    return lambda: topic in run_topics(broker) and len(read(broker, topic)) >= records


def heartbeats(records: list[StoredRecord]) -> set[tuple[str, str]]:
    """The (source, target) aliases the heartbeats in ``records`` name, in MM2's format."""
    return {heartbeat(r) for r in records}


def mirror_client_report(broker: Broker, source: str, group: str) -> list[str]:
    """What MirrorMaker 2's ``MirrorClient`` and ``RemoteClusterUtils`` read on ``broker``."""
    out = kafka_tool(str(JAVA / "MirrorClientReport.java"), broker.bootstrap_servers, source, group)
    return out.splitlines()


def alter_topic(broker: Broker, topic: str, configs: dict[str, str]) -> None:
    """Replace ``topic``'s own configs with ``configs`` (AlterConfigs)."""

    async def alter() -> None:
        admin = await admin_client(broker.bootstrap_servers)
        try:
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])
        finally:
            await admin.close()

    run(alter())


@contextmanager
def two_pairs(*aliases: str) -> Iterator[dict[str, dict[str, Broker]]]:
    """Two identical sets of clusters named ``aliases``: one for MirrorMaker, one for the
    product, started together."""
    names = [f"{side}-{alias}" for side in ("mm", "rep") for alias in aliases]
    with start_clusters(*names) as brokers:
        yield {
            side: {alias: brokers[f"{short}-{alias}"] for alias in aliases}
            for side, short in ((MM2, "mm"), (PRODUCT, "rep"))
        }


def run_both_mm2(
    replicators: Start,
    tmp_path: Path,
    pairs: dict[str, dict[str, Broker]],
    flows: dict[str, str],
) -> tuple[MirrorMakerProcess, ReplicatorProcess]:
    """The same MM2 file (MM2's test settings and ``flows``) for MirrorMaker 2 on one pair and
    ``replicator mm2`` on the other; both started."""
    files = {}
    for side, brokers in pairs.items():
        bootstrap = {alias: broker.bootstrap_servers for alias, broker in brokers.items()}
        files[side] = tmp_path / f"{side}-mm2.properties"
        files[side].write_text(properties_text(mm2_test_properties(bootstrap) | flows))
    mirror_maker = start_mm2(files[MM2], tmp_path / "mm2")
    product = replicators("backup", ENV, ("mm2", str(files[PRODUCT])))
    product.wait_ready()
    return mirror_maker, product


def both_hold(
    pairs: dict[str, dict[str, Broker]],
    wanted: list[tuple[str, str, int]],
    mirror_maker: MirrorMakerProcess,
    product: ReplicatorProcess,
) -> None:
    """Wait until each (cluster, topic, records) of ``wanted`` holds on both pairs."""
    for side, brokers in pairs.items():
        for alias, topic, records in wanted:
            log = mirror_maker.log if side == MM2 else product.log
            wait_until(holds_all(brokers[alias], topic, records), 90, f"{side}: {topic}", log)


def assert_same_records(
    topic: str, mm2: list[StoredRecord], product: list[StoredRecord], produced: int
) -> None:
    """Both copies hold exactly the records produced, each in the same partition, in the same
    order, with the same key, value, application headers and timestamp."""
    assert len(mm2) == len(product) == produced, (topic, len(mm2), len(product), produced)
    for theirs, ours in zip(mm2, product, strict=True):
        assert (theirs.partition, theirs.offset, *content(theirs)) == (
            ours.partition,
            ours.offset,
            *content(ours),
        ), topic


# -- MirrorMaker 2 ------------------------------------------------------------------------------

ORDERS = Topic(
    "orders",
    3,
    30,
    (("cleanup.policy", "compact"), ("retention.ms", "3600000"), ("min.insync.replicas", "1")),
)
PAYMENTS = Topic("payments", 2, 20, keyless=4)
DRAFTS = Topic("orders-draft", 1, 5)  # matched by topics, excluded by topics.exclude
OTHER = Topic("other", 1, 5)  # matched by nothing
INVENTORY = Topic("inventory", 2, 20, (("retention.ms", "7200000"),))
READ_UPTO_ORDERS = {0: 7, 1: 10, 2: 4}  # each partition to its own offset; 1 to its end
READ_UPTO_INVENTORY = {0: 3, 1: 10}


def config_is(broker: Broker, topic: str, key: str, value: str) -> Callable[[], bool]:
    """A predicate: ``topic``'s own config ``key`` is ``value``."""
    return lambda: configs_set(broker, topic).get(key) == value


def checkpoints_of(
    broker: Broker, source: str, group: str, keys: set[tuple[str, int]]
) -> Callable[[], bool]:
    """A predicate: MirrorClient would find a checkpoint of ``group`` for each of ``keys``."""
    return lambda: keys <= remote_consumer_offsets(broker, source, group).keys()


def offsets_synced(broker: Broker, group: str, topic: str) -> Callable[[], bool]:
    """A predicate: ``group`` has a committed offset in every partition of ``topic``."""
    return lambda: None not in committed(broker, group, topic).values()


def at_most_exact(
    mm2: dict[tuple[str, int], int], exact: dict[tuple[str, int], int], ends: set[tuple[str, int]]
) -> bool:
    """MirrorMaker 2's translated positions against the exact ones: each at most the exact one
    (MM2 translates from sparse offset syncs: a group between two syncs is put just after the
    earlier one, to read again what lies between) and equal where the group is at the end."""
    return mm2.keys() == exact.keys() and all(
        0 <= mm2[k] <= exact[k] and (k not in ends or mm2[k] == exact[k]) for k in exact
    )


def test_mm2_default_policy_both_ways_against_mirror_maker_2(
    replicators: Start, tmp_path: Path
) -> None:
    """MM2's default policy both ways, with topics, topics.exclude, groups and groups.exclude,
    offset sync and config sync: the remote topics, their partitions, configs and records, the
    heartbeats, the checkpoints and the synced group offsets, side by side."""
    flows = {
        "primary->backup.enabled": "true",
        "primary->backup.topics": "orders.*, payments",
        "primary->backup.topics.exclude": "orders-draft",
        "backup->primary.enabled": "true",
        "backup->primary.topics": "inventory",
        "groups": "app-.*",
        "groups.exclude": "app-ignored",
        "sync.group.offsets.enabled": "true",
    }
    base = int(time.time() * 1000) - 60_000
    orders_at = {("primary.orders", p): at for p, at in READ_UPTO_ORDERS.items()}
    inventory_at = {("backup.inventory", p): at for p, at in READ_UPTO_INVENTORY.items()}
    with two_pairs("primary", "backup") as pairs:
        for brokers in pairs.values():
            primary, backup = brokers["primary"], brokers["backup"]
            write_input(primary, [ORDERS, PAYMENTS, DRAFTS, OTHER], base)
            write_input(backup, [INVENTORY], base)
            # Groups that consumed on the source and left: app-readers part of orders and of
            # inventory (each partition to its own offset), app-ignored (excluded) payments.
            assert len(consume(primary, "orders", "app-readers", READ_UPTO_ORDERS)) == 21
            assert len(consume(primary, "payments", "app-ignored")) == PAYMENTS.records
            assert len(consume(backup, "inventory", "app-readers", READ_UPTO_INVENTORY)) == 13
        mirror_maker, product = run_both_mm2(replicators, tmp_path, pairs, flows)
        try:
            both_hold(
                pairs,
                [
                    ("backup", "primary.orders", ORDERS.records),
                    ("backup", "primary.payments", PAYMENTS.records),
                    ("primary", "backup.inventory", INVENTORY.records),
                    ("backup", "primary.heartbeats", 1),
                    ("primary", "backup.heartbeats", 1),
                ],
                mirror_maker,
                product,
            )
            # Config sync: retention.ms changed on the source while both run.
            for brokers in pairs.values():
                alter_topic(
                    brokers["primary"], "orders", dict(ORDERS.configs) | {"retention.ms": "1800000"}
                )
            for side, brokers in pairs.items():
                log = mirror_maker.log if side == MM2 else product.log
                backup, primary = brokers["backup"], brokers["primary"]
                wait_until(
                    config_is(backup, "primary.orders", "retention.ms", "1800000"),
                    60,
                    f"{side}: retention.ms synced",
                    log,
                )
                # Checkpoints of every partition app-readers read, and its offsets synced.
                for broker, source, keys in (
                    (backup, "primary", orders_at.keys()),
                    (primary, "backup", inventory_at.keys()),
                ):
                    wait_until(
                        checkpoints_of(broker, source, "app-readers", set(keys)),
                        60,
                        f"{side}: app-readers' checkpoints in {broker.alias}",
                        log,
                    )
                wait_until(
                    offsets_synced(backup, "app-readers", "primary.orders"),
                    60,
                    f"{side}: app-readers' offsets synced",
                    log,
                )
            snaps = {side: {a: snapshot(b) for a, b in bs.items()} for side, bs in pairs.items()}
            checkpoints = {
                side: {
                    "backup": remote_consumer_offsets(bs["backup"], "primary", "app-readers"),
                    "primary": remote_consumer_offsets(bs["primary"], "backup", "app-readers"),
                    "ignored": remote_consumer_offsets(bs["backup"], "primary", "app-ignored"),
                }
                for side, bs in pairs.items()
            }
            synced = {
                side: {
                    "app-readers": committed(bs["backup"], "app-readers", "primary.orders"),
                    "app-ignored": committed(bs["backup"], "app-ignored", "primary.payments"),
                }
                for side, bs in pairs.items()
            }
            reports = {
                side: mirror_client_report(bs["backup"], "primary", "app-readers")
                for side, bs in pairs.items()
            }
        finally:
            mm2_exit = mirror_maker.stop()
            product_exit = product.stop()

        expected_topics = {
            "primary": {"orders", "orders-draft", "other", "payments", "heartbeats"}
            | {"backup.inventory", "backup.heartbeats", "backup.checkpoints.internal"},
            "backup": {"inventory", "heartbeats"}
            | {"primary.orders", "primary.payments", "primary.heartbeats"}
            | {"primary.checkpoints.internal"},
        }
        produced = {t.name: t.records for t in (ORDERS, PAYMENTS, DRAFTS, OTHER, INVENTORY)}
        produced |= {"primary.orders": 30, "primary.payments": 20, "backup.inventory": 20}
        for alias, wanted in expected_topics.items():
            theirs, ours = snaps[MM2][alias], snaps[PRODUCT][alias]
            internal = f"internal: MirrorMaker {theirs.internal}, replicator {ours.internal}"
            assert theirs.user_topics == ours.user_topics == wanted, (alias, internal)
            for topic in sorted(wanted):
                assert theirs.partitions[topic] == ours.partitions[topic], (alias, topic)
                if topic.endswith(".checkpoints.internal"):
                    # Different: MirrorMaker 2 creates its checkpoints topic compacted only; the
                    # product also sets min.cleanable.dirty.ratio=0.1 and segment.ms=1 h.
                    assert theirs.configs[topic] == {"cleanup.policy": "compact"}
                    assert ours.configs[topic] == theirs.configs[topic] | {
                        "min.cleanable.dirty.ratio": "0.1",
                        "segment.ms": "3600000",
                    }
                    continue
                assert theirs.configs[topic] == ours.configs[topic], (alias, topic)
                if topic.endswith("heartbeats"):
                    continue
                assert_same_records(
                    topic, theirs.records[topic], ours.records[topic], produced[topic]
                )
            # Heartbeats: the same (source, target) pairs in each topic, in MM2's format, with
            # no application header (the product's copies carry only its provenance).
            beats = {
                "primary": {
                    "heartbeats": {("backup", "primary")},
                    "backup.heartbeats": {("primary", "backup")},
                },
                "backup": {
                    "heartbeats": {("primary", "backup")},
                    "primary.heartbeats": {("backup", "primary")},
                },
            }[alias]
            for topic, pairs_named in beats.items():
                for snap in (theirs, ours):
                    assert heartbeats(snap.records[topic]) == pairs_named, (alias, topic)
                    assert not any(app_headers(r) for r in snap.records[topic])
        # Both copied the records written to the source topic (config sync aside) the same:
        # min.insync.replicas is excluded by MM2's default config.properties.exclude.
        assert snaps[MM2]["backup"].configs["primary.orders"] == {
            "cleanup.policy": "compact",
            "retention.ms": "1800000",
        }

        # Checkpoints, as MirrorClient.remoteConsumerOffsets reads them. The product's are exact;
        # MirrorMaker 2's are at most the group's position (observed: 1 for 7 and for 4), exact
        # at the log end. Different: the product also checkpoints the group's position in the
        # topics it came from (backup's app-readers read inventory; its offsets synced to primary
        # as backup.inventory are translated back into inventory on backup, and orders likewise
        # on primary); MirrorMaker 2 checkpoints only the topics its flow copied.
        ends = {("primary.orders", 1), ("backup.inventory", 1)}
        mine, theirs_cp = checkpoints[PRODUCT], checkpoints[MM2]
        own_back = {("inventory", p): at for p, at in READ_UPTO_INVENTORY.items()}
        own_fwd = {("orders", p): at for p, at in READ_UPTO_ORDERS.items()}
        assert mine["backup"] == orders_at | own_back, mine
        assert mine["primary"] == inventory_at | own_fwd, mine
        assert at_most_exact(theirs_cp["backup"], orders_at, ends), theirs_cp
        assert at_most_exact(theirs_cp["primary"], inventory_at, ends), theirs_cp
        assert mine["ignored"] == theirs_cp["ignored"] == {}  # groups.exclude
        # The group offsets synced to backup (the group idle there): the same rule.
        assert synced[PRODUCT]["app-readers"] == READ_UPTO_ORDERS
        mm2_synced = {("primary.orders", p): at for p, at in synced[MM2]["app-readers"].items()}
        assert at_most_exact(mm2_synced, orders_at, ends), synced  # type: ignore[arg-type]
        for side in SIDES:
            assert set(synced[side]["app-ignored"].values()) == {None}, synced

        # MirrorClient itself: the same upstream cluster, hops and remote topics; checkpoints
        # and translated offsets as above (the product's extra inventory lines included).
        for what in ("upstream", "hops", "remote-topics"):
            assert [x for x in reports[MM2] if x.startswith(what + " ")] == [
                x for x in reports[PRODUCT] if x.startswith(what + " ")
            ], reports
        assert (
            "remote-topics [primary.heartbeats, primary.orders, primary.payments]" in reports[MM2]
        )
        for what in ("checkpoint", "translated"):
            for side, wanted_at in ((PRODUCT, orders_at | own_back), (MM2, None)):
                found = {
                    (line.split()[1], int(line.split()[2])): int(line.split()[3])
                    for line in reports[side]
                    if line.startswith(what + " ")
                }
                if wanted_at is not None:
                    assert found == wanted_at, reports
                else:
                    assert at_most_exact(found, orders_at, ends), reports
        assert product_exit == 0, product.log()
        assert mm2_exit == 143, mirror_maker.log()  # SIGTERM: the JVM's shutdown hooks ran


LEDGER = Topic("ledger", 2, 20, (("retention.ms", "3600000"),))
STOCK = Topic("stock", 2, 20)


def test_mm2_identity_policy_and_a_separator_without_checkpoints_against_mirror_maker_2(
    replicators: Start, tmp_path: Path
) -> None:
    """MM2's identity policy one way (primary->backup), the default policy with the separator
    ``_`` the other way, that flow's heartbeats off and checkpoints off everywhere."""
    flows = {
        "primary->backup.enabled": "true",
        "primary->backup.topics": "ledger",
        "primary->backup.replication.policy.class": IDENTITY,
        "backup->primary.enabled": "true",
        "backup->primary.topics": "stock",
        "backup->primary.replication.policy.separator": "_",
        "backup->primary.emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
    }
    base = int(time.time() * 1000) - 60_000
    with two_pairs("primary", "backup") as pairs:
        for brokers in pairs.values():
            write_input(brokers["primary"], [LEDGER], base)
            write_input(brokers["backup"], [STOCK], base)
            assert len(consume(brokers["primary"], "ledger", "app-readers", {0: 4, 1: 10})) == 14
        mirror_maker, product = run_both_mm2(replicators, tmp_path, pairs, flows)
        try:
            both_hold(
                pairs,
                [
                    ("backup", "ledger", LEDGER.records),
                    ("primary", "backup_stock", STOCK.records),
                    ("backup", "heartbeats", 1),
                ],
                mirror_maker,
                product,
            )
            # Both copy backup's heartbeats (those of primary->backup) into primary as
            # backup_heartbeats although backup->primary emits none: wait for them there.
            for side, log in ((MM2, mirror_maker.log), (PRODUCT, product.log)):
                wait_until(
                    holds_all(pairs[side]["primary"], "backup_heartbeats", 1),
                    60,
                    f"{side}: backup_heartbeats",
                    log,
                )
            snaps = {side: {a: snapshot(b) for a, b in bs.items()} for side, bs in pairs.items()}
            synced = {
                side: committed(bs["backup"], "app-readers", "ledger") for side, bs in pairs.items()
            }
        finally:
            mm2_exit = mirror_maker.stop()
            product_exit = product.stop()

        ours_wanted = {
            "primary": {"ledger", "backup_stock", "backup_heartbeats"},
            "backup": {"ledger", "stock", "heartbeats"},
        }
        # Both copy backup's heartbeats to primary as backup_heartbeats though backup->primary
        # emits none (emit.heartbeats.enabled=false stops the emitting only). Different:
        # MirrorMaker 2 creates the heartbeats topic on primary all the same (its heartbeat
        # connector creates the topic, then emits nothing) and copies it, empty, to backup as
        # primary.heartbeats (identity still names heartbeats by their source); the product
        # creates no topic it will not write.
        theirs_extra = {"primary": {"heartbeats"}, "backup": {"primary.heartbeats"}}
        for alias, wanted in ours_wanted.items():
            theirs, ours = snaps[MM2][alias], snaps[PRODUCT][alias]
            internal = f"internal: MirrorMaker {theirs.internal}, replicator {ours.internal}"
            assert ours.user_topics == wanted, (alias, internal)
            assert theirs.user_topics == wanted | theirs_extra[alias], (alias, internal)
            for topic in sorted(wanted):
                assert theirs.partitions[topic] == ours.partitions[topic], (alias, topic)
                assert theirs.configs[topic] == ours.configs[topic], (alias, topic)
            # No checkpoints topic on either side (emit.checkpoints.enabled=false).
            assert not [t for t in theirs.topics | ours.topics if "checkpoints" in t]
        assert snaps[MM2]["primary"].records["heartbeats"] == []
        assert snaps[MM2]["backup"].records["primary.heartbeats"] == []
        for side in SIDES:
            assert heartbeats(snaps[side]["primary"].records["backup_heartbeats"]) == {
                ("primary", "backup")
            }
        for snap in (snaps[MM2]["backup"], snaps[PRODUCT]["backup"]):
            assert heartbeats(snap.records["heartbeats"]) == {("primary", "backup")}
        for alias, topic, count in (("backup", "ledger", 20), ("primary", "backup_stock", 20)):
            assert_same_records(
                topic, snaps[MM2][alias].records[topic], snaps[PRODUCT][alias].records[topic], count
            )
        assert snaps[PRODUCT]["backup"].configs["ledger"] == {"retention.ms": "3600000"}
        for side in SIDES:  # no offset sync without checkpoints (nor asked for)
            assert set(synced[side].values()) == {None}, synced
        assert product_exit == 0, product.log()
        assert mm2_exit == 143, mirror_maker.log()


# -- MirrorMaker 1 ------------------------------------------------------------------------------

APP_LOG = Topic("app_log", 3, 30, (("retention.ms", "3600000"),))  # keyed, placed round-robin
METRICS = Topic("metrics", 2, 20, keyless=1)  # keyless
AUDIT = Topic("audit", 1, 5)  # not included


def key_partition(key: bytes, partitions: int) -> int:
    """Where Kafka's default partitioner puts a keyed record (murmur2, made positive)."""
    return (int(murmur2(key)) & 0x7FFFFFFF) % partitions


def test_mirror_maker_1_command_line_against_mirror_maker_1(
    replicators: Start, tmp_path: Path
) -> None:
    """MirrorMaker 1's command line (``--whitelist``, the name older deployments use for
    ``--include``; ``--num.streams 2``) and files on two
    identical pairs (the target topics created beforehand: MirrorMaker 1 creates none). Each
    pair has its own source: the product's flow joins the consumer group the file names (it
    commits under a name of its own), and a MirrorMaker 1 in that group beside it fails to join
    (InconsistentGroupProtocolException): the migration guide says to stop MirrorMaker first."""
    base = int(time.time() * 1000) - 60_000
    with two_pairs("source", "target") as pairs:
        sources = {side: bs["source"] for side, bs in pairs.items()}
        targets = {side: bs["target"] for side, bs in pairs.items()}
        consumers, producers = {}, {}
        for side in SIDES:
            write_input(sources[side], [APP_LOG, METRICS, AUDIT], base)
            run(_create_topics(targets[side].bootstrap_servers, {"app_log": 3, "metrics": 2}, {}))
            consumers[side] = tmp_path / f"{side}-consumer.properties"
            consumers[side].write_text(
                f"bootstrap.servers={sources[side].bootstrap_servers}\n"
                "group.id=mm1-mirror\n"
                "auto.offset.reset=earliest\n"
            )
            producers[side] = tmp_path / f"{side}-producer.properties"
            producers[side].write_text(f"bootstrap.servers={targets[side].bootstrap_servers}\n")
        args = ["--whitelist", "app_log|metrics", "--num.streams", "2"]
        args += ["--offset.commit.interval.ms", "1000"]

        # Different: MirrorMaker 1 (3.9.1) takes one --consumer.config only (its option parser
        # asks for a single value); the product aggregates one flow per file.
        twice = start_mm1(
            [consumers[MM2], consumers[MM2]], producers[MM2], args, tmp_path / "mm1-twice"
        )
        assert twice.process.wait(60) == 1
        assert "MultipleArgumentsForOptionException" in twice.log(), twice.log()

        mirror_maker = start_mm1([consumers[MM2]], producers[MM2], args, tmp_path / "mm1")
        product = replicators(
            "target",
            ENV,
            ("mirror-maker", "--consumer.config", str(consumers[PRODUCT]), "--producer.config",
             str(producers[PRODUCT]), *args),
        )  # fmt: skip
        try:
            product.wait_ready()
            for side, target in targets.items():
                log = mirror_maker.log if side == MM2 else product.log
                for topic in (APP_LOG, METRICS):
                    wait_until(holds_all(target, topic.name, topic.records), 90, side, log)
            snaps = {side: snapshot(target) for side, target in targets.items()}
        finally:
            mm1_exit = mirror_maker.stop()
            product_exit = product.stop()
        sent = snapshot(sources[MM2]).records
        assert [(r.partition, *content(r)) for t in sent.values() for r in t] == [
            (r.partition, *content(r))
            for t in snapshot(sources[PRODUCT]).records.values()
            for r in t
        ]
        theirs, ours = snaps[MM2], snaps[PRODUCT]
        internal = f"internal: MirrorMaker {theirs.internal}, replicator {ours.internal}"
        assert theirs.user_topics == ours.user_topics == {"app_log", "metrics"}, internal
        for topic in (APP_LOG, METRICS):
            name = topic.name
            assert theirs.partitions[name] == ours.partitions[name] == topic.partitions
            # Both copy every record once, unchanged (key, value, headers, timestamp).
            assert Counter(map(content, theirs.records[name])) == Counter(
                map(content, sent[name])
            ), name
            # The product keeps each record's partition and offset (the targets were empty).
            assert [(r.partition, r.offset, *content(r)) for r in ours.records[name]] == [
                (r.partition, r.offset, *content(r)) for r in sent[name]
            ], name
        # Different: MirrorMaker 1's handler sends each record with no partition, so its
        # producer places it: a keyed record by murmur2 of its key (here into another
        # partition than its source's for most), per-key order kept.
        moved = 0
        for record in theirs.records["app_log"]:
            assert record.key is not None
            assert record.partition == key_partition(record.key, 3), record
        for source_record in sent["app_log"]:
            assert source_record.key is not None
            moved += key_partition(source_record.key, 3) != source_record.partition
        assert moved > 0
        # Order holds per source partition and key (a key written to several source
        # partitions, as here, arrives interleaved as MirrorMaker's streams fetch them).
        origin = {r.value: r.partition for r in sent["app_log"]}
        for key in {r.key for r in sent["app_log"]}:
            for partition in range(APP_LOG.partitions):
                assert [
                    r.value
                    for r in theirs.records["app_log"]
                    if r.key == key and origin[r.value] == partition
                ] == [r.value for r in sent["app_log"] if r.key == key and r.partition == partition]
        # Keyless records go where the sticky partitioner puts them; each source partition's
        # records stay in their order within whichever target partition they reach.
        for partition in range(METRICS.partitions):
            values = [r.value for r in sent["metrics"] if r.partition == partition]
            for target_partition in range(METRICS.partitions):
                got = [
                    r.value for r in theirs.records["metrics"] if r.partition == target_partition
                ]
                kept = [v for v in got if v in values]
                assert kept == [v for v in values if v in kept]
        # The source's retention.ms (1 h) reaches neither target topic: MirrorMaker 1 never
        # touches topic configs; the product's config sync for MirrorMaker 1 command lines only
        # ever raises limits (REPLICATOR_TOPIC_CONFIG_SYNC=raise-only), and the target's
        # default (7 days) is higher.
        assert theirs.configs["app_log"] == ours.configs["app_log"] == {}
        # MirrorMaker 1 commits under the consumer config's group.id; the product under
        # <group>.<source>.<target> (its note says so), both at the log end.
        ends = {0: 10, 1: 10, 2: 10}
        assert committed(sources[MM2], "mm1-mirror", "app_log") == ends
        flow_group = ".".join(
            [
                "mm1-mirror",
                *(str(server_alias(b.bootstrap_servers)) for b in pairs[PRODUCT].values()),
            ]
        )
        assert committed(sources[PRODUCT], flow_group, "app_log") == ends
        assert product_exit == 0, product.log()
        assert mm1_exit == 143, mirror_maker.log()
