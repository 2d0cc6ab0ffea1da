"""Every command of the CLI documents itself: ``--help`` works everywhere and says something."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from replicator.cli import app

EXPECTED = {
    "run",
    "mirror-maker",
    "mm2",
    "demo",
    "sandbox",
    "check-config",
    "lag",
    "topics ensure",
    "backfill",
    "audit",
    "failover",
}
# Clusters nobody listens on: a command that reached one would fail differently, and slowly.
UNREACHABLE = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1:10",
}


def commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(``"topics ensure"``, command) for every leaf command of a (typer) click group."""
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            yield from commands(command, path + " ")
        else:
            yield path, command


def test_every_command_answers_help_with_its_purpose_and_options() -> None:
    found = dict(commands(typer.main.get_command(app)))
    assert set(found) == EXPECTED
    runner = CliRunner()
    for path, command in found.items():
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert command.help, f"{path} has no help text"
        undocumented = [
            p.name for p in command.params if p.param_type_name == "option" and not p.help
        ]
        assert not undocumented, f"{path}: options without help {undocumented}"


def test_commands_that_print_data_offer_json() -> None:
    found = dict(commands(typer.main.get_command(app)))
    for path in ("check-config", "lag", "topics ensure", "backfill", "audit", "failover"):
        options = {o for p in found[path].params for o in getattr(p, "opts", [])}
        assert "--json" in options, path


@pytest.mark.parametrize("clusters", ["dc1,DC2", "dc1,dc_2", "dc1,dc1", " , "])
def test_sandbox_refuses_invalid_aliases_with_2_naming_the_option(clusters: str) -> None:
    result = CliRunner().invoke(app, ["sandbox", "--clusters", clusters])
    assert result.exit_code == 2, result.output
    assert "--clusters" in result.stderr


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("orders_REPLICA", "give the real topic name: orders"),
        ("orders/eu", "not a valid Kafka topic name"),
        ("..", "not a valid Kafka topic name"),
        ("x" * 250, "not a valid Kafka topic name"),
        ("x" * 245, "not a valid Kafka topic name"),  # its X_REPLICA would be too long
    ],
)
def test_topics_ensure_refuses_bad_names_before_touching_a_cluster(
    topic: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("REPLICATOR_")]:
        monkeypatch.delenv(key)
    args = ["topics", "ensure", "--topic", "payments", "--topic", topic, "--partitions", "3"]
    result = CliRunner().invoke(app, args, env=UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert "--topic" in result.stderr and expected in result.stderr


@pytest.mark.parametrize("command", ["backfill", "audit"])
def test_the_bulk_jobs_refuse_a_replica_topic_name_before_touching_a_cluster(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("REPLICATOR_")]:
        monkeypatch.delenv(key)
    result = CliRunner().invoke(app, [command, "--topic", "orders_REPLICA"], env=UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert "--topic" in result.stderr and "give the real topic name: orders" in result.stderr


def test_failover_names_the_cluster_that_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("REPLICATOR_")]:
        monkeypatch.delenv(key)
    args = ["failover", "--group", "g", "--from", "dc1", "--to", "dc2", "--json"]
    result = CliRunner().invoke(app, args, env=UNREACHABLE)
    assert result.exit_code == 1, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert '"executed": false' in last and "dc2 does not answer at 127.0.0.1:10" in last, last
    for wrong in (["--to", "dc3"], ["--to", "dc1"]):
        result = CliRunner().invoke(app, [*args[:5], *wrong], env=UNREACHABLE)
        assert result.exit_code == 2 and "--to" in result.stderr, result.output
