"""Crashes and membership changes: SIGKILL during a two-way stream, replicas joining and leaving."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from tests.fault_figures import FAULT_SUMMARY, FaultFigures
from tests.integration.harness import (
    ReplicatorProcess,
    Start,
    Stream,
    count,
    create_topics,
    holds,
    holds_distinct,
    oracle,
    peak_rss_mb,
    read,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)

# dc2's first kill comes this long after dc1's: while dc1's restarted replicator waits to join.
_STAGGER_S = 2


def test_sigkill_four_times_during_a_two_way_stream(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        for broker in brokers.values():
            create_topics(broker, orders_REPLICA=3)
        envs = {alias: replicator_env(alias, brokers) for alias in brokers}
        running = {alias: replicators(alias, envs[alias]) for alias in brokers}
        for replicator in running.values():
            replicator.wait_ready()
        recovered: dict[int, float] = {}  # seconds from restart to ready, by kill number

        def kill_and_restart(victim: str, kills: tuple[int, int]) -> None:
            for kill in kills:
                time.sleep(2)
                running[victim].kill()  # SIGKILL: no drain, no commit
                time.sleep(1)
                running[victim] = replicators(victim, envs[victim])
                started = time.monotonic()
                running[victim].wait_ready(timeout=60)
                recovered[kill] = round(time.monotonic() - started, 1)

        streams = [Stream(b, "orders_REPLICA", 3, per_tick=25) for b in brokers.values()]
        with streams[0], streams[1]:
            # Kills 0 and 2 hit dc1, 1 and 3 dc2, in that order. Each replicator reads its own
            # cluster with its own group and commits (they meet only in the destination topics,
            # as they always do), so each runs its kill, restart, ready cycles in its own thread,
            # dc2's _STAGGER_S behind dc1's: most of a cycle is the restarted replicator waiting
            # for its group to drop the killed member, and the two now wait at the same time.
            with ThreadPoolExecutor(2) as cycles:
                dc1_cycles = cycles.submit(kill_and_restart, "dc1", (0, 2))
                time.sleep(_STAGGER_S)
                dc2_cycles = cycles.submit(kill_and_restart, "dc2", (1, 3))
                dc1_cycles.result()
                dc2_cycles.result()
            time.sleep(2)
        recoveries = [recovered[kill] for kill in range(4)]
        assert not streams[0].errors and not streams[1].errors
        expected = sum(count(b, "orders_REPLICA") for b in brokers.values())
        for broker in brokers.values():
            wait_until(holds_distinct(broker, "orders", expected), 90, f"all on {broker.alias}")
            # Exactly: a restart resumes after what the destination already holds.
            assert count(broker, "orders") == expected, f"{broker.alias}: records written twice"
        duplicates, rss = 0, max(peak_rss_mb(r) for r in running.values())
        for destination in brokers.values():
            stored = read(destination, "orders")
            for origin, source in brokers.items():
                report = oracle(read(source, "orders_REPLICA"), stored, origin)
                assert not report.missing, f"{origin} -> {destination.alias}: {report}"
                assert not report.out_of_order, f"{origin} -> {destination.alias}: {report}"
                duplicates += report.duplicates
        print(
            f"4 SIGKILLs: {expected} source records, 0 lost, {duplicates} duplicates, "
            f"ready again after {recoveries} s"
        )
        assert duplicates == 0
        FAULT_SUMMARY.append(
            FaultFigures(
                "SIGKILL x4 during a two-way stream",
                expected,
                0,
                duplicates,
                rss,
                f"ready {max(recoveries)} s after restart",
            )
        )
        for replicator in running.values():
            assert replicator.stop() == 0


def lag_partitions(process: ReplicatorProcess, leg: str) -> list[str]:
    """The source partitions whose lag ``process`` reports for ``leg`` (``/status`` detail: the
    metric is per topic)."""
    _, body = process.get("/status?partitions=all")
    (shown,) = [entry for entry in body["legs"] if entry["leg"] == leg]
    return [str(p["partition"]) for p in shown["partitions"] if p["lag"] is not None]


def lag_topics(process: ReplicatorProcess, leg: str) -> list[str]:
    """The topics whose lag ``process`` exports for ``leg`` (labelled by topic, not partition)."""
    _, text = process.get("/metrics")
    series = r'^replicator_commit_lag_records\{leg="' + re.escape(leg) + r'",topic="([^"]+)"\}'
    return re.findall(series, text, re.MULTILINE)


def test_second_replica_joins_and_leaves_during_a_stream(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=6)
        env = replicator_env("dc1", brokers)
        first = replicators("dc1", env)
        first.wait_ready()
        with Stream(local, "orders_REPLICA", 6, per_tick=60):
            time.sleep(3)

            def first_exports_every_lag() -> bool:
                return all(
                    len(lag_partitions(first, leg)) == 6 and lag_topics(first, leg) == ["orders"]
                    for leg in ("dc1->dc1", "dc1->dc2")
                )

            wait_until(first_exports_every_lag, 30, "lag of all 6 partitions on the first replica")
            second = replicators("dc1", env)  # the same datacenter: shares the partitions

            def second_has_partitions() -> bool:
                try:
                    return bool(second.get("/status")[1]["source_feed"]["assigned_partitions"])
                except (OSError, TypeError):
                    return False

            wait_until(
                second_has_partitions, 60, "the second replica taking partitions", second.log
            )

            def lag_exported_once_per_partition() -> bool:
                """The replica that gave a partition up no longer reports its lag; each exports
                the topic's lag of its own share."""
                for leg in ("dc1->dc1", "dc1->dc2"):
                    reported = lag_partitions(first, leg) + lag_partitions(second, leg)
                    if sorted(reported) != [str(p) for p in range(6)]:
                        return False
                    if any(lag_topics(replica, leg) != ["orders"] for replica in (first, second)):
                        return False
                return True

            wait_until(lag_exported_once_per_partition, 30, "lag exported by owners only")
            shared = {
                "first": first.get("/status")[1]["source_feed"]["assigned_partitions"],
                "second": second.get("/status")[1]["source_feed"]["assigned_partitions"],
            }
            time.sleep(3)
            assert second.stop() == 0  # leaves: its partitions move back
            left_at = time.monotonic()

            def first_owns_all() -> bool:
                feed = first.get("/status")[1]["source_feed"]
                return bool(feed["assigned_partitions"] == 6 and feed["joined"])

            wait_until(first_owns_all, 60, "the first replica owning every partition again")
            takeover = time.monotonic() - left_at
            time.sleep(2)
        total = count(local, "orders_REPLICA")
        for broker in brokers.values():
            wait_until(holds(broker, "orders", total), 60, f"{broker.alias} complete", first.log)
            report = oracle(read(local, "orders_REPLICA"), read(broker, "orders"), "dc1")
            assert not report.missing and not report.out_of_order, f"{broker.alias}: {report}"
            assert not report.duplicates, f"{broker.alias}: {report}"
            print(f"replica joined (partitions {shared}) and left: {broker.alias}: {report}")
            FAULT_SUMMARY.append(
                FaultFigures(
                    f"replica joins and leaves ({broker.alias})",
                    report.source_records,
                    len(report.missing),
                    report.duplicates,
                    peak_rss_mb(first),
                    f"partitions back {takeover:.1f} s after leave",
                )
            )
        assert first.stop() == 0


