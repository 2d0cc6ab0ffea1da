"""The commands: replicator mirror-maker and replicator mm2."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from replicator.cli.commands import app
from replicator.config.loading import load_settings
from replicator.config.settings import Settings
from replicator.mirrormaker import mirror_maker_translation, mm2_translation
from tests.unit.mirrormaker import test_support as support
from tests.unit.mirrormaker.test_support import (
    BASE,
    GO_ARGS,
    MM1_ARGS,
    PLAIN_JAAS,
    SAMPLES,
    SECRET,
    F,
    write,
)


@pytest.fixture(autouse=True)
def _no_replicator_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("REPLICATOR_"):
            monkeypatch.delenv(name)


@pytest.fixture
def plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return support.plain_configs(tmp_path, monkeypatch)


@pytest.fixture
def mm1_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return support.mm1_fixed(tmp_path, monkeypatch)


def test_cli_mirror_maker_refuses_plain_without_tls_naming_the_property(plain: Path) -> None:
    write(
        plain,
        "dst.properties",
        f"bootstrap.servers=t1:9092\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"{PLAIN_JAAS}",
    )
    args = ["mirror-maker", *BASE, "--whitelist=.*", "--print-env"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "sasl.mechanism (in dst.properties)" in result.stderr
    assert "REPLICATOR_CLUSTERS__T1__ALLOW_INSECURE_PLAIN=true" in result.stderr
    assert SECRET not in result.output
    opt_in = {"REPLICATOR_CLUSTERS__T1__ALLOW_INSECURE_PLAIN": "true"}
    result = CliRunner().invoke(app, args, env=opt_in)
    assert result.exit_code == 0, result.output
    assert "REPLICATOR_CLUSTERS__T1__ALLOW_INSECURE_PLAIN=true" in result.stdout.splitlines()
    assert SECRET not in result.output


def test_cli_mirror_maker_print_env_masks_secrets(plain: Path) -> None:
    write(
        plain,
        "dst.properties",
        f"bootstrap.servers=t1:9092\nsecurity.protocol=SASL_SSL\n{PLAIN_JAAS}",
    )
    result = CliRunner().invoke(app, ["mirror-maker", *BASE, "--whitelist=.*", "--print-env"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "REPLICATOR_LOCAL_CLUSTER=t1" in lines
    # A bare name: docker run --env-file takes its value from the environment it runs in.
    assert "REPLICATOR_CLUSTERS__T1__SASL_PASSWORD" in lines
    assert any("SASL_PASSWORD: the secret of" in line for line in lines if line.startswith("# "))
    assert SECRET not in result.output


def test_cli_print_env_shell_is_sourced_by_a_posix_shell_as_given(plain: Path) -> None:
    """``--print-env --shell``: ``set -a; . FILE`` exports exactly the translated variables,
    regexes with shell syntax in them included; a secret must come from the environment."""
    write(
        plain,
        "dst.properties",
        f"bootstrap.servers=t1:9092\nsecurity.protocol=SASL_SSL\n{PLAIN_JAAS}",
    )
    whitelist = "--whitelist=pay(ments|outs) .*|it's$x|a;b&`c`"
    args = ["mirror-maker", *BASE, whitelist, "--print-env", "--shell"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    script = plain / "replicator.env"
    script.write_text(result.stdout)
    sourced = "set -a; . ./replicator.env; env -0"
    password = "REPLICATOR_CLUSTERS__T1__SASL_PASSWORD"
    done = subprocess.run(
        ["sh", "-c", sourced], cwd=plain, env={password: SECRET}, capture_output=True, check=True
    )
    exported = dict(
        item.split("=", 1)
        for item in done.stdout.decode().split("\0")
        if item.startswith("REPLICATOR_")
    )
    translation = mirror_maker_translation([*BASE, whitelist])
    assert exported == translation.env
    assert exported[F + "TOPICS_INCLUDE"] == "pay(ments|outs) .*|it's$x|a;b&`c`"
    missing = subprocess.run(
        ["sh", "-c", sourced], cwd=plain, env={}, capture_output=True, check=False
    )
    assert missing.returncode != 0 and password in missing.stderr.decode()
    alone = CliRunner().invoke(app, ["mirror-maker", *BASE, "--whitelist=a", "--shell"])
    assert alone.exit_code == 2 and "--shell: only with --print-env" in alone.stderr


def test_cli_mirror_maker_refusals_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(SAMPLES / "zk")
    args = ["mirror-maker", "--consumer.config", "sourceClusterConsumer.config"]
    args += ["--producer.config", "targetClusterProducer.config", "--whitelist", ".*"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "configuration error: zk.connect (in sourceClusterConsumer.config): "
    )
    result = CliRunner().invoke(app, ["mirror-maker", "--no.such.option", "1"])
    assert result.exit_code == 2
    assert "configuration error: --no.such.option: unknown" in result.stderr
    monkeypatch.chdir(SAMPLES / "mm1")
    result = CliRunner().invoke(app, ["mirror-maker", *MM1_ARGS])
    assert result.exit_code == 2
    assert "bootstrap.servers (in sourceCluster1Consumer.config)" in result.stderr


def test_cli_mirror_maker_help(plain: Path) -> None:
    for flag in ("--help", "-help", "-h"):
        result = CliRunner().invoke(app, ["mirror-maker", flag])
        assert result.exit_code == 0, flag
        assert "--consumer.config" in result.stdout


def test_cli_mm2_print_env(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "connect-mirror-maker.properties", tmp_path)
    result = CliRunner().invoke(
        app,
        ["mm2", str(tmp_path / "connect-mirror-maker.properties"), "--print-env"],
        env={"REPLICATOR_HTTP_PORT": "9091"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "REPLICATOR_FLOWS__SOURCE_TO_DESTINATION__NAMING=source-alias" in lines
    assert "REPLICATOR_HTTP_PORT=9091" in lines
    result = CliRunner().invoke(app, ["mm2", str(tmp_path / "missing.properties")])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr


def test_cli_runs_the_service_with_the_translated_settings_and_notes(
    mm1_fixed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import replicator.cli.commands

    served: list[tuple[Settings, Sequence[str]]] = []
    monkeypatch.setattr(
        replicator.cli.commands,
        "_serve",
        lambda settings, notes=(): served.append((settings, notes)),
    )
    result = CliRunner().invoke(app, ["mirror-maker", *GO_ARGS])
    assert result.exit_code == 0, result.output
    ((settings, notes),) = served
    assert settings.local_cluster == "kafka-target-server1-6667"
    assert notes == mirror_maker_translation(GO_ARGS).notes


def docker_env_file(text: str) -> dict[str, str]:
    """What ``docker run --env-file`` reads: ``NAME=value`` lines taken literally, ``#`` lines
    and blank lines skipped."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    return env


