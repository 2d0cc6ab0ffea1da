"""MirrorMaker's own command lines and files, run unchanged but for their hosts, on real brokers.

The samples are those of the MirrorMaker 1 documentation (two source clusters aggregated into
one target), the Go mirror maker's README (``--prefix``) and a MirrorMaker 2
``connect-mirror-maker.properties``; each is copied with its hosts pointed at local brokers and
run as ``replicator mirror-maker ...`` or ``replicator mm2 FILE``; the records must arrive once
each, in order, where the original tool would have put them.
"""

from __future__ import annotations

import json
import re
import shlex
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from replicator.kafka.readers import StoredRecord
from tests.integration.harness import (
    Broker,
    Start,
    _create_topics,
    create_topics,
    holds,
    produce,
    produce_records,
    read,
    replicator_cli,
    run,
    start_clusters,
    wait_settled,
    wait_until,
)
from tests.integration.test_flows import assert_copied
from tests.integration.test_flows import run_topics as topics

SAMPLES = Path(__file__).resolve().parent.parent / "unit" / "samples" / "mirrormaker"

# The MirrorMaker 1 documentation's command line, as a shell would split it.
MM1_COMMAND = (
    "--consumer.config sourceCluster1Consumer.config "
    "--consumer.config sourceCluster2Consumer.config --num.streams 2 "
    '--producer.config targetClusterProducer.config --whitelist=".*"'
)
GO_COMMAND = (
    "--consumer.config sourceCluster1Consumer.config --num.streams 2 "
    '--producer.config targetClusterProducer.config --whitelist=".*" --prefix dc1_ '
    "--preserve.partitions --queue.size 10000"
)
ENV = {
    "REPLICATOR_LOG_FORMAT": "json",
    "REPLICATOR_COMMIT_INTERVAL_MS": "200",
    "REPLICATOR_METADATA_MAX_AGE_MS": "1000",
}


def pointed_at(sample: Path, copy: Path, servers: dict[str, str]) -> Path:
    """``sample`` copied to ``copy`` with each ``<prefix>bootstrap.servers`` line given the
    servers ``servers[prefix]`` names (prefix ``""`` for a client file); nothing else changes."""
    text = sample.read_text()
    for prefix, bootstrap in servers.items():
        line = re.compile(rf"^{re.escape(prefix)}bootstrap\.servers\s*=.*$", re.M)
        assert line.search(text), f"{sample.name} has no {prefix}bootstrap.servers line"
        text = line.sub(f"{prefix}bootstrap.servers = {bootstrap}", text)
    copy.write_text(text)
    return copy


def heartbeat(record: StoredRecord) -> tuple[str, str]:
    """The (source, target) aliases of a heartbeat in MirrorMaker 2's format; its value is
    version 0 and a timestamp."""
    assert record.key is not None and record.value is not None
    aliases, at = [], 0
    for _ in range(2):
        (size,) = struct.unpack_from(">h", record.key, at)
        aliases.append(record.key[at + 2 : at + 2 + size].decode())
        at += 2 + size
    version, _ = struct.unpack(">hq", record.value)
    assert version == 0 and at == len(record.key)
    return aliases[0], aliases[1]


def named_by_brokers(broker: Broker) -> str:
    """The alias of a cluster whose file names none: its bootstrap server 127.0.0.1:<port> as
    127-0-0-1-<port> (the embedded brokers listen on one address each)."""
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return f"{host.replace('.', '-')}-{port}"


def mirror_maker(workdir: Path, command: str) -> list[str]:
    """The command line with its files given as paths in ``workdir``."""
    args = []
    for word in shlex.split(command):
        is_file = word.endswith(".config") and not word.startswith("-")
        args.append(str(workdir / word) if is_file else word)
    return args


def test_mirror_maker_1_command_line_aggregates_two_sources_into_one_target(
    replicators: Start, tmp_path: Path
) -> None:
    with start_clusters("dc1", "dc2", "dc3") as brokers:
        for alias in ("dc1", "dc2"):
            create_topics(brokers[alias], app_log=3)
        files = {
            "sourceCluster1Consumer.config": brokers["dc1"],
            "sourceCluster2Consumer.config": brokers["dc2"],
            "targetClusterProducer.config": brokers["dc3"],
        }
        named = ("dc1", "dc2", "")  # the sources named in their files; the target by its brokers
        for (name, broker), given in zip(files.items(), named, strict=True):
            copy = pointed_at(
                SAMPLES / "mm1" / name, tmp_path / name, {"": broker.bootstrap_servers}
            )
            if given:
                copy.write_text(copy.read_text() + f"\nreplicator.cluster.alias={given}\n")
        args = ("mirror-maker", *mirror_maker(tmp_path, MM1_COMMAND))
        process = replicators("dc3", ENV, args)
        process.wait_ready()
        # MirrorMaker 1's consumers start at the latest records: written after it started.
        sources = {"dc1": "dc1", "dc2": "dc2"}  # each one's origin in provenance
        sent = {alias: produce(brokers[alias], "app_log", 120, partitions=3) for alias in sources}
        target = brokers["dc3"]
        wait_until(holds(target, "app_log", 240), 60, "both sources in dc3's app_log")
        wait_settled(process)
        stored = read(target, "app_log")
        assert len(stored) == 240
        for alias, origin in sources.items():
            assert_copied(stored, sent[alias], origin)
        flows = process.get("/status")[1]["flows"]
        assert len(flows) == 2 and {f["target"] for f in flows.values()} == {
            named_by_brokers(target)
        }


