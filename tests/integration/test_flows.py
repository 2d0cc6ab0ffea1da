"""MirrorMaker-style flows on real brokers: naming policies, one source into several targets,
same-name active-active in two and three datacenters (no loop, no duplicate, no loss)."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from aiokafka import TopicPartition

from replicator.kafka.readers import StoredRecord
from replicator.model.batching import place
from tests.integration.faults import behind_proxy
from tests.integration.harness import (
    APACHE_KAFKA,
    Broker,
    Sent,
    Start,
    Stream,
    admin_client,
    commit_offsets,
    create_topics,
    holds,
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


def flow_env(name: str, source: str, target: str, **options: str) -> dict[str, str]:
    """The variables of one flow."""
    prefix = f"REPLICATOR_FLOWS__{name.upper()}__"
    env = {prefix + "SOURCE": source, prefix + "TARGET": target}
    env.update({prefix + key.upper(): value for key, value in options.items()})
    return env


def assert_copied(stored: list[StoredRecord], sent: list[Sent], origin: str) -> None:
    """``stored`` holds every record of ``sent`` (written on cluster ``origin``) exactly once,
    intact, in its source partition and in source order, and nothing else from ``origin``."""
    wanted = {(s.topic, s.partition, s.offset): s for s in sent}
    seen: Counter[tuple[str, int, int]] = Counter()
    last: dict[int, int] = defaultdict(lambda: -1)
    for record in stored:
        tag = record.provenance
        if tag is None or tag.cluster != origin:
            continue
        key = (tag.topic, tag.partition, tag.offset)
        seen[key] += 1
        source = wanted.get(key)
        assert source is not None, f"{key} is not a record written on {origin}"
        assert record.partition == source.partition, "partition number changed"
        assert (record.key, record.value, record.timestamp) == (
            source.key,
            source.value,
            source.timestamp,
        )
        assert tag.offset > last[tag.partition], f"out of order in partition {tag.partition}"
        last[tag.partition] = tag.offset
    duplicates = {k: n for k, n in seen.items() if n > 1}
    missing = sorted(set(wanted) - set(seen))
    assert not duplicates, f"duplicates: {list(duplicates)[:5]}"
    assert not missing, f"{len(missing)} of {len(wanted)} missing, e.g. {missing[:5]}"


def test_each_naming_policy_copies_exactly_and_one_source_feeds_several_targets(
    replicators: Start,
) -> None:
    """One replicator runs three flows of dc1: identity into dc2, prefix and MM2's
    ``<source>.<topic>`` into dc3. Internal and excluded topics stay where they are.

    The prefix is not ``dc1_``: Kafka refuses a topic whose name differs from an existing one
    only in '.' against '_', so ``dc1_orders`` cannot sit beside MM2's ``dc1.orders`` in dc3
    (the embedded broker does not check it). A flow that makes such a name is shown last: its
    topics refused with Kafka's reason, its partitions halted and counted, nothing written."""
    with start_clusters("dc1", "dc2", "dc3") as brokers:
        dc1 = brokers["dc1"]
        create_topics(dc1, orders=3, payments=1, audit_log=1)
        env = replicator_env("dc1", brokers, replica_mode="false")
        env |= flow_env("backup", "dc1", "dc2", topics_exclude="audit.*")
        env |= flow_env("prefixed", "dc1", "dc3", naming="prefix", prefix="mirror_")
        env |= flow_env(
            "mm2", "dc1", "dc3", naming="source-alias", topics_include="orders,payments"
        )
        process = replicators("dc1", env)
        process.wait_ready()
        sent = {
            "orders": produce(dc1, "orders", 240, partitions=3),
            "payments": produce(dc1, "payments", 60, partitions=1),
            "audit_log": produce(dc1, "audit_log", 20, partitions=1),
        }
        expected = {
            ("dc2", "orders"): sent["orders"],
            ("dc2", "payments"): sent["payments"],
            ("dc3", "mirror_orders"): sent["orders"],
            ("dc3", "mirror_payments"): sent["payments"],
            ("dc3", "mirror_audit_log"): sent["audit_log"],
            ("dc3", "dc1.orders"): sent["orders"],
            ("dc3", "dc1.payments"): sent["payments"],
        }
        for (alias, topic), records in expected.items():
            wait_until(holds(brokers[alias], topic, len(records)), 60, f"{topic} on {alias}")
        wait_settled(process)  # anything extra (a duplicate) is written by then
        for (alias, topic), records in expected.items():
            stored = read(brokers[alias], topic)
            assert len(stored) == len(records), (alias, topic)
            assert_copied(stored, records, "dc1")
        topics_dc2 = run_topics(brokers["dc2"])
        assert "audit_log" not in topics_dc2, "an excluded topic was copied"
        assert "dc1.audit_log" not in run_topics(brokers["dc3"]), "not included, yet copied"
        status = process.get("/status")[1]
        assert set(status["flows"]) == {"backup", "mm2", "prefixed"}
        assert status["flows"]["mm2"]["topics"]["rules"]["topic_names"] == "dc1.<topic>"
        assert status["source_feed"] is None  # the _REPLICA mode is off
        assert process.metric("replicator_source_topics", feed="backup", selection="excluded") == 1
        # The operator commands see the flows: their legs' lag, each flow's selection.
        status_code, out, err = replicator_cli(env, "lag", "--json")
        assert status_code == 0, err
        lags = {(r["leg"], r["topic"]): r["lag"] for r in json.loads(out)}
        assert lags[("backup:dc1->dc2", "orders")] == 0
        assert lags[("mm2:dc1->dc3", "payments")] == 0
        assert ("mm2:dc1->dc3", "audit_log") not in lags
        status_code, out, err = replicator_cli(env, "check-config", "--json")
        assert status_code == 0, err
        flows = json.loads(out)["flows"]
        assert "audit_log" in flows["backup"]["rejected"]["excluded"]
        assert set(flows["mm2"]["replicated"]) == {"heartbeats", "orders", "payments"}
        if APACHE_KAFKA:
            assert_refused_as_colliding(replicators, brokers)


