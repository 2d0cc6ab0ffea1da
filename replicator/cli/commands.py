"""The command line: ``replicator run`` (the service), ``mirror-maker`` and ``mm2`` (the service,
configured by MirrorMaker's command line or properties file), ``demo``, ``sandbox`` and the operator
commands; the Spark jobs' commands are registered from :mod:`replicator.cli.jobs`.

Messages go to stderr, data to stdout. Invalid configuration exits with status 2 and names the
variable at fault.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import structlog
import typer
import uvloop
from typer.core import TyperCommand

from replicator.cli import helptext, jobs
from replicator.cli.arguments import (
    EXIT_CONFIG,
    EXIT_FENCED,
    MirrorMakerLine,
    Mm2File,
    configuration,
    known_clusters,
    needs_extra,
    real_topic_names,
)
from replicator.config.settings import Settings
from replicator.errors import ConfigError, InstanceFenced

if TYPE_CHECKING:
    from replicator.mirrormaker import Translation

# Plain click help (no rich panels): paragraphs are re-flowed to the terminal, 80 columns at
# most, and option names are never cut short as rich's option table cut them.
app = typer.Typer(
    help="Active-active Kafka replication sidecar.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    cls=helptext.Group,
)


def _version(value: bool) -> None:
    if value:
        from replicator import __version__

        typer.echo(f"replicator {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Active-active Kafka replication sidecar."""


@app.command()
def run() -> None:
    """Run the replicator beside the local cluster (configured by REPLICATOR_* variables)."""
    _serve(configuration())


