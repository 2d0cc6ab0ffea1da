"""The command line: ``replicator run`` (the service) and ``replicator demo``.

Messages go to stderr, data to stdout. Invalid configuration exits with status 2 and names the
variable at fault.
"""

from __future__ import annotations

import asyncio

import structlog
import typer
import uvloop

from replicator.errors import ConfigError

app = typer.Typer(
    help="Active-active Kafka replication sidecar.",
    no_args_is_help=True,
    add_completion=False,
)

EXIT_CONFIG = 2


@app.command()
def run() -> None:
    """Run the replicator beside the local cluster (configured by REPLICATOR_* variables)."""
    from replicator.app import ReplicatorService
    from replicator.logs import configure_logging
    from replicator.records import use_decoded_records
    from replicator.settings import load_settings

    try:
        settings = load_settings()
    except ConfigError as exc:
        typer.echo(f"configuration error: {exc.variable}: {exc.message}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    configure_logging(settings.log_level, settings.log_format)
    use_decoded_records()
    service = ReplicatorService(settings)
    try:
        uvloop.run(service.run())
    except (KeyboardInterrupt, SystemExit):
        raise
    except asyncio.CancelledError:  # a second signal forced the exit
        raise typer.Exit(130) from None
    except BaseException:  # a crashed task stops the service loudly, with its traceback
        structlog.get_logger("replicator").exception("replicator crashed")
        raise typer.Exit(1) from None


@app.command()
def demo(
    seconds: float = typer.Option(15.0, help="How long to produce traffic."),
    rate: int = typer.Option(2000, help="Records per second produced in each datacenter."),
) -> None:
    """Two local brokers, two replicators, live traffic both ways; prints counts that prove it."""
    from replicator.demo import main as run_demo

    raise typer.Exit(run_demo(seconds, rate))


def main() -> None:
    app(prog_name="replicator")


if __name__ == "__main__":
    main()
