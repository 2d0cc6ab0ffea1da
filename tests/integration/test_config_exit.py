"""Invalid configuration: ``replicator run`` exits 2, names the variable, never prints secrets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

CANARY = "canary-secret-91c2"
VALID = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "127.0.0.1:9",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "127.0.0.1:10",
    "REPLICATOR_CLUSTERS__DC2__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "REPLICATOR_CLUSTERS__DC2__SASL_MECHANISM": "SCRAM-SHA-512",
    "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME": "replicator",
    "REPLICATOR_CLUSTERS__DC2__SASL_PASSWORD": CANARY,
}


def run_with(env: dict[str, str], drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    clean.update({k: v for k, v in env.items() if k not in drop})
    return subprocess.run(
        [sys.executable, "-m", "replicator", "run"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("change", "drop", "variable"),
    [
        ({}, ("REPLICATOR_LOCAL_CLUSTER",), "REPLICATOR_LOCAL_CLUSTER"),
        ({"REPLICATOR_LOCAL_CLUSTER": "dc7"}, (), "REPLICATOR_LOCAL_CLUSTER"),
        ({"REPLICATOR_TOPICS_INCLUDE": "(unclosed"}, (), "REPLICATOR_TOPICS_INCLUDE"),
        ({"REPLICATOR_REPLICA_SUFFIX": ""}, (), "REPLICATOR_REPLICA_SUFFIX"),
        (
            {"REPLICATOR_CLUSTERS__DC1__SSL_CAFILE": "/nonexistent/ca.pem"},
            (),
            "REPLICATOR_CLUSTERS__DC1__SSL_CAFILE",
        ),
        (
            {},
            ("REPLICATOR_CLUSTERS__DC2__SASL_USERNAME",),
            "REPLICATOR_CLUSTERS__DC2__SASL_USERNAME",
        ),
        ({"REPLICATOR_HTTP_PORT": "-1"}, (), "REPLICATOR_HTTP_PORT"),
        ({"REPLICATOR_SHUTDOWN_GRACE": "5"}, (), "REPLICATOR_SHUTDOWN_GRACE"),
    ],
)
def test_invalid_configuration_exits_2_naming_the_variable(
    change: dict[str, str], drop: tuple[str, ...], variable: str
) -> None:
    result = run_with({**VALID, **change}, drop)
    assert result.returncode == 2, result.stderr
    assert variable in result.stderr
    assert CANARY not in result.stderr + result.stdout


def test_console_script_and_module_behave_the_same() -> None:
    script = Path(sys.executable).with_name("replicator")
    assert script.exists(), "the replicator console script is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    by_script = subprocess.run(
        [str(script), "run"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    by_module = run_with({})
    assert by_script.returncode == by_module.returncode == 2
    assert "REPLICATOR_LOCAL_CLUSTER" in by_script.stderr
    assert "REPLICATOR_LOCAL_CLUSTER" in by_module.stderr
    helped = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert helped.returncode == 0
    assert "run" in helped.stdout and "demo" in helped.stdout


def test_an_http_port_already_in_use_exits_2_naming_the_variable() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_with(
            {**VALID, "REPLICATOR_HTTP_HOST": "127.0.0.1", "REPLICATOR_HTTP_PORT": str(port)}
        )
    assert result.returncode == 2, result.stderr
    assert "REPLICATOR_HTTP_PORT" in result.stderr and str(port) in result.stderr
    assert "already in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_http_host_not_on_this_machine_exits_2_naming_the_variable() -> None:
    result = run_with({**VALID, "REPLICATOR_HTTP_HOST": "192.0.2.1", "REPLICATOR_HTTP_PORT": "0"})
    assert result.returncode == 2, result.stderr
    assert "REPLICATOR_HTTP_HOST" in result.stderr and "192.0.2.1" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
