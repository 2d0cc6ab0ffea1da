"""Two-way and three-way replication: every real topic everywhere holds the union, once each."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from replicator import provenance
from replicator.provenance import Provenance
from replicator.readback import StoredRecord
from tests.integration.harness import (
    ReplicatorProcess,
    Sent,
    Start,
    count,
    create_topics,
    holds,
    produce,
    read,
    replicator_env,
    start_clusters,
    wait_until,
)


def assert_exact_replica(
    stored: list[StoredRecord], sent: dict[str, list[Sent]], topic: str
) -> None:
    """``stored`` (a real topic in one cluster) holds each sent record once, intact, in order."""
    by_origin = {
        (origin, s.topic, s.partition, s.offset): s for origin, recs in sent.items() for s in recs
    }
    seen: Counter[tuple[str, str, int, int]] = Counter()
    last_offset: dict[tuple[str, int], int] = defaultdict(lambda: -1)
    for record in stored:
        origin = record.provenance
        assert origin is not None, f"untagged record in {topic}: {record}"
        key = (origin.cluster, origin.topic, origin.partition, origin.offset)
        seen[key] += 1
        source = by_origin[key]
        assert record.partition == source.partition, "partition number changed"
        assert (record.key, record.value, record.timestamp) == (
            source.key,
            source.value,
            source.timestamp,
        )
        assert list(record.headers) == provenance.tagged(source.headers, Provenance(*key))
        stream = (origin.cluster, origin.partition)
        assert origin.offset > last_offset[stream], f"out of order in {stream}"
        last_offset[stream] = origin.offset
    duplicates = {k: n for k, n in seen.items() if n > 1}
    missing = set(by_origin) - set(seen)
    assert not duplicates, f"duplicates: {list(duplicates)[:5]}"
    assert not missing, f"{len(missing)} records missing, e.g. {sorted(missing)[:5]}"


def test_two_datacenters_replicate_both_ways_exactly_once(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        for broker in brokers.values():
            create_topics(broker, orders_REPLICA=3, internal_REPLICA=1)
        dc1 = replicators("dc1", replicator_env("dc1", brokers, topics_exclude="internal"))
        dc2 = replicators("dc2", replicator_env("dc2", brokers, topics_exclude="internal"))
        dc1.wait_ready()
        dc2.wait_ready()

        sent = {
            alias: produce(broker, "orders_REPLICA", 300, partitions=3)
            for alias, broker in brokers.items()
        }
        # Records that already carry provenance (written by another replicator) and records with
        # broken provenance are never mirrored again.
        forged = Provenance("dc9", "orders_REPLICA", 0, 42).headers()
        produce(brokers["dc1"], "orders_REPLICA", 20, 3, tag="-tagged", headers=tuple(forged))
        broken = ((provenance.ORIGIN_CLUSTER, b"dc9"),)
        produce(brokers["dc1"], "orders_REPLICA", 5, 3, tag="-broken", headers=broken)
        produce(brokers["dc1"], "internal_REPLICA", 10, 1)

        for broker in brokers.values():
            wait_until(holds(broker, "orders", 600), 60, f"orders on {broker.alias}")
        time.sleep(2)  # anything mirrored back or twice would arrive by now
        for broker in brokers.values():
            assert_exact_replica(read(broker, "orders"), sent, "orders")
            assert count(broker, "internal") == 0, "excluded topic was replicated"

        for leg in ("dc1->dc1", "dc1->dc2"):
            assert (
                dc1.metric("replicator_records_skipped_total", leg=leg, reason="already_replicated")
                == 20
            )
            assert (
                dc1.metric(
                    "replicator_records_skipped_total", leg=leg, reason="malformed_provenance"
                )
                == 5
            )
            assert dc1.metric("replicator_records_replicated_total", leg=leg) == 300
        assert dc2.metric("replicator_records_replicated_total", leg="dc2->dc1") == 300
        assert dc1.metric("replicator_replication_latency_seconds_count", leg="dc1->dc2") > 0

        wait_until(lambda: _all_committed(dc1), 10, "dc1 commits every acknowledged offset")
        status, body = dc1.get("/status")
        assert status == 200
        legs = {leg["leg"]: leg for leg in body["legs"]}
        assert set(legs) == {"dc1->dc1", "dc1->dc2"}
        assert legs["dc1->dc2"]["assigned_partitions"] == 3
        assert dc1.stop() == 0
        assert dc2.stop() == 0


def _all_committed(replicator: ReplicatorProcess) -> bool:
    _, body = replicator.get("/status")
    return all(p["lag"] == 0 for leg in body["legs"] for p in leg["partitions"])


def test_three_datacenters_each_hold_the_union(replicators: Start) -> None:
    aliases = ("dc1", "dc2", "dc3")
    with start_clusters(*aliases) as brokers:
        for broker in brokers.values():
            create_topics(broker, events_REPLICA=2)
        running = [replicators(a, replicator_env(a, brokers)) for a in aliases]
        for replicator in running:
            replicator.wait_ready()
        sent = {a: produce(b, "events_REPLICA", 120, partitions=2) for a, b in brokers.items()}
        for broker in brokers.values():
            wait_until(holds(broker, "events", 360), 60, f"events on {broker.alias}")
        time.sleep(2)
        for broker in brokers.values():
            assert_exact_replica(read(broker, "events"), sent, "events")
        for replicator in running:
            assert replicator.stop() == 0
