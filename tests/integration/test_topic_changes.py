"""Topics changing under a running replicator: a source topic recreated, a destination deleted,
records deleted at the source before a leg read them.

A recreated source topic restarts its offsets, so positions the replicator holds (or committed)
may point past the new log's end. That is never reset silently: it is counted in
``replicator_offset_resets_total``, logged, shown in ``/status``, and handled by
``REPLICATOR_OFFSET_RESET_POLICY`` (``earliest``: replicate the new log from its start; ``halt``:
stop the partition and report it). On Apache Kafka a recreated topic is usually seen gone
first: its deletion completes before the topic can be created again, the consumers' fetches
fail meanwhile and their metadata shows it missing, so the group releases its partitions, and
Kafka deletes the committed offsets of a deleted topic; the new topic's partitions then start
afresh, at its log start, and nothing points past a log end. Records deleted below a leg's
position (DeleteRecords; retention alike) are a position below the log start: the leg skips to
it and counts exactly the records it never read as lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from replicator.config.loading import load_settings
from replicator.devtools.apache_kafka import ApacheKafkaCluster
from replicator.kafka.clients import ClusterClient
from replicator.topics.provisioning import ClusterAdmin
from tests.fault_figures import FAULT_SUMMARY, FaultFigures
from tests.integration.faults import second_listener_proxy
from tests.integration.harness import (
    BACKEND,
    Broker,
    Oracle,
    ReplicatorProcess,
    Sent,
    Start,
    Stream,
    admin_client,
    assigned_partitions,
    commit_offsets,
    configs_set,
    count,
    create_topics,
    holds,
    holds_distinct,
    oracle,
    peak_rss_mb,
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


async def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = await admin_client(bootstrap)
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    admin = await admin_client(bootstrap)
    try:
        await admin.delete_topics([topic])
        for _ in range(200):  # created again as soon as the broker takes it (TOPIC_ALREADY_EXISTS)
            response = await admin.create_topics([NewTopic(topic, partitions, 1)])
            (error_code,) = {error[1] for error in response.topic_errors}
            if error_code == 0:
                return
            assert error_code == _TOPIC_ALREADY_EXISTS, f"creating {topic}: error {error_code}"
            await asyncio.sleep(0.02)
        raise AssertionError(f"{topic} was never deleted")
    finally:
        await admin.close()


_TOPIC_ALREADY_EXISTS = 36


def recreate(broker: Broker, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again, empty, at once: a running replicator sees a topic
    whose log starts again at 0 below its committed offsets (what the tests below are about),
    not a topic gone for a while (its partitions released, then new ones assigned)."""
    run(_recreate(broker.bootstrap_servers, topic, partitions))


def recreated_reports(destination: Broker, old: list[Sent], new: list[Sent]) -> list[Oracle]:
    """``destination``'s ``orders`` compared with the records of the old topic and with those
    of the recreated one (both number their offsets from 0: the copies are told apart by the
    tag their values carry), record by record: one report for each."""
    copies = read(destination, "orders")
    return [
        oracle(sent, [r for r in copies if r.value is not None and tag in r.value], "dc1")
        for sent, tag in ((old, b"-old-"), (new, b"-new-"))
    ]


def replicated_then_recreated(
    replicators: Start, brokers: dict[str, Broker], **settings: str
) -> tuple[ReplicatorProcess, list[Sent], list[Sent], float, int]:
    """Replicate 1,500 records, recreate ``orders_REPLICA``, write 300 new ones to it; the
    replicator, the old and the new records, when the topic was recreated, and how far its log
    had got then (bytes)."""
    local = brokers["dc1"]
    create_topics(local, orders_REPLICA=3)
    dc1 = replicators("dc1", replicator_env("dc1", brokers, **settings))
    dc1.wait_ready()
    old = produce(local, "orders_REPLICA", 1500, partitions=3, tag="-old")
    for broker in brokers.values():
        wait_until(holds(broker, "orders", 1500), 60, f"first records on {broker.alias}", dc1.log)
    wait_settled(dc1)  # the offsets of the old topic are committed
    logged = dc1.log_path.stat().st_size
    recreate(local, "orders_REPLICA", 3)
    sent = produce(local, "orders_REPLICA", 300, partitions=3, tag="-new")
    return dc1, old, sent, time.monotonic(), logged


