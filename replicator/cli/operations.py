"""Operator commands: ``replicator check-config``, ``lag``, ``acls``, ``hand-back``,
``topics ensure``.

``check-config`` validates the environment, checks that the HTTP server could listen on its
address (as ``run`` would), connects to every cluster (naming the addresses it could not reach),
prints the effective configuration with secrets masked, and for each feed (the ``_REPLICA``
mode's, each flow's) which of its source cluster's topics the rules replicate and why the others
are left out. ``lag`` shows, per leg (flows' legs included), topic and partition, the leg's
committed offset, the source log end and the difference, read from the clusters themselves (the
successor of MirrorMaker's offset checker, like ``kafka-consumer-groups --describe``), and warns
when the rules select no topic.
``acls`` prints the ACLs the configuration needs (:mod:`replicator.config.acls`) for the topics
each feed selects now, as ``kafka-acls`` commands per cluster, each with why.
``hand-back`` gives each flow that took over from a MirrorMaker (``TAKE_OVER``) its committed
positions back where that MirrorMaker resumes (MirrorMaker 1's group offsets, MirrorMaker 2's
Connect offsets topic), so that rolling back copies nothing twice.
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

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.console import Console
from rich.table import Table

from replicator.config.acls import AclGrant, Pattern, Resource, required_acls
from replicator.config.settings import Settings
from replicator.config.topology import (
    FeedPlan,
    Rejection,
    TopicRules,
    TopicSelection,
    colliding_flow_names,
    feeds_for,
)
from replicator.config.values import TakeOver
from replicator.errors import ConfigError, HandBackRefused
from replicator.failover.group_positions import active_members
from replicator.kafka.admin import TopicSpec, describe_partitions, replication_factor
from replicator.kafka.clients import ClusterClient, GroupOffsets, client_options
from replicator.kafka.readers import partitions_of
from replicator.kafka.translation import translate
from replicator.replication.takeover import (
    HANDED_BACK,
    connect_key,
    connect_value,
    default_offsets_topic,
    read_connect_positions,
)
from replicator.service.http import listen_problem
from replicator.telemetry.logs import print_table
from replicator.topics.provisioning import create_topic
from replicator.topics.snapshot import snapshot, topic_selection

_CHECK_TIMEOUT_S = 15.0
_LISTED_MAX = 20  # names shown of the topics that are not replica topics at all
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def rules_text(rules: TopicRules, feed: str = "replica") -> str:
    """The topic rules as the user configured them (regexes after comma lists are joined)."""
    if rules.suffix is None:
        prefix = f"REPLICATOR_FLOWS__{feed.upper()}__"
        described = rules.describe()
        named = ", ".join(
            f"{k}={v!r}" for k, v in described.items() if k not in ("include", "exclude")
        )
        return (
            f"{prefix}TOPICS_INCLUDE={rules.include.pattern!r}, "
            f"{prefix}TOPICS_EXCLUDE={rules.exclude.pattern!r}, {named}"
        )
    return (
        f"REPLICATOR_TOPICS_INCLUDE={rules.include.pattern!r}, "
        f"REPLICATOR_TOPICS_EXCLUDE={rules.exclude.pattern!r}, "
        f"REPLICATOR_REPLICA_SUFFIX={rules.suffix!r}"
    )


async def _probe_all(settings: Settings) -> dict[str, str | None]:
    clients = {
        a: ClusterClient(a, c, settings.client_timings()) for a, c in settings.clusters.items()
    }
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


async def _selection(settings: Settings, plan: FeedPlan) -> TopicSelection:
    source = settings.clusters[plan.source]
    return await asyncio.wait_for(
        topic_selection(client_options(source, settings), plan.rules), _CHECK_TIMEOUT_S
    )


def _print_selection(plan: FeedPlan, selection: TopicSelection) -> None:
    rules = plan.rules
    what = "" if not plan.is_flow else f" by flow {plan.name}"
    print(f"topics of {plan.source}{what} ({rules_text(rules, plan.name)}):")
    for source in selection.replicated:
        print(f"  replicated: {source} -> {rules.target(source)}")
    grouped = selection.by_reason()
    for reason in Rejection:
        if reason is Rejection.NOT_A_REPLICA_TOPIC:
            continue
        for topic in grouped.get(reason.value, []):
            print(f"  rejected ({reason.value}): {topic}")
    others = grouped.get(Rejection.NOT_A_REPLICA_TOPIC.value, [])
    if others:
        shown = ", ".join(others[:_LISTED_MAX])
        more = f" and {len(others) - _LISTED_MAX} more" if len(others) > _LISTED_MAX else ""
        print(f"  not a replica topic ({len(others)}): {shown}{more}")


def _warn_nothing_selected(plan: FeedPlan, selection: TopicSelection) -> None:
    rules = plan.rules
    rejected = selection.replica_topics_rejected()
    if rejected:
        why = ", ".join(f"{t} ({r.value})" for t, r in sorted(rejected.items()))
        detail = f"they reject {why}"
    elif rules.suffix is None:
        detail = "the cluster holds no topic"
    else:
        detail = f"the cluster holds no topic ending in {rules.suffix!r}"
    what = "replicated" if not plan.is_flow else f"copied by flow {plan.name}"
    warn(f"no topic of {plan.source} would be {what}: {rules_text(rules, plan.name)}; {detail}")


def check_config(settings: Settings, as_json: bool) -> int:
    """Print the effective configuration, whether the HTTP server could listen, whether each
    cluster answers and which topics each feed's rules replicate; 0 if the server could listen
    and every cluster answers, else 2 (as ``run`` exits on an address it cannot listen on)."""
    address = f"{settings.http_host}:{settings.http_port}"
    http_error = listen_problem(settings.http_host, settings.http_port)
    reachable = asyncio.run(_probe_all(settings))
    selections = _reachable_selections(settings, reachable)
    effective = settings.model_dump(mode="json")  # SecretStr values dump as '**********'
    if as_json:
        document = _check_document(settings, effective, address, http_error, reachable, selections)
        print(json.dumps(document, indent=2))
    else:
        Console().print_json(json.dumps(effective))
        listening = "can listen" if http_error is None else "CANNOT LISTEN: " + http_error.message
        print(f"http {address}: {listening}")
        for alias, error in reachable.items():
            print(f"cluster {alias}: {'reachable' if error is None else 'UNREACHABLE: ' + error}")
        for plan, selection in selections.values():
            _print_selection(plan, selection)
    _check_warnings(settings, selections)
    if http_error is not None:
        # The same line, and status, as ``run`` gives for this address.
        print(f"configuration error: {http_error.variable}: {http_error.message}", file=sys.stderr)
        return 2
    return 0 if all(e is None for e in reachable.values()) else 2


def _reachable_selections(
    settings: Settings, reachable: dict[str, str | None]
) -> dict[str, tuple[FeedPlan, TopicSelection]]:
    """Each feed's topic selection, by feed name, for the feeds whose source answered (a
    listing that fails is warned about and left out)."""
    selections: dict[str, tuple[FeedPlan, TopicSelection]] = {}
    for plan in feeds_for(settings):
        if reachable[plan.source] is not None:
            continue
        try:
            selections[plan.name] = (plan, asyncio.run(_selection(settings, plan)))
        except Exception as exc:
            warn(f"could not list the topics of {plan.source}: {translate(exc)}")
    return selections


def _check_document(
    settings: Settings,
    effective: dict[str, Any],
    address: str,
    http_error: ConfigError | None,
    reachable: dict[str, str | None],
    selections: dict[str, tuple[FeedPlan, TopicSelection]],
) -> dict[str, Any]:
    """``check-config --json``'s document."""

    def shown(selection: TopicSelection) -> dict[str, Any]:
        return {"replicated": list(selection.replicated), "rejected": selection.by_reason()}

    replica = selections.get("replica") if settings.replica_mode else None
    return {
        "configuration": effective,
        "http": {
            "address": address,
            "listenable": http_error is None,
            "variable": None if http_error is None else http_error.variable,
            "error": None if http_error is None else http_error.message,
        },
        "clusters": {a: {"reachable": e is None, "error": e} for a, e in reachable.items()},
        "topics": None if replica is None else shown(replica[1]),
        "flows": {
            name: shown(selection) for name, (plan, selection) in selections.items() if plan.is_flow
        },
    }