def test_go_mirror_maker_command_line_prefixes_the_target_topics(
    replicators: Start, tmp_path: Path
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], app_log=2, test=1)
        pointed_at(
            SAMPLES / "mm1" / "sourceCluster1Consumer.config",
            tmp_path / "sourceCluster1Consumer.config",
            {"": brokers["dc1"].bootstrap_servers},
        )
        pointed_at(
            SAMPLES / "mm1" / "targetClusterProducer.config",
            tmp_path / "targetClusterProducer.config",
            {"": brokers["dc2"].bootstrap_servers},
        )
        # History written before it starts: the Go mirror maker copies it (its consumer always
        # started from the earliest record), though the consumer config sets no reset.
        history = produce(brokers["dc1"], "app_log", 120, partitions=2, tag="-history")
        args = ("mirror-maker", *mirror_maker(tmp_path, GO_COMMAND))
        process = replicators("dc2", ENV, args)
        process.wait_ready()
        _, status = process.get("/status")
        notes = "\n".join(status["translation_notes"])
        assert "recognised as the Go mirror maker's (by --prefix)" in notes, notes
        assert "absent: the Go mirror maker's default, earliest, applies" in notes, notes
        sent = {
            "app_log": history + produce(brokers["dc1"], "app_log", 100, partitions=2),
            "test": produce(brokers["dc1"], "test", 30, partitions=1),
        }
        for topic, records in sent.items():
            wait_until(holds(brokers["dc2"], f"dc1_{topic}", len(records)), 60, f"dc1_{topic}")
        wait_settled(process)
        for topic, records in sent.items():
            stored = read(brokers["dc2"], f"dc1_{topic}")
            assert len(stored) == len(records)
            assert_copied(stored, records, named_by_brokers(brokers["dc1"]))