def test_three_replicas_rolling_restart_without_pauses(replicators: Start) -> None:
    """Three replicas of one datacenter share 9 partitions under a steady stream; each is
    stopped (SIGTERM) and its replacement started at once, the next one as soon as the
    replacement serves: no waiting for the group to settle between steps, as an orchestrator's
    rolling update does. Kafka's coordinator fences a member that lost its partitions (its
    commits of an old generation are refused), and each partition resumes after what its
    destination holds: every record reaches both clusters once, in order."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=9)
        env = replicator_env("dc1", brokers)
        replicas = [replicators("dc1", env) for _ in range(3)]
        for replica in replicas:
            replica.wait_ready()
        took = []
        with Stream(local, "orders_REPLICA", 9, per_tick=30) as stream:
            wait_until(holds(local, "orders", 300), 60, "records flowing", replicas[0].log)
            for i in range(len(replicas)):
                started = time.monotonic()
                assert replicas[i].stop() == 0, replicas[i].log()
                replicas[i] = replicators("dc1", env)
                replicas[i].wait_serving()
                took.append(time.monotonic() - started)
            time.sleep(2)
        assert not stream.errors, stream.errors
        total = count(local, "orders_REPLICA")
        assert total == stream.produced > 0
        for broker in brokers.values():
            wait_until(
                holds_distinct(broker, "orders", total),
                90,
                f"{broker.alias} complete",
                replicas[0].log,
            )
        wait_settled(*replicas)
        source = read(local, "orders_REPLICA")
        for broker in brokers.values():
            report = oracle(source, read(broker, "orders"), "dc1")
            print(f"rolling restart of 3 replicas, no pauses: {broker.alias}: {report}")
            FAULT_SUMMARY.append(
                FaultFigures(
                    f"rolling restart x3, no pauses ({broker.alias})",
                    report.source_records,
                    len(report.missing),
                    report.duplicates,
                    max(peak_rss_mb(r) for r in replicas),
                    "steps " + ", ".join(f"{t:.1f} s" for t in took),
                )
            )
            assert not report.missing and not report.out_of_order, f"{broker.alias}: {report}"
            assert not report.duplicates, f"{broker.alias}: {report}"
        for replica in replicas:
            assert replica.stop() == 0