def assert_refused_as_colliding(replicators: Start, brokers: dict[str, Broker]) -> None:
    """A flow naming dc1's ``orders`` ``dc1_orders`` in dc3, where ``dc1.orders`` exists: Kafka
    refuses the topic, the flow's partitions halt, the reason is reported and counted, and
    nothing is written."""
    env = replicator_env("dc1", brokers, replica_mode="false")
    env |= flow_env(
        "clash", "dc1", "dc3", naming="prefix", prefix="dc1_", topics_include="orders",
        heartbeats="false",
    )  # fmt: skip
    clash = replicators("dc1", env)
    clash.wait_serving()
    leg = "clash:dc1->dc3"
    said = "cannot create dc1_orders: InvalidTopicError (error 17): Topic 'dc1_orders' collides"

    def reported() -> bool:
        status, body = clash.get("/readyz")
        return status == 503 and any(leg in p and said in p for p in body["problems"])

    wait_until(reported, 60, "the colliding topic refused in /readyz", clash.log)
    assert clash.metric("replicator_leg_partitions", leg=leg, state="halted") == 3
    assert clash.metric("replicator_leg_ready", leg=leg) == 0
    (shown,) = clash.get("/status")[1]["legs"]
    assert shown["partition_states"] == {"starting": 0, "replicating": 0, "stalled": 0, "halted": 3}
    assert "dc1_orders" not in run_topics(brokers["dc3"])
    assert said in clash.log()
    assert clash.stop() == 0


def run_topics(broker: Broker) -> set[str]:
    async def listing() -> set[str]:
        admin = await admin_client(broker.bootstrap_servers)
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    return run(listing())


