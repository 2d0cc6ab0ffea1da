"""The Spark jobs as ``replicator backfill`` and ``replicator audit``, local mode, real brokers.

Backfill: a history copied exactly (partition, order, key, value, headers, timestamp, provenance),
a derived record copied with fresh provenance and its upstream, a loop and a malformed record
counted and not copied, a re-run that adds nothing, and the hand-over to a live replicator with
no gap and no duplicate. Audit: clean clusters (a derived record among the expected ones) report
nothing; injected faults (a missing, a duplicated, a reordered, an altered, a looped, a malformed
and an untagged record) are reported exactly, and the same when every partition's range is read
by several tasks. The jobs read with the shipped ``replicator-kafka`` (the default) and with
Spark's own ``spark-sql-kafka-0-10`` fetched from Maven Central (``--connector standard``): each
test says which.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.model.provenance import ORIGIN, Provenance, Tagger
from tests.integration.harness import (
    APACHE_KAFKA,
    Sent,
    Start,
    copies_of,
    create_topics,
    holds,
    oracle,
    produce,
    produce_records,
    read,
    replicator_cli,
    replicator_env,
    run,
    start_clusters,
    wait_settled,
    wait_until,
)

# Each test starts Spark once or more (13-17 s a session) beside two brokers: 190-330 s each
# under the suite's load on two cores (measured in CI), over the suite's default 300 s.
pytestmark = pytest.mark.timeout(900)


def _derived(topic: str, partition: int, timestamp: int) -> Sent:
    """A record a stream processor published into ``topic``: it forwarded the headers of a
    record it read from dc2's ``payments`` (whose provenance names ``payments_REPLICA``)."""
    carried = Provenance("dc2", "payments_REPLICA", 1, 7).headers()
    headers = (("trace-id", b"d1"), *carried, ("app", b"enricher"))
    return Sent(topic, partition, -1, b"d", b"derived", headers, timestamp)


def _looped(topic: str, partition: int, timestamp: int) -> Sent:
    """A replicated record (from dc2, through ``topic``) published into ``topic`` again."""
    headers = (("trace-id", b"l1"), *Provenance("dc2", topic, partition, 3).headers())
    return Sent(topic, partition, -1, b"l", b"looped", headers, timestamp)


def _malformed(topic: str, partition: int, timestamp: int) -> Sent:
    headers = (("trace-id", b"m1"), (ORIGIN, b"dc2/orders_REPLICA/one/1"))
    return Sent(topic, partition, -1, b"m", b"malformed", headers, timestamp)


async def _committed(bootstrap: str, group: str, partitions: int) -> list[int | None]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition("orders_REPLICA", p) for p in range(partitions)]
        consumer.assign(tps)
        return [await consumer.committed(tp) for tp in tps]
    finally:
        await consumer.stop()