def test_mirror_maker_2_file_runs_its_flow_with_mm2_names(
    replicators: Start, tmp_path: Path
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        source, destination = brokers["dc1"], brokers["dc2"]
        run(
            _create_topics(
                source.bootstrap_servers, {"toa.evehicles-latest-dev": 2, "other": 1}, {}
            )
        )
        config = pointed_at(
            SAMPLES / "connect-mirror-maker.properties",
            tmp_path / "connect-mirror-maker.properties",
            {
                "source.": source.bootstrap_servers,
                "destination.": destination.bootstrap_servers,
            },
        )
        # The sample asks for 3 replicas; these clusters have one broker each, and Apache Kafka
        # refuses a replication factor above its broker count (as it would refuse MM2 itself).
        with config.open("a") as lines:
            lines.write("replication.factor=1\n")
        # MirrorMaker 2 copies the history too (its consumers start at the earliest record).
        sent = produce(source, "toa.evehicles-latest-dev", 80, partitions=2)
        produce(source, "other", 10, partitions=1)
        process = replicators("dc2", ENV, ("mm2", str(config)))
        process.wait_ready()
        renamed = "source.toa.evehicles-latest-dev"
        wait_until(holds(destination, renamed, len(sent)), 60, renamed)
        later = produce(source, "toa.evehicles-latest-dev", 40, partitions=2)
        wait_until(holds(destination, renamed, len(sent) + len(later)), 60, renamed)
        wait_until(
            lambda: topics(destination) >= {"source.heartbeats"}, 30, "the flow's heartbeats"
        )
        # Heartbeats where MirrorMaker 2 puts them: source->destination ones in the
        # destination's own topic, destination->source ones (no flow runs that direction, MM2
        # still emits them) in the source's, copied as source.heartbeats, in MM2's format.
        wait_until(lambda: len(read(destination, "source.heartbeats")) > 0, 30, "copies")
        assert {heartbeat(r) for r in read(destination, "heartbeats")} == {
            ("source", "destination")
        }
        assert {heartbeat(r) for r in read(source, "heartbeats")} == {("destination", "source")}
        assert {heartbeat(r) for r in read(destination, "source.heartbeats")} == {
            ("destination", "source")
        }
        # What MirrorClient.upstreamClusters() and replicationHops() read: the topic names.
        upstream = {t.rsplit(".", 1)[0] for t in topics(destination) if t.endswith(".heartbeats")}
        assert upstream == {"source"}

        def heartbeat_status() -> dict[str, Any]:
            _, status = process.get("/status")
            beat: dict[str, Any] = status["flows"]["source_to_destination"]["heartbeat"]
            return beat

        # The flow's heartbeat age comes from that copy: its path is proven end to end.
        wait_until(lambda: heartbeat_status()["age_seconds"] is not None, 30, "heartbeat age")
        assert heartbeat_status()["target_topic"] == "source.heartbeats"
        wait_settled(process)

        # The file leaves sync.topic.acls.enabled at MirrorMaker 2's default: the flow's ACL
        # sync runs, and a source that keeps no ACLs (no authorizer) is no failure.
        def acl_sync_status() -> dict[str, Any]:
            found: dict[str, Any] = process.get("/status")[1]["acl_sync"]["source->destination"]
            return found

        def acl_sync_ran() -> bool:
            found = acl_sync_status()
            return bool(found["rounds"]) or "no authorizer" in (found["waiting"] or "")

        wait_until(acl_sync_ran, 30, "the ACL sync's first round", process.log)
        acl_sync = acl_sync_status()
        assert acl_sync["policy"] == "mm2", acl_sync
        assert (acl_sync["failures"], acl_sync["last_error"]) == (0, None), acl_sync
        assert process.metric("replicator_acl_sync_failures_total") == 0
        stored = read(destination, renamed)
        assert len(stored) == len(sent) + len(later)
        assert_copied(stored, sent + later, "source")
        assert "source.other" not in topics(destination), "a topic the file does not list"

        # The audit, pointed at the same file, proves the target equal to the source but for
        # a copy written twice, and fails on it (exit 1): a verdict cron and CI can rely on.
        twice = stored[7]
        produce_records(destination, renamed, [replace(twice, offset=-1)])
        status, out, err = replicator_cli(ENV, "audit", "--mm2", str(config), "--json", "-")
        assert status == 1, err
        report = json.loads(out.strip().splitlines()[-1])
        assert (report["ok"], report["failed_by"]) == (False, {"duplicates": 1}), report
        assert report["totals"] == {
            "expected": 120,
            "delivered": 120,
            "missing": 0,
            "lag": 0,
            "duplicates": 1,
            "out_of_order": 0,
            "mismatched": 0,
            "untagged": 0,
            "loops": 0,
            "malformed": 0,
        }, report["totals"]
        (doubled,) = [p for p in report["partitions"] if p["duplicates"]]
        assert (doubled["cluster"], doubled["topic"], doubled["origin"]) == (
            "destination",
            "toa.evehicles-latest-dev",
            "source",
        )
        assert twice.provenance is not None
        assert doubled["partition"] == twice.provenance.partition
        # A topic no flow replicates is named, never "OK".
        status, out, err = replicator_cli(ENV, "audit", "--mm2", str(config), "--topic", "other")
        assert status == 2 and "topic other (given with --topic): no flow" in " ".join(err.split())


def test_a_zookeeper_era_file_is_refused_naming_the_setting_and_runs_once_it_names_brokers(
    replicators: Start, tmp_path: Path
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], app_log=1)
        consumer = tmp_path / "sourceClusterConsumer.config"
        producer = tmp_path / "targetClusterProducer.config"
        consumer.write_text((SAMPLES / "zk" / consumer.name).read_text())
        producer.write_text((SAMPLES / "zk" / producer.name).read_text())
        args = [
            "mirror-maker",
            "--consumer.config",
            str(consumer),
            "--producer.config",
            str(producer),
            "--whitelist=.*",
        ]
        status, _, err = replicator_cli(ENV, *args, "--print-env")
        assert status == 2
        assert "zk.connect" in err and "bootstrap.servers" in err, err
        # The same files once their ZooKeeper line names the brokers instead.
        for path, broker in ((consumer, brokers["dc1"]), (producer, brokers["dc2"])):
            text = re.sub(
                r"^zk\.connect\s*=.*$",
                f"bootstrap.servers={broker.bootstrap_servers}",
                path.read_text(),
                flags=re.M,
            )
            path.write_text(text)
        process = replicators("dc2", ENV, tuple(args))
        process.wait_ready()
        sent = produce(brokers["dc1"], "app_log", 50, partitions=1)
        wait_until(holds(brokers["dc2"], "app_log", 50), 60, "app_log on dc2")
        origin = named_by_brokers(brokers["dc1"])  # named by its brokers
        assert_copied(read(brokers["dc2"], "app_log"), sent, origin)
