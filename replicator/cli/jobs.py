"""The Spark jobs' commands: ``backfill`` (a bounded history copied to other clusters) and
``audit`` (clusters proven to hold the same data). Their work is in :mod:`replicator.spark`,
imported only when the spark extra is installed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from replicator.cli.arguments import (
    EXIT_CONFIG,
    MirrorMakerLine,
    Mm2File,
    configuration,
    known_clusters,
    real_topic_names,
    spark_jobs,
)
from replicator.spark.connectors import Connector

# Both jobs read Kafka through the same connector choice.
KafkaConnector = Annotated[
    Connector,
    typer.Option(
        help="Read Kafka with the replicator-kafka data source this package ships (shipped, "
        "measured the faster) or Spark's own spark-sql-kafka-0-10 (standard: fetched from "
        "Maven Central by Spark the first time). Backfills write through replicator-kafka "
        "either way (it keeps record timestamps).",
    ),
]

# Both jobs split each partition's offset range into Spark tasks the same way.
MaxOffsetsPerTask = Annotated[
    int,
    typer.Option(
        min=0,
        help="Split each partition's range into Spark tasks of this many offsets "
        "(default: about two tasks per core, none under 50,000 offsets).",
    ),
]


def backfill(
    source: str = typer.Option(None, "--from", help="Cluster to copy from (default: the local)."),
    to: Annotated[
        list[str] | None,
        typer.Option(help="Destination cluster (repeatable; default: every other cluster)."),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(help="Real topic X to fill from X_REPLICA (repeatable; default: all)."),
    ] = None,
    since: str = typer.Option("earliest", help="Start: earliest, epoch ms or ISO-8601 time."),
    master: str = typer.Option("local[2]", help="Spark master."),
    connector: KafkaConnector = Connector.SHIPPED,
    hand_over: bool = typer.Option(
        True,
        help="Set each leg's consumer group to the snapshot "
        "end, so the sidecar continues where the backfill stopped.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    real_topics: bool = typer.Option(
        False,
        "--real-topics",
        help="Copy the real topics X themselves (every origin's records, provenance kept) "
        "instead of X_REPLICA.",
    ),
    max_offsets_per_task: MaxOffsetsPerTask = 0,
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Copy a bounded history of X_REPLICA (up to a snapshot of its end) to X on other clusters.

    Exits 0 when copied; 1 when a destination refused; 2 when there is nothing to copy (no topic
    selected, a topic the source does not hold, no record since --since, or a configuration of
    flows only), naming what.
    """
    jobs = spark_jobs("backfill")
    settings = configuration(mm2_file, mirror_maker_line)
    origin = known_clusters(settings, [source or settings.local_cluster], "--from")[0]
    destinations = known_clusters(
        settings, to or [a for a in settings.clusters if a != origin], "--to"
    )
    try:
        since_ms = jobs.parse_since(since)
    except ValueError as exc:
        typer.echo(f"--since: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    raise typer.Exit(
        jobs.backfill(
            settings,
            origin,
            destinations,
            real_topic_names(settings, topic or []),
            since_ms,
            jobs.SparkSetup(master, connector),
            hand_over,
            json_output,
            real_topics,
            max_offsets_per_task,
        )
    )


def audit(
    cluster: Annotated[
        list[str] | None,
        typer.Option(help="Cluster to audit (repeatable; default: every configured cluster)."),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(help="Real topic X to audit with X_REPLICA (repeatable; default: all)."),
    ] = None,
    master: str = typer.Option("local[2]", help="Spark master."),
    connector: KafkaConnector = Connector.SHIPPED,
    json_path: str = typer.Option(
        None, "--json", help="Also write the JSON report here ('-': only JSON, on stdout)."
    ),
    allow_lag: bool = typer.Option(
        False, help="Records not yet replicated at the snapshot's tail do not fail the audit."
    ),
    allow_duplicates: bool = typer.Option(
        False,
        help="Records held more than once (the same provenance twice) do not fail the audit; "
        "still counted and shown.",
    ),
    max_offsets_per_task: MaxOffsetsPerTask = 0,
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Prove that clusters hold the same data: missing, duplicated, reordered, altered, looped.

    Exits 0 when nothing is missing, duplicated, altered, reordered, looped or malformed (lag
    and duplicates only where allowed); 1 otherwise, or when the audit could not finish (a
    cluster unreachable, Spark failing: an error and no verdict); 2 when it would check nothing
    (no topic selected, a topic no cluster holds, topics without a record), naming what, or on
    invalid configuration.
    """
    jobs = spark_jobs("audit")
    from replicator.spark.audit import Allowed  # with the spark extra, which spark_jobs checked

    settings = configuration(mm2_file, mirror_maker_line)
    clusters = known_clusters(settings, cluster or sorted(settings.clusters), "--cluster")
    raise typer.Exit(
        jobs.audit(
            settings,
            clusters,
            real_topic_names(settings, topic or []),
            jobs.SparkSetup(master, connector),
            json_path,
            Allowed(lag=allow_lag, duplicates=allow_duplicates),
            max_offsets_per_task,
        )
    )
