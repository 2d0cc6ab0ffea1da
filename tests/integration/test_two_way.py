"""Two-way and three-way replication: every real topic everywhere holds the union, once each."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from replicator.kafka.readers import StoredRecord
from replicator.model import provenance
from replicator.model.provenance import Provenance
from tests.integration.harness import (
    DATA_PATH,
    ReplicatorProcess,
    Sent,
    Start,
    count,
    create_topics,
    holds,
    produce,
    produce_records,
    read,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)

# Also run on the embedded broker (make smoke): the demo's path stays proven.
pytestmark = pytest.mark.smoke


def replicated_headers(source: Sent, origin: Provenance) -> list[tuple[str, bytes | None]]:
    """What the replicator writes for ``source``: its own headers, then the provenance it
    carried (a derived record) as ``replicator-upstream``, then its own provenance."""
    own = [(k, v) for k, v in source.headers if k not in provenance.HEADER_NAMES]
    carried = [(provenance.UPSTREAM, v) for k, v in source.headers if k == provenance.ORIGIN]
    return [*own, *carried, (provenance.ORIGIN, str(origin).encode())]


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
        assert list(record.headers) == replicated_headers(source, Provenance(*key))
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
        # Records whose provenance names the topic they sit in (replicated records published
        # again into their own flow) and records with broken provenance are never mirrored.
        forged = Provenance("dc9", "orders_REPLICA", 0, 42).headers()
        produce(brokers["dc1"], "orders_REPLICA", 20, 3, tag="-tagged", headers=tuple(forged))
        broken = ((provenance.ORIGIN, b"dc9"),)
        produce(brokers["dc1"], "orders_REPLICA", 5, 3, tag="-broken", headers=broken)
        produce(brokers["dc1"], "internal_REPLICA", 10, 1)

        for broker in brokers.values():
            wait_until(holds(broker, "orders", 600), 60, f"orders on {broker.alias}")
        wait_settled(dc1, dc2)  # anything mirrored back or twice is written by then
        for broker in brokers.values():
            assert_exact_replica(read(broker, "orders"), sent, "orders")
            assert count(broker, "internal") == 0, "excluded topic was replicated"

        for leg in ("dc1->dc1", "dc1->dc2"):
            assert dc1.metric("replicator_records_skipped_total", leg=leg, reason="loop") == 20
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
        # The path the suite runs (REPLICATOR_TEST_DATA_PATH): native unless told otherwise.
        assert body["data_path"]["path"] == DATA_PATH
        assert dc1.metric("replicator_data_path", path=DATA_PATH) == 1
        legs = {leg["leg"]: leg for leg in body["legs"]}
        assert set(legs) == {"dc1->dc1", "dc1->dc2"}
        assert legs["dc1->dc2"]["assigned_partitions"] == 3
        for leg in legs.values():  # the summary agrees with the partitions' detail
            assert leg["partition_states"] == {
                "starting": 0,
                "replicating": 3,
                "stalled": 0,
                "halted": 0,
            }
            assert leg["lag"]["records"] == 0 and leg["lag"]["partitions_unknown"] == 0
            assert "partitions" not in leg
        assert dc1.stop() == 0
        assert dc2.stop() == 0


def _all_committed(replicator: ReplicatorProcess) -> bool:
    _, body = replicator.get("/status?partitions=all")
    return all(p["lag"] == 0 for leg in body["legs"] for p in leg["partitions"])


def test_three_datacenters_each_hold_the_union_and_derived_data_chains(
    replicators: Start,
) -> None:
    aliases = ("dc1", "dc2", "dc3")
    with start_clusters(*aliases) as brokers:
        for broker in brokers.values():
            create_topics(broker, events_REPLICA=2)
        create_topics(brokers["dc1"], derived_REPLICA=2)
        create_topics(brokers["dc2"], summary_REPLICA=1)
        running = {a: replicators(a, replicator_env(a, brokers)) for a in aliases}
        for replicator in running.values():
            replicator.wait_ready()
        sent = {a: produce(b, "events_REPLICA", 120, partitions=2) for a, b in brokers.items()}
        for broker in brokers.values():
            wait_until(holds(broker, "events", 360), 60, f"events on {broker.alias}")

        # A stream processor in dc1 reads events (every origin's) and publishes one derived
        # record each, forwarding the input's headers (provenance included), as Kafka Streams
        # does; one in dc2 reads those derived records and publishes a summary the same way.
        # Each is new data: replicated everywhere, once, with its own provenance.
        def derive(records: list[StoredRecord], partitions: int) -> list[Sent]:
            return [
                Sent("", r.offset % partitions, -1, r.key, b"from-" + (r.value or b""),
                     r.headers, r.timestamp)
                for r in records
            ]  # fmt: skip

        events_dc1 = read(brokers["dc1"], "events")
        derived = produce_records(brokers["dc1"], "derived_REPLICA", derive(events_dc1, 2))
        wait_until(holds(brokers["dc2"], "derived", 360), 60, "derived on dc2")
        derived_dc2 = read(brokers["dc2"], "derived")
        summary = produce_records(brokers["dc2"], "summary_REPLICA", derive(derived_dc2, 1))
        # An application in dc3 publishes 30 replicated events again into events_REPLICA: the
        # loop the rule exists for. They are skipped and counted, never mirrored.
        again = read(brokers["dc3"], "events")[:30]
        produce_records(brokers["dc3"], "events_REPLICA", derive(again, 2))

        for broker in brokers.values():
            wait_until(holds(broker, "summary", 360), 60, f"summary on {broker.alias}")
            wait_until(holds(broker, "derived", 360), 60, f"derived on {broker.alias}")
        wait_settled(*running.values())
        for broker in brokers.values():
            assert_exact_replica(read(broker, "events"), sent, "events")
            assert_exact_replica(read(broker, "derived"), {"dc1": derived}, "derived")
            assert_exact_replica(read(broker, "summary"), {"dc2": summary}, "summary")
        for destination in aliases:
            leg = f"dc3->{destination}"
            assert (
                running["dc3"].metric("replicator_records_skipped_total", leg=leg, reason="loop")
                == 30
            )
            leg = f"dc1->{destination}"
            assert running["dc1"].metric("replicator_records_derived_total", leg=leg) == 360
        for replicator in running.values():
            assert replicator.stop() == 0