def events_since(process: ReplicatorProcess, offset: int) -> list[dict[str, Any]]:
    """The JSON log events ``process`` wrote after byte ``offset`` of its log."""
    with process.log_path.open("rb") as log:
        log.seek(offset)
        lines = log.read().decode(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_source_topic_recreated_is_detected_and_replicated_from_its_start(
    replicators: Start,
) -> None:
    """The new log is replicated from its start, each record once and in order, however the
    replicator came to see the recreation; which way it did is said, never silently:

    - its fetch positions outlived the old log (the embedded broker deletes and creates a topic
      at once, so a running consumer never sees it missing; on Apache Kafka, when its metadata
      happened to miss the moment the topic was gone): they point past the new log end, a reset
      counted (``beyond_log_end``) and shown in ``/status``;
    - or the topic was seen gone (Apache Kafka, as a rule: see the module's docstring): the feed
      released its partitions, Kafka deleted their committed offsets with the topic, and each
      leg started the new topic's partitions at its log start, as it starts any new topic,
      logging it; no position pointed past a log end, so no reset is counted.
    """
    legs = ("dc1->dc1", "dc1->dc2")
    with start_clusters("dc1", "dc2") as brokers:
        dc1, old, sent, recreated_at, logged = replicated_then_recreated(replicators, brokers)
        total = len(old) + len(sent)
        for broker in brokers.values():
            wait_until(
                holds(broker, "orders", total), 60, f"new records on {broker.alias}", dc1.log
            )
        recovery = time.monotonic() - recreated_at
        dc1.wait_ready(timeout=30)
        wait_settled(dc1)  # anything written twice would have arrived
        reports = {alias: recreated_reports(b, old, sent) for alias, b in brokers.items()}
        measured = [report for both in reports.values() for report in both]
        resets = {
            leg: dc1.metric("replicator_offset_resets_total", leg=leg, reason="beyond_log_end")
            for leg in legs
        }
        shown = {
            leg["leg"]: {r["reason"] for r in leg["offset_resets"]}
            for leg in dc1.get("/status")[1]["legs"]
        }
        after = events_since(dc1, logged)
        started_afresh = {
            event["leg"]
            for event in after
            if event["event"] == "no committed offset: starting at log start"
            and event.get("partitions") == 3
        }
        released = [e for e in after if e["event"] == "partitions released"]
        if any(resets.values()):
            seen_as = "positions past the new log end, reset"
            assert all(n >= 1 for n in resets.values()), f"not counted on every leg: {resets}"
            assert shown == {leg: {"beyond_log_end"} for leg in legs}, shown
        else:
            seen_as = "topic gone, then new partitions started at their log start"
            assert released, f"neither a reset counted nor the partitions released\n{dc1.log()}"
            assert started_afresh == set(legs), f"not started afresh: {started_afresh}"
            assert shown == {leg: set() for leg in legs}, shown
        print(
            f"source topic recreated ({seen_as}): {len(sent)} new records on both clusters "
            f"after {recovery:.1f} s: {reports}"
        )
        FAULT_SUMMARY.append(
            FaultFigures(
                "source topic deleted and recreated",
                total,
                sum(len(r.missing) for r in measured),
                sum(r.duplicates for r in measured),
                peak_rss_mb(dc1),
                f"{recovery:.1f} s ({seen_as})",
            )
        )
        # Each record of the old topic and of the new one once on both clusters, in order.
        for alias, (old_report, new_report) in reports.items():
            for report in (old_report, new_report):
                assert not report.missing and not report.out_of_order, f"{alias}: {report}"
                assert not report.duplicates, f"{alias}: {report}"
            assert (old_report.delivered, new_report.delivered) == (len(old), len(sent))
            assert count(brokers[alias], "orders") == total, f"{alias}: records not told apart"
        assert dc1.stop() == 0


@pytest.mark.parametrize("policy", ["earliest", "halt"])
def test_committed_offset_beyond_the_log_end_follows_the_policy(
    replicators: Start, policy: str
) -> None:
    """The dc1->dc2 leg's committed offsets point past the log end (a log replaced or truncated
    while the replicator was away); the dc1->dc1 leg has none. Only dc1->dc2 is affected."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=3)
        sent = produce(local, "orders_REPLICA", 300, partitions=3)
        beyond = {TopicPartition("orders_REPLICA", p): 1000 for p in range(3)}
        commit_offsets(local, "replicator.dc1.dc2", beyond)
        dc1 = replicators("dc1", replicator_env("dc1", brokers, offset_reset_policy=policy))
        wait_until(holds(local, "orders", 300), 60, "the unaffected leg replicating", dc1.log)
        if policy == "earliest":
            wait_until(holds(brokers["dc2"], "orders", 300), 60, "dc2 from the log start")
            report = oracle(sent, read(brokers["dc2"], "orders"), "dc1")
            assert not report.missing and not report.duplicates and not report.out_of_order
            dc1.wait_ready(timeout=30)
        else:

            def reported() -> bool:
                status, body = dc1.get("/readyz")
                halted = [p for p in body["problems"] if "beyond the source log end" in p]
                # One line for the leg, however many partitions: counted, with examples.
                return status == 503 and any(
                    "3 of 3 partitions halted (3 failed;" in p for p in halted
                )

            wait_until(reported, 60, "/readyz reporting the 3 halted partitions", dc1.log)
            assert count(brokers["dc2"], "orders") == 0, "records replicated despite halt"
        resets = dc1.metric("replicator_offset_resets_total", leg="dc1->dc2")
        replayed = dc1.metric("replicator_records_replayed_total", leg="dc1->dc2")
        assert dc1.metric("replicator_offset_resets_total", leg="dc1->dc1") == 0
        legs = {leg["leg"]: leg for leg in dc1.get("/status")[1]["legs"]}
        # Whichever looks first, the feed at the source or the resume at dc2 (which holds
        # nothing of dc1 and no mark while offsets were committed), the position past the log
        # end is an offset reset: counted once per partition, never a replay.
        assert resets == 3, dc1.log()
        assert replayed == 0, dc1.log()
        assert [r["position"] for r in legs["dc1->dc2"]["offset_resets"]] == [1000] * 3
        # Read back: dc1 holds every record once, in order; so does dc2 under ``earliest``,
        # and under ``halt`` it lacks exactly the records of the partitions it reports halted.
        local_report = oracle(sent, read(local, "orders"), "dc1")
        remote_report = oracle(sent, read(brokers["dc2"], "orders"), "dc1")
        halted = {
            p["partition"]
            for leg in dc1.get("/status?state=halted")[1]["legs"]
            if leg["leg"] == "dc1->dc2"
            for p in leg["partitions"]
        }
        unaccounted = [m for m in remote_report.missing if m[0] not in halted]
        if policy == "earliest":
            outcome = "replicated from log start"
        else:
            outcome = f"{len(remote_report.missing)} held in {len(halted)} halted partitions"
        FAULT_SUMMARY.append(
            FaultFigures(
                f"committed offset beyond log end, {policy}",
                local_report.source_records,
                len(local_report.missing) + len(unaccounted),
                local_report.duplicates + remote_report.duplicates,
                peak_rss_mb(dc1),
                outcome,
            )
        )
        assert not local_report.missing and not local_report.out_of_order, local_report
        assert not local_report.duplicates, local_report
        assert halted == (set() if policy == "earliest" else {0, 1, 2}), halted
        assert not unaccounted and not remote_report.out_of_order, remote_report
        assert not remote_report.duplicates, remote_report
        assert dc1.stop() == 0


async def _delete_records(bootstrap: str, before: dict[TopicPartition, int]) -> None:
    admin = await admin_client(bootstrap)
    try:
        await admin.delete_records({tp: RecordsToDelete(offset) for tp, offset in before.items()})
    finally:
        await admin.close()


def delete_records(broker: Broker, before: dict[TopicPartition, int]) -> None:
    """Kafka's DeleteRecords: each partition's log starts at the offset given from now on, as
    retention makes it start at a later segment (the replicator sees either as a log start)."""
    run(_delete_records(broker.bootstrap_servers, before))


def remote_partitions(process: ReplicatorProcess) -> dict[int, dict[str, Any]]:
    """The dc1->dc2 leg's partitions of ``orders_REPLICA`` in ``/status``, by partition."""
    legs = {leg["leg"]: leg for leg in process.get("/status?partitions=all")[1]["legs"]}
    return {
        p["partition"]: p for p in legs["dc1->dc2"]["partitions"] if p["topic"] == "orders_REPLICA"
    }


def held_back(process: ReplicatorProcess) -> dict[int, int]:
    """The held-back leg's next offsets once they stopped moving (its queues are full), by
    partition: every record below one was read (delivered, or held to be sent), none above."""
    seen: list[dict[int, int]] = []

    def steady() -> bool:
        partitions = remote_partitions(process)
        seen.append({p: entry["next_offset"] for p, entry in partitions.items()})
        return len(seen) >= 4 and len(seen[-1]) == 3 and seen[-4] == seen[-1]

    wait_until(steady, 60, "the held-back leg to stop reading", process.log)
    return seen[-1]


def newest_held(destination: Broker, origin: str = "dc1") -> dict[int, int]:
    """Per partition, the origin offset after the newest record of ``origin`` held."""
    held: dict[int, int] = {}
    for record in read(destination, "orders"):
        tag = record.provenance
        if tag is not None and tag.cluster == origin:
            held[tag.partition] = max(held.get(tag.partition, 0), tag.offset + 1)
    return held


@pytest.mark.skipif(
    BACKEND != "kafka",
    reason="the embedded broker has neither DeleteRecords nor retention, and no second "
    "listener to hold dc2 back from the replicator alone (REPLICATOR_TEST_BROKER=kafka); the "
    "below_log_start branch is unit-tested in tests/unit/replication",
)
@pytest.mark.parametrize("held", ["running", "restarted"])
def test_records_deleted_before_a_held_back_leg_read_them_are_counted_exactly(
    replicators: Start, held: str
) -> None:
    """dc2 stops answering the replicator (its connections black-holed; the test and ``rpo``
    reach it directly) while 600 records are produced: the local leg delivers them, the
    dc1->dc2 leg holds back, ``running``: reading until its queues are full, ``restarted``
    (the replicator restarted meanwhile): reading nothing, its partitions waiting for dc2's
    tail. DeleteRecords then removes every partition's records below offset 250, past where
    the leg stands; ``replicator rpo`` beside dc2 says what is gone from both clusters. dc2
    answers again: the records the leg had read reach dc2, the ones deleted before it read them
    are counted lost, exactly, and said once per partition in the log and in ``/status``; every
    record from 250 on arrives once, in order: nothing after them is lost. (Retention moves a
    log start as DeleteRecords does, at a segment boundary: the replicator sees the same
    out-of-range position and log start either way.)"""
    cut = 250  # the new log start of every partition, of 300 records
    with start_clusters("dc1", "dc2", second_listener=True) as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        assert isinstance(remote, ApacheKafkaCluster)
        create_topics(local, orders_REPLICA=3)
        # Small fetches and queues: a running held-back leg reads a few chunks ahead, then stops.
        env = replicator_env(
            "dc1", brokers, max_partition_fetch_bytes="1024", partition_queue_max_records="20"
        )
        env["REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS"] = remote.listener("WAN")
        beside_dc2 = replicator_env("dc2", brokers)  # both clusters reached directly
        with second_listener_proxy(remote) as proxy:
            dc1 = replicators("dc1", env)
            dc1.wait_ready()
            sent = produce(local, "orders_REPLICA", 300, partitions=3, tag="-before")
            for broker in (local, remote):
                wait_until(holds(broker, "orders", 300), 60, broker.alias, dc1.log)
            wait_settled(dc1)
            proxy.black_hole()
            if held == "restarted":
                assert dc1.stop() == 0
                dc1 = replicators("dc1", env)
                dc1.wait_serving()
            for batch in range(20):  # one producer batch per partition each: 1 KiB fetches
                sent += produce(local, "orders_REPLICA", 30, partitions=3, tag=f"-held{batch}-")
            wait_until(holds(local, "orders", 900), 60, "the local leg delivering", dc1.log)
            reached = held_back(dc1)
            source = read(local, "orders_REPLICA")  # every record, before any is deleted
            assert len(source) == len(sent) == 900
            assert all(100 <= at < cut for at in reached.values()), reached
            delete_records(local, {TopicPartition("orders_REPLICA", p): cut for p in range(3)})
            deleted = {(r.partition, r.offset) for r in source if r.offset < cut}
            # While the leg is held back: dc2's newest record of dc1 is where dc2 stands, the
            # records from it to the new log start are gone from both clusters (the ones the
            # running leg read are in its memory alone), the ones after it not in dc2 yet.
            on_dc2 = newest_held(remote)
            status, out, err = replicator_cli(beside_dc2, "rpo", "--origin", "dc1", "--json")
            assert status == 1, (out, err)
            before = json.loads(out)
            points = {p["partition"]: p for p in before["partitions"]}
            assert {
                p: (q["held_up_to"], q["origin_log_end"], q["expired"], q["missing"])
                for p, q in points.items()
            } == {p: (on_dc2[p], 300, cut - on_dc2[p], 300 - cut) for p in range(3)}, before
            proxy.restore()
            restored_at = time.monotonic()

            def arrived() -> bool:
                found = newest_held(remote)
                return len(found) == 3 and all(at == 300 for at in found.values())

            wait_until(arrived, 90, "dc2 caught up", dc1.log)
            wait_settled(dc1)
            recovery = time.monotonic() - restored_at
            local_report = oracle(source, read(local, "orders"), "dc1")
            remote_report = oracle(source, read(remote, "orders"), "dc1")
            lost = dc1.metric("replicator_records_lost_total", leg="dc1->dc2")
            # dc2 may lack deleted records only: any other missing record is a loss.
            unaccounted = sorted(set(remote_report.missing) - deleted)
            FAULT_SUMMARY.append(
                FaultFigures.measured(
                    f"DeleteRecords past a held-back leg, {held}",
                    [local_report, dataclasses.replace(remote_report, missing=unaccounted)],
                    peak_rss_mb(dc1),
                    f"{recovery:.1f} s; {int(lost)} deleted, counted lost",
                )
            )
            status, out, err = replicator_cli(beside_dc2, "rpo", "--origin", "dc1", "--json")
            after = json.loads(out)
            print(
                f"deleted below {cut}, the dc1->dc2 leg {held} at {reached}, dc2 at {on_dc2}: "
                f"{remote_report}; counted lost {lost:.0f}; rpo while held back: "
                f"{before['expired']} lost, {before['missing']} not here; caught up in "
                f"{recovery:.1f} s; rpo after: {after.get('expired')} lost, "
                f"{after.get('missing')} not here"
            )
            assert not local_report.missing and not local_report.duplicates, local_report
            assert not unaccounted, f"lost beyond the deleted records: {unaccounted}"
            assert not remote_report.duplicates and not remote_report.out_of_order, remote_report
            # Exactly the records deleted before the leg read them: from where it stood to the cut.
            missing = set(remote_report.missing)
            assert missing == {(p, o) for p in range(3) for o in range(reached[p], cut)}, missing
            assert lost == len(missing) > 0, dc1.log()
            if held == "restarted":  # it had read nothing dc2 lacked: rpo's figure is the loss
                assert reached == on_dc2 and before["expired"] == lost, (reached, on_dc2, before)
            assert dc1.metric("replicator_records_lost_total", leg="dc1->dc1") == 0
            resets = dc1.metric(
                "replicator_offset_resets_total", leg="dc1->dc2", reason="below_log_start"
            )
            assert resets == 3, dc1.log()
            said = [e for e in dc1.events("source offset out of range") if e["leg"] == "dc1->dc2"]
            assert sorted((e["partition"], e["position"], e["records_lost"]) for e in said) == [
                (p, reached[p], cut - reached[p]) for p in range(3)
            ], said
            legs = {leg["leg"]: leg for leg in dc1.get("/status")[1]["legs"]}
            shown = legs["dc1->dc2"]["offset_resets"]
            assert sorted(
                (r["partition"], r["position"], r["log_start"], r["records_lost"]) for r in shown
            ) == [(p, reached[p], cut, cut - reached[p]) for p in range(3)], shown
            assert legs["dc1->dc1"]["offset_resets"] == []
            # Afterwards rpo sees dc2 holding all that dc1 still has: the loss lies behind dc2's
            # newest record, where rpo does not look; the metric, the log and /status keep it.
            assert (status, after["complete"], after["expired"]) == (0, True, 0), (after, err)
            dc1.wait_ready(timeout=30)
            assert dc1.stop() == 0


def test_destination_topic_deleted_mid_stream_is_detected_and_replayed(
    replicators: Start,
) -> None:
    """Someone deletes ``orders`` on dc2 while records flow. The leg notices that dc2's log went
    backwards, recreates the topic and replays the source partitions from their log start, so
    dc2 again holds every record (the records written between the deletion and its detection
    come twice, the first copy ahead of the replay).

    The embedded broker acknowledges writes to a deleted topic and then refuses every write of
    a client that wrote before the topic was created again (UNKNOWN_SERVER_ERROR; a new client
    is served), so here the replay halts with that error, is reported, and completes after a
    restart of the replicator; a broker without that quirk replays without the restart."""
    with start_clusters("dc1", "dc2") as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        create_topics(local, orders_REPLICA=3)
        env = replicator_env("dc1", brokers)
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        with Stream(local, "orders_REPLICA", 3) as stream:
            wait_until(holds(remote, "orders", 1000), 60, "records on dc2", dc1.log)
            run(_delete_topic(remote.bootstrap_servers, "orders"))
            deleted_at = time.monotonic()

            def detected() -> bool:
                return dc1.metric("replicator_destination_partitions_replaced_total") >= 1

            wait_until(detected, 30, "the replaced destination detected", dc1.log)
            detection = time.monotonic() - deleted_at
            time.sleep(3)
        assert not stream.errors, stream.errors
        status, body = dc1.get("/readyz")
        if status != 200:  # the broker quirk above: reported, then a restart completes it
            assert any("dc1->dc2" in p for p in body["problems"]), body
            assert dc1.stop() == 0
            dc1 = replicators("dc1", env)
        total = count(local, "orders_REPLICA")
        wait_until(holds_distinct(remote, "orders", total), 90, "dc2 replayed", dc1.log)
        recovery = time.monotonic() - deleted_at
        report = oracle(read(local, "orders_REPLICA"), read(remote, "orders"), "dc1")
        assert not report.missing, report
        local_report = oracle(read(local, "orders_REPLICA"), read(local, "orders"), "dc1")
        assert not local_report.missing and not local_report.duplicates, local_report
        assert not local_report.out_of_order, local_report
        print(
            f"destination deleted: detected after {detection:.1f} s, complete after "
            f"{recovery:.1f} s: {report}"
        )
        FAULT_SUMMARY.append(
            FaultFigures(
                "destination topic deleted mid-stream",
                report.source_records,
                len(report.missing),
                report.duplicates,
                peak_rss_mb(dc1),
                f"{recovery:.1f} s (detected {detection:.1f} s)",
            )
        )
        dc1.wait_ready(timeout=60)
        assert dc1.stop() == 0


@pytest.mark.skipif(
    BACKEND != "kafka",
    reason="the embedded broker has no CreatePartitions: a source topic's growth is followed "
    "on the Apache Kafka path (REPLICATOR_TEST_BROKER=kafka); test_lifecycle.py covers a "
    "destination that refuses to grow",
)
def test_a_source_topic_grown_while_replicating_grows_every_destination(
    replicators: Start,
) -> None:
    """MM2's test ported: partitions added to a source topic appear on every destination, and
    the records of the new partitions arrive in their own partition numbers."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=2)
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        first = produce(local, "orders_REPLICA", 100, partitions=2)
        wait_until(holds(brokers["dc2"], "orders", len(first)), 60, "first records on dc2")

        async def grow() -> None:
            admin = await admin_client(local.bootstrap_servers)
            try:
                await admin.create_partitions({"orders_REPLICA": NewPartitions(total_count=4)})
            finally:
                await admin.close()

        run(grow())
        # The feed's next listing picks the new partitions up, and the group assigns them.
        wait_until(lambda: assigned_partitions(dc1) == 4, 60, "the new partitions read", dc1.log)
        later = produce(local, "orders_REPLICA", 200, partitions=4)
        source = read(local, "orders_REPLICA")
        for broker in brokers.values():
            wait_until(holds(broker, "orders", len(first) + len(later)), 90, broker.alias)
            report = oracle(source, read(broker, "orders"), "dc1")  # partition numbers kept
            assert not report.missing and not report.duplicates, f"{broker.alias}: {report}"
        remote = next(leg for leg in dc1.get("/status")[1]["legs"] if leg["leg"] == "dc1->dc2")
        assert remote["partitions_added"] == {"orders": 2}
        assert dc1.stop() == 0


@pytest.mark.skipif(
    BACKEND != "kafka",
    reason="the embedded broker has no AlterConfigs: config sync runs on the Apache Kafka path "
    "(REPLICATOR_TEST_BROKER=kafka); the decision is tested as pure logic in test_topics.py",
)
def test_topic_configs_follow_the_source_except_the_excluded_ones(replicators: Start) -> None:
    """MM2's test ported: a config changed on the source reaches the destination at the next
    sync (retention raised: a limit is never lowered); an excluded one (min.insync.replicas by
    default) never does."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=2)
        env = replicator_env("dc1", brokers, topic_config_sync_interval_ms="1000")
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        produce(local, "orders_REPLICA", 20, partitions=2)
        wait_until(holds(brokers["dc2"], "orders", 20), 60, "first records on dc2")

        async def alter(configs: dict[str, str]) -> None:
            admin = await admin_client(local.bootstrap_servers)
            try:
                resource = ConfigResource(ConfigResourceType.TOPIC, "orders_REPLICA", configs)
                await admin.alter_configs([resource])
            finally:
                await admin.close()

        run(alter({"retention.ms": "1234567890", "min.insync.replicas": "1"}))
        wait_until(
            lambda: configs_set(brokers["dc2"], "orders").get("retention.ms") == "1234567890",
            30,
            "retention.ms synced to dc2",
        )
        assert "min.insync.replicas" not in configs_set(brokers["dc2"], "orders")
        assert dc1.stop() == 0


@pytest.mark.skipif(
    BACKEND != "kafka",
    reason="the embedded broker has no AlterConfigs (nor IncrementalAlterConfigs): mirror sync "
    "runs on the Apache Kafka path "
    "(REPLICATOR_TEST_BROKER=kafka); the decision is tested as pure logic in test_topics.py",
)
def test_mirror_sync_lowers_and_removes_as_mirrormaker_2_does(replicators: Start) -> None:
    """MM2's config sync (``REPLICATOR_TOPIC_CONFIG_SYNC=mirror``, the default of ``replicator
    mm2``): retention.bytes lowered on the source is lowered on the destination, and an override
    removed on the source is removed there (its default applies, use.defaults.from=target)."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=1)
        env = replicator_env(
            "dc1", brokers, topic_config_sync_interval_ms="1000", topic_config_sync="mirror"
        )

        async def incremental(topic: str, configs: dict[str, str | None], at: str) -> None:
            client = ClusterClient(
                "probe", load_settings(env).clusters[at], load_settings(env).client_timings()
            )
            try:
                await ClusterAdmin(client).alter({topic: configs})
            finally:
                await client.close()

        run(
            incremental(
                "orders_REPLICA", {"retention.bytes": "2000", "segment.ms": "600000"}, "dc1"
            )
        )
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        produce(local, "orders_REPLICA", 10, partitions=1)
        wait_until(holds(brokers["dc2"], "orders", 10), 60, "first records on dc2")
        wait_until(
            lambda: configs_set(brokers["dc2"], "orders").get("retention.bytes") == "2000",
            30,
            "retention.bytes on dc2",
        )
        run(incremental("orders_REPLICA", {"retention.bytes": "1000", "segment.ms": None}, "dc1"))
        wait_until(
            lambda: configs_set(brokers["dc2"], "orders").get("retention.bytes") == "1000",
            30,
            "retention.bytes lowered on dc2",
        )
        wait_until(
            lambda: "segment.ms" not in configs_set(brokers["dc2"], "orders"),
            30,
            "segment.ms removed on dc2",
        )
        assert dc1.stop() == 0


def stamps(broker: Broker, topic: str) -> dict[bytes, tuple[int, int]]:
    """Each record of ``topic`` by value: (its timestamp, its timestamp type)."""
    return {r.value: (r.timestamp, r.timestamp_type) for r in read(broker, topic) if r.value}


def test_a_log_append_time_source_keeps_its_broker_stamps(replicators: Start) -> None:
    """A source topic with ``message.timestamp.type=LogAppendTime``: the producer's timestamps
    are replaced by the source broker's. Every record is copied once, with the source's append
    time as its timestamp, on a destination created beforehand and on the one the replicator
    creates; that one does not copy ``message.timestamp.type`` (excluded by default, as
    MirrorMaker 2 excludes it), so the destination never stamps a later time of its own."""
    ancient = 1_000_000_000_000  # 2001: what the producer claims, replaced at the source
    with start_clusters("dc1", "dc2") as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        create_topics(local, {"message.timestamp.type": "LogAppendTime"}, orders_REPLICA=2)
        create_topics(remote, orders=2)
        records = [
            Sent("orders_REPLICA", i % 2, -1, b"k%d" % i, b"v%d" % i, (), ancient + i)
            for i in range(100)
        ]
        produce_records(local, "orders_REPLICA", records)
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        for broker in (local, remote):
            wait_until(holds(broker, "orders", 100), 60, broker.alias, dc1.log)
        wait_settled(dc1)
        for broker in (local, remote):
            found = oracle(read(local, "orders_REPLICA"), read(broker, "orders"), "dc1")
            assert (found.delivered, found.duplicates, found.missing) == (100, 0, []), found
        source = stamps(local, "orders_REPLICA")
        assert len(source) == 100
        assert all(kind == 1 and at > ancient + 1_000 for at, kind in source.values()), source
        for broker in (local, remote):
            assert stamps(broker, "orders") == {
                value: (at, 0) for value, (at, _) in source.items()
            }, broker.alias
        assert "message.timestamp.type" not in configs_set(local, "orders")
        assert dc1.stop() == 0