def _choose_data_path(settings: Settings) -> None:
    """The data path of this process (``REPLICATOR_DATA_PATH``), its fetch path installed;
    ``native`` without the native extension exits 2."""
    from replicator.kafka.decoding import use_decoded_records
    from replicator.model import native

    try:
        path = native.choose(settings.data_path)
    except ConfigError as exc:
        typer.echo(f"configuration error: {exc.variable}: {exc.message}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    if not use_decoded_records(record_sets=path == native.NATIVE):
        native.choose(native.PYTHON)  # another aiokafka version: its own records, in Python


def _serve(settings: Settings, notes: Sequence[str] = ()) -> None:
    """Run the service with ``settings`` until it stops; ``notes`` are logged first, once each."""
    from replicator.service.app import ReplicatorService
    from replicator.telemetry.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    log = structlog.get_logger("replicator")
    if settings.service_links:
        log.debug(
            "Kubernetes service link variables ignored (a Service named replicator)",
            variables=list(settings.service_links),
        )
    for note in notes:
        log.info("mirrormaker configuration translated", note=note)
    for alias, cluster in sorted(settings.clusters.items()):
        if cluster.sends_password_in_clear:
            log.warning(
                "SASL PLAIN without TLS: the password crosses the network unencrypted",
                cluster=alias,
                accepted_by=f"REPLICATOR_CLUSTERS__{alias.upper()}__ALLOW_INSECURE_PLAIN",
            )
    _choose_data_path(settings)
    service = ReplicatorService(settings, notes=tuple(notes))
    try:
        uvloop.run(service.run())
    except (KeyboardInterrupt, SystemExit):
        raise
    except asyncio.CancelledError:  # a second signal forced the exit
        raise typer.Exit(130) from None
    except ConfigError as exc:  # found at start-up, e.g. an HTTP port that cannot be bound
        typer.echo(f"configuration error: {exc.variable}: {exc.message}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    except BaseException as exc:  # a crashed task stops the service loudly, with its traceback
        fenced = _fenced(exc)
        if fenced is not None:  # not a crash: another process took this replica's identity
            structlog.get_logger("replicator").error("replica fenced", error=str(fenced))
            raise typer.Exit(EXIT_FENCED) from None
        structlog.get_logger("replicator").exception("replicator crashed")
        raise typer.Exit(1) from None


def _fenced(exc: BaseException) -> InstanceFenced | None:
    """The :class:`InstanceFenced` that stopped the service, if that is what did."""
    if isinstance(exc, InstanceFenced):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _fenced(inner)
            if found is not None:
                return found
    return None


_PRINT_ENV_HELP = (
    "Print the translated REPLICATOR_* variables as an env file for docker run --env-file or a "
    "Kubernetes envFrom (NAME=value lines taken literally; a secret as a bare NAME, which docker "
    "takes from its environment; the notes as # comments), then exit 0."
)
_SHELL_HELP = (
    "With --print-env: POSIX shell lines instead (set -a; . FILE): values single-quoted, each "
    "secret a check that the environment holds it."
)


@app.command(
    "mirror-maker",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    options_metavar="[--print-env [--shell]] MIRRORMAKER-OPTIONS...",
)
def mirror_maker(
    ctx: typer.Context,
    print_env: bool = typer.Option(False, "--print-env", help=_PRINT_ENV_HELP),
    shell: bool = typer.Option(False, "--shell", help=_SHELL_HELP),
) -> None:
    """Run a MirrorMaker 1 or Go mirror maker command line unchanged.

    Give MirrorMaker's own options: --consumer.config FILE (repeatable: one flow per source
    cluster), --producer.config FILE, one of --whitelist/--include/--blacklist REGEX, and
    optionally --prefix, --queue.size, --offset.commit.interval.ms, --preserve.partitions=false
    (records placed by key, as MirrorMaker 1 does; by default they keep their partition
    number), --num.streams, --num.producers, --preserve.order, --abort.on.send.failure,
    --new.consumer. A cluster's alias is its file's replicator.cluster.alias, else its first
    bootstrap server (set the property: the alias is in provenance and group names). Options and
    properties done another way are accepted and noted; ZooKeeper settings, message handlers,
    rebalance listeners, Kerberos/OAuth and JKS stores are refused (exit 2, naming them), and so
    is SASL PLAIN over SASL_PLAINTEXT unless REPLICATOR_CLUSTERS__<ALIAS>__ALLOW_INSECURE_PLAIN=true
    is in the environment. REPLICATOR_HTTP_PORT, REPLICATOR_LOG_LEVEL and other top-level
    variables of the environment still apply.
    """
    from replicator.mirrormaker import mirror_maker_translation

    if any(arg in ("-h", "-help") for arg in ctx.args):
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    _run_translated(lambda: mirror_maker_translation(list(ctx.args)), print_env, shell)


@app.command("mm2")
def mm2(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE", help="A MirrorMaker 2 connect-mirror-maker.properties file."
        ),
    ],
    print_env: bool = typer.Option(False, "--print-env", help=_PRINT_ENV_HELP),
    shell: bool = typer.Option(False, "--shell", help=_SHELL_HELP),
) -> None:
    """Run the flows of a MirrorMaker 2 connect-mirror-maker.properties file unchanged.

    Every A->B.enabled = true becomes one flow (A's topics named A.<topic> on B under the default
    replication policy, the same names under IdentityReplicationPolicy), with its topics,
    topics.exclude, replication.factor and heartbeats (emit.heartbeats.enabled and
    emit.heartbeats.interval.seconds), checkpoints (emit.checkpoints.*, groups) and group offset
    sync (sync.group.offsets.*). What this version does not run (ACL sync) is accepted with a
    note saying so; custom policies, Kerberos/OAuth and JKS
    stores are refused (exit 2, naming the property), and so is SASL PLAIN over SASL_PLAINTEXT
    unless REPLICATOR_CLUSTERS__<ALIAS>__ALLOW_INSECURE_PLAIN=true is in the environment.
    REPLICATOR_HTTP_PORT, REPLICATOR_LOG_LEVEL and other top-level variables of the environment
    still apply.
    """
    from replicator.mirrormaker import mm2_translation

    _run_translated(lambda: mm2_translation(path), print_env, shell)


