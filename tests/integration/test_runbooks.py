"""The runbooks of the guides, run as written on Apache Kafka (:mod:`tests.integration.runbooks`).

Losing a datacenter and coming back (``docs/guides/failover.md``): dc1 is lost with records its
replicator had not copied out; the page's commands measure them, move the producers and the
consumer group to dc2, bring dc1 back, deliver them and move everything back. The oracle is
record-level: every record published anywhere is once in each cluster's ``orders``, the group
read every one of them, and the records it read twice are exactly those the dry runs announced
plus, from a checkpoint, those it read in the lost datacenter after that checkpoint.
"""

from __future__ import annotations

import re
import shlex
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicator.devtools.apache_kafka import ApacheKafkaCluster, kafka_tool, tool_scripts
from replicator.devtools.embedded import free_port
from replicator.devtools.mirror_makers import MirrorMakerProcess, start_mm1, start_mm2
from tests.integration.harness import (
    APACHE_KAFKA,
    Broker,
    ReplicatorProcess,
    Sent,
    Start,
    Stream,
    create_topics,
    holds,
    produce,
    read,
    replicator_env,
    start_clusters,
    wait_until,
)
from tests.integration.runbooks import ROOT, Operator, Ran, Step, matches, runbook
from tests.integration.test_failover import consume
from tests.integration.test_takeover import (
    all_copied,
    copying_on,
    group_assigned,
    group_has_members,
    mm1_files,
    mm2_file,
)

pytestmark = pytest.mark.skipif(not APACHE_KAFKA, reason="the runbooks are run on Apache Kafka")

FAILOVER = ROOT / "docs" / "guides" / "failover.md"
SAMPLES = ROOT / "docs" / "guides" / "samples"
PARTITIONS = 3

Identity = tuple[str, int, int]  # origin cluster, partition, offset of orders_REPLICA


def identities(sent: list[Sent], cluster: str) -> list[Identity]:
    return [(cluster, s.partition, s.offset) for s in sent]


def held(broker: Broker) -> Counter[Identity]:
    """Each record of ``orders`` by its origin."""
    found: Counter[Identity] = Counter()
    for record in read(broker, "orders"):
        tag = record.provenance
        assert tag is not None and tag.topic == "orders_REPLICA", record
        found[(tag.cluster, tag.partition, tag.offset)] += 1
    return found


def read_by_group(broker: Broker, group: str, upto: dict[int, int] | None = None) -> list[Identity]:
    """What ``group`` reads of ``orders`` from its position (up to ``upto``), by origin."""
    found = []
    for record in consume(broker, "orders", group, upto):
        tag = record.provenance
        assert tag is not None
        found.append((tag.cluster, tag.partition, tag.offset))
    return found


def announced(ran: list[Ran]) -> int:
    """The records a failover's table says the group will read again."""
    (said,) = [
        int(m[1]) for r in ran if (m := re.search(r"(\d+) records will be read again", r.out))
    ]
    return said


# How a stopped cluster's client failed: a refused connection or a timeout, said either way.
UNREACHED = r"does not answer at \S+[^.]*\.|not read \([^)]*\)"


def sample(name: str, ran: list[Ran], shape: bool = True) -> None:
    matches(SAMPLES / name, "\n".join(r.transcript for r in ran), shape, UNREACHED)


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    return tool_scripts(tmp_path / "bin")


def kubernetes_commands(page: Path, marker: str) -> Iterator[tuple[str, str]]:
    """The ``replicator`` commands of the page's Kubernetes block, with the context each runs in."""
    lines = page.read_text().splitlines()
    i = lines.index(f"<!-- kubernetes: {marker} -->") + 2
    while not lines[i].startswith("```"):
        if " -- replicator " in lines[i]:
            args = shlex.split(lines[i])
            yield args[args.index("--context") + 1], lines[i].split(" -- ", 1)[1]
        i += 1


