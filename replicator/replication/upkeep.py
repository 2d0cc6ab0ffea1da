"""A leg's upkeep: the tasks besides its senders, catch-up fetch and committer that keep what it
shows and what it leaves behind current, each run in the leg's ``TaskGroup`` until stop.

- :func:`refresh_health`: the leg's gauges and transition logs
  (:class:`~replicator.replication.health.LegHealth`), soon after a partition's transition.
- :func:`refresh_marks`: the destination mark of each idle partition raised to the destination's
  log end, so that a resume reads little of what other origins wrote meanwhile.
- :func:`sync_topic_configs`: destination topics' configs following their source's
  (:mod:`replicator.topics.provisioning`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition

from replicator.kafka.retry import Backoff
from replicator.lifecycle import sleep_unless_stopped, wait_any, walk_interval
from replicator.replication.connections import LegDestination
from replicator.replication.health import LegHealth
from replicator.replication.partition import LegPartition
from replicator.topics.provisioning import TopicProvisioner

HEALTH_REFRESH_S = 1.0
# How often the destination marks of idle partitions are raised to the destination's log end:
# a resume then reads at most this long of what other origins wrote meanwhile.
MARK_REFRESH_S = 30.0
_CONFIG_SYNC_CEILING_S = 600.0


async def refresh_health(
    stop: asyncio.Event,
    health: LegHealth,
    due: asyncio.Event,
    partitions: Mapping[TopicPartition, LegPartition],
) -> None:
    """The leg's gauges and transition logs, within a second of a partition's transition
    (``due`` set); without one (a stall is found by time), a census of very many partitions is
    taken less often (:func:`walk_interval`). Readiness and ``/status`` take their own."""
    while not stop.is_set():
        due.clear()
        health.refresh(lambda _: None)
        await sleep_unless_stopped(stop, HEALTH_REFRESH_S)
        rest = walk_interval(HEALTH_REFRESH_S, len(partitions)) - HEALTH_REFRESH_S
        if rest > 0 and not due.is_set():
            await wait_any((stop, due), rest)


async def refresh_marks(
    stop: asyncio.Event,
    destination: LegDestination,
    partitions: Mapping[TopicPartition, LegPartition],
    log: Any,
) -> None:
    """Raise the destination mark of each idle partition to the destination's log end."""
    while not stop.is_set():
        await sleep_unless_stopped(stop, MARK_REFRESH_S)
        if stop.is_set() or not destination.ready.is_set():
            continue
        idle = {
            TopicPartition(p.target_topic, p.tp.partition): (p, tracker.last_end)
            for p in partitions.values()
            # Placed by key, no single destination partition holds the origin: no mark.
            if p.open
            and p.placement is None
            and (tracker := p.tracker) is not None
            and tracker.idle
        }
        if not idle:
            continue
        try:
            ends = await destination.tail.log_ends(list(idle))
        except Exception as exc:  # the next round tries again; marks only bound a read
            log.debug("destination log ends unknown", error=repr(exc))
            continue
        for destination_tp, end in ends.items():
            partition, last_end = idle[destination_tp]
            partition.destination_end_seen(end, last_end)


async def sync_topic_configs(stop: asyncio.Event, topics: TopicProvisioner, every: float) -> None:
    """Destination topics' configs follow their source's, every ``every`` seconds."""
    # A destination that refuses (no AlterConfigs) is asked less and less often.
    backoff = Backoff(base=every, ceiling=max(every, _CONFIG_SYNC_CEILING_S))
    wait = every
    while not stop.is_set():
        await sleep_unless_stopped(stop, wait)
        if not stop.is_set():
            synced = await topics.sync_configs()
            wait = backoff.delay(retriable=synced)