def _run_translated(
    translate: Callable[[], Translation], print_env: bool, shell: bool = False
) -> None:
    import os

    if shell and not print_env:
        typer.echo("--shell: only with --print-env", err=True)
        raise typer.Exit(EXIT_CONFIG)
    try:
        translation = translate().with_environment(os.environ)
        settings = translation.settings()
        lines = []
        if print_env:
            lines = translation.shell_file() if shell else translation.env_file()
    except ConfigError as exc:
        typer.echo(f"configuration error: {exc.variable}: {exc.message}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    if print_env:
        for line in lines:
            typer.echo(line)
        raise typer.Exit(0)
    _serve(settings, translation.notes)


@app.command()
def demo(
    seconds: float = typer.Option(15.0, help="How long to produce traffic."),
    rate: int = typer.Option(2000, help="Records per second produced in each datacenter."),
    spark: bool = typer.Option(
        False, help="Instead: the Spark jobs (backfill a history, audit it, catch tampering)."
    ),
    records: int = typer.Option(50_000, help="With --spark: records of history to backfill."),
) -> None:
    """Two local brokers, two replicators, live traffic both ways; prints counts that prove it."""
    if spark:
        needs_extra("demo --spark", "spark", "embedded")
        from replicator.spark.jobs_demo import run as run_jobs_demo

        raise typer.Exit(run_jobs_demo(records, "local[2]"))
    needs_extra("demo", "embedded")
    from replicator.devtools.demo import main as run_demo

    raise typer.Exit(run_demo(seconds, rate))


@app.command()
def sandbox(
    clusters: str = typer.Option(
        "dc1,dc2", help="Comma-separated cluster aliases: one local broker for each."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print the brokers and each datacenter's environment as JSON."
    ),
    broker: str = typer.Option(
        "embedded",
        help="embedded (the trial broker, no JVM) or kafka (Apache Kafka itself, from Maven "
        "Central's jars: needs Java 17+ and Maven; fetched once into ~/.cache/replicator).",
    ),
) -> None:
    """Local brokers to try the replicator by hand, and the exports to run one per datacenter.

    Runs until Ctrl-C or SIGTERM, then stops the brokers and exits 0. The embedded brokers keep
    data in memory only: everything is lost when the sandbox stops. For trials, not production.
    """
    if broker not in ("embedded", "kafka"):
        typer.echo(f"--broker: {broker!r} is not embedded or kafka", err=True)
        raise typer.Exit(EXIT_CONFIG)
    if broker == "embedded":
        needs_extra("sandbox", "embedded")
    from replicator.devtools.sandbox import parse_aliases, serve

    try:
        aliases = parse_aliases(clusters)
    except ValueError as exc:
        typer.echo(f"--clusters: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    raise typer.Exit(serve(aliases, json_output, broker))


@app.command("check-config")
def check_config(
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Validate the environment, connect to every cluster, print the effective configuration.

    Secrets are masked. Also checks that the HTTP server could listen on REPLICATOR_HTTP_HOST and
    REPLICATOR_HTTP_PORT (bound and released at once). Exits 0 when the configuration is valid,
    the HTTP address is free and every cluster answers, 2 otherwise (an invalid variable is
    named).
    """
    from replicator.cli.operations import check_config as check

    raise typer.Exit(check(configuration(mm2_file, mirror_maker_line), json_output))


@app.command()
def lag(
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Per leg, topic and partition: committed offset, source log end, and lag.

    Exits 0; 1 when the topic rules select no topic of the local cluster (a warning on stderr
    names the rules and the replica topics they rejected, with why); 2 on invalid configuration.
    """
    from replicator.cli.operations import lag as show_lag

    raise typer.Exit(show_lag(configuration(mm2_file, mirror_maker_line), json_output))


@app.command()
def acls(
    principal: Annotated[
        list[str] | None,
        typer.Option(
            help="ALIAS=User:NAME: the replicator's principal on that cluster (repeatable; "
            "default: User:<its SASL username>; needed for a cluster reached by mutual TLS).",
        ),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            help="A source topic as its cluster names it (orders_REPLICA; a flow's orders), "
            "repeatable: grants for these instead of the topics listed from each source (a "
            "principal without ACLs yet sees none).",
        ),
    ] = None,
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Print the Kafka ACLs this configuration needs, as kafka-acls commands per cluster.

    Exactly the grants for the topics each feed's rules select (those given with --topic, else
    those listed from each source cluster now), the feeds' and legs' groups, the destination
    marks, and the replicator's own topics where the configuration uses them, each with why.
    Exits 0; 1 when a feed selects no topic (a source that could not be listed, or whose
    topics the principal cannot see yet: give --topic) or a principal is unknown (shown as
    User:CHANGE-ME); 2 on invalid configuration or a malformed --principal.
    """
    from replicator.cli.operations import print_acls

    settings = configuration(mm2_file, mirror_maker_line)
    given: dict[str, str] = {}
    for item in principal or []:
        alias, _, name = item.partition("=")
        if alias.strip().lower() not in settings.clusters or not name.startswith("User:"):
            typer.echo(f"--principal {item!r}: expected ALIAS=User:NAME, ALIAS one of "
                       f"{', '.join(sorted(settings.clusters))}", err=True)  # fmt: skip
            raise typer.Exit(EXIT_CONFIG)
        given[alias.strip().lower()] = name
    raise typer.Exit(print_acls(settings, given, topic or [], json_output))


@app.command("hand-back")
def hand_back(
    execute: bool = typer.Option(
        False, "--execute", help="Write the positions (default: a dry run)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Give each flow's positions back to the MirrorMaker it took over from (TAKE_OVER).

    Per source partition, the flow's committed offset is written where the MirrorMaker resumes:
    MirrorMaker 1's group offsets on the source, MirrorMaker 2's Connect offsets topic on the
    target. Run it after stopping every replicator of the flows, before starting the
    MirrorMaker again: it then copies nothing twice and skips nothing. Should the flows start
    again later, they take over from where the MirrorMaker got to. Exits 0; 1 when refused (a
    flow's group still has members, MirrorMaker 2's offsets topic is missing); 2 on invalid
    configuration.
    """
    from replicator.cli.operations import hand_back as give_back

    raise typer.Exit(give_back(configuration(mm2_file, mirror_maker_line), execute, json_output))


@app.command()
def failover(
    group: str = typer.Option(..., "--group", help="The consumer group to move."),
    source: str = typer.Option(..., "--from", help="Cluster the group consumed in."),
    to: str = typer.Option(..., "--to", help="Cluster the group continues in."),
    topic: Annotated[
        list[str] | None,
        typer.Option(
            help="Topic of the --from cluster (repeatable; default: every replicated topic the "
            "group has a position in)."
        ),
    ] = None,
    execute: bool = typer.Option(
        False, "--execute", help="Commit the translated positions (default: a dry run)."
    ),
    from_checkpoint: bool = typer.Option(
        False,
        "--from-checkpoint",
        help="Use the checkpoints kept in --to even if --from answers (automatic when not).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Move a consumer group to another cluster with exact positions (from provenance).

    Per partition: the group's position in --from, the translated position in --to (nothing the
    group had not consumed is skipped) and how many records it will read again. When --from does
    not answer, the latest checkpoints kept in --to are used and their age is said. Exits 0; 1 when
    refused (the group has active members in --to, or --from is gone and no checkpoint exists);
    2 on invalid configuration.
    """
    from replicator.failover.plan import FailoverRequest
    from replicator.failover.plan import failover as move

    settings = configuration(mm2_file, mirror_maker_line)
    known_clusters(settings, [source], "--from")
    known_clusters(settings, [to], "--to")
    if source == to:
        typer.echo(
            "--to: the group is already in that cluster (--from and --to are the same)", err=True
        )
        raise typer.Exit(EXIT_CONFIG)
    request = FailoverRequest(group, source, to, topic, from_checkpoint, execute)
    raise typer.Exit(move(settings, request, json_output))


@app.command()
def rpo(
    origin: str = typer.Option(
        ..., "--origin", help="The cluster whose _REPLICA topics are measured (the lost one)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """What the local cluster holds of another cluster's _REPLICA topics: the recovery point.

    Per partition of --origin's replica topics: the newest record of that origin the local
    cluster holds (its offset, when it was written, its age) and, when --origin answers, the
    records it holds that are not here yet (committed data, as the legs copy it) and those its
    retention removed before they arrived (lost). Run it beside a surviving datacenter when
    another is lost, or to see that a new one is complete. Exits 0 when --origin answered and
    the local cluster holds every record it took; 1 otherwise (records not here or lost,
    --origin unanswered: the counts unknown, the ages shown; or the local cluster unread); 2 on
    invalid configuration.
    """
    from replicator.failover.recovery_point import rpo as measure

    settings = configuration(None, None)
    known_clusters(settings, [origin], "--origin")
    if origin == settings.local_cluster:
        typer.echo("--origin: that is the local cluster; run this beside another one", err=True)
        raise typer.Exit(EXIT_CONFIG)
    if not settings.replica_mode:
        typer.echo(
            "REPLICATOR_REPLICA_MODE: rpo measures the _REPLICA mode, which is off here "
            "(a flow's delay is its heartbeat age: replicator_heartbeat_age_seconds)",
            err=True,
        )
        raise typer.Exit(EXIT_CONFIG)
    raise typer.Exit(measure(settings, origin, json_output))


topics_app = typer.Typer(
    help="Manage the X_REPLICA and X topic pairs.",
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=helptext.Group,
)
app.add_typer(topics_app, name="topics")


@topics_app.command("ensure")
def topics_ensure(
    topic: Annotated[list[str], typer.Option(help="Real topic X (repeatable).")],
    partitions: int = typer.Option(..., min=1, help="Partitions of X_REPLICA and X."),
    config: Annotated[
        list[str] | None, typer.Option(help="Topic config key=value (repeatable).")
    ] = None,
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Create X_REPLICA and X with the same partitions and configs on every cluster.

    Give the real topic name (orders, not orders_REPLICA). A pair the topic rules would not
    replicate is still created, with a warning naming the rule. Exits 0 when every pair exists as
    asked, 1 when one has another partition count or could not be created (reported per cluster),
    2 on invalid configuration or an invalid topic name (before any cluster is touched).
    """
    from replicator.cli.operations import ensure_topics

    settings = configuration(mm2_file, mirror_maker_line)
    real_topic_names(settings, topic)
    pairs = dict(item.split("=", 1) for item in config or [] if "=" in item)
    if len(pairs) != len(config or []):
        typer.echo("--config: expected key=value", err=True)
        raise typer.Exit(EXIT_CONFIG)
    raise typer.Exit(ensure_topics(settings, topic, partitions, pairs, json_output))


def _short_helps(*typers: typer.Typer) -> None:
    """Each command's line in its group's list: the first paragraph of its help, whole (click
    cuts one it derives itself at 45 characters with '...'); and its help wrapped at spaces
    only (:mod:`replicator.cli.helptext`)."""
    for group in typers:
        for info in group.registered_commands:
            text = info.help or (info.callback.__doc__ if info.callback else None) or ""
            first = inspect.cleandoc(text).split("\n\n")[0]
            info.short_help = info.short_help or " ".join(first.split())
            if info.cls is None or info.cls is TyperCommand:  # typer's default
                info.cls = helptext.Command


app.command()(jobs.backfill)
app.command()(jobs.audit)
_short_helps(app, topics_app)


def main() -> None:
    app(prog_name="replicator")


if __name__ == "__main__":
    main()