@pytest.mark.parametrize("datacenters", [2, 3])
def test_same_name_active_active_copies_each_record_once_everywhere(
    replicators: Start, datacenters: int
) -> None:
    """Applications write and read ``orders`` in every datacenter; each replicator runs an
    identity flow from its cluster to every other. Every cluster ends with every record once:
    no loop (a copy is never copied again), no duplicate, no loss, order per source partition."""
    aliases = [f"dc{i}" for i in range(1, datacenters + 1)]
    with start_clusters(*aliases) as brokers:
        for broker in brokers.values():
            create_topics(broker, orders=3)
        processes = []
        for alias in aliases:
            env = replicator_env(alias, brokers, replica_mode="false")
            for other in aliases:
                if other != alias:
                    env |= flow_env(f"{alias}_to_{other}", alias, other)
            processes.append(replicators(alias, env))
        for process in processes:
            process.wait_ready()
        # Written while every flow runs, in every datacenter at once.
        sent = {
            alias: produce(broker, "orders", 150, partitions=3) for alias, broker in brokers.items()
        }
        total = sum(len(records) for records in sent.values())
        for alias, broker in brokers.items():
            wait_until(holds(broker, "orders", total), 90, f"orders on {alias}")
        wait_settled(*processes)  # a loop or a duplicate is written by then
        for alias, broker in brokers.items():
            stored = read(broker, "orders")
            assert len(stored) == total, f"{alias}: {len(stored)} records, expected {total}"
            local = [r for r in stored if r.provenance is None]
            assert len(local) == len(sent[alias]), f"{alias}: its own records changed"
            for origin in aliases:
                if origin != alias:
                    assert_copied(stored, sent[origin], origin)
        for process in processes:
            # Every copy a flow read back from its own cluster was recognised and not sent on.
            skipped = process.metric(
                "replicator_records_skipped_total", topic="orders", reason="loop"
            )
            copies_here = total - len(sent[process.alias])
            assert skipped == (datacenters - 1) * copies_here, process.alias
            # A mesh: every origin reaching a cluster also reaches every target directly.
            assert process.get("/readyz")[0] == 200, process.get("/readyz")
            flows = process.get("/status")[1]["flows"]
            assert all(not flow["heartbeat"]["unforwarded"] for flow in flows.values()), flows


def test_identity_flows_in_a_ring_are_reported_naming_the_chain(replicators: Start) -> None:
    """dc1 -> dc2 -> dc3 -> dc1, one identity flow per replicator: a copy is never copied again,
    so each cluster would lack one origin's records. Each replicator says so (not ready, the
    chain named in /readyz, /status and the log) instead of staying green."""
    ring = {"dc1": "dc2", "dc2": "dc3", "dc3": "dc1"}
    with start_clusters(*ring) as brokers:
        processes = {}
        for source, target in ring.items():
            env = replicator_env(source, brokers, replica_mode="false", heartbeat_interval_ms="500")
            env |= flow_env(f"{source}_to_{target}", source, target)
            processes[source] = replicators(source, env)
        for process in processes.values():
            process.wait_serving()
        for source, target in ring.items():
            origin = next(o for o, t in ring.items() if t == source)  # whose copies reach source
            chain = f"{origin} -> {source} -> {target}"
            process = processes[source]

            def reported(process: Any = process, chain: str = chain) -> bool:
                status, body = process.get("/readyz")
                return status == 503 and any(chain in p for p in body["problems"])

            wait_until(reported, 60, f"{source}'s replicator naming {chain}", process.log)
            flow = process.get("/status")[1]["flows"][f"{source}_to_{target}"]
            assert flow["heartbeat"]["unforwarded"] == [chain]
            assert "identity flows form a chain or a ring" in process.log()
        for process in processes.values():
            assert process.stop() == 0


def test_heartbeats_show_the_delay_and_a_stalled_flow_without_any_traffic(
    replicators: Start,
) -> None:
    """No application writes anything: the flow's heartbeats still cross it, and their age
    shows the target going silent and coming back."""
    target, proxy = behind_proxy("dc2")
    try:
        with start_clusters("dc1") as brokers:
            env = replicator_env(
                "dc1",
                {"dc1": brokers["dc1"], "dc2": target},
                replica_mode="false",
                heartbeat_interval_ms="200",
            )
            env |= flow_env("backup", "dc1", "dc2", naming="source-alias")
            process = replicators("dc1", env)
            process.wait_ready()

            def heartbeat() -> dict[str, Any]:
                beat: dict[str, Any] = process.get("/status")[1]["flows"]["backup"]["heartbeat"]
                return beat

            def fresh() -> bool:
                age = heartbeat()["age_seconds"]
                return age is not None and age < 1.5

            wait_until(fresh, 60, "a fresh heartbeat on the target", lambda: str(heartbeat()))
            beat = heartbeat()
            assert beat["target_topic"] == "dc1.heartbeats"
            assert 0 <= beat["delay_seconds"] < 1.5
            assert process.metric("replicator_heartbeats_emitted_total", flow="backup") >= 1
            assert process.metric("replicator_heartbeat_delay_seconds", flow="backup") < 1.5
            copies = read(target, "dc1.heartbeats")
            assert copies and all(r.provenance is not None for r in copies)
            assert {r.key for r in copies} == {b"backup"}

            proxy.black_hole()  # the target stops answering: nothing crosses the flow
            wait_until(
                lambda: heartbeat()["age_seconds"] > 4,
                30,
                "the heartbeat age to grow while the target is silent",
                lambda: str(heartbeat()),
            )
            assert process.metric("replicator_heartbeat_age_seconds", flow="backup") > 4
            proxy.restore()
            wait_until(fresh, 90, "heartbeats to cross again", lambda: str(heartbeat()))
    finally:
        proxy.stop()
        target.stop()


