"""Every command of the CLI documents itself: ``--help`` works everywhere and says something;
invalid configuration exits 2 naming the variable and never showing a secret; ``check-config``
fails as ``run`` would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from replicator.cli import operations
from replicator.cli.commands import app
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, TopicSelection
from replicator.service.http import listen_problem

EXPECTED = {
    "run",
    "mirror-maker",
    "mm2",
    "demo",
    "sandbox",
    "check-config",
    "lag",
    "acls",
    "hand-back",
    "topics ensure",
    "backfill",
    "audit",
    "failover",
    "rpo",
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
    for path in (
        "check-config",
        "lag",
        "hand-back",
        "topics ensure",
        "backfill",
        "audit",
        "failover",
        "rpo",
    ):
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


def test_rpo_refuses_what_it_cannot_measure_and_names_a_cluster_that_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith("REPLICATOR_")]:
        monkeypatch.delenv(key)
    runner = CliRunner()
    for origin in ("dc3", "dc1"):  # unknown; the local cluster itself
        result = runner.invoke(app, ["rpo", "--origin", origin], env=UNREACHABLE)
        assert result.exit_code == 2 and "--origin" in result.stderr, result.output
    flows_only = {**UNREACHABLE, "REPLICATOR_REPLICA_MODE": "false"}
    result = runner.invoke(app, ["rpo", "--origin", "dc2"], env=flows_only)
    assert result.exit_code == 2 and "REPLICATOR_REPLICA_MODE" in result.stderr, result.output
    result = runner.invoke(app, ["rpo", "--origin", "dc2", "--json"], env=UNREACHABLE)
    assert result.exit_code == 1, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert "dc1 does not answer at 127.0.0.1:9" in last, last


SECRET = "canary-secret-5e1d"
DC2_SERVERS = "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS"


@pytest.fixture
def no_replicator_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("REPLICATOR_")]:
        monkeypatch.delenv(key)


@pytest.mark.usefixtures("no_replicator_environment")
@pytest.mark.parametrize("command", ["check-config", "run", "lag"])
@pytest.mark.parametrize(
    "servers",
    [
        f"user:{SECRET}@kafka-1.dc2:9092",
        f"sasl://user:{SECRET}@kafka-1.dc2",
        f"SASL_SSL://replicator:{SECRET}@kafka-1.dc2:9093,kafka-2.dc2:9093",
        f"{SECRET}@kafka-1.dc2:9092",
        f"kafka-1.dc2:9092,user:{SECRET},more@kafka-2.dc2:9092",
        f"kafka-1.dc2:9092;sasl.password={SECRET}",
    ],
)
def test_credentials_in_a_bootstrap_entry_exit_2_and_are_never_shown(
    command: str, servers: str
) -> None:
    result = CliRunner().invoke(app, [command], env={**UNREACHABLE, DC2_SERVERS: servers})
    assert result.exit_code == 2, result.output
    assert DC2_SERVERS in result.stderr
    assert SECRET not in result.output + result.stderr
    assert SECRET[:8] not in result.output + result.stderr


def test_credentials_in_a_bootstrap_entry_are_not_shown_by_the_process_either() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    env |= {**UNREACHABLE, DC2_SERVERS: f"alice:{SECRET}@kafka-1.dc2:9092"}
    done = subprocess.run(
        [sys.executable, "-m", "replicator", "check-config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert DC2_SERVERS in done.stderr and "***@kafka-1.dc2:9092" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert done.stderr.count("kafka-1.dc2") == 1  # said once, not twice


@pytest.mark.usefixtures("no_replicator_environment")
@pytest.mark.parametrize(
    ("extra", "variable"),
    [
        ({"REPLICATOR_HEARTBEAT_TOPIC": "orders"}, "REPLICATOR_HEARTBEAT_TOPIC"),
        ({"REPLICATOR_CHECKPOINTS_TOPIC": "orders"}, "REPLICATOR_CHECKPOINTS_TOPIC"),
        ({"REPLICATOR_DEAD_LETTER_TOPIC": "orders_REPLICA"}, "REPLICATOR_DEAD_LETTER_TOPIC"),
        (
            {
                "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM": "PLAIN",
                "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME": "replicator",
                "REPLICATOR_CLUSTERS__DC2__SASL_PASSWORD": SECRET,
            },
            "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM",
        ),
    ],
)
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_refused_configuration_exits_2_naming_the_variable(
    command: str, extra: dict[str, str], variable: str
) -> None:
    result = CliRunner().invoke(app, [command], env={**UNREACHABLE, **extra})
    assert result.exit_code == 2, result.output
    assert f"configuration error: {variable}: " in result.stderr
    assert SECRET not in result.output + result.stderr


@pytest.fixture
def clusters_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check-config`` finds every cluster reachable with one replicated topic, untouched."""

    async def reachable(settings: Settings) -> dict[str, str | None]:
        return dict.fromkeys(settings.clusters)

    async def selection(settings: Settings, plan: FeedPlan) -> TopicSelection:
        return TopicSelection(("orders_REPLICA",))

    monkeypatch.setattr(operations, "_probe_all", reachable)
    monkeypatch.setattr(operations, "_selection", selection)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.usefixtures("no_replicator_environment", "clusters_answer")
def test_check_config_fails_with_2_naming_the_variable_when_the_http_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **UNREACHABLE,
            "REPLICATOR_HTTP_HOST": "127.0.0.1",
            "REPLICATOR_HTTP_PORT": str(port),
        }
        result = CliRunner().invoke(app, ["check-config"], env=env)
        assert result.exit_code == 2, result.output
        assert f"configuration error: REPLICATOR_HTTP_PORT: cannot listen on 127.0.0.1:{port}" in (
            result.stderr
        )
        assert "already in use" in result.stderr
        assert f"http 127.0.0.1:{port}: CANNOT LISTEN" in result.stdout
        result = CliRunner().invoke(app, ["check-config", "--json"], env=env)
        assert result.exit_code == 2, result.output
        report = json.loads(result.stdout)
        assert report["http"] == {
            "address": f"127.0.0.1:{port}",
            "listenable": False,
            "variable": "REPLICATOR_HTTP_PORT",
            "error": report["http"]["error"],
        }
        assert "already in use" in report["http"]["error"]
    # Released: the same configuration passes.
    result = CliRunner().invoke(app, ["check-config", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["http"]["listenable"] is True


@pytest.mark.usefixtures("no_replicator_environment", "clusters_answer")
def test_check_config_passes_on_a_free_http_port_and_leaves_it_free() -> None:
    port = free_port()
    env = {**UNREACHABLE, "REPLICATOR_HTTP_HOST": "127.0.0.1", "REPLICATOR_HTTP_PORT": str(port)}
    result = CliRunner().invoke(app, ["check-config"], env=env)
    assert result.exit_code == 0, result.output
    assert f"http 127.0.0.1:{port}: can listen" in result.stdout
    with socket.socket() as again:  # check-config bound it and let it go
        again.bind(("127.0.0.1", port))


def test_listen_problem_names_the_variable_to_change() -> None:
    assert listen_problem("127.0.0.1", 0) is None
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = listen_problem("127.0.0.1", taken.getsockname()[1])
    assert busy is not None and busy.variable == "REPLICATOR_HTTP_PORT"
    elsewhere = listen_problem("192.0.2.1", 0)  # TEST-NET-1: no address of this machine
    assert elsewhere is not None and elsewhere.variable == "REPLICATOR_HTTP_HOST"