def test_losing_a_datacenter_and_coming_back_as_the_runbooks_say(
    replicators: Start, tools: Path, tmp_path: Path
) -> None:
    lost, back = runbook(FAILOVER, "datacenter-lost"), runbook(FAILOVER, "failback")
    with start_clusters("dc1", "dc2") as brokers:
        dc1_kafka, dc2_kafka = brokers["dc1"], brokers["dc2"]
        assert isinstance(dc1_kafka, ApacheKafkaCluster)
        for broker in brokers.values():
            create_topics(broker, orders_REPLICA=PARTITIONS)

        def env(local: str) -> dict[str, str]:
            return replicator_env(
                local, brokers, sync_groups="billing", sync_groups_interval_ms="1000"
            )

        running = {"dc1": replicators("dc1", env("dc1")), "dc2": replicators("dc2", env("dc2"))}
        # The page's names for the test's addresses; each datacenter's operator environment is
        # its replicator's (with an HTTP port of its own: the replicator holds its own).
        hosts = {f"{a}-kafka:9092": b.bootstrap_servers for a, b in brokers.items()}

        def start(where: str, args: tuple[str, ...]) -> None:
            assert args[:2] == ("replicator", "run"), args
            running[where] = replicators(where, env(where), args[1:])
            hosts[f"{where}-replicator:8080"] = f"127.0.0.1:{running[where].http_port}"
            running[where].wait_ready()

        for alias, node in running.items():
            hosts[f"{alias}-replicator:8080"] = f"127.0.0.1:{node.http_port}"
            node.wait_ready()
        operator = Operator({a: env(a) for a in brokers}, hosts, tools, tmp_path, start)

        # Before: both datacenters publish; billing reads part of orders in dc1.
        sent = identities(produce(dc1_kafka, "orders_REPLICA", 300, PARTITIONS), "dc1")
        sent += identities(produce(dc2_kafka, "orders_REPLICA", 300, PARTITIONS), "dc2")
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 600), 60, f"orders in {broker.alias}")
        in_dc1 = read_by_group(dc1_kafka, "billing", {0: 150, 1: 90, 2: 200})
        read_at = time.time()

        def checkpointed() -> bool:
            _, status = running["dc1"].get("/status")
            group = (status["checkpoints"]["groups"].get("billing") or {}).get("dc1->dc2")
            return group is not None and group["age_s"] < time.time() - read_at - 0.5

        wait_until(checkpointed, 30, "a checkpoint of billing after its reads", running["dc1"].log)

        # The loss: dc1's replicator stops (no checkpoint after this), billing reads on in dc1
        # (70 records it will read again in dc2), 120 records are not copied out, dc1 is gone.
        running["dc1"].kill()
        after_checkpoint = read_by_group(dc1_kafka, "billing", {0: 190, 1: 120, 2: 200})
        assert len(after_checkpoint) == 70
        in_dc1 += after_checkpoint
        stranded = identities(
            produce(dc1_kafka, "orders_REPLICA", 120, PARTITIONS, tag="-stranded"), "dc1"
        )
        dc1_kafka.stop()

        # Lost, 1: dc2's replicator names dc1 unreachable.
        def says_dc1_unreachable() -> bool:
            status, body = running["dc2"].get("/readyz")
            return status == 503 and "cluster dc1 unreachable" in str(body)

        wait_until(says_dc1_unreachable, 60, "dc2's replicator naming dc1", running["dc2"].log)
        step: Iterator[Step] = iter(lost)
        ran = operator.step(next(step), "See what is down")
        assert "cluster dc1 unreachable" in ran[0].out, ran[0].out
        sample("lost-1.txt", ran, shape=False)  # its problems follow the replicator's retries

        # Lost, 2: dc2 holds dc1's records up to 100 per partition; the count is unknown.
        ran = operator.step(next(step), "Measure what dc1 had not copied out")
        assert "dc1 does not answer" in ran[0].out and "Run this again" in ran[0].out, ran[0].out
        held_up_to = re.findall(r"orders_REPLICA\s*\S\s*(\d)\s*\S\s*(\d+)", ran[0].out)
        assert sorted(held_up_to) == [(str(p), "100") for p in range(PARTITIONS)], ran[0].out
        sample("lost-2.txt", ran)

        # Lost, 3: dc1's producers publish to dc2.
        assert operator.step(next(step), "Move dc1's producers to dc2") == []
        moved = identities(produce(dc2_kafka, "orders_REPLICA", 90, PARTITIONS, "-moved"), "dc2")
        wait_until(holds(dc2_kafka, "orders", 690), 60, "the moved producers' records in dc2")

        # Lost, 4: billing to dc2, from its checkpoint; then its consumers there.
        ran = operator.step(next(step), "Move the consumer groups to dc2")
        assert "translated from the checkpoints" in ran[0].out, ran[0].out
        # Counted from the checkpoint, which billing's last 70 reads in dc1 came after.
        first_repeats = announced(ran[:1]) + len(after_checkpoint)
        sample("lost-4.txt", ran)
        in_dc2 = read_by_group(dc2_kafka, "billing")

        # Lost, 5: dc2's lag.
        ran = operator.step(next(step), "Watch dc2 carry the load")
        assert "dc2->dc1" in ran[0].out and "dc2->dc2" in ran[0].out, ran[0].out
        sample("lost-5.txt", ran)
        assert next(step, None) is None

        # Failback, 1: dc1's cluster is back (its replicator not yet): 120 records counted.
        step = iter(back)
        dc1_kafka.start()
        ran = operator.step(next(step), "Bring dc1's cluster back, and measure")
        assert "Completed updating config for topic orders_REPLICA" in ran[0].out, ran[0].out
        assert "dc1 answered: 120 records" in ran[1].out, ran[1].out
        sample("failback-1.txt", ran)

        # Failback, 2: dc1's replicator (the page's `replicator run`).
        ran = operator.step(next(step), "Start dc1's replicator")
        assert [r.command.line for r in ran] == ["replicator run"]
        everything = sent + stranded + moved
        for broker in brokers.values():
            wait_until(holds(broker, "orders", len(everything)), 90, f"all in {broker.alias}")

        # Failback, 3: both hold everything, no leg behind.
        ran = operator.step(next(step), "Wait until both clusters hold everything")
        assert all("holds every record" in r.out for r in ran[:2]), ran
        assert re.findall(r"(\S+): (\d+) records behind", ran[2].out) == [
            ("dc1->dc1", "0"),
            ("dc1->dc2", "0"),
        ], ran[2].out
        sample("failback-3.txt", ran)

        # Failback, 4: billing reads what reached dc2 since, then moves back to dc1.
        in_dc2 += read_by_group(dc2_kafka, "billing")
        ran = operator.step(next(step), "Move the consumer groups back")
        second_repeats = announced(ran)
        sample("failback-4.txt", ran)

        # Failback, 5: dc1's producers publish in dc1 again.
        assert operator.step(next(step), "Move dc1's producers back") == []
        after = identities(produce(dc1_kafka, "orders_REPLICA", 60, PARTITIONS, "-back"), "dc1")
        everything += after
        for broker in brokers.values():
            wait_until(holds(broker, "orders", len(everything)), 60, f"all in {broker.alias}")
        in_dc1_again = read_by_group(dc1_kafka, "billing")
        assert next(step, None) is None

        # Every record once in each cluster; the group read each, twice only as announced.
        for broker in brokers.values():
            assert held(broker) == Counter(everything), broker.alias
        assert set(in_dc1) | set(in_dc2) | set(in_dc1_again) == set(everything)
        assert len(set(in_dc1) & set(in_dc2)) == first_repeats
        assert len(set(in_dc2) & set(in_dc1_again)) == second_repeats
        assert not set(in_dc1) & set(in_dc1_again)
        for reads in (in_dc1, in_dc2, in_dc1_again):
            assert len(reads) == len(set(reads))
        print(
            f"runbooks: {len(stranded)} stranded records delivered on failback; billing read "
            f"{len(in_dc1)} + {len(in_dc2)} + {len(in_dc1_again)}, {first_repeats} and "
            f"{second_repeats} again as announced (the first: {len(after_checkpoint)} read after "
            "the checkpoint)"
        )

        # The Kubernetes variant's replicator commands are the ones run above.
        run_where = {(where, r.command.line) for where, r in operator.where_ran}
        for context, command in kubernetes_commands(FAILOVER, "datacenter-lost failback"):
            assert (context, command) in run_where, (context, command)