def test_records_are_placed_by_key_where_partition_numbers_are_not_kept(
    replicators: Start,
) -> None:
    """The target topics have other partition counts (2 for a 3-partition source, 4 for a
    1-partition one) and the flow does not preserve partition numbers: each record goes where a
    Kafka producer puts its key, in order per key, and a replicator killed while records stream
    resumes without writing any twice."""
    with start_clusters("dc1", "dc2") as brokers:
        dc1, dc2 = brokers["dc1"], brokers["dc2"]
        create_topics(dc1, orders=3, payments=1)
        create_topics(dc2, orders=2, payments=4)
        env = replicator_env("dc1", brokers, replica_mode="false")
        env |= flow_env("placed", "dc1", "dc2", preserve_partitions="false")
        process = replicators("dc1", env)
        process.wait_ready()
        produce(dc1, "payments", 80, partitions=1)
        produce_records(
            dc1,
            "payments",
            [
                Sent("payments", 0, -1, None, b"keyless-%d" % i, (), int(time.time() * 1000))
                for i in range(20)
            ],
        )
        with Stream(dc1, "orders", 3, per_tick=40) as stream:
            time.sleep(2)
            process.kill()  # SIGKILL while records stream: no drain, no commit
            process = replicators("dc1", env)
            process.wait_ready()
            time.sleep(2)
        assert not stream.errors
        for topic, partitions in (("orders", 2), ("payments", 4)):
            source = read(dc1, topic)
            wait_until(holds(dc2, topic, len(source)), 90, f"{topic} on dc2")
            wait_settled(process)
            stored = read(dc2, topic)
            assert len(stored) == len(source), f"{topic}: {len(stored)} for {len(source)}"
            wanted = {(r.partition, r.offset): r for r in source}
            last: dict[tuple[int, int, bytes | None], int] = {}
            for record in stored:
                origin = record.provenance
                assert origin is not None
                key = (origin.partition, origin.offset)
                source_record = wanted.pop(key)  # once each: a second copy fails here
                assert (record.key, record.value) == (source_record.key, source_record.value)
                assert record.partition == place(record.key, origin.offset, partitions)
                stream_of_key = (record.partition, origin.partition, record.key)
                assert origin.offset > last.get(stream_of_key, -1), "out of order for its key"
                last[stream_of_key] = origin.offset
            assert not wanted, f"{topic}: {len(wanted)} records missing"
        assert process.metric("replicator_duplicates_possible_total") == 0