def _check_warnings(
    settings: Settings, selections: dict[str, tuple[FeedPlan, TopicSelection]]
) -> None:
    """The warnings of ``check-config``: feeds that select no topic, flow names that collide,
    passwords sent in clear."""
    for plan, selection in selections.values():
        if not selection.replicated:
            _warn_nothing_selected(plan, selection)
    for warning in colliding_flow_names(settings):
        warn(warning)
    for alias, cluster in sorted(settings.clusters.items()):
        if cluster.sends_password_in_clear:
            warn(
                f"cluster {alias}: SASL PLAIN without TLS sends the password unencrypted "
                f"(accepted by REPLICATOR_CLUSTERS__{alias.upper()}__ALLOW_INSECURE_PLAIN)"
            )


@dataclass
class PartitionLag:
    leg: str
    group: str
    topic: str
    partition: int
    committed: int | None
    log_end: int
    lag: int


async def _lag(
    settings: Settings,
) -> tuple[list[tuple[FeedPlan, TopicSelection]], list[PartitionLag]]:
    selections: list[tuple[FeedPlan, TopicSelection]] = []
    rows: list[PartitionLag] = []
    for plan in feeds_for(settings):
        client = client_options(settings.clusters[plan.source], settings)
        selection = await topic_selection(client, plan.rules)
        selections.append((plan, selection))
        if not selection.replicated:
            continue
        ranges = await snapshot(client, list(selection.replicated))
        for leg in plan.legs:
            group = leg.group_id(plan.leg_group_prefix)
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
    return selections, rows


