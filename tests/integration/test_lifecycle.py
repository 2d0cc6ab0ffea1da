"""Topics appearing at runtime, destination topic provisioning, and restart without loss."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from replicator.devtools.apache_kafka import ScramUser, Security, grant
from replicator.kafka.admin import describe_partitions
from tests.integration.harness import (
    BACKEND,
    Broker,
    ReplicatorProcess,
    Start,
    Stream,
    admin_client,
    count,
    create_topics,
    holds,
    holds_distinct,
    kafka_cluster,
    oracle,
    produce,
    read,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)


def test_topic_created_at_runtime_is_picked_up_within_seconds(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        create_topics(brokers["dc1"], late_REPLICA=2)
        produce(brokers["dc1"], "late_REPLICA", 50, partitions=2)
        took = wait_until(
            lambda: count(brokers["dc2"], "late") == 50 and count(brokers["dc1"], "late") == 50,
            30,
            "runtime topic replicated",
            dc1.log,
        )
        print(f"runtime topic replicated everywhere {took:.1f}s after its first records")
        assert dc1.stop() == 0


def test_destination_topic_gets_source_partitions_and_configs(replicators: Start) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(
            brokers["dc1"],
            configs={"retention.ms": "3600000", "max.message.bytes": "2097152"},
            audit_REPLICA=5,
        )
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        produce(brokers["dc1"], "audit_REPLICA", 25, partitions=5)
        wait_until(lambda: count(brokers["dc2"], "audit") == 25, 30, "audit replicated", dc1.log)

        async def inspect() -> tuple[int, dict[str, str]]:
            admin = await admin_client(brokers["dc2"].bootstrap_servers)
            try:
                partitions = (await describe_partitions(admin))["audit"]
                responses = await admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, "audit")]
                )
            finally:
                await admin.close()
            configs = {e[0]: e[1] for r in responses for res in r.resources for e in res[4]}
            return len(partitions), configs

        partitions, configs = asyncio.run(inspect())
        assert partitions == 5
        assert configs.get("retention.ms") == "3600000"
        assert configs.get("max.message.bytes") == "2097152"
        # Same partition number on the destination as on the source.
        assert Counter(r.partition for r in read(brokers["dc2"], "audit")) == {
            p: 5 for p in range(5)
        }
        assert dc1.stop() == 0


@contextmanager
def growth_refused(brokers: dict[str, Broker], topic: str) -> Iterator[dict[str, str]]:
    """The replicator's settings for dc2 on a cluster that refuses to grow ``topic``.

    Apache Kafka grows topics on request (CreatePartitions): dc2 is one whose ACLs deny the
    replicator's user Alter on ``topic`` (and allow it everything else). The embedded broker
    has no CreatePartitions at all: plain."""
    if BACKEND != "kafka":
        with start_clusters("dc2") as more:
            brokers.update(more)
            yield {}
        return
    dc2 = kafka_cluster(
        "dc2",
        security=Security(
            users=(ScramUser("replicator", "replicator-secret"),), acls=True, sasl_plaintext=True
        ),
    )
    try:
        dc2.start()
        user = "User:replicator"
        grant(dc2, user, "--topic", "*", operations="All")
        grant(dc2, user, "--group", "*", operations="All")
        grant(dc2, user, "--topic", topic, operations="Alter", allow=False)
        brokers["dc2"] = dc2
        yield {
            "clusters__dc2__bootstrap_servers": dc2.listener("SASL_PLAINTEXT"),
            "clusters__dc2__security_protocol": "SASL_PLAINTEXT",
            "clusters__dc2__sasl_mechanism": "SCRAM-SHA-512",
            "clusters__dc2__sasl_username": "replicator",
            "clusters__dc2__sasl_password": "replicator-secret",
        }
    finally:
        dc2.remove()


def test_destination_with_fewer_partitions_blocks_only_that_topic(replicators: Start) -> None:
    with start_clusters("dc1") as brokers, growth_refused(brokers, "narrow") as dc2_settings:
        create_topics(brokers["dc1"], narrow_REPLICA=3, wide_REPLICA=2)
        create_topics(brokers["dc2"], narrow=1)
        dc1 = replicators("dc1", replicator_env("dc1", brokers, **dc2_settings))
        dc1.wait_serving()
        produce(brokers["dc1"], "narrow_REPLICA", 30, partitions=3)
        produce(brokers["dc1"], "wide_REPLICA", 20, partitions=2)
        wait_until(lambda: count(brokers["dc2"], "wide") == 20, 30, "wide replicated", dc1.log)
        # The local leg is unaffected: narrow reaches dc1's own real topic.
        wait_until(lambda: count(brokers["dc1"], "narrow") == 30, 30, "narrow on dc1", dc1.log)
        status, body = dc1.get("/readyz")
        assert status == 503
        assert any("narrow" in p and "partitions" in p for p in body["problems"]), body
        assert count(brokers["dc2"], "narrow") == 0
        _, status_body = dc1.get("/status")
        remote = next(leg for leg in status_body["legs"] if leg["leg"] == "dc1->dc2")
        assert remote["partitions_added"] == {}
        if BACKEND == "kafka":
            # dc2's ACL denies the growth: named, and waited for (granted, it goes on), not
            # refused for good.
            denied = "Alter on topic narrow denied by the ACLs of dc2"
            assert any(denied in p for p in body["problems"]), body
            assert "narrow" not in remote["refused_topics"]
        else:
            # The embedded broker cannot grow a topic (no CreatePartitions): refused for good,
            # what the operator reads.
            assert "adding partitions was refused" in remote["refused_topics"]["narrow"]
            assert dc1.metric("replicator_topics_blocked", leg="dc1->dc2") == 1
        assert dc1.stop() == 0


def test_sigterm_during_a_stream_then_restart_loses_and_repeats_nothing(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=3)
        env = replicator_env("dc1", brokers)
        first = replicators("dc1", env)
        first.wait_ready()
        chunks, per_chunk = 20, 200

        def stream() -> None:
            for chunk in range(chunks):
                produce(brokers["dc1"], "orders_REPLICA", per_chunk, partitions=3, tag=f"-{chunk}")
                time.sleep(0.1)

        producer = threading.Thread(target=stream)
        producer.start()
        wait_until(holds(brokers["dc2"], "orders", per_chunk), 30, "stream flowing", first.log)
        # Stopped mid-stream: in-flight batches are drained and committed, the rest is left.
        assert first.stop() == 0
        assert '"stop requested, draining"' in first.log()
        stopped_at = {alias: count(b, "orders") for alias, b in brokers.items()}
        producer.join()
        assert all(n < chunks * per_chunk for n in stopped_at.values()), stopped_at

        second = replicators("dc1", env)
        second.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", chunks * per_chunk), 30, "the rest", second.log)
        wait_settled(second)  # everything read is committed: a late duplicate would be here
        for broker in brokers.values():
            values = Counter(r.value for r in read(broker, "orders"))
            assert len(values) == chunks * per_chunk, broker.alias
            assert set(values.values()) == {1}, f"duplicates on {broker.alias}"
        print(f"stopped mid-stream at {stopped_at}; resumed with no loss and no duplicate")
        assert second.stop() == 0


# -- SIGTERM while the group rebalances ------------------------------------------------------------

# REPLICATOR_SHUTDOWN_GRACE_MS of the replicas below: longer than a rebalance of the embedded
# broker (about 5 s), so that a consumer closing mid-rebalance sees it complete (and the
# assignment arrive after stop) rather than being cut short by the grace.
_GRACE_S = 8
_EXIT_MARGIN_S = 10  # a stop may take the grace plus this (closing clients, leaving the group)


def _stack_of(process: ReplicatorProcess) -> str:
    """py-spy's dump of a replicator that did not exit (best effort: py-spy may be missing)."""
    assert process.process is not None
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        done = subprocess.run(
            [spy, "dump", "--pid", str(process.process.pid)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no stack: {exc!r})"
    return done.stdout + done.stderr


class _ExitClock:
    """The moment each process exited (a thread waits for each), to time an exit seen late."""

    def __init__(self, *processes: ReplicatorProcess) -> None:
        self.at: dict[int, float] = {}
        for process in processes:
            threading.Thread(target=self._watch, args=(process,), daemon=True).start()

    def _watch(self, process: ReplicatorProcess) -> None:
        assert process.process is not None
        process.process.wait()
        self.at[process.process.pid] = time.monotonic()


_clock = _ExitClock()


def _exit_within(
    process: ReplicatorProcess, since: float, limit: float, clock: _ExitClock = _clock
) -> tuple[int, float]:
    """Wait for ``process`` to exit at most ``limit`` seconds after ``since``: (status, seconds).

    A process still running then is dumped (py-spy), killed, and the test fails with its stack
    and log: what Kubernetes would do to it after the termination grace period.
    """
    assert process.process is not None
    try:
        status = process.process.wait(timeout=max(0.0, since + limit - time.monotonic()))
    except subprocess.TimeoutExpired:
        stack = _stack_of(process)
        process.kill()
        raise AssertionError(
            f"replicator {process.alias} (pid {process.process.pid}) still running "
            f"{limit:.0f}s after SIGTERM\n--- stack ---\n{stack}\n--- log ---\n{process.log()}"
        ) from None
    return status, clock.at.get(process.process.pid, time.monotonic()) - since


def _events(process: ReplicatorProcess) -> list[str]:
    """The ``event`` of every JSON log line of ``process``, in order."""
    events = []
    for line in process.log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "event" in entry:
            events.append(str(entry["event"]))
    return events


def _owned(process: ReplicatorProcess) -> int:
    try:
        feed = process.get("/status")[1]["source_feed"]
    except (OSError, TypeError, ValueError):
        return 0
    return int(feed["assigned_partitions"]) if feed and feed["joined"] else 0


# How B shows that its group is rebalancing: the feed releasing its partitions (the product's
# own line, one per revocation), or aiokafka's lines when it learns of it at its heartbeat or (on
# Apache Kafka, whose coordinator starts the rebalance as soon as A leaves) at its next offset
# commit. aiokafka's lines alone do not do: the product logs a repeated aiokafka line once per
# 30 s, so one said at B's own join can hide the next.
_REBALANCING = ("partitions released", "because it is rebalancing", "will rejoin")


def _rebalances_seen(process: ReplicatorProcess) -> int:
    log = process.log()
    return sum(log.count(line) for line in _REBALANCING)


def _signal_at(
    moment: str, a: ReplicatorProcess, b: ReplicatorProcess, since: float, clock: _ExitClock
) -> None:
    """Return at ``moment`` of the rebalance that A's stop (at ``since``) causes on B.

    Measured on the embedded broker: A leaves within a second, but B only learns of the
    rebalance at its heartbeat after A's session expired (about 12 s after A's SIGTERM), and the
    rebalance (revocation, join, sync, assignment) then takes about 5 s. Fixed delays after A's
    signal would all land before it, so the moments are read from B's log and status instead.
    An A that does not exit in time fails the test here, with its stack.
    """
    seen = _rebalances_seen(b)
    reached: Callable[[], bool] = {
        "with-a": lambda: True,  # both draining at once, before any rebalance
        "mid-rebalance": lambda: _rebalances_seen(b) > seen,  # revoking / joining
        "after-takeover": lambda: _owned(b) == 6,  # B was assigned every partition
    }[moment]
    while not reached():
        assert a.process is not None
        if a.process.poll() is None and time.monotonic() > since + _GRACE_S + _EXIT_MARGIN_S:
            _exit_within(a, since, _GRACE_S + _EXIT_MARGIN_S, clock)  # fails with A's stack
        b.assert_running()
        if time.monotonic() > since + 60:
            raise AssertionError(f"B never reached {moment} after A stopped:\n{b.log()}")
        time.sleep(0.05)


def _sigterm_while_rebalancing(replicators: Start, moment: str, say: list[str]) -> None:
    """The scenario of the test below for one ``moment``; what it prints goes to ``say``."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=6)
        env = replicator_env("dc1", brokers, shutdown_grace_ms=str(_GRACE_S * 1000))
        a = replicators("dc1", env)
        b = replicators("dc1", env)  # the same datacenter: shares the feed's partitions
        a.wait_ready()
        b.wait_ready()
        with Stream(local, "orders_REPLICA", 6, per_tick=20) as stream:

            def both_replicating() -> bool:
                owned = (_owned(a), _owned(b))
                return (
                    min(owned) > 0
                    and sum(owned) == 6
                    and all(
                        p.metric("replicator_records_replicated_total", leg="dc1->dc2") > 0
                        for p in (a, b)
                    )
                )

            wait_until(both_replicating, 60, "both replicas replicating their share", b.log)
            assert a.process is not None and b.process is not None
            clock = _ExitClock(a, b)
            a.process.send_signal(signal.SIGTERM)
            a_signalled = time.monotonic()
            _signal_at(moment, a, b, a_signalled, clock)
            b.process.send_signal(signal.SIGTERM)
            b_signalled = time.monotonic()
            limit = _GRACE_S + _EXIT_MARGIN_S
            b_status, b_took = _exit_within(b, b_signalled, limit, clock)
            a_status, a_took = _exit_within(a, a_signalled, limit, clock)
        assert not stream.errors, stream.errors
        say.append(
            f"B signalled {moment}, {b_signalled - a_signalled:.1f}s after A; "
            f"A exited {a_status} in {a_took:.1f}s, B exited {b_status} in {b_took:.1f}s"
        )
        assert (a_status, b_status) == (0, 0), f"A:\n{a.log()}\nB:\n{b.log()}"
        events = _events(b)
        assert "replicator stopped" in events, b.log()
        stopped_at = events.index("stop requested, draining")
        assert "partitions assigned" not in events[stopped_at:], (
            f"B started partitions after its stop request:\n{b.log()}"
        )

        # Nothing lost: a replicator started afterwards delivers every record (A and B committed
        # only what was acknowledged, so it resumes where they stopped).
        total = count(local, "orders_REPLICA")
        assert total == stream.produced
        again = replicators("dc1", env)
        again.wait_ready()
        source = read(local, "orders_REPLICA")
        for broker in brokers.values():
            wait_until(holds_distinct(broker, "orders", total), 60, broker.alias, again.log)
            report = oracle(source, read(broker, "orders"), "dc1")
            assert not report.missing and not report.out_of_order, f"{broker.alias}: {report}"
            say.append(f"{broker.alias}: {report}")
        assert again.stop() == 0


_MOMENTS = ("with-a", "mid-rebalance", "after-takeover")
_TEST = "test_sigterm_to_a_replica_while_its_group_rebalances_exits_within_the_grace"


def _scenario_in_thread(moment: str, say: list[str]) -> None:
    """:func:`_sigterm_while_rebalancing` with its own replicators, all killed when it ends
    (what the ``replicators`` fixture does for a test)."""
    started: list[ReplicatorProcess] = []

    def start(
        alias: str,
        env: dict[str, str],
        args: tuple[str, ...] = ("run",),
        source: Path | None = None,
    ) -> ReplicatorProcess:
        process = ReplicatorProcess(alias, env, args, source).start()
        started.append(process)
        return process

    try:
        _sigterm_while_rebalancing(start, moment, say)
    finally:
        for process in started:
            process.kill()


@pytest.fixture(scope="module")
def rebalance_scenarios(
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, tuple[Future[None], list[str]]]]:
    """The scenario of every selected ``moment``, all started at once, each in its own thread
    with its own brokers and replicators: the outcome and printed lines of each, by moment.

    A scenario spends most of its 25-30 s waiting for the broker (a stopped member's session to
    expire, a rebalance, a first join) and little CPU, so side by side the three take about the
    time of one. Each test waits for its own moment and fails with that scenario's assertion.
    """
    moments = sorted(
        {
            str(item.callspec.params["moment"])
            for item in request.session.items
            if isinstance(item, pytest.Function)
            and item.originalname == _TEST
            and item.module is request.module
        }
    )
    with ThreadPoolExecutor(max(1, len(moments))) as pool:
        scenarios: dict[str, tuple[Future[None], list[str]]] = {}
        for moment in moments:
            say: list[str] = []
            scenarios[moment] = (pool.submit(_scenario_in_thread, moment, say), say)
        yield scenarios


@pytest.mark.parametrize("moment", _MOMENTS)
def test_sigterm_to_a_replica_while_its_group_rebalances_exits_within_the_grace(
    rebalance_scenarios: dict[str, tuple[Future[None], list[str]]], moment: str
) -> None:
    """Two replicas of dc1 share the feed's group; replica A is stopped (SIGTERM), which makes
    the group rebalance onto B, and B gets SIGTERM at ``moment``: before, during or after that
    rebalance. B must exit 0 within the grace period plus a margin, start nothing after its stop
    request, and a replicator started afterwards must deliver every record.

    The three moments run side by side (see ``rebalance_scenarios``), each on its own clusters."""
    if moment not in rebalance_scenarios:  # not selected when the fixture started them
        said: list[str] = []
        try:
            _scenario_in_thread(moment, said)
        finally:
            print("\n".join(said))
        return
    outcome, said = rebalance_scenarios[moment]
    try:
        outcome.result()  # raises the scenario's own failure, if it failed
    finally:
        print("\n".join(said))
