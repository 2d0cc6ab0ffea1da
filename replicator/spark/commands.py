"""``replicator backfill`` and ``replicator audit``: settings in, report out, exit status.

Clusters, credentials, the replica suffix and the topic rules come from the same ``REPLICATOR_*``
variables as the sidecar. Reports go to stdout (a table, or JSON with ``--json``), progress and
messages to stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from functools import partial
from typing import Any

import structlog
from aiokafka import TopicPartition
from pyspark.sql import SparkSession
from rich.console import Console
from rich.table import Table

from replicator.config.settings import Settings
from replicator.config.topology import Leg, TopicRules, feeds_for
from replicator.errors import ReplicatorError, TopicMissing
from replicator.kafka.clients import ClusterClient, client_options
from replicator.kafka.retry import retrying
from replicator.spark.audit import COUNTS, Allowed, AuditReport, Route, run_audit, run_flow_audit
from replicator.spark.backfill import BackfillResult, hand_over, run_backfill
from replicator.spark.frames import ClusterInput
from replicator.spark.kafka_source import spark_options
from replicator.spark.progress import spark_progress
from replicator.spark.session import SparkSetup, kafka_format, spark_session
from replicator.telemetry.logs import configure_logging, print_table
from replicator.topics import snapshot
from replicator.topics.provisioning import ClusterAdmin, TopicProvisioner

err = Console(stderr=True)
EXIT_CONFIG = 2  # the job was pointed at nothing: named, never reported as success
_log = structlog.get_logger("replicator.backfill")
_PREPARE_S = 60.0  # how long the backfill waits for its destination topics
_SHORT = {
    "expected": "expected",
    "delivered": "delivered",
    "missing": "missing",
    "lag": "lag",
    "duplicates": "dups",
    "out_of_order": "reordered",
    "mismatched": "altered",
    "untagged": "untagged",
    "loops": "loops",
    "malformed": "malformed",
}


def parse_since(text: str | None) -> int | None:
    """``None``/``earliest``, epoch milliseconds, or an ISO-8601 time (UTC if no zone)."""
    if text is None or text == "earliest":
        return None
    if text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.now().astimezone().tzinfo).astimezone()
    return int(moment.timestamp() * 1000)


def _client(settings: Settings, alias: str) -> dict[str, Any]:
    """Options for this process's own clients of a cluster (the executors use Spark's)."""
    return client_options(settings.clusters[alias], settings)


def real_topics(settings: Settings, cluster: str, chosen: list[str]) -> list[str]:
    """The real topics named, else those of every replica topic the rules replicate."""
    if chosen:
        return chosen
    rules = TopicRules.from_settings(settings)
    found = asyncio.run(snapshot.replica_topics(_client(settings, cluster), rules))
    return sorted({t for r in found if (t := rules.target(r)) is not None})


def nothing_to_check(
    chosen: list[str],
    snapshots: dict[str, dict[TopicPartition, tuple[int, int]]],
    suffix: str,
    named: bool,
) -> list[str]:
    """Why a bulk job over the real topics ``chosen`` (``named``: given with ``--topic``) and
    the clusters' ``snapshots`` would check nothing: one line per topic that no cluster holds,
    or whose topics hold no record anywhere; one line if nothing was chosen. Empty: go on.

    A job that checked nothing never reports success (it exits 2 with these lines)."""
    if not chosen:
        return [
            "the topic selection matches nothing: no replica topic is replicated by the topic "
            "rules (REPLICATOR_TOPICS_INCLUDE / _EXCLUDE); name one with --topic"
        ]
    problems = []
    where = ", ".join(sorted(snapshots))
    for topic in chosen:
        names = {topic, topic + suffix}
        ranges = [r for taken in snapshots.values() for tp, r in taken.items() if tp.topic in names]
        if not ranges:
            how = "given with --topic" if named else "selected"
            problems.append(
                f"topic {topic} ({how}): neither {topic} nor {topic}{suffix} exists in {where}"
            )
        elif all(end <= start for start, end in ranges):
            problems.append(
                f"topic {topic}: no record to check: {topic} and {topic}{suffix} are empty in "
                f"{where}"
            )
    return problems


def flow_routes(
    settings: Settings, clusters: list[str], topics: list[str]
) -> tuple[list[Route], list[str]]:
    """What the flows between ``clusters`` replicate (each source topic their rules select, of
    ``topics`` if given, and its target topic; not the heartbeat topic), and why any named
    topic is not replicated."""
    routes: list[Route] = []
    listed: dict[str, set[str]] = {}  # each source cluster's topics, listed once
    for plan in feeds_for(settings):
        leg = plan.legs[0]
        if not plan.is_flow or leg.source not in clusters or leg.destination not in clusters:
            continue
        if plan.source not in listed:
            listed[plan.source] = asyncio.run(
                snapshot.cluster_topics(_client(settings, plan.source))
            )
        for topic in plan.rules.select(listed[plan.source]).replicated:
            if topic == settings.heartbeat_topic:
                continue  # the replicator's own, always in motion: its age is in /status
            target = plan.rules.target(topic)
            if target is not None and (not topics or topic in topics):
                routes.append(Route(plan.source, topic, leg.destination, target, plan.home_marks))
    problems = [
        f"topic {t} (given with --topic): no flow between {', '.join(clusters)} replicates it "
        "(not in its source, or not selected by the flow's topic rules)"
        for t in topics
        if not any(r.topic == t for r in routes)
    ]
    if not routes and not topics:
        problems.append(
            f"the flows between {', '.join(clusters)} select no topic: nothing to compare"
        )
    return routes, problems


def nothing_in_routes(
    routes: list[Route], snapshots: dict[str, dict[TopicPartition, tuple[int, int]]]
) -> list[str]:
    """The routes whose source and target topics hold no record at all: nothing to check."""
    problems = []
    for r in routes:
        ranges = [
            rng
            for alias, topic in ((r.source, r.topic), (r.target, r.target_topic))
            for tp, rng in snapshots.get(alias, {}).items()
            if tp.topic == topic
        ]
        if all(end <= start for start, end in ranges):
            problems.append(
                f"flow {r.source} -> {r.target}, topic {r.topic}: no record to check: "
                f"{r.topic} in {r.source} and {r.target_topic} in {r.target} are empty"
            )
    return problems


def _refused(job: str, problems: list[str]) -> bool:
    """Say each reason a job would check nothing (``True``: it must exit 2, never pass)."""
    for problem in problems:
        err.print(f"{job}: {problem}")
    return bool(problems)


def _flows_only(settings: Settings, job: str) -> bool:
    """Refuse (``True``, said on stderr) a backfill on a configuration without the replica
    mode: it copies ``<topic>_REPLICA`` into ``<topic>``, which flows do not have (a flow's
    history is copied by the flow itself: ``START_FROM=earliest``)."""
    if settings.replica_mode:
        return False
    err.print(
        f"{job}: REPLICATOR_REPLICA_MODE=false: this configuration has only flows, and {job} "
        "copies <topic>_REPLICA into <topic>; a flow copies its source's history itself "
        "(its START_FROM=earliest, or its committed offsets moved back): nothing to do here"
    )
    return True


def backfill(
    settings: Settings,
    source: str,
    destinations: list[str],
    topics: list[str],
    since_ms: int | None,
    setup: SparkSetup,
    with_hand_over: bool,
    as_json: bool,
    copy_real_topics: bool = False,
    max_offsets_per_task: int = 0,
) -> int:
    configure_logging(settings.log_level, settings.log_format)  # to stderr: stdout is the result
    if _flows_only(settings, "backfill"):
        return EXIT_CONFIG
    suffix = settings.replica_suffix
    chosen = real_topics(settings, source, topics)
    options = {alias: spark_options(c) for alias, c in settings.clusters.items()}
    read = chosen if copy_real_topics else [t + suffix for t in chosen]
    origin = ClusterInput(
        source,
        options[source],
        snapshot.take(_client(settings, source), read, since_ms),
        max_offsets_per_task,
    )
    # Only what the backfill reads counts: a topic with none of it there has nothing to copy.
    problems = nothing_to_check(
        chosen,
        {source: {tp: r for tp, r in origin.snapshot.items() if tp.topic in read}},
        "" if copy_real_topics else suffix,
        named=bool(topics),
    )
    if _refused("backfill", problems):
        return EXIT_CONFIG
    total = sum(end - start for start, end in origin.snapshot.values())
    err.print(f"backfill {source} -> {', '.join(destinations)}: {read}, {total} offsets")
    present = {tp.topic for tp in origin.snapshot}
    pairs = [(r, c) for r, c in zip(read, chosen, strict=True) if r in present]
    try:
        asyncio.run(_prepare_topics(settings, source, destinations, pairs))
    except ReplicatorError as exc:
        err.print(f"backfill: {exc}")
        return 1
    # The destinations' snapshots, taken once their topics exist.
    targets = [
        ClusterInput(d, options[d], snapshot.take(_client(settings, d), chosen))
        for d in destinations
    ]
    try:
        spark = spark_session(setup, "replicator-backfill")
    except ReplicatorError as exc:
        err.print(f"backfill: {exc}")
        return 1
    try:
        fmt = kafka_format(spark, setup.connector)
        with spark_progress(spark, f"backfill {source}"):
            result = run_backfill(spark, fmt, origin, targets, suffix, copy_real_topics)
    except ReplicatorError as exc:
        err.print(f"backfill: {exc}")
        return 1
    finally:
        spark.stop()
    if result.loops or result.malformed:
        err.print(
            f"not copied, as the live replicator would not: {result.loops} loops (provenance "
            f"naming their own replica topic), {result.malformed} with malformed provenance"
        )
    if copy_real_topics and with_hand_over:
        err.print("hand-over applies to replica topics (one leg each); skipped for real topics")
    elif with_hand_over:
        for destination in destinations:
            group = Leg(source, destination).group_id(settings.group_prefix)
            result.handed_over[group] = hand_over(_client(settings, source), origin, group)
    _print_backfill(result, as_json)
    return 0


async def _prepare_topics(
    settings: Settings, source: str, destinations: list[str], pairs: list[tuple[str, str]]
) -> None:
    """Create or check each destination's real topic for each (read, real) topic pair, as the
    sidecar does (the source's partition count and configs; too few partitions grown, or refused
    with the reason), before Spark writes into them. Waits out a topic that is created but not yet
    in the metadata for up to a minute; anything else raises."""
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(_PREPARE_S, stop.set)
    failures: list[ReplicatorError] = []
    origin = ClusterClient(source, settings.clusters[source], settings.client_timings())
    try:
        for alias in destinations:
            destination = ClusterClient(alias, settings.clusters[alias], settings.client_timings())
            topics = TopicProvisioner(
                ClusterAdmin(origin),
                ClusterAdmin(destination),
                settings.destination_replication_factor,
            )
            try:
                # Asked together, the topics are prepared in one round of requests.
                ready = await asyncio.gather(
                    *(
                        retrying(
                            partial(topics.ensure, read, real),
                            stop=stop,
                            what=f"prepare {real} on {alias}",
                            log=_log,
                            on_error=failures.append,
                            persistent=False,
                        )
                        for read, real in pairs
                    )
                )
                for (_, real), topic in zip(pairs, ready, strict=True):
                    if topic is None:
                        last = f" (last: {failures[-1]})" if failures else ""
                        raise TopicMissing(
                            f"{real} on {alias}: not ready after {_PREPARE_S:.0f} s{last}"
                        )
            finally:
                await destination.close()
    finally:
        await origin.close()


def _print_backfill(result: BackfillResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(result)))
        return
    title = f"backfill from {result.source} ({result.records} records"
    if result.derived:
        title += f", {result.derived} of them derived (copied with replicator-upstream)"
    if result.loops:
        title += f"; {result.loops} loops not copied"
    if result.malformed:
        title += f"; {result.malformed} with malformed provenance not copied"
    if result.untagged:
        title += f"; {result.untagged} without provenance not copied"
    print_table(Console(), backfill_table(title + ")", result))
    rate = sum(result.written.values()) / result.seconds if result.seconds else 0.0
    print(
        f"{sum(result.written.values())} records written in {result.seconds:.1f} s ({rate:.0f}/s)"
    )


def backfill_table(title: str, result: BackfillResult) -> Table:
    table = Table(title=title)
    for column in ("destination", "written", "already there", "leg group set to snapshot end"):
        table.add_column(column)
    for destination, written in result.written.items():
        moved = next(
            (v for k, v in result.handed_over.items() if k.endswith(f".{destination}")), {}
        )
        table.add_row(
            destination,
            str(written),
            str(result.already_there[destination]),
            ", ".join(f"{k}={v}" for k, v in moved.items()) or "-",
        )
    return table


def audit(
    settings: Settings,
    clusters: list[str],
    topics: list[str],
    setup: SparkSetup,
    json_path: str | None,
    allowed: Allowed,
    max_offsets_per_task: int = 0,
) -> int:
    if not settings.replica_mode:
        return _audit_flows(
            settings, clusters, topics, setup, json_path, allowed, max_offsets_per_task
        )
    if settings.flows:
        err.print(
            "audit: the _REPLICA mode's topics only; the flows of this configuration are "
            "audited from a configuration of flows only (REPLICATOR_REPLICA_MODE=false, or "
            "--mm2 FILE)"
        )
    suffix = settings.replica_suffix
    chosen = real_topics(settings, settings.local_cluster, topics)
    wanted = [t + suffix for t in chosen] + chosen
    began = time.monotonic()
    inputs = []
    for alias in clusters:
        options = spark_options(settings.clusters[alias])
        taken = snapshot.take(_client(settings, alias), wanted)
        inputs.append(ClusterInput(alias, options, taken, max_offsets_per_task))
    problems = nothing_to_check(
        chosen, {c.alias: c.snapshot for c in inputs}, suffix, named=bool(topics)
    )
    if _refused("audit", problems):
        return EXIT_CONFIG
    err.print(f"audit of {chosen} on {', '.join(clusters)}")
    return _audit_report(
        began,
        setup,
        lambda spark: run_audit(
            spark, kafka_format(spark, setup.connector), inputs, chosen, suffix
        ),
        json_path,
        allowed,
    )


def _audit_flows(
    settings: Settings,
    clusters: list[str],
    topics: list[str],
    setup: SparkSetup,
    json_path: str | None,
    allowed: Allowed,
    max_offsets_per_task: int,
) -> int:
    """The audit of a configuration of flows: each flow's source topics against their copies
    in its target, by provenance."""
    began = time.monotonic()
    routes, problems = flow_routes(settings, clusters, topics)
    plays: dict[str, set[str]] = {alias: set() for alias in clusters}
    for r in routes:
        plays[r.source].add(r.topic)
        plays[r.target].add(r.target_topic)
    inputs = [
        ClusterInput(
            alias,
            spark_options(settings.clusters[alias]),
            snapshot.take(_client(settings, alias), sorted(plays[alias])) if plays[alias] else {},
            max_offsets_per_task,
        )
        for alias in clusters
    ]
    problems += nothing_in_routes(routes, {c.alias: c.snapshot for c in inputs})
    if _refused("audit", problems):
        return EXIT_CONFIG
    shown = ", ".join(f"{r.source}:{r.topic} -> {r.target}:{r.target_topic}" for r in routes)
    err.print(f"audit of the flows' topics {shown}")
    return _audit_report(
        began,
        setup,
        lambda spark: run_flow_audit(spark, kafka_format(spark, setup.connector), inputs, routes),
        json_path,
        allowed,
    )


def _audit_report(
    began: float,
    setup: SparkSetup,
    run: Callable[[SparkSession], AuditReport],
    json_path: str | None,
    allowed: Allowed,
) -> int:
    """Run an audit in a Spark session of ``setup``, print its report; the exit status."""
    snapshot_s = time.monotonic() - began
    try:
        spark = spark_session(setup, "replicator-audit")
    except ReplicatorError as exc:
        err.print(f"audit: {exc}")
        return 1
    try:
        start_s = time.monotonic() - began - snapshot_s
        with spark_progress(spark, "audit"):
            report = run(spark)
    except ReplicatorError as exc:
        err.print(f"audit: {exc}")
        return 1
    finally:
        spark.stop()
    report.timings = {
        "snapshot": round(snapshot_s, 2),
        "spark start": round(start_s, 2),
        **report.timings,
    }
    document = report.as_json(allowed)
    if json_path == "-":
        print(json.dumps(document))
    else:
        _print_audit(report, allowed)
        if json_path:
            with open(json_path, "w") as out:
                json.dump(document, out, indent=2)
    return 0 if document["ok"] else 1


def audit_table(report: AuditReport) -> Table:
    table = Table(title="audit (per cluster, topic, partition and origin cluster)")
    for column in ("cluster", "topic", "part", "origin", *_SHORT.values()):
        table.add_column(column, justify="right")
    for p in report.partitions:
        cells = [str(getattr(p, c)) for c in COUNTS]
        table.add_row(p.cluster, p.topic, str(p.partition), p.origin or "-", *cells)
    totals = report.totals()
    table.add_row("total", "", "", "", *(str(totals[c]) for c in COUNTS), style="bold")
    return table


def _print_audit(report: AuditReport, allowed: Allowed) -> None:
    print_table(Console(), audit_table(report))
    totals = report.totals()
    verdict = "OK" if report.ok(allowed) else "PROBLEMS FOUND"
    counts = ", ".join(f"{totals[c]} {c.replace('_', ' ')}" for c in COUNTS)
    allowing = "".join(f" ({name} allowed)" for name in allowed.named())
    print(f"{verdict}: {counts}{allowing}")
    sys.stdout.flush()
