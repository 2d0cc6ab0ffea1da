"""Operator commands: ``replicator check-config``, ``replicator lag``, ``replicator topics ensure``.

``check-config`` validates the environment, connects to every cluster and prints the effective
configuration with secrets masked. ``lag`` shows, per leg, topic and partition, the leg's
committed offset, the source log end and the difference, read from the clusters themselves (the
successor of MirrorMaker's offset checker, like ``kafka-consumer-groups --describe``).
``topics ensure`` creates the ``X_REPLICA`` and ``X`` pair of a topic on every cluster with the
same partition count and configuration, and reports pairs that cannot match.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.table import Table

from replicator.kafka import ClusterClient, client_options, translate
from replicator.settings import Settings
from replicator.snapshot import replica_topics, snapshot
from replicator.topics import TopicSpec, create_topic, describe_partitions, replication_factor
from replicator.topology import TopicRules, legs_for

_CHECK_TIMEOUT_S = 15.0


async def _probe_all(settings: Settings) -> dict[str, str | None]:
    clients = {a: ClusterClient(a, c, settings) for a, c in settings.clusters.items()}
    try:
        await asyncio.wait_for(
            asyncio.gather(*(client.probe() for client in clients.values())), _CHECK_TIMEOUT_S
        )
    except TimeoutError:
        pass
    finally:
        await asyncio.gather(*(client.close() for client in clients.values()))
    return {alias: client.error for alias, client in clients.items()}


def check_config(settings: Settings, as_json: bool) -> int:
    """Print the effective configuration and whether each cluster answers; 0 if all do, else 2."""
    reachable = asyncio.run(_probe_all(settings))
    effective = settings.model_dump(mode="json")  # SecretStr values dump as '**********'
    document = {
        "configuration": effective,
        "clusters": {a: {"reachable": e is None, "error": e} for a, e in reachable.items()},
    }
    if as_json:
        print(json.dumps(document, indent=2))
    else:
        Console().print_json(json.dumps(effective))
        for alias, error in reachable.items():
            print(f"cluster {alias}: {'reachable' if error is None else 'UNREACHABLE: ' + error}")
    return 0 if all(e is None for e in reachable.values()) else 2


@dataclass
class PartitionLag:
    leg: str
    group: str
    topic: str
    partition: int
    committed: int | None
    log_end: int
    lag: int


async def _lag(settings: Settings) -> list[PartitionLag]:
    local = settings.clusters[settings.local_cluster]
    client = client_options(local, settings)
    topics = await replica_topics(client, TopicRules.from_settings(settings))
    ranges = await snapshot(client, topics)
    rows: list[PartitionLag] = []
    for leg in legs_for(settings):
        group = leg.group_id(settings.group_prefix)
        reader = AIOKafkaConsumer(**client, group_id=group, enable_auto_commit=False)
        await reader.start()
        try:
            for tp, (start, end) in sorted(ranges.items()):
                committed = await reader.committed(tp)
                behind = end - (committed if committed is not None else start)
                rows.append(
                    PartitionLag(
                        leg.name, group, tp.topic, tp.partition, committed, end, max(0, behind)
                    )
                )
        finally:
            await reader.stop()
    return rows


def lag(settings: Settings, as_json: bool) -> int:
    """Print each leg's lag per source partition; 0 (informational)."""
    rows = asyncio.run(_lag(settings))
    if as_json:
        print(json.dumps([asdict(r) for r in rows]))
        return 0
    table = Table(title=f"replication lag of {settings.local_cluster}'s replica topics")
    for column in ("leg", "group", "topic", "partition", "committed", "log end", "lag"):
        table.add_column(column, justify="right")
    for r in rows:
        committed = "-" if r.committed is None else str(r.committed)
        table.add_row(
            r.leg, r.group, r.topic, str(r.partition), committed, str(r.log_end), str(r.lag)
        )
    Console(width=max(Console().width, 110)).print(table)
    totals: dict[str, Any] = {}
    for r in rows:
        totals[r.leg] = totals.get(r.leg, 0) + r.lag
    print(", ".join(f"{leg}: {total} records behind" for leg, total in totals.items()))
    return 0


@dataclass
class TopicOutcome:
    cluster: str
    topic: str
    partitions: int | None
    action: str  # created, exists, mismatch, failed
    detail: str = ""


async def _ensure_on(
    settings: Settings, alias: str, names: list[str], partitions: int, configs: dict[str, str]
) -> list[TopicOutcome]:
    client = ClusterClient(alias, settings.clusters[alias], settings)
    outcomes = []
    try:
        admin = await client.admin()
        existing = await describe_partitions(admin)
        replication: int | None = None  # asked of the cluster once, when a topic is missing
        for name in names:
            if name in existing:
                have = len(existing[name])
                if have == partitions:
                    outcomes.append(TopicOutcome(alias, name, have, "exists"))
                else:
                    detail = f"has {have} partitions, the pair needs {partitions}"
                    outcomes.append(TopicOutcome(alias, name, have, "mismatch", detail))
                continue
            if replication is None:
                configured = settings.destination_replication_factor
                replication = await replication_factor(admin, configured)
            errors = await create_topic(admin, TopicSpec(name, partitions, replication, configs))
            if errors:
                outcomes.append(TopicOutcome(alias, name, None, "failed", "; ".join(errors)))
            else:
                outcomes.append(TopicOutcome(alias, name, partitions, "created"))
    except Exception as exc:
        outcomes += [
            TopicOutcome(alias, n, None, "failed", str(translate(exc)))
            for n in names
            if n not in {o.topic for o in outcomes}
        ]
    finally:
        await client.close()
    return outcomes


def ensure_topics(
    settings: Settings, topics: list[str], partitions: int, configs: dict[str, str], as_json: bool
) -> int:
    """Create each ``X_REPLICA``/``X`` pair on every cluster; 0 if all match, 1 otherwise."""
    names = [n for t in topics for n in (t + settings.replica_suffix, t)]

    async def everywhere() -> list[TopicOutcome]:
        results = await asyncio.gather(
            *(_ensure_on(settings, a, names, partitions, configs) for a in settings.clusters)
        )
        return [o for r in results for o in r]

    outcomes = asyncio.run(everywhere())
    if as_json:
        print(json.dumps([asdict(o) for o in outcomes]))
    else:
        table = Table(title=f"topics ensured with {partitions} partitions")
        for column in ("cluster", "topic", "partitions", "action", "detail"):
            table.add_column(column)
        for o in outcomes:
            table.add_row(o.cluster, o.topic, str(o.partitions or "-"), o.action, o.detail)
        Console(width=max(Console().width, 110)).print(table)
    return 0 if all(o.action in ("created", "exists") for o in outcomes) else 1
