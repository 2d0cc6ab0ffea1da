"""MirrorMaker 2 and MirrorMaker 1 themselves as contenders of the one-way benchmark.

Each copies ``bench`` of dc1 to ``bench`` of dc2 on the same brokers, from the same preloaded
records, as the replicator's identity flow does: MirrorMaker 2 in dedicated mode with the
identity replication policy (topic names kept), MirrorMaker 1 with its default handler. Both run
with what their documentation recommends for throughput, printed beside the figures
(:data:`MM2_SETTINGS`, :data:`MM1_SETTINGS`): one MirrorMaker 2 task per partition
(``tasks.max``; Kafka's geo-replication docs: raise it for throughput), and as many MirrorMaker 1
streams (``--num.streams``); producer batching at the clients' defaults, compression off on every
side, ``acks=all`` everywhere (MirrorMaker 2's Connect producer and MirrorMaker 1 force it, the
replicator's default).

``mm2-tuned`` is MirrorMaker 2 again with what its high-volume tuning guides add
(:data:`MM2_TUNED_SETTINGS`): large producer batches with a linger, large fetches and polls. In
the one-way workloads both run on the JVM ``connect-mirror-maker.sh`` gives them
(:data:`LAUNCHER_JVM`: G1, ``-Xms256M -Xmx2G``, ``kafka-run-class.sh``'s performance and JMX
options), unless ``--mm2-jvm suite`` asks for the test suite's JVM (serial GC, 1 GiB) the
figures before it were measured on (:func:`choose_jvm`).

Over the thousands of partitions of the scale benchmark (:mod:`benchmarks.scale`), MirrorMaker 2
runs with one task per core instead (:func:`mm2_tasks`), on the test suite's JVM, as does the
two-way workload's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from replicator.devtools.apache_kafka import kafka_libs
from replicator.devtools.embedded import LocalBroker
from replicator.devtools.jvm import die_with_parent, ensure_dir, java
from replicator.devtools.mirror_makers import (
    MM2_LOG4J2,
    MM2_MAIN,
    MirrorMakerProcess,
    mm2_local_properties,
    properties_text,
    start_mm1,
    start_mm2,
)

PEERS = ("mm2", "mm2-tuned", "mm1")
MM2_PEERS = ("mm2", "mm2-tuned")

MM2_SETTINGS = {
    "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
    "tasks.max": "<partitions>",
    "producer.acks": "all",
    "producer.compression.type": "none",
    "emit.checkpoints.enabled": "false",
    "sync.group.offsets.enabled": "false",
}
"""MirrorMaker 2's settings beyond one-broker replication factors (printed with the figures):
checkpoints off because the replicator's identity flow syncs no group either; heartbeats on in
both (their defaults)."""

MM2_TUNED_SETTINGS = {
    **MM2_SETTINGS,
    "dc2.producer.batch.size": "524288",
    "dc2.producer.linger.ms": "20",
    "dc2.producer.compression.type": "none",
    "dc1.consumer.fetch.max.bytes": "52428800",
    "dc1.consumer.max.partition.fetch.bytes": "10485760",
    "dc1.consumer.max.poll.records": "10000",
}
"""``mm2-tuned``: :data:`MM2_SETTINGS` (one task per partition) with what MirrorMaker 2's
high-volume tuning guides add: producer batches of 512 KiB with 20 ms of linger (the guides
give 5 to 50 ms), fetches of up to 50 MiB (10 MiB a partition) and polls of 10,000 records,
no compression. The client settings are given per cluster (``dc2.producer.*``: the Connect
worker's producer writing to dc2; ``dc1.consumer.*``: the source tasks' consumers), where
MirrorMaker 2 in dedicated mode reads them (``MirrorMakerConfig.clusterProps``)."""

MM1_SETTINGS = {"--num.streams": "<partitions>", "compression.type": "none", "acks": "all"}
"""MirrorMaker 1's options and producer properties (printed with the figures)."""

LAUNCHER_JVM = (
    "-Xms256M",
    "-Xmx2G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
    "-Dcom.sun.management.jmxremote",
    "-Dcom.sun.management.jmxremote.authenticate=false",
    "-Dcom.sun.management.jmxremote.ssl=false",
)
"""The JVM options ``bin/connect-mirror-maker.sh`` starts MirrorMaker 2 with when nothing is set:
its ``KAFKA_HEAP_OPTS`` (``-Xms256M -Xmx2G``), then ``kafka-run-class.sh``'s
``KAFKA_JVM_PERFORMANCE_OPTS`` (G1) and ``KAFKA_JMX_OPTS`` (the local JMX agent, no port)."""

SUITE_JVM_HEAP_MB = 1024
"""MirrorMaker 2's heap on the test suite's JVM (``--mm2-jvm suite``: serial GC,
:func:`replicator.devtools.jvm.spawn_jvm`)."""

_jvm = {"mm2": "launcher"}
JVMS = ("launcher", "suite")


def choose_jvm(name: str) -> None:
    """Run the one-way MirrorMaker 2 contenders on ``name``'s JVM: ``launcher`` (as
    ``connect-mirror-maker.sh`` starts it, :data:`LAUNCHER_JVM`) or ``suite`` (the test
    suite's: serial GC, :data:`SUITE_JVM_HEAP_MB`)."""
    if name not in JVMS:
        raise ValueError(f"no JVM {name!r}: {JVMS}")
    _jvm["mm2"] = name


def mm2_jvm() -> list[str]:
    """The JVM options the one-way MirrorMaker 2 contenders run with (printed with the figures)."""
    if _jvm["mm2"] == "launcher":
        return list(LAUNCHER_JVM)
    return [f"-Xmx{SUITE_JVM_HEAP_MB}m", "-XX:+UseSerialGC", "(the test suite's JVM)"]


