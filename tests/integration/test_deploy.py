"""What deploy/ and examples/ run, run here against real brokers: the Compose file's topic
set-up command, the image's HEALTHCHECK command, and the example producer and consumer apps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from replicator.devtools.embedded import free_port
from tests.integration.harness import (
    APACHE_KAFKA,
    Start,
    holds,
    replicator_cli,
    replicator_env,
    start_clusters,
    wait_until,
)
from tests.repository.deployment import EXAMPLES, compose, healthcheck_command

# Also run on the embedded broker (make smoke): the demo's path stays proven.
pytestmark = pytest.mark.smoke


def healthcheck(port: int) -> int:
    """Run the image's HEALTHCHECK command as Docker would: its exit status."""
    env = {**os.environ, "REPLICATOR_HTTP_PORT": str(port)}
    command = [sys.executable if part == "python" else part for part in healthcheck_command()]
    return subprocess.run(command, env=env, capture_output=True, timeout=30, check=False).returncode


def example(script: str, *args: str) -> tuple[dict[str, object], list[str]]:
    """Run an example app to completion: its final JSON summary line, and its stderr lines."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary, done.stderr.splitlines()


def test_compose_set_up_healthcheck_and_example_apps_work_on_real_brokers(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        env = replicator_env("dc1", brokers)
        command = compose()["services"]["topics"]["command"]
        status, out, err = replicator_cli(env, *command)
        assert status == 0, out + err
        one = replicators("dc1", env)
        two = replicators("dc2", replicator_env("dc2", brokers))
        one.wait_ready()
        two.wait_ready()
        assert healthcheck(one.http_port) == 0
        assert healthcheck(two.http_port) == 0

        # dc1's producer asks for idempotence, as it does by default: the embedded broker
        # refuses aiokafka's InitProducerId, and the example says so in one line and goes on;
        # dc2's is told not to ask.
        produced = {"dc1": 300, "dc2": 200}
        for alias, count in produced.items():
            summary, said = example(
                "producer.py",
                *("--bootstrap-servers", brokers[alias].bootstrap_servers),
                *("--datacenter", alias, "--rate", "0", "--count", str(count)),
                *(() if alias == "dc1" else ("--no-idempotence",)),
            )
            assert summary == {"topic": "orders_REPLICA", "produced": count}
            refused = [line for line in said if "refused an idempotent producer" in line]
            expected = 1 if alias == "dc1" and not APACHE_KAFKA else 0
            assert len(refused) == expected, said
        for broker in brokers.values():
            wait_until(holds(broker, "orders", sum(produced.values())), 60, "orders complete")
        # dc1's consumer stops at the count; dc2's reads until idle (what the trial page says to
        # do where end offsets cannot be trusted): both count every record once.
        for alias, broker in brokers.items():
            until = (
                ("--count", str(sum(produced.values())))
                if alias == "dc1"
                else ("--idle-seconds", "5")
            )
            summary, _ = example(
                "consumer.py",
                *("--bootstrap-servers", broker.bootstrap_servers, "--group", f"app-{alias}"),
                *until,
                *("--report-every", "60"),
            )
            assert summary["by_origin"] == produced, alias
            assert summary["consumed"] == sum(produced.values()), alias

        assert one.stop() == 0
        assert healthcheck(one.http_port) != 0, "nothing answers on a stopped replicator's port"


def test_local_readiness_ignores_an_unreachable_remote_and_full_readiness_names_it(
    replicators: Start,
) -> None:
    with start_clusters("dc1") as brokers:
        nowhere = f"127.0.0.1:{free_port()}"
        env = replicator_env("dc1", brokers, clusters__dc2__bootstrap_servers=nowhere)
        one = replicators("dc1", env)
        one.wait_serving()
        wait_until(lambda: one.get("/readyz?scope=local")[0] == 200, 60, "locally ready", one.log)
        status, body = one.get("/readyz")
        assert status == 503
        assert any(p.startswith("cluster dc2 unreachable") for p in body["problems"]), body
        assert one.get("/readyz?scope=nearby")[0] == 400