ADDING = ROOT / "docs" / "guides" / "adding-a-datacenter.md"


def test_adding_then_removing_a_datacenter_as_the_runbooks_say(
    replicators: Start, tools: Path, tmp_path: Path
) -> None:
    add, remove = runbook(ADDING, "add-datacenter"), runbook(ADDING, "remove-datacenter")
    with start_clusters("dc1", "dc2", "dc3") as brokers:
        pair = {a: brokers[a] for a in ("dc1", "dc2")}
        for broker in pair.values():
            create_topics(broker, orders_REPLICA=PARTITIONS, orders=PARTITIONS)
        running = {a: replicators(a, replicator_env(a, pair)) for a in pair}
        hosts = {f"{a}-kafka:9092": b.bootstrap_servers for a, b in brokers.items()}
        envs = {a: replicator_env(a, brokers) for a in brokers}

        def start(where: str, args: tuple[str, ...]) -> None:
            assert args[:2] == ("replicator", "run"), args
            running[where] = replicators(where, envs[where], args[1:])
            running[where].wait_ready()

        def restart(alias: str, env: dict[str, str]) -> None:
            assert running[alias].stop() == 0
            running[alias] = replicators(alias, env)
            running[alias].wait_ready()

        operator = Operator(envs, hosts, tools, tmp_path, start)
        for node in running.values():
            node.wait_ready()
        mesh = identities(produce(brokers["dc1"], "orders_REPLICA", 300, PARTITIONS), "dc1")
        mesh += identities(produce(brokers["dc2"], "orders_REPLICA", 210, PARTITIONS), "dc2")
        for broker in pair.values():
            wait_until(holds(broker, "orders", len(mesh)), 60, f"orders in {broker.alias}")

        # Adding dc3, with dc1 writing on in between the steps.
        step: Iterator[Step] = iter(add)
        ran = operator.step(next(step), "Create dc3's topic pairs")
        sample("add-1.txt", ran)
        assert operator.step(next(step), "Start dc3's replicator")[0].command.line == (
            "replicator run"
        )
        mesh += identities(produce(brokers["dc1"], "orders_REPLICA", 30, PARTITIONS, "-a"), "dc1")
        assert operator.step(next(step), "Give every other replicator dc3's cluster") == []
        for alias in pair:
            restart(alias, envs[alias])
        for broker in brokers.values():
            wait_until(holds(broker, "orders", len(mesh)), 90, f"orders in {broker.alias}")
        ran = operator.step(next(step), "Check that dc3 holds everything")
        assert all("holds every record" in r.out for r in ran[:2]), ran
        assert [leg for leg, _ in re.findall(r"(\S+): (\d+) records behind", ran[2].out)] == [
            "dc1->dc1",
            "dc1->dc2",
            "dc1->dc3",
        ], ran[2].out
        sample("add-4.txt", ran)
        assert operator.step(next(step), "Move applications into dc3") == []
        mesh += identities(produce(brokers["dc3"], "orders_REPLICA", 90, PARTITIONS), "dc3")
        assert next(step, None) is None
        for broker in brokers.values():
            wait_until(holds(broker, "orders", len(mesh)), 60, f"orders in {broker.alias}")
            assert held(broker) == Counter(mesh), broker.alias

        # Removing dc3: its last records are published, then copied out before it leaves.
        step = iter(remove)
        assert operator.step(next(step), "Move dc3's applications away") == []
        mesh += identities(produce(brokers["dc3"], "orders_REPLICA", 60, PARTITIONS, "-z"), "dc3")
        for broker in pair.values():
            wait_until(holds(broker, "orders", len(mesh)), 60, f"orders in {broker.alias}")
        ran = operator.step(next(step), "Check that every record of dc3 is out")
        assert all("holds every record" in r.out for r in ran), ran
        sample("remove-2.txt", ran)
        assert operator.step(next(step), "Stop dc3's replicator") == []
        assert running["dc3"].stop() == 0
        assert (
            operator.step(next(step), "Remove dc3's cluster block from every other replicator")
            == []
        )
        for alias in pair:
            operator.envs[alias] = replicator_env(alias, pair)
            restart(alias, operator.envs[alias])
        ran = operator.step(next(step), "Delete the groups the legs to dc3 leave behind")
        sample("remove-5.txt", ran)
        ran = operator.step(next(step), "Check what is left")
        assert re.findall(r"(\S+): (\d+) records behind", ran[0].out) == [
            ("dc1->dc1", "0"),
            ("dc1->dc2", "0"),
        ], ran[0].out
        sample("remove-6.txt", ran)
        assert next(step, None) is None

        # dc1 and dc2 go on; the groups of the legs to dc3 are gone from both.
        mesh += identities(produce(brokers["dc2"], "orders_REPLICA", 30, PARTITIONS, "-y"), "dc2")
        for alias, broker in pair.items():
            wait_until(holds(broker, "orders", len(mesh)), 60, f"orders in {alias}")
            assert held(broker) == Counter(mesh), alias
            groups = kafka_tool(
                "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                "--bootstrap-server", broker.bootstrap_servers, "--list",
            )  # fmt: skip
            assert f"replicator.{alias}.dc3" not in groups.split(), groups
            assert f"replicator.{alias}.{alias}" in groups.split(), groups