def mm2_properties(
    brokers: dict[str, LocalBroker], topic: str, partitions: int, tuned: bool = False
) -> str:
    """A one-way dc1 -> dc2 MirrorMaker 2 file for ``topic``: the one-broker settings (with the
    plugin scan skipped, as its documentation advises once plugins declare manifests) and
    :data:`MM2_SETTINGS` (``tuned``: :data:`MM2_TUNED_SETTINGS`)."""
    chosen = MM2_TUNED_SETTINGS if tuned else MM2_SETTINGS
    settings = {k: v.replace("<partitions>", str(partitions)) for k, v in chosen.items()}
    return properties_text(_one_way(brokers, topic, settings))


def mm2_tasks() -> int:
    """MirrorMaker 2's ``tasks.max`` over a scale layout: one task per core of this machine.

    Each task of the source connector is a consumer and a producer on a thread of its own, and
    MirrorMaker 2 spreads the flow's partitions over its tasks round-robin. One task per
    partition (the one-way benchmark's choice, at 8 partitions) would be 1,200 to 6,000
    consumers, producers and threads on a 2-core machine; one per core gives each core a task,
    the parallelism the machine has."""
    return os.cpu_count() or 1


def mm2_scale_settings(pattern: str, tasks: int) -> dict[str, str]:
    """MirrorMaker 2's settings for a scale layout (printed with the figures): the topics
    ``pattern``, :data:`MM2_SETTINGS` with ``tasks`` tasks."""
    return {"dc1->dc2.topics": pattern, **MM2_SETTINGS, "tasks.max": str(tasks)}


def mm2_scale_properties(brokers: dict[str, LocalBroker], pattern: str, tasks: int) -> str:
    """A one-way dc1 -> dc2 MirrorMaker 2 file for every topic matching ``pattern`` (a Java
    regex), identity names, ``tasks`` tasks: :func:`mm2_scale_settings`."""
    settings = mm2_scale_settings(pattern, tasks)
    return properties_text(_one_way(brokers, settings.pop("dc1->dc2.topics"), settings))


def _one_way(
    brokers: dict[str, LocalBroker], topics: str, settings: dict[str, str]
) -> dict[str, str]:
    lines = mm2_local_properties(
        {alias: brokers[alias].bootstrap_servers for alias in ("dc1", "dc2")}
    )
    return lines | {
        "dc1->dc2.enabled": "true",
        "dc1->dc2.topics": topics,
        "dc2->dc1.enabled": "false",
        "dc2->dc1.emit.heartbeats.enabled": "false",
        **settings,
    }


def mm2_two_way_properties(brokers: dict[str, LocalBroker], topic: str, partitions: int) -> str:
    """MirrorMaker 2's default policy both ways for ``topic`` (``dc1.<topic>`` on dc2 and
    ``dc2.<topic>`` on dc1), one process, the same settings otherwise."""
    text = mm2_properties(brokers, topic, partitions)
    text = text.replace(
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n",
        "",
    )
    text = text.replace("dc2->dc1.enabled = false\n", "dc2->dc1.enabled = true\n")
    text = text.replace("dc2->dc1.emit.heartbeats.enabled = false\n", "")
    return text + f"dc2->dc1.topics = {topic}\n"


def start_peer(
    name: str, brokers: dict[str, LocalBroker], topic: str, partitions: int, workdir: Path
) -> MirrorMakerProcess:
    """Start MirrorMaker 2 (``mm2``, ``mm2-tuned``) or 1 (``mm1``) copying ``topic`` from dc1 to
    dc2."""
    if name in MM2_PEERS:
        config = workdir / "mm2.properties"
        config.write_text(mm2_properties(brokers, topic, partitions, tuned=name == "mm2-tuned"))
        if _jvm["mm2"] == "launcher":
            return start_mm2_as_launched(config, workdir)
        return start_mm2(config, workdir, heap_mb=SUITE_JVM_HEAP_MB)
    consumer = workdir / "consumer.properties"
    consumer.write_text(
        f"bootstrap.servers={brokers['dc1'].bootstrap_servers}\ngroup.id=bench-mm1\n"
        "auto.offset.reset=earliest\n"
    )
    producer = workdir / "producer.properties"
    producer.write_text(
        f"bootstrap.servers={brokers['dc2'].bootstrap_servers}\ncompression.type=none\n"
    )
    args = ["--include", topic, "--num.streams", str(partitions)]
    return start_mm1([consumer], producer, args, workdir, heap_mb=1024)


def start_mm2_as_launched(properties: Path, workdir: Path) -> MirrorMakerProcess:
    """MirrorMaker 2 in dedicated mode on ``properties`` in the JVM ``connect-mirror-maker.sh``
    would start (:data:`LAUNCHER_JVM`), on Kafka's jars, its output in ``workdir/mm2.log``; like
    :func:`replicator.devtools.mirror_makers.start_mm2` otherwise (its own session and tmpdir,
    dying with this process)."""
    ensure_dir(workdir)
    log4j2 = workdir / "mm2-log4j2.properties"
    log4j2.write_text(MM2_LOG4J2)
    log_path = workdir / "mm2.log"
    command = [
        java(),
        *LAUNCHER_JVM,
        f"-Djava.io.tmpdir={ensure_dir(workdir / 'mm2-tmp')}",
        f"-Dlog4j2.configurationFile={log4j2}",
        "-cp",
        f"{kafka_libs()}/*",
        MM2_MAIN,
        str(properties),
    ]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 (no threads touch state in between)
        )
    return MirrorMakerProcess("MirrorMaker 2", process, log_path, workdir)