def lag(settings: Settings, as_json: bool) -> int:
    """Print each leg's lag per source partition; 0, or 1 when a feed's rules select no topic."""
    selections, rows = asyncio.run(_lag(settings))
    status = 0
    for plan, selection in selections:
        if not selection.replicated:
            _warn_nothing_selected(plan, selection)
            status = 1
    if as_json:
        print(json.dumps([asdict(r) for r in rows]))
        return status
    print_table(Console(), lag_table(rows))
    totals: dict[str, Any] = {}
    for r in rows:
        totals[r.leg] = totals.get(r.leg, 0) + r.lag
    print(", ".join(f"{leg}: {total} records behind" for leg, total in totals.items()))
    return status


def lag_table(rows: list[PartitionLag]) -> Table:
    """Lag per leg and source partition; each leg's consumer group (one per leg) in the caption,
    not in a column, so that the table fits 80 columns (``--json`` has it on every row)."""
    groups = ", ".join(
        f"{leg} {group}" for leg, group in dict((r.leg, r.group) for r in rows).items()
    )
    table = Table(
        title="replication lag per leg and source partition",
        caption=f"committed offsets of the groups {groups}" if groups else None,
        caption_justify="left",
    )
    for column in ("leg", "topic", "partition", "committed", "log end", "lag"):
        table.add_column(column, justify="right")
    for r in rows:
        committed = "-" if r.committed is None else str(r.committed)
        table.add_row(r.leg, r.topic, str(r.partition), committed, str(r.log_end), str(r.lag))
    return table


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
    client = ClusterClient(alias, settings.clusters[alias], settings.client_timings())
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
            f"name: {real} (its replica topic is {real}{suffix})"
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
        print_table(Console(), ensure_table(partitions, outcomes))
    return 0 if all(o.action in ("created", "exists") for o in outcomes) else 1


