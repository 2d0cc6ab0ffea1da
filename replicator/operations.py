"""Operator commands: ``replicator check-config``, ``replicator lag``, ``replicator topics ensure``.

``check-config`` validates the environment, connects to every cluster (naming the addresses it
could not reach), prints the effective configuration with secrets masked, and which of the local
cluster's topics the rules replicate and why the others are left out. ``lag`` shows, per leg,
topic and partition, the leg's committed offset, the source log end and the difference, read from
the clusters themselves (the successor of MirrorMaker's offset checker, like
``kafka-consumer-groups --describe``), and warns when the rules select no topic.
``topics ensure`` creates the ``X_REPLICA`` and ``X`` pair of a topic on every cluster with the
same partition count and configuration, and reports pairs that cannot match; it refuses names
that are not Kafka topic names or that already carry the replica suffix.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.table import Table

from replicator.kafka import ClusterClient, client_options, translate
from replicator.settings import Settings
from replicator.snapshot import snapshot, topic_selection
from replicator.topics import TopicSpec, create_topic, describe_partitions, replication_factor
from replicator.topology import Rejection, TopicRules, TopicSelection, legs_for

_CHECK_TIMEOUT_S = 15.0
_LISTED_MAX = 20  # names shown of the topics that are not replica topics at all
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def rules_text(rules: TopicRules) -> str:
    """The topic rules as the user configured them (regexes after comma lists are joined)."""
    return (
        f"REPLICATOR_TOPICS_INCLUDE={rules.include.pattern!r}, "
        f"REPLICATOR_TOPICS_EXCLUDE={rules.exclude.pattern!r}, "
        f"REPLICATOR_REPLICA_SUFFIX={rules.suffix!r}"
    )


async def _probe_all(settings: Settings) -> dict[str, str | None]:
    clients = {a: ClusterClient(a, c, settings) for a, c in settings.clusters.items()}
    try:
        await asyncio.wait_for(
            asyncio.gather(*(client.probe() for client in clients.values())), _CHECK_TIMEOUT_S
        )
    except TimeoutError:
        for client in clients.values():
            if client.error == "not contacted yet":  # its probe was still waiting
                client.error = (
                    f"no answer within {_CHECK_TIMEOUT_S:.0f}s from {client.bootstrap_servers}"
                )
    finally:
        await asyncio.gather(*(client.close() for client in clients.values()))
    return {alias: client.error for alias, client in clients.items()}


async def _local_selection(settings: Settings) -> TopicSelection:
    local = settings.clusters[settings.local_cluster]
    rules = TopicRules.from_settings(settings)
    return await asyncio.wait_for(
        topic_selection(client_options(local, settings), rules), _CHECK_TIMEOUT_S
    )


def _print_selection(settings: Settings, selection: TopicSelection) -> None:
    rules = TopicRules.from_settings(settings)
    print(f"topics of {settings.local_cluster} ({rules_text(rules)}):")
    for source in selection.replicated:
        print(f"  replicated: {source} -> {rules.target(source)}")
    grouped = selection.by_reason()
    for reason in (Rejection.NOT_INCLUDED, Rejection.EXCLUDED, Rejection.TARGET_IS_REPLICA_TOPIC):
        for topic in grouped.get(reason.value, []):
            print(f"  rejected ({reason.value}): {topic}")
    others = grouped.get(Rejection.NOT_A_REPLICA_TOPIC.value, [])
    if others:
        shown = ", ".join(others[:_LISTED_MAX])
        more = f" and {len(others) - _LISTED_MAX} more" if len(others) > _LISTED_MAX else ""
        print(f"  not a replica topic ({len(others)}): {shown}{more}")


def _warn_nothing_selected(settings: Settings, selection: TopicSelection) -> None:
    rules = TopicRules.from_settings(settings)
    rejected = selection.replica_topics_rejected()
    if rejected:
        why = ", ".join(f"{t} ({r.value})" for t, r in sorted(rejected.items()))
        detail = f"they reject {why}"
    else:
        detail = f"the cluster holds no topic ending in {rules.suffix!r}"
    warn(f"no topic of {settings.local_cluster} would be replicated: {rules_text(rules)}; {detail}")


def check_config(settings: Settings, as_json: bool) -> int:
    """Print the effective configuration, whether each cluster answers and which local topics
    the rules replicate; 0 if every cluster answers, else 2."""
    reachable = asyncio.run(_probe_all(settings))
    selection: TopicSelection | None = None
    if reachable[settings.local_cluster] is None:
        try:
            selection = asyncio.run(_local_selection(settings))
        except Exception as exc:
            warn(f"could not list the topics of {settings.local_cluster}: {translate(exc)}")
    effective = settings.model_dump(mode="json")  # SecretStr values dump as '**********'
    document = {
        "configuration": effective,
        "clusters": {a: {"reachable": e is None, "error": e} for a, e in reachable.items()},
        "topics": None
        if selection is None
        else {"replicated": list(selection.replicated), "rejected": selection.by_reason()},
    }
    if as_json:
        print(json.dumps(document, indent=2))
    else:
        Console().print_json(json.dumps(effective))
        for alias, error in reachable.items():
            print(f"cluster {alias}: {'reachable' if error is None else 'UNREACHABLE: ' + error}")
        if selection is not None:
            _print_selection(settings, selection)
    if selection is not None and not selection.replicated:
        _warn_nothing_selected(settings, selection)
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


async def _lag(settings: Settings) -> tuple[TopicSelection, list[PartitionLag]]:
    local = settings.clusters[settings.local_cluster]
    client = client_options(local, settings)
    selection = await topic_selection(client, TopicRules.from_settings(settings))
    if not selection.replicated:
        return selection, []
    ranges = await snapshot(client, list(selection.replicated))
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
    return selection, rows


def lag(settings: Settings, as_json: bool) -> int:
    """Print each leg's lag per source partition; 0, or 1 when the rules select no topic."""
    selection, rows = asyncio.run(_lag(settings))
    status = 0
    if not selection.replicated:
        _warn_nothing_selected(settings, selection)
        status = 1
    if as_json:
        print(json.dumps([asdict(r) for r in rows]))
        return status
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
    return status


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


def topic_name_problem(topic: str, suffix: str) -> str | None:
    """Why ``topic`` cannot be the real topic X of a pair, or ``None`` when it can."""
    if topic.endswith(suffix):
        real = topic[: -len(suffix)] or "<name>"
        return (
            f"{topic!r} already ends with the replica suffix {suffix!r}: give the real topic "
            f"name: {real} (the pair {real}{suffix} and {real} is created)"
        )
    for name in (topic, topic + suffix):
        if name in (".", "..") or not _TOPIC_NAME.fullmatch(name):
            return (
                f"{name!r} is not a valid Kafka topic name (letters, digits, '.', '_', '-'; "
                "at most 249 characters; not '.' or '..')"
            )
    return None


def ensure_topics(
    settings: Settings, topics: list[str], partitions: int, configs: dict[str, str], as_json: bool
) -> int:
    """Create each ``X_REPLICA``/``X`` pair on every cluster; 0 if all match, 1 otherwise.

    A pair the topic rules would not replicate is still created, with a warning saying why.
    """
    rules = TopicRules.from_settings(settings)
    for topic in topics:
        reason = rules.rejection(topic + settings.replica_suffix)
        if reason is not None:
            warn(
                f"{topic + settings.replica_suffix} will not be replicated with these rules "
                f"({reason.value}: {rules_text(rules)}); creating the pair anyway"
            )
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
