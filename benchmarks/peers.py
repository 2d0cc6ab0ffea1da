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

Over the thousands of partitions of the scale benchmark (:mod:`benchmarks.scale`), MirrorMaker 2
runs with one task per core instead (:func:`mm2_tasks`).
"""

from __future__ import annotations

import os
from pathlib import Path

from replicator.devtools.embedded import LocalBroker
from replicator.devtools.mirror_makers import (
    MirrorMakerProcess,
    mm2_local_properties,
    properties_text,
    start_mm1,
    start_mm2,
)

PEERS = ("mm2", "mm1")

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

MM1_SETTINGS = {"--num.streams": "<partitions>", "compression.type": "none", "acks": "all"}
"""MirrorMaker 1's options and producer properties (printed with the figures)."""


def mm2_properties(brokers: dict[str, LocalBroker], topic: str, partitions: int) -> str:
    """A one-way dc1 -> dc2 MirrorMaker 2 file for ``topic``: the one-broker settings (with the
    plugin scan skipped, as its documentation advises once plugins declare manifests) and
    :data:`MM2_SETTINGS`."""
    settings = {k: v.replace("<partitions>", str(partitions)) for k, v in MM2_SETTINGS.items()}
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
    """Start MirrorMaker 2 (``mm2``) or 1 (``mm1``) copying ``topic`` from dc1 to dc2."""
    if name == "mm2":
        config = workdir / "mm2.properties"
        config.write_text(mm2_properties(brokers, topic, partitions))
        return start_mm2(config, workdir, heap_mb=1024)
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