def ensure_table(partitions: int, outcomes: list[TopicOutcome]) -> Table:
    table = Table(title=f"topics ensured with {partitions} partitions")
    for column in ("cluster", "topic", "partitions", "action", "detail"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(o.cluster, o.topic, str(o.partitions or "-"), o.action, o.detail)
    return table


@dataclass
class HandedBack:
    """One source partition of a flow given back to the MirrorMaker it replaced."""

    flow: str
    predecessor: str
    topic: str
    partition: int
    flow_position: int | None  # the flow's committed offset: the next record to copy
    mirror_maker_position: int | None  # where the MirrorMaker would resume before the hand-back


@dataclass
class _FlowHandBack:
    """One flow's positions, read before anything is written."""

    plan: FeedPlan
    predecessor: str
    topic: str  # MirrorMaker 2's offsets topic ("" for MirrorMaker 1)
    alias: str  # the source's alias as MirrorMaker spells it
    partitions: list[TopicPartition]
    mine: dict[TopicPartition, int]
    theirs: dict[TopicPartition, int | None]


async def _hand_back(settings: Settings, execute: bool) -> list[HandedBack]:
    """Every flow's positions read and checked first (a refusal writes nothing), then with
    ``execute`` written where each MirrorMaker resumes, and the flow's own commits tagged
    :data:`HANDED_BACK` so that a later takeover looks at what MirrorMaker did since."""
    flows = [
        await _read_hand_back(settings, plan)
        for plan in feeds_for(settings)
        if plan.take_over is not TakeOver.NONE
    ]
    if execute:
        for flow in flows:
            await _write_hand_back(settings, flow)
    return [
        HandedBack(
            flow.plan.name,
            flow.predecessor,
            tp.topic,
            tp.partition,
            flow.mine.get(tp),
            flow.theirs.get(tp),
        )
        for flow in flows
        for tp in flow.partitions
    ]


async def _read_hand_back(settings: Settings, plan: FeedPlan) -> _FlowHandBack:
    (leg,) = plan.legs
    alias = settings.clusters[plan.source].topic_alias or plan.source
    source = client_options(settings.clusters[plan.source], settings)
    selection = await topic_selection(source, plan.rules)
    partitions = sorted(await snapshot(source, list(selection.replicated)))
    client = ClusterClient(plan.source, settings.clusters[plan.source], settings.client_timings())
    try:
        running = await active_members(client, plan.group)
    finally:
        await client.close()
    if running:
        raise HandBackRefused(
            f"{plan.name}: the group {plan.group} on {plan.source} has active members: stop "
            "every replicator running the flow first"
        )
    reader = AIOKafkaConsumer(**source, enable_auto_commit=False)
    await reader.start()
    try:
        found = await GroupOffsets(reader, leg.group_id(plan.leg_group_prefix)).fetch(partitions)
        mine = {tp: p for tp, p in found.items() if p is not None}
        if plan.take_over is TakeOver.MIRRORMAKER1:
            theirs = await GroupOffsets(reader, plan.group).fetch(partitions)
            return _FlowHandBack(
                plan, f"MirrorMaker 1 (group {plan.group})", "", alias, partitions, mine, theirs
            )
    finally:
        await reader.stop()
    topic = plan.take_over_topic or default_offsets_topic(alias)
    target = client_options(settings.clusters[leg.destination], settings)
    reader = AIOKafkaConsumer(**target, enable_auto_commit=False)
    await reader.start()
    try:
        if not await partitions_of(reader, topic):
            raise HandBackRefused(
                f"{plan.name}: MirrorMaker 2's offsets topic {topic} does not exist on "
                f"{leg.destination} (REPLICATOR_FLOWS__<FLOW>__TAKE_OVER_TOPIC names another?)"
            )
        before = await read_connect_positions(
            reader, topic, alias, settings.request_timeout_ms / 1000
        )
    finally:
        await reader.stop()
    return _FlowHandBack(
        plan, f"MirrorMaker 2 ({topic})", topic, alias, partitions, mine, dict(before)
    )


async def _write_hand_back(settings: Settings, flow: _FlowHandBack) -> None:
    plan, mine = flow.plan, flow.mine
    (leg,) = plan.legs
    if not mine:
        return
    source = client_options(settings.clusters[plan.source], settings)
    if plan.take_over is TakeOver.MIRRORMAKER2:
        target = client_options(settings.clusters[leg.destination], settings)
        producer = AIOKafkaProducer(**target, acks="all", enable_idempotence=False)
        await producer.start()
        try:
            # Position 0: nothing copied; MirrorMaker 2 starts such a partition by its own rule.
            sent = [
                await producer.send(
                    flow.topic, connect_value(position), key=connect_key(flow.alias, tp)
                )
                for tp, position in sorted(mine.items())
                if position > 0
            ]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
    reader = AIOKafkaConsumer(**source, enable_auto_commit=False)
    await reader.start()
    try:
        if plan.take_over is TakeOver.MIRRORMAKER1:
            await GroupOffsets(reader, plan.group).commit(mine)
        tags = dict.fromkeys(mine, HANDED_BACK)
        await GroupOffsets(reader, leg.group_id(plan.leg_group_prefix)).commit(mine, tags)
    finally:
        await reader.stop()


def hand_back(settings: Settings, execute: bool, as_json: bool) -> int:
    """Print (and with ``execute`` write) each taken-over flow's positions where its
    MirrorMaker reads them; 0, or 1 when refused."""
    try:
        rows = asyncio.run(_hand_back(settings, execute))
    except HandBackRefused as exc:
        warn(f"refused: {exc}")
        return 1
    if as_json:
        print(json.dumps([asdict(r) for r in rows]))
        return 0
    table = Table(
        title="flow positions handed back"
        if execute
        else "flow positions to hand back (a dry run: --execute writes them)",
    )
    for column in ("flow", "topic", "partition", "flow position", "MirrorMaker's before"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r.flow,
            r.topic,
            str(r.partition),
            "-" if r.flow_position is None else str(r.flow_position),
            "-" if r.mirror_maker_position is None else str(r.mirror_maker_position),
        )
    print_table(Console(), table)
    if not rows:
        warn("no flow takes over from a MirrorMaker (TAKE_OVER): nothing to hand back")
    return 0


_UNKNOWN_PRINCIPAL = "User:CHANGE-ME"


def _principals(settings: Settings, given: dict[str, str]) -> dict[str, str | None]:
    """Each cluster's principal: given, else ``User:<SASL username>``; ``None`` when unknown
    (mutual TLS: the certificate's subject, which Kafka maps by its own rules)."""
    found: dict[str, str | None] = {}
    for alias, cluster in settings.clusters.items():
        default = f"User:{cluster.sasl_username}" if cluster.sasl_username else None
        found[alias] = given.get(alias, default)
    return found


def kafka_acls_command(grant: AclGrant, principal: str, bootstrap: str) -> str:
    """The ``kafka-acls.sh`` line that adds one grant (the admin's own credentials are given
    with ``--command-config``, as each cluster's operators keep them)."""
    parts = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--add"]
    parts += ["--allow-principal", principal]
    for operation in grant.operations:
        parts += ["--operation", operation]
    if grant.resource is Resource.CLUSTER:
        parts += ["--cluster"]
    else:
        parts += [f"--{grant.resource}", grant.name]
    if grant.pattern is Pattern.PREFIXED:
        parts += ["--resource-pattern-type", "prefixed"]
    return " ".join(parts)


def print_acls(settings: Settings, given: dict[str, str], topics: list[str], as_json: bool) -> int:
    """Print the grants ``settings`` needs, per cluster, for ``topics`` (else each source's
    listing); 0, or 1 when a feed selects no topic or a principal is unknown (said on stderr)."""
    status = 0
    if topics:
        selections = {plan.name: (plan, plan.rules.select(topics)) for plan in feeds_for(settings)}
    else:
        selections = _reachable_selections(settings, asyncio.run(_probe_all(settings)))
    for plan in feeds_for(settings):
        if plan.name not in selections or not selections[plan.name][1].replicated:
            what = "given" if topics else f"of {plan.source} (listed as its principal sees them)"
            warn(
                f"{'flow ' + plan.name if plan.is_flow else 'the _REPLICA mode'} selects no topic "
                f"{what}: the grants below lack its topics; name them with --topic"
            )
            status = 1
    grants = required_acls(settings, {name: sel for name, (_, sel) in selections.items()})
    principals = _principals(settings, given)
    for alias in sorted({grant.cluster for grant in grants}):
        if principals[alias] is None:
            warn(
                f"cluster {alias}: the replicator's principal is not known (no SASL username): "
                f"give --principal {alias}=User:NAME (shown as {_UNKNOWN_PRINCIPAL})"
            )
            status = 1
    if as_json:
        rows = [
            {
                "cluster": g.cluster,
                "principal": principals[g.cluster] or _UNKNOWN_PRINCIPAL,
                "resource": str(g.resource),
                "name": g.name,
                "pattern": str(g.pattern),
                "operations": list(g.operations),
                "why": list(g.why),
            }
            for g in grants
        ]
        print(json.dumps({"grants": rows}, indent=2))
        return status
    for alias in sorted({grant.cluster for grant in grants}):
        principal = principals[alias] or _UNKNOWN_PRINCIPAL
        print(f"# cluster {alias}, principal {principal}")
        bootstrap = settings.clusters[alias].bootstrap_servers
        for grant in (g for g in grants if g.cluster == alias):
            print(f"# {grant.describe()}: {'; '.join(grant.why)}")
            print(kafka_acls_command(grant, principal, bootstrap))
    return status