MIGRATING = ROOT / "docs" / "guides" / "migrating.md"


def test_cutting_over_from_mirrormaker_2_and_back_as_the_runbooks_say(
    replicators: Start, tools: Path, tmp_path: Path
) -> None:
    cutover, way_back = runbook(MIGRATING, "cutover-mm2"), runbook(MIGRATING, "hand-back-mm2")
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_topics(primary, orders=PARTITIONS)
        config = mm2_file(tmp_path, primary, backup)
        assert config.name == "connect-mirror-maker.properties"
        env = {"REPLICATOR_LOG_FORMAT": "json", "REPLICATOR_COMMIT_INTERVAL_MS": "200"}
        env["REPLICATOR_HTTP_PORT"] = str(free_port())  # check-config's; a replicator has its own
        makers: dict[str, MirrorMakerProcess] = {}
        nodes: dict[str, ReplicatorProcess] = {}
        hosts: dict[str, str] = {}

        def start(where: str, args: tuple[str, ...]) -> None:
            here = tuple(str(tmp_path / a) if (tmp_path / a).is_file() else a for a in args)
            if args[0] == "connect-mirror-maker.sh":
                makers["mm2"] = start_mm2(Path(here[1]), tmp_path / "mm2-again")
                return
            assert args[:2] == ("replicator", "mm2"), args
            node = nodes["replicator"] = replicators(where, env, here[1:])
            hosts["backup-replicator:8080"] = f"127.0.0.1:{node.http_port}"
            node.wait_serving()

        operator = Operator({"backup": env}, hosts, tools, tmp_path, start)
        remote = "primary.orders"
        try:
            with Stream(primary, "orders", PARTITIONS, per_tick=20) as stream:
                mm2 = makers["mm2"] = start_mm2(config, tmp_path / "mm2")
                copying_on(backup, remote, 200, mm2.log)
                step: Iterator[Step] = iter(cutover)
                ran = operator.step(next(step), "Read what the replicator makes of the file")
                assert "REPLICATOR_FLOWS__PRIMARY_TO_BACKUP__TAKE_OVER=mirrormaker2" in ran[0].out
                sample("cutover-mm2-1.txt", ran)
                assert (
                    operator.step(next(step), "Grant the replicator's principal what it needs")
                    == []
                )
                assert operator.step(next(step), "Stop MirrorMaker 2") == []
                assert mm2.stop() in (0, 130, 143), mm2.log()
                ran = operator.step(next(step), "Start the replicator on the same file")
                node = nodes["replicator"]
                copying_on(backup, remote, 200, node.log)
                ran = operator.step(next(step), "Check what was taken over, and that it keeps up")
                assert '"from":"MirrorMaker 2' in ran[0].out, ran[0].out
                assert "primary->backup" in ran[1].out, ran[1].out
                sample("cutover-mm2-5.txt", ran)
                assert next(step, None) is None

                step = iter(way_back)
                assert operator.step(next(step), "Stop the replicator") == []
                assert node.stop() == 0
                ran = operator.step(next(step), "Give MirrorMaker 2 the flows' positions")
                sample("hand-back-mm2-2.txt", ran)
                operator.step(next(step), "Start MirrorMaker 2 on the same file")
                mm2 = makers["mm2"]
                copying_on(backup, remote, 200, mm2.log)
                assert next(step, None) is None
            assert not stream.errors, stream.errors
            all_copied(primary, backup, remote, mm2.log)
        finally:
            for maker in makers.values():
                maker.kill()