def test_backfill_copies_exactly_then_hands_over_to_the_live_replicator(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        create_topics(local, orders_REPLICA=3)
        sent = produce(local, "orders_REPLICA", 3000, partitions=3)
        at = sent[0].timestamp
        derived, _, _ = produce_records(
            local,
            "orders_REPLICA",
            [
                _derived("orders_REPLICA", 0, at),
                _looped("orders_REPLICA", 1, at),
                _malformed("orders_REPLICA", 2, at),
            ],
        )
        sent = [*sent, derived]  # what the live replicator would copy
        env = replicator_env("dc1", brokers)

        status, out, err = replicator_cli(env, "backfill", "--to", "dc2", "--json")
        assert status == 0, err
        result = json.loads(out)
        assert (result["records"], result["written"]) == (3001, {"dc2": 3001}), result
        counted = {k: result[k] for k in ("derived", "loops", "malformed", "untagged")}
        assert counted == {"derived": 1, "loops": 1, "malformed": 1, "untagged": 0}, result
        rate = 3000 / result["seconds"]
        stored = read(remote, "orders")
        assert len(stored) == 3001
        report = oracle(sent, stored, "dc1")
        assert not report.missing and not report.duplicates and not report.out_of_order, report
        by_origin = {(r.partition, r.offset): r for r in sent}
        for record in stored:
            tag = record.provenance
            assert tag is not None
            assert tag == Provenance("dc1", "orders_REPLICA", record.partition, tag.offset)
            source = by_origin[(tag.partition, tag.offset)]
            assert record.timestamp == source.timestamp
            # exactly the live replicator's headers (a derived record's carry its upstream)
            _, written = Tagger("dc1", "orders_REPLICA", source.partition).retag(
                source.headers, source.offset
            )
            assert list(record.headers) == written
        (copied,) = [r for r in stored if r.value == b"derived"]
        assert copied.headers == (
            ("trace-id", b"d1"),
            ("app", b"enricher"),
            ("replicator-upstream", b"dc2/payments_REPLICA/1/7"),
            ("replicator", f"dc1/orders_REPLICA/0/{derived.offset}".encode()),
        )

        status, out, err = replicator_cli(env, "backfill", "--to", "dc2", "--json")
        assert status == 0, err
        again = json.loads(out)
        assert again["written"] == {"dc2": 0} and again["already_there"] == {"dc2": 3001}
        assert len(read(remote, "orders")) == 3001, "a re-run wrote duplicates"

        group = "replicator.dc1.dc2"
        assert run(_committed(local.bootstrap_servers, group, 3)) == [1001, 1001, 1001]
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        more = produce(local, "orders_REPLICA", 300, partitions=3, tag="-live")
        wait_until(holds(remote, "orders", 3301), 60, "live records on dc2", dc1.log)
        wait_until(holds(local, "orders", 3301), 60, "dc1's own topic", dc1.log)
        wait_settled(dc1)
        assert len(read(remote, "orders")) == 3301
        final = oracle(sent + more, read(remote, "orders"), "dc1")
        assert not final.missing and not final.duplicates and not final.out_of_order, final
        assert dc1.stop() == 0
        print(f"backfill: 3000 records in {result['seconds']:.1f} s ({rate:.0f} records/s)")


def _audit(env: dict[str, str], topic: str, *more: str) -> tuple[int, dict[str, Any]]:
    status, out, err = replicator_cli(env, "audit", "--topic", topic, "--json", "-", *more)
    assert status in (0, 1), err
    assert out.strip(), err
    return status, json.loads(out.strip().splitlines()[-1])


# One audit of two topics, one Spark JVM: each JVM is a minute or more on a loaded 2-core
# machine. Spark's own connector is read by the backfill of real topics.
def test_audit_reports_nothing_on_clean_clusters_and_exactly_the_injected_faults(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        for broker in (local, remote):
            create_topics(broker, orders_REPLICA=3, orders=3)
        sent = produce(local, "orders_REPLICA", 300, partitions=3)
        # derived: expected in every cluster, like new data, matched by its fresh provenance
        sent += produce_records(
            local, "orders_REPLICA", [_derived("orders_REPLICA", 0, sent[0].timestamp)]
        )
        copies = copies_of(sent, "orders")
        env = replicator_env("dc1", brokers)

        # Pointed at nothing, the jobs never pass: a topic no cluster holds, and one that holds
        # no record yet, are named (exit 2, before Spark starts).
        create_topics(local, empty_REPLICA=1)
        for job in ("audit", "backfill"):
            for topic, why in (
                ("nosuchtopic", "neither nosuchtopic nor nosuchtopic_REPLICA exists in dc1"),
                ("empty", "topic empty: no record to check"),
            ):
                status, out, err = replicator_cli(env, job, "--topic", topic)
                said = " ".join(err.split())
                assert status == 2 and why in said and "OK" not in out, (job, out, err)

        produce_records(local, "orders", copies)
        produce_records(remote, "orders", copies)

        # The same history, with one fault of each kind, on dc2's "payments"; both topics are
        # audited in one run (one Spark job), each reported on its own. Each partition's range
        # is split into tasks of 7 offsets (15 per partition: a fault's neighbours in other
        # tasks than it, copies read apart from their sources).
        for broker in (local, remote):
            create_topics(broker, payments_REPLICA=3, payments=3)
        paid = produce(local, "payments_REPLICA", 300, partitions=3)
        faulty = _inject_faults(copies_of(paid, "payments"), paid)
        produce_records(local, "payments", [*copies_of(paid, "payments")])
        produce_records(remote, "payments", faulty)
        looped = copies_of(paid[:1], "payments_REPLICA")  # replicated data published again
        broken = _malformed("payments_REPLICA", 2, paid[0].timestamp)
        produce_records(remote, "payments_REPLICA", [*looped, broken])
        status, both = _audit(env, "orders", "--topic", "payments", "--max-offsets-per-task", "7")
        assert status == 1, both

        def of(topic: str) -> dict[str, Any]:
            partitions = [p for p in both["partitions"] if p["topic"] == topic]
            totals = {c: sum(p[c] for p in partitions) for c in both["totals"]}
            return {"partitions": partitions, "totals": totals}

        clean, found = of("orders"), of("payments")
        assert {c: clean["totals"][c] + found["totals"][c] for c in both["totals"]} == both[
            "totals"
        ]
        totals = clean["totals"]
        assert totals["expected"] == totals["delivered"] == 602, totals
        assert {k: v for k, v in totals.items() if k not in ("expected", "delivered")} == {
            "missing": 0,
            "lag": 0,
            "duplicates": 0,
            "out_of_order": 0,
            "mismatched": 0,
            "untagged": 0,
            "loops": 0,
            "malformed": 0,
        }

        assert found["totals"] == {
            "expected": 600,
            "delivered": 599,
            "missing": 1,
            "lag": 0,
            "duplicates": 1,
            "out_of_order": 1,
            "mismatched": 1,
            "untagged": 1,
            "loops": 1,
            "malformed": 1,
        }, found["totals"]
        flagged = {
            (p["cluster"], p["partition"], k)
            for p in found["partitions"]
            for k in (
                "missing",
                "duplicates",
                "out_of_order",
                "mismatched",
                "untagged",
                "loops",
                "malformed",
            )
            if p[k]
        }
        assert flagged == {
            ("dc2", 0, "missing"),
            ("dc2", 0, "duplicates"),
            ("dc2", 1, "out_of_order"),
            ("dc2", 2, "mismatched"),
            ("dc2", 1, "untagged"),
            ("dc2", paid[0].partition, "loops"),
            ("dc2", 2, "malformed"),
        }, flagged
        print(f"audit of injected faults: {found['totals']}")


def _inject_faults(copies: list[Sent], source: list[Sent]) -> list[Sent]:
    """Drop one record, duplicate one, swap two, alter one, add an untagged one."""
    by_partition: dict[int, list[Sent]] = {0: [], 1: [], 2: []}
    for record, origin in zip(copies, source, strict=True):
        by_partition[origin.partition].append(record)
    p0, p1, p2 = by_partition[0], by_partition[1], by_partition[2]
    p0 = [*p0[:10], *p0[11:20], p0[20], *p0[20:]]  # offset 10 missing, offset 20 twice
    p1 = [*p1[:5], p1[6], p1[5], *p1[7:]]  # offsets 5 and 6 swapped
    p2 = [*p2[:7], replace(p2[7], value=b"tampered"), *p2[8:]]
    stray = Sent("payments", 1, -1, b"k", b"written to X directly", (), p1[0].timestamp)
    return [*p0, *p1, stray, *p2]


def test_backfill_of_real_topics_copies_every_origin_with_its_provenance(
    replicators: Start,
) -> None:
    """Seeding dc3 from dc1's ``orders``, which holds dc1's and dc2's records: copied as they are
    (provenance kept, partition and order too), split into several Spark tasks per partition,
    into a topic the backfill creates with the source's 4 partitions; a record without
    provenance is not copied and is counted. A destination topic with too few partitions is
    grown first (refused where the broker cannot grow it)."""
    with start_clusters("dc1", "dc3") as brokers:
        local, new = brokers["dc1"], brokers["dc3"]
        create_topics(local, orders_REPLICA=4, orders=4)
        source = produce(local, "orders_REPLICA", 300, partitions=4)
        ours = copies_of(source, "orders")
        theirs = [  # as if replicated from dc2
            replace(
                copy,
                headers=(
                    *r.headers,
                    *Provenance("dc2", "orders_REPLICA", r.partition, r.offset).headers(),
                ),
            )
            for copy, r in zip(ours[:150], source[:150], strict=True)
        ]
        stray = Sent("orders", 2, -1, b"k", b"written to X directly", (), ours[0].timestamp)
        produce_records(local, "orders", [*ours, *theirs, stray])
        env = replicator_env("dc1", brokers)
        # Read by Spark's own connector (the default is the shipped one).
        args: tuple[str, ...] = ("backfill", "--to", "dc3", "--real-topics")
        args += ("--max-offsets-per-task", "40", "--connector", "standard")
        status, out, err = replicator_cli(env, *args, "--json")
        assert status == 0, err
        result = json.loads(out)
        assert (result["records"], result["written"], result["untagged"]) == (450, {"dc3": 450}, 1)
        held = [r for r in read(local, "orders") if r.provenance is not None]
        copied = read(new, "orders")
        for partition in range(4):
            assert [
                (r.key, r.value, r.headers, r.timestamp) for r in copied if r.partition == partition
            ] == [
                (r.key, r.value, r.headers, r.timestamp) for r in held if r.partition == partition
            ]
        # Then, in one more job (each Spark JVM is a minute or more on a loaded machine): the
        # same topics again write nothing, and a destination topic with fewer partitions than
        # its source is grown to the source's count before Spark starts, as the sidecar grows
        # it (and MirrorMaker 2), then copied partition for partition. A broker that cannot
        # grow it (the embedded broker has no CreatePartitions) has it refused before Spark
        # starts, named with the reason; nothing is written.
        create_topics(local, payments=4)
        paid = [
            Sent(
                "payments",
                i % 4,
                -1,
                b"k%d" % i,
                b"paid-%d" % i,
                tuple(Provenance("dc2", "payments_REPLICA", i % 4, i // 4).headers()),
                ours[0].timestamp,
            )
            for i in range(8)
        ]
        produce_records(local, "payments", paid)
        create_topics(new, payments=1)
        if not APACHE_KAFKA:
            short = ("backfill", "--to", "dc3", "--real-topics", "--topic", "payments", "--json")
            status, out, err = replicator_cli(env, *short)
            assert status == 1, (out, err)
            assert "payments" in err and "partition" in err, err
            assert read(new, "payments") == []
            return
        both = ("--topic", "orders", "--topic", "payments")
        status, out, err = replicator_cli(env, *args, *both, "--json")
        assert status == 0, err
        assert "destination topic grown to the source's partition count" in err, err
        again = json.loads(out)
        assert (again["written"], again["already_there"], again["untagged"]) == (
            {"dc3": 8},
            {"dc3": 450},
            1,
        ), again
        assert len(read(new, "orders")) == 450, "a re-run wrote duplicates"
        copied = read(new, "payments")
        for partition in range(4):
            assert [(r.key, r.value, r.headers) for r in copied if r.partition == partition] == [
                (r.key, r.value, r.headers) for r in paid if r.partition == partition
            ]
