"""Topic rules as users write them, and the loop rule, on real brokers and real replicators.

dc1 writes its include anchored with an alternation (``^(orders|payments|enriched)$``), dc2 as a
MirrorMaker comma list with an exclude that overlaps it. Each replicates exactly the topics its
rules accept, says why it rejects the others (``/status``, the log, a metric), copies derived
records (which carry forwarded provenance) with their own provenance, and skips replicated
records published again into their own replica topic.
"""

from __future__ import annotations

from collections.abc import Callable

from replicator.kafka.readers import StoredRecord
from replicator.model import provenance
from tests.integration.harness import (
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
from tests.integration.test_two_way import assert_exact_replica


def _republished(records: list[StoredRecord], value_prefix: bytes) -> list[Sent]:
    """What an application writes after reading ``records``: its own value, headers forwarded."""
    return [
        Sent("", r.partition, -1, r.key, value_prefix + (r.value or b""), r.headers, r.timestamp)
        for r in records
    ]


def test_rules_as_written_select_exactly_and_derived_records_are_new_data(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        for broker in brokers.values():
            create_topics(
                broker, orders_REPLICA=2, payments_REPLICA=1, audit_REPLICA=1, enriched_REPLICA=2
            )
        dc1 = replicators(
            "dc1", replicator_env("dc1", brokers, topics_include="^(orders|payments|enriched)$")
        )
        dc2 = replicators(
            "dc2",
            replicator_env(
                "dc2",
                brokers,
                topics_include="orders, payments,audit,enriched",
                topics_exclude="audit,__.*",
            ),
        )
        dc1.wait_ready()
        dc2.wait_ready()

        orders = {a: produce(b, "orders_REPLICA", 100, partitions=2) for a, b in brokers.items()}
        payments = {a: produce(b, "payments_REPLICA", 30, partitions=1) for a, b in brokers.items()}
        for broker in brokers.values():
            produce(broker, "audit_REPLICA", 20, partitions=1)
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 200), 60, f"orders on {broker.alias}")
            wait_until(holds(broker, "payments", 60), 60, f"payments on {broker.alias}")

        # dc1: a processor enriches every order (both origins) and forwards its headers.
        enriched = produce_records(
            brokers["dc1"], "enriched_REPLICA", _republished(read(brokers["dc1"], "orders"), b"+")
        )
        # dc2: an application publishes the payments it read back into payments_REPLICA: loops.
        produce_records(
            brokers["dc2"],
            "payments_REPLICA",
            _republished(read(brokers["dc2"], "payments"), b""),
        )
        # ... and five records whose provenance header is unreadable: refused, counted.
        broken = ((provenance.ORIGIN, b"dc1/orders_REPLICA/x/1"),)
        produce(brokers["dc2"], "orders_REPLICA", 5, 2, tag="-broken", headers=broken)

        for broker in brokers.values():
            wait_until(holds(broker, "enriched", 200), 60, f"enriched on {broker.alias}")
        wait_settled(dc1, dc2)  # anything mirrored twice, back, or from a rejected topic is in
        for broker in brokers.values():
            assert_exact_replica(read(broker, "orders"), orders, "orders")
            assert_exact_replica(read(broker, "payments"), payments, "payments")
            assert_exact_replica(read(broker, "enriched"), {"dc1": enriched}, "enriched")
            assert count(broker, "audit") == 0, "a rejected topic was replicated"

        for leg in ("dc1->dc1", "dc1->dc2"):
            assert dc1.metric("replicator_records_derived_total", leg=leg) == 200
        for leg in ("dc2->dc2", "dc2->dc1"):
            skipped = "replicator_records_skipped_total"
            assert dc2.metric(skipped, leg=leg, reason="loop") == 60
            assert dc2.metric(skipped, leg=leg, reason="malformed_provenance") == 5
            assert dc2.metric("replicator_records_derived_total", leg=leg) == 0

        # Why each replica topic is or is not replicated: /status and the metric, once each
        # replicator's topic listing has seen every topic.
        # A listing taken before the replicator created `orders` on dc2 shows audit_REPLICA
        # without it: wait for the listing that holds both.
        def listed(process: ReplicatorProcess, why: str, topic: str) -> Callable[[], bool]:
            def check() -> bool:
                rejected = process.get("/status")[1]["topics"]["rejected"]
                return topic in rejected.get(why, ())

            return check

        wait_until(listed(dc1, "not_included", "audit_REPLICA"), 30, "audit not included, dc1")
        wait_until(listed(dc2, "excluded", "audit_REPLICA"), 30, "audit excluded, dc2")
        wait_until(listed(dc2, "not_a_replica_topic", "orders"), 30, "orders listed, dc2")
        topics = dc1.get("/status")[1]["topics"]
        assert topics["replicated"] == ["enriched_REPLICA", "orders_REPLICA", "payments_REPLICA"]
        assert topics["rejected"]["not_included"] == ["audit_REPLICA"]
        topics = dc2.get("/status")[1]["topics"]
        assert topics["rejected"]["excluded"] == ["audit_REPLICA"]
        assert "orders" in topics["rejected"]["not_a_replica_topic"]
        assert dc2.metric("replicator_source_topics", selection="replicated") == 3
        assert dc2.metric("replicator_source_topics", selection="excluded") == 1
        assert dc1.stop() == 0
        assert dc2.stop() == 0


def test_rules_that_match_nothing_say_so_and_a_new_topic_is_picked_up(
    replicators: Start,
) -> None:
    with start_clusters("dc1") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=1)
        # A whitelist written for the real topic names, but with a typo: nothing matches.
        dc1 = replicators("dc1", replicator_env("dc1", brokers, topics_include="^ordres$,invoices"))
        dc1.wait_ready()
        wait_until(
            lambda: "the topic rules match no replica topic" in dc1.log(), 30, "a warning", dc1.log
        )
        topics = dc1.get("/status")[1]["topics"]
        assert topics["replicated"] == []
        assert topics["rules"]["include"] == "^ordres$|invoices"
        assert topics["rejected"]["not_included"] == ["orders_REPLICA"]
        assert dc1.metric("replicator_source_topics", selection="replicated") == 0

        # The listing is refreshed: a topic created later that the rules accept is replicated.
        create_topics(brokers["dc1"], invoices_REPLICA=2)
        sent = {"dc1": produce(brokers["dc1"], "invoices_REPLICA", 40, partitions=2)}
        wait_until(holds(brokers["dc1"], "invoices", 40), 60, "invoices replicated", dc1.log)
        assert_exact_replica(read(brokers["dc1"], "invoices"), sent, "invoices")
        assert dc1.get("/status")[1]["topics"]["replicated"] == ["invoices_REPLICA"]
        assert dc1.stop() == 0
