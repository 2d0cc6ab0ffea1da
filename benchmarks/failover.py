"""The cost of translating a consumer group's positions to another cluster (``failover``).

Two embedded clusters each hold ``orders`` with 12 partitions and ``records`` records in all,
the records of two origins (dc1's and dc2's replica topics) interleaved differently in each
(one by one in dc1, in runs of 100 in dc2), provenance headers included. A group's positions in
dc1 are then translated to dc2 by the code ``replicator failover`` runs, timed:

- ``no checkpoint, half way`` and ``no checkpoint, lag 1%``: the first translation of a group
  reads its consumed part of each partition in dc1 and each partition of dc2 whole;
- ``from a checkpoint, lag 1%``: the half-way translation as the sync point (as the continuous
  checkpoints keep it), the group since moved on to 1% behind the log end;
- ``from a checkpoint a round ago``: the sync point 1% of the records behind the group (about
  what a checkpoint interval leaves).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from benchmarks.brokers import clusters
from benchmarks.resume import TOPIC, fill
from replicator.config.loading import load_settings
from replicator.failover.checkpoints import Checkpoint, CheckpointKey
from replicator.failover.group_positions import GroupTranslator, PartitionMove
from replicator.kafka.clients import GroupOffsets
from replicator.kafka.retry import Backoff, retrying
from replicator.model.provenance import Provenance

PARTITIONS = 12
GROUP = "bench.app"


def origin_at(cluster: str, i: int, partition: int) -> Provenance:
    """The origin of the ``i``-th record of ``partition`` as ``cluster`` interleaves them."""
    if cluster == "dc1":
        source, offset = ("dc1" if i % 2 else "dc2"), i // 2
    else:
        run, within = divmod(i, 200)
        source = "dc2" if within < 100 else "dc1"
        offset = run * 100 + within % 100
    return Provenance(source, "orders_REPLICA", partition, offset)


async def commit(bootstrap: str, positions: dict[int, int]) -> None:
    """Commit the group's positions (retried while a fresh cluster's group coordinator is
    still being elected: Apache Kafka creates its offsets topic on first use)."""
    client = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await client.start()
    try:
        offsets = {TopicPartition(TOPIC, p): at for p, at in positions.items()}
        await retrying(
            lambda: GroupOffsets(client, GROUP).commit(offsets),
            stop=asyncio.Event(),
            what="commit the benchmark group's positions",
            log=structlog.get_logger(__name__),
            persistent=False,
            backoff=Backoff(base=0.5, ceiling=2.0),
        )
    finally:
        await client.stop()


async def timed(
    translator: GroupTranslator, since: dict[CheckpointKey, Checkpoint]
) -> tuple[dict[str, Any], list[PartitionMove]]:
    """Translate the group's positions as ``failover`` does; the figures and the moves."""
    began = time.monotonic()
    reader = translator.reader("dc1", "bench")
    await reader.start()
    try:
        jobs, _ = await translator.jobs(reader, GROUP, None, since)
    finally:
        await reader.stop()
    moves = await translator.translate(jobs, live=True)
    figures = {
        "seconds": round(time.monotonic() - began, 2),
        "partitions": len(moves),
        "records_read": sum(m.scanned for m in moves),
        "repeats": sum(m.repeats for m in moves),
    }
    return figures, moves


def as_checkpoints(moves: list[PartitionMove]) -> dict[CheckpointKey, Checkpoint]:
    kept = (m.checkpoint(GROUP, "dc1", "dc2", 0) for m in moves)
    return {(c.topic, c.partition): c for c in kept if c is not None}


async def failover_cost(records: int) -> dict[str, Any]:
    """Time the translation of a group over 12 partitions of ``records`` records."""
    per_partition = records // PARTITIONS
    with clusters("dc1", "dc2") as brokers:
        began = time.monotonic()
        await asyncio.gather(
            *(
                fill(b.bootstrap_servers, per_partition, PARTITIONS, partial(origin_at, alias))
                for alias, b in brokers.items()
            )
        )
        filled = time.monotonic() - began
        env = {"REPLICATOR_LOCAL_CLUSTER": "dc2"}
        for alias, broker in brokers.items():
            env[f"REPLICATOR_CLUSTERS__{alias.upper()}__BOOTSTRAP_SERVERS"] = (
                broker.bootstrap_servers
            )
        settings = load_settings(env)
        translator = GroupTranslator(settings, "dc1", "dc2")
        dc1 = brokers["dc1"].bootstrap_servers
        result: dict[str, Any] = {
            "records_per_cluster": per_partition * PARTITIONS,
            "partitions": PARTITIONS,
            "fill_seconds": round(filled, 1),
        }
        half, late = per_partition // 2, per_partition * 99 // 100
        await commit(dc1, dict.fromkeys(range(PARTITIONS), half))
        result["no checkpoint, half way"], at_half = await timed(translator, {})
        await commit(dc1, dict.fromkeys(range(PARTITIONS), late))
        result["no checkpoint, lag 1%"], _ = await timed(translator, {})
        result["from a checkpoint, lag 1%"], _ = await timed(translator, as_checkpoints(at_half))
        await commit(dc1, dict.fromkeys(range(PARTITIONS), late - per_partition // 100))
        _, a_round_ago = await timed(translator, {})
        await commit(dc1, dict.fromkeys(range(PARTITIONS), late))
        result["from a checkpoint a round ago"], _ = await timed(
            translator, as_checkpoints(a_round_ago)
        )
        return result


if __name__ == "__main__":
    import json
    import sys

    print(
        json.dumps(asyncio.run(failover_cost(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)))
    )