def test_cutting_over_from_mirrormaker_1_as_the_runbook_says(
    replicators: Start, tools: Path, tmp_path: Path
) -> None:
    cutover = runbook(MIGRATING, "cutover-mm1")
    with start_clusters("primary", "backup") as brokers:
        primary, backup = brokers["primary"], brokers["backup"]
        create_topics(primary, orders=PARTITIONS)
        create_topics(backup, orders=PARTITIONS)  # MirrorMaker 1 creates no topics
        consumer, producer = mm1_files(tmp_path, primary, backup)
        env = {"REPLICATOR_LOG_FORMAT": "json", "REPLICATOR_COMMIT_INTERVAL_MS": "200"}
        env["REPLICATOR_HTTP_PORT"] = str(free_port())  # check-config's; a replicator has its own
        nodes: dict[str, ReplicatorProcess] = {}

        def start(where: str, args: tuple[str, ...]) -> None:
            here = tuple(str(tmp_path / a) if (tmp_path / a).is_file() else a for a in args)
            assert args[:2] == ("replicator", "mirror-maker"), args
            nodes["replicator"] = replicators(where, env, here[1:])
            nodes["replicator"].wait_serving()

        operator = Operator({"backup": env}, {}, tools, tmp_path, start)
        args = ["--include", "orders", "--offset.commit.interval.ms", "1000"]
        mm1 = start_mm1([consumer], producer, args, tmp_path / "mm1")
        try:
            wait_until(lambda: group_assigned(primary, "mm1-orders"), 120, "MM1 joined", mm1.log)
            with Stream(primary, "orders", PARTITIONS, per_tick=20) as stream:
                copying_on(backup, "orders", 200, mm1.log)
                step: Iterator[Step] = iter(cutover)
                ran = operator.step(
                    next(step), "Read what the replicator makes of the command line"
                )
                assert "TAKE_OVER=mirrormaker1" in ran[0].out, ran[0].out
                sample("cutover-mm1-1.txt", ran)
                assert operator.step(next(step), "Stop MirrorMaker 1") == []
                assert mm1.stop() in (0, 130, 143), mm1.log()
                wait_until(lambda: not group_has_members(primary, "mm1-orders"), 60, "MM1 left")
                operator.step(next(step), "Start the replicator on the same command line")
                node = nodes["replicator"]
                copying_on(backup, "orders", 200, node.log)
                ran = operator.step(next(step), "Check that it keeps up")
                # MirrorMaker 1 names no clusters: the legs are named by their addresses.
                behind = re.findall(r"(\S+): (\d+) records behind", ran[0].out)
                assert len(behind) == 1 and "orders" in ran[0].out, ran[0].out
                sample("cutover-mm1-4.txt", ran)
                assert next(step, None) is None
            assert not stream.errors, stream.errors
            all_copied(primary, backup, "orders", node.log)
            assert "took over from MirrorMaker 1" in node.log()
            assert node.stop() == 0
        finally:
            mm1.kill()
