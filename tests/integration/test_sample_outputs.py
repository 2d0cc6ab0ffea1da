"""The sample outputs of ``docs/operations/sample-outputs.md`` come from real runs, and still
match what the commands print.

One run on Apache Kafka does what the page shows: ``topics ensure``, ``check-config``, a
replicator copying 300 records to both clusters, its ``/status``, ``lag``, then ``audit``; and
``replicator sandbox`` on its embedded brokers. Each output is compared with its sample in
``docs/operations/samples/`` by shape: the words, in order (numbers, ports and paths vary from
run to run), and for ``/status`` every key path of the JSON. A command whose output changed fails
here until the sample is taken again: ``REPLICATOR_UPDATE_SAMPLES=1 pytest
tests/integration/test_sample_outputs.py`` writes the new outputs into the page's files.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.harness import (
    APACHE_KAFKA,
    Start,
    holds,
    produce,
    replicator_cli,
    replicator_env,
    start_clusters,
    wait_settled,
    wait_until,
)
from tests.integration.runbooks import matches as kept_as

SAMPLES = Path(__file__).resolve().parents[2] / "docs" / "operations" / "samples"


def matches(name: str, output: str) -> None:
    """``output`` has the shape of the page's sample ``name`` (written instead with UPDATE)."""
    kept_as(SAMPLES / name, output)


def command(env: dict[str, str], *args: str, status: int = 0) -> str:
    """``replicator ARGS``'s standard output, as a terminal shows it after the prompt."""
    code, out, err = replicator_cli(env, *args)
    assert code == status, f"replicator {' '.join(args)}: {code}\n{out}\n{err}"
    return f"$ replicator {' '.join(args)}\n{out}"


@pytest.mark.timeout(900)  # an audit's Spark session is part of it
@pytest.mark.skipif(not APACHE_KAFKA, reason="the samples are taken on Apache Kafka")
def test_the_operators_commands_print_what_the_samples_show(replicators: Start) -> None:
    pytest.importorskip("pyspark")
    with start_clusters("dc1", "dc2") as brokers:
        env = {"REPLICATOR_LOCAL_CLUSTER": "dc1", "REPLICATOR_LOG_FORMAT": "json"}
        for alias, broker in brokers.items():
            env[f"REPLICATOR_CLUSTERS__{alias.upper()}__BOOTSTRAP_SERVERS"] = (
                broker.bootstrap_servers
            )
        matches(
            "topics-ensure.txt",
            command(env, "topics", "ensure", "--topic", "orders", "--partitions", "3"),
        )
        produce(brokers["dc1"], "orders_REPLICA", 300, 3)
        matches("check-config.txt", command(env, "check-config"))

        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 300), 60, f"orders on {broker.alias}", dc1.log)
        wait_settled(dc1)
        _, status = dc1.get("/status")
        matches("status.json", json.dumps(status, indent=2) + "\n")
        matches("lag.txt", command(env, "lag"))
        assert dc1.stop() == 0
        matches("audit.txt", command(env, "audit", "--topic", "orders"))


def test_the_sandbox_prints_what_the_sample_shows() -> None:
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "replicator", "sandbox"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert sandbox.stderr is not None
        said = []
        for line in sandbox.stderr:
            said.append(line)
            if line.startswith("sandbox running"):
                break
        sandbox.send_signal(signal.SIGINT)
        out, rest = sandbox.communicate(timeout=60)
    finally:
        sandbox.kill()
    assert sandbox.returncode == 0, "".join(said) + rest
    matches("sandbox.txt", f"$ replicator sandbox\n{out}")
    matches("sandbox-stderr.txt", "".join(said) + rest)