# Both modes and both stops, not every pairing (the suite's time): the resume decision is the
# same for a stop and a kill once the destination holds the republished record.
@pytest.mark.parametrize(("mode", "stop"), [("identity", "sigterm"), ("replica", "sigkill")])
def test_a_copy_an_application_republished_with_its_headers_never_positions_a_resume(
    replicators: Start, mode: str, stop: str
) -> None:
    """dc1's records reach dc2's ``orders`` (an identity flow, or the ``_REPLICA`` mode); an
    application in dc2 reads copies and publishes them again into dc2's ``orders`` with every
    header (Kafka Streams forwards them) while the replicator is down (SIGTERM or SIGKILL), so
    they lie past its saved marks. It resumes after what it wrote, never after a republished
    record: no record of dc1 reaches dc2 twice, and the ignored records are counted."""
    source = "orders" if mode == "identity" else "orders_REPLICA"
    with start_clusters("dc1", "dc2") as brokers:
        for broker in brokers.values():
            create_topics(broker, orders=2)
        if mode == "identity":
            env = replicator_env("dc1", brokers, replica_mode="false")
            env |= flow_env("dc1_to_dc2", "dc1", "dc2")
        else:
            create_topics(brokers["dc1"], orders_REPLICA=2)
            env = replicator_env("dc1", brokers)
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        sent = produce(brokers["dc1"], source, 400, partitions=2)
        wait_until(holds(brokers["dc2"], "orders", 400), 60, "first copies on dc2", dc1.log)
        wait_settled(dc1)  # committed, marks saved
        copies = [r for r in read(brokers["dc2"], "orders") if r.provenance is not None]
        republished = [
            Sent("orders", c.partition, -1, c.key, c.value, (*c.headers, ("republished", b"1")),
                 c.timestamp)
            for c in copies
            if c.provenance is not None and c.provenance.offset in (50, 51)
        ]  # fmt: skip
        assert len(republished) == 4  # offsets 50 and 51 of both partitions
        if stop == "sigkill":
            dc1.kill()
        else:
            assert dc1.stop() == 0
        produce_records(brokers["dc2"], "orders", republished)  # after the last saved marks
        sent += produce(brokers["dc1"], source, 200, partitions=2, tag="-after")
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        wait_until(holds(brokers["dc2"], "orders", 604), 60, "every copy on dc2", dc1.log)
        wait_settled(dc1)  # a duplicate is written by then
        stored = read(brokers["dc2"], "orders")
        assert len(stored) == 604, f"{len(stored) - 604} records too many"
        replicated = [r for r in stored if ("republished", b"1") not in r.headers]
        assert_copied(replicated, sent, "dc1")
        ignored = dc1.metric("replicator_resume_ignored_total", topic="orders")
        assert ignored == 2, "each partition's resume on dc2 saw the republished records"
        assert dc1.metric("replicator_duplicates_possible_total") == 0
        assert dc1.stop() == 0


def test_a_flows_committed_offsets_moved_back_copy_nothing_twice(replicators: Start) -> None:
    """MirrorMaker 2's "alter offsets" copies again from the offsets given. Here a flow whose
    committed offsets an operator moved back (the group ``<group>.<source>.<target>``, while the
    replicator is stopped) resumes after what its target already holds, by provenance: nothing
    is written twice (stronger than MM2, on purpose); the records skipped are counted
    (``replicator_resume_skipped_records_total``) and logged."""
    with start_clusters("dc1", "dc2") as brokers:
        dc1, dc2 = brokers["dc1"], brokers["dc2"]
        create_topics(dc1, orders=2)
        env = replicator_env("dc1", brokers, replica_mode="false")
        env |= flow_env("backup", "dc1", "dc2", group_id="mirror")
        first = replicators("dc1", env)
        first.wait_ready()
        sent = produce(dc1, "orders", 40, partitions=2)
        wait_until(holds(dc2, "orders", 40), 60, "the first copies")
        assert first.stop() == 0
        # The operator moves the flow's position back to 5 in each partition.
        back = {TopicPartition("orders", p): 5 for p in range(2)}
        commit_offsets(dc1, "mirror.dc1.dc2", back)
        again = replicators("dc1", env)
        again.wait_ready()
        more = produce(dc1, "orders", 10, partitions=2, tag="-after")
        wait_until(holds(dc2, "orders", 50), 60, "the new records", again.log)
        stored = read(dc2, "orders")
        assert len(stored) == 50
        assert_copied(stored, sent + more, "dc1")
        skipped = again.metric("replicator_resume_skipped_records_total")
        assert skipped == 30, skipped  # 15 per partition: 5 to 19, already there

        # Said once for the leg, with its start (within a second), not once per partition.
        def said() -> int:
            started = again.events("every assigned partition started")
            return sum(e.get("records_not_written_twice", 0) for e in started)

        wait_until(lambda: said() > 0, 10, "the start said", again.log)
        started = again.events("every assigned partition started")
        assert said() == 30, started
        assert sum(e.get("resumed_after_records_written", 0) for e in started) == 2, started
        assert again.metric("replicator_duplicates_possible_total") == 0
