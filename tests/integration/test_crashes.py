"""Crashes and membership changes: SIGKILL during a two-way stream, replicas joining and leaving."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from replicator.devtools.apache_kafka import ApacheKafkaCluster
from tests.fault_figures import FAULT_SUMMARY, FaultFigures
from tests.integration.faults import FaultProxy, second_listener_proxy
from tests.integration.harness import (
    Broker,
    Oracle,
    ReplicatorProcess,
    Start,
    Stream,
    count,
    create_topics,
    default_timings_env,
    holds,
    holds_distinct,
    oracle,
    peak_rss_mb,
    read,
    replicator_env,
    share_partitions,
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
        rss = max(peak_rss_mb(r) for r in running.values())
        reports = []
        for destination in brokers.values():
            stored = read(destination, "orders")
            for origin, source in brokers.items():
                report = oracle(read(source, "orders_REPLICA"), stored, origin)
                assert not report.missing, f"{origin} -> {destination.alias}: {report}"
                assert not report.out_of_order, f"{origin} -> {destination.alias}: {report}"
                reports.append(report)
        figures = FaultFigures.measured(
            "SIGKILL x4 during a two-way stream",
            reports,
            rss,
            f"ready {max(recoveries)} s after restart",
        )
        figures.source_records = expected  # both origins' records (each report holds one's)
        print(
            f"4 SIGKILLs: {expected} source records, {figures.lost} lost, "
            f"{figures.duplicates} duplicates, ready again after {recoveries} s"
        )
        assert figures.duplicates == 0
        FAULT_SUMMARY.append(figures)
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


# -- restarts at the product's default timings (static membership, the lease) ----------------------

# The restarted replica delivers again within this many seconds of its start, at the defaults.
_DELIVERY_BACK_S = 15.0


def per_partition(broker: Broker, topic: str) -> Counter[int]:
    return Counter(record.partition for record in read(broker, topic))


def seconds_until_every_partition_grows(broker: Broker, topic: str, timeout: float) -> float:
    """Seconds from now until every partition of ``topic`` holds more than it does now (a
    stream writes to every partition: each has an owner delivering again)."""
    before = per_partition(broker, topic)
    started = time.monotonic()

    def grown() -> bool:
        now = per_partition(broker, topic)
        return all(now[p] > n for p, n in before.items())

    wait_until(grown, timeout, f"every partition of {topic} on {broker.alias} to grow")
    return round(time.monotonic() - started, 1)


def exact_reports(brokers: dict[str, Broker], origin: str) -> list[Oracle]:
    """``origin``'s ``orders_REPLICA`` against ``orders`` in every cluster, once all arrived:
    nothing missing, nothing out of order (each report's duplicates counted by the caller)."""
    source = brokers[origin]
    total = count(source, "orders_REPLICA")
    reports = []
    for broker in brokers.values():
        wait_until(holds_distinct(broker, "orders", total), 90, f"all on {broker.alias}")
        report = oracle(read(source, "orders_REPLICA"), read(broker, "orders"), origin)
        assert not report.missing and not report.out_of_order, f"{broker.alias}: {report}"
        reports.append(report)
    return reports


def test_a_killed_replica_restarted_at_the_defaults_delivers_again_within_seconds(
    replicators: Start,
) -> None:
    """SIGKILL and an immediate restart, every timing at its default (45 s session): the
    restarted process is the same static member (its HOSTNAME, as a pod's name is), so the
    coordinator hands its partitions back at once instead of after the dead member's session."""
    with start_clusters("dc1", "dc2") as brokers:
        for broker in brokers.values():
            create_topics(broker, orders_REPLICA=3)
        local = brokers["dc1"]
        env = default_timings_env("dc1", brokers, HOSTNAME="replicator-dc1-0")
        first = replicators("dc1", env)
        first.wait_ready()
        with Stream(local, "orders_REPLICA", 3, per_tick=10) as stream:
            wait_until(holds(local, "orders", 100), 60, "the stream replicated", first.log)
            first_rss = peak_rss_mb(first)
            first.kill()
            restarted = replicators("dc1", env)
            back = seconds_until_every_partition_grows(local, "orders", 120)
            remote_back = seconds_until_every_partition_grows(brokers["dc2"], "orders", 60)
            time.sleep(2)
        assert not stream.errors, stream.errors
        (membership,) = [restarted.get("/status")[1]["source_feed"]["membership"]]
        assert membership["instance_id"] == "replicator-dc1-0", membership
        reports = exact_reports(brokers, "dc1")
        rss = max(first_rss, peak_rss_mb(restarted))
        figures = FaultFigures.measured(
            "SIGKILL + restart, default timings", reports, rss, f"delivering {back} s after"
        )
        FAULT_SUMMARY.append(figures)
        print(
            f"SIGKILL at the defaults: local delivery {back} s after the restart began, then "
            f"every partition on dc2 within {remote_back} s more; {figures}"
        )
        assert figures.duplicates == 0
        assert back < _DELIVERY_BACK_S, f"delivery back only {back} s after the restart"
        assert restarted.stop() == 0


def test_one_of_three_replicas_killed_restarted_and_gone_for_good_at_the_defaults(
    replicators: Start,
) -> None:
    """Three replicas share dc1's partitions, each with its own REPLICATOR_INSTANCE_ID, at the
    default timings. One is SIGKILLed and restarted: its partitions deliver again within
    seconds. One stops for good (SIGTERM): it leaves the group by its id and the others take
    its partitions at once. One is SIGKILLed for good: the survivor takes its partitions when
    its session (45 s) runs out, which is what a replica gone without a word costs."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=6)
        envs = {
            name: default_timings_env("dc1", brokers, REPLICATOR_INSTANCE_ID=f"dc1-{name}")
            for name in ("a", "b", "c")
        }
        running = {name: replicators("dc1", env) for name, env in envs.items()}
        for replica in running.values():
            replica.wait_ready()
        wait_until(
            lambda: share_partitions(list(running.values()), 6)() is not None,
            120,
            "three replicas sharing six partitions",
        )
        with Stream(local, "orders_REPLICA", 6, per_tick=10) as stream:
            wait_until(holds(local, "orders", 100), 60, "the stream replicated")
            rss = max(peak_rss_mb(r) for r in running.values())
            running["b"].kill()
            running["b"] = replicators("dc1", envs["b"])
            restart_back = seconds_until_every_partition_grows(local, "orders", 120)
            time.sleep(3)
            assert running["c"].stop() == 0  # for good: leaves the group by its instance id
            left_back = seconds_until_every_partition_grows(local, "orders", 120)
            time.sleep(3)
            running["a"].kill()  # for good, without a word
            gone_back = seconds_until_every_partition_grows(local, "orders", 120)
            time.sleep(2)
        assert not stream.errors, stream.errors
        reports = exact_reports(brokers, "dc1")
        rss = max(rss, peak_rss_mb(running["b"]))
        figures = FaultFigures.measured(
            "1 of 3 replicas: SIGKILL + restart, default timings",
            reports,
            rss,
            f"delivering {restart_back} s after",
        )
        FAULT_SUMMARY.append(figures)
        print(
            f"one of three at the defaults: killed and restarted, every partition delivering "
            f"{restart_back} s after; one stopped for good: {left_back} s; one killed for good: "
            f"{gone_back} s (its session); {figures}"
        )
        assert figures.duplicates == 0
        assert restart_back < _DELIVERY_BACK_S, f"{restart_back} s after the restart"
        assert left_back < _DELIVERY_BACK_S, f"{left_back} s after a replica left for good"
        # A replica killed for good holds its partitions until its session runs out (45 s).
        assert gone_back < 45 + _DELIVERY_BACK_S, f"{gone_back} s after one was killed for good"
        assert running["b"].stop() == 0


def test_a_second_process_under_the_same_identity_stops_the_first(replicators: Start) -> None:
    """Two processes started with one REPLICATOR_INSTANCE_ID are never two writers: the newer
    takes the identity, the older is told FENCED_INSTANCE_ID at its next heartbeat, writes
    nothing more and exits naming the cause; the newer reads the destination only once the
    older's lease has run out, so not one record is written twice."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=3)
        env = default_timings_env("dc1", brokers, REPLICATOR_INSTANCE_ID="dc1-twin")
        older = replicators("dc1", env)
        older.wait_ready()
        with Stream(local, "orders_REPLICA", 3, per_tick=20) as stream:
            wait_until(holds(local, "orders", 100), 60, "the stream replicated", older.log)
            older_rss = peak_rss_mb(older)
            newer = replicators("dc1", env)
            older_process = older.process
            assert older_process is not None
            wait_until(lambda: older_process.poll() is not None, 60, "the older to stop")
            back = seconds_until_every_partition_grows(local, "orders", 60)
            time.sleep(2)
        assert not stream.errors, stream.errors
        assert older_process.returncode == 3  # fenced, not crashed
        assert "another process joined group replicator.dc1 as instance 'dc1-twin'" in older.log()
        reports = exact_reports(brokers, "dc1")
        figures = FaultFigures.measured(
            "two processes of one identity",
            reports,
            max(older_rss, peak_rss_mb(newer)),
            f"the newer delivering {back} s after the older stopped",
        )
        FAULT_SUMMARY.append(figures)
        print(f"two processes of one instance id: {figures}")
        assert figures.duplicates == 0
        assert newer.stop() == 0


# -- a member its group dropped: frozen, cut off from its source, its loop blocked ----------------

_LOOP_BLOCKER = Path(__file__).parent / "loop_blocker"  # SIGUSR2 blocks the loop (sitecustomize)
_PAUSES = ("SIGSTOP", "source black-holed", "event loop blocked")


@contextlib.contextmanager
def second_listener_proxies(brokers: dict[str, Broker]) -> Iterator[dict[str, FaultProxy]]:
    """A fault proxy in front of each cluster's second listener: what one replica reaches."""
    with contextlib.ExitStack() as stack:
        yield {
            alias: stack.enter_context(second_listener_proxy(broker))
            for alias, broker in brokers.items()
        }


def pause(replica: ReplicatorProcess, how: str, proxies: dict[str, FaultProxy]) -> None:
    assert replica.process is not None
    if how == "SIGSTOP":
        os.kill(replica.process.pid, signal.SIGSTOP)
    elif how == "source black-holed":
        proxies["dc1"].black_hole()  # its source; the destination dc2 stays reachable
    else:
        os.kill(replica.process.pid, signal.SIGUSR2)  # blocks for its LOOP_BLOCK_S


def unpause(replica: ReplicatorProcess, how: str, proxies: dict[str, FaultProxy]) -> None:
    assert replica.process is not None
    if how == "SIGSTOP":
        os.kill(replica.process.pid, signal.SIGCONT)
    elif how == "source black-holed":
        proxies["dc1"].restore()


@pytest.mark.parametrize("session_s", [45, 10])
def test_a_replica_its_group_dropped_writes_nothing_twice(
    replicators: Start, session_s: int
) -> None:
    """Two replicas share dc1's partitions under a stream. Replica A reaches dc2 over a slow
    link (and small batches), so it always holds a backlog for dc2. A is paused three times,
    each for its session plus 10 s: frozen (SIGSTOP), its source connections black-holed while
    dc2 stays reachable, its event loop blocked. Each time the group gives A's partitions to B,
    which reads dc2's tail and writes on; when A comes back it must not send what it held: its
    lease ran out with its last accepted heartbeat, so nothing it queued reaches the network
    before a heartbeat tells it it was dropped, and what waited for the lease fails once A
    rejoins. Exact oracle on both clusters: not one record lost or written twice. At Kafka's
    default session (45 s) A is frozen only, the other ways take the 10 s session: the same
    lease, each pause a minute long at the default."""
    paused_s = session_s + 10
    pauses = _PAUSES if session_s < 45 else _PAUSES[:1]
    with (
        start_clusters("dc1", "dc2", second_listener=True) as brokers,
        second_listener_proxies(brokers) as proxies,
    ):
        local, remote = brokers["dc1"], brokers["dc2"]
        create_topics(local, orders_REPLICA=6)
        timings = {"REPLICATOR_GROUP_SESSION_TIMEOUT_MS": str(session_s * 1000)}
        env_a = default_timings_env("dc1", brokers, REPLICATOR_INSTANCE_ID="dc1-a", **timings)
        assert isinstance(local, ApacheKafkaCluster) and isinstance(remote, ApacheKafkaCluster)
        env_a["REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS"] = local.listener("WAN")
        env_a["REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS"] = remote.listener("WAN")
        env_a["REPLICATOR_BATCH_MAX_BYTES"] = "1024"  # a request lands within a second
        env_a["PYTHONPATH"] = str(_LOOP_BLOCKER)  # SIGUSR2 blocks its loop for LOOP_BLOCK_S
        env_a["LOOP_BLOCK_S"] = str(paused_s)
        env_b = default_timings_env("dc1", brokers, REPLICATOR_INSTANCE_ID="dc1-b", **timings)
        a, b = replicators("dc1", env_a), replicators("dc1", env_b)
        a.wait_ready()
        b.wait_ready()
        wait_until(lambda: share_partitions([a, b], 6)() is not None, 120, "A and B sharing")
        proxies["dc2"].slow(bytes_per_second=4_000)
        rejoined: dict[str, float] = {}
        with Stream(local, "orders_REPLICA", 6, per_tick=20) as stream:
            time.sleep(5)  # A falls behind towards dc2
            rss = max(peak_rss_mb(a), peak_rss_mb(b))
            for how in pauses:
                pause(a, how, proxies)
                time.sleep(paused_s)
                unpause(a, how, proxies)
                a_back = time.monotonic()
                wait_until(
                    lambda: share_partitions([a, b], 6)() is not None, 120, "A back in the group"
                )
                rejoined[how] = round(time.monotonic() - a_back, 1)
                time.sleep(5)  # A falls behind again
        assert not stream.errors, stream.errors
        proxies["dc2"].restore()
        reports = exact_reports(brokers, "dc1")
        wait_settled(a, b, timeout=120)
        membership = a.get("/status")[1]["source_feed"]["membership"]
        copied = {
            name: int(r.metric("replicator_records_replicated_total", leg="dc1->dc2"))
            for name, r in (("A", a), ("B", b))
        }
        # Records of requests A had in flight and saw answered long after its lease ran out:
        # counted as possible duplicates (they landed before B read, as the oracle shows).
        possible = int(
            a.metric("replicator_duplicates_possible_total", reason="answered_after_the_lease")
        )
        figures = FaultFigures.measured(
            f"replica dropped {len(pauses)} way(s), {session_s} s session",
            reports,
            rss,
            "A back in the group " + ", ".join(f"{s} s" for s in rejoined.values()) + " after",
        )
        FAULT_SUMMARY.append(figures)
        print(
            f"A paused {paused_s} s each way ({', '.join(pauses)}) at a {session_s} s session: "
            f"{figures}; records copied to dc2 by A {copied['A']}, by B {copied['B']}; A's "
            f"lease lapses seen by its sender: {membership['lease_lapses']}; counted as possible "
            f"duplicates: {possible}"
        )
        assert figures.duplicates == 0, f"{figures.duplicates} records written twice"
        assert a.stop() == 0 and b.stop() == 0