def test_cli_print_env_is_an_env_file(tmp_path: Path) -> None:
    text = (
        "clusters=us_east, eu-west\nus_east.bootstrap.servers=e:9092\n"
        "eu-west.bootstrap.servers=w:9092\nus_east->eu-west.enabled=true\n"
        "topics=orders, pay.*\nemit.heartbeats.interval.seconds=2\n"
    )
    (tmp_path / "mm2.properties").write_text(text)
    result = CliRunner().invoke(app, ["mm2", str(tmp_path / "mm2.properties"), "--print-env"])
    assert result.exit_code == 0, result.output
    env = docker_env_file(result.stdout)
    translation = mm2_translation(tmp_path / "mm2.properties")
    assert env == translation.env
    assert env["REPLICATOR_FLOWS__US_EAST_TO_EU_WEST__TOPICS_INCLUDE"] == "orders|pay.*"
    assert env["REPLICATOR_HEARTBEAT_INTERVAL_MS"] == "2000"
    assert load_settings(env) == translation.settings()
    comments = [line for line in result.stdout.splitlines() if line.startswith("# ")]
    assert len(comments) == len(translation.notes) + 1
    assert sum("cannot export" in line for line in comments) == 1


def test_cli_print_env_refuses_a_value_an_env_file_cannot_hold(plain: Path) -> None:
    result = CliRunner().invoke(
        app, ["mirror-maker", *BASE, "--whitelist=a", "--prefix=x\ny", "--print-env"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("configuration error: --prefix: holds a line break")
    assert result.stdout == ""


def test_operator_commands_read_a_mirror_maker_command_line_as_mirror_maker_runs_it(
    plain: Path,
) -> None:
    """``--mirror-maker 'OPTIONS'`` gives the operator commands the configuration that
    ``replicator mirror-maker OPTIONS`` runs; with --mm2 too, or a line a shell could not
    split, they exit 2 and say why."""
    from replicator.cli.arguments import configuration as _settings

    line = "--consumer.config src.properties --producer.config dst.properties --whitelist 'a|b'"
    settings = _settings(mirror_maker_line=line)
    assert settings == mirror_maker_translation(shlex.split(line)).settings()
    assert settings.flows["s1_to_t1"].topics_include == "a|b"
    for args, said in (
        (["lag", "--mm2", "x.properties", "--mirror-maker", line], "give one configuration"),
        (["check-config", "--mirror-maker", line + " 'unclosed"], "not a command line"),
        (["lag", "--mirror-maker", "--whitelist x"], "--consumer.config"),
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and said in result.output, (args, result.output)
