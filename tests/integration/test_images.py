"""The shipped sidecar image run as an operator runs it, beside the test's Apache Kafka clusters.

Built from ``deploy/Dockerfile`` once per test run (``replicator.devtools.images``: docker, else
podman; the registry's base images, else the local stand-ins), then run read-only on the host
network, configured by ``REPLICATOR_*`` variables only, its SASL password handed in as a
container secret: non-root, ``/livez`` and ``/readyz``, records both ways exact, the image's own
``HEALTHCHECK`` healthy, a SIGKILL then a new container resuming exactly, ``stop`` draining
within the grace with exit 0, no secret in the logs; a bad variable exits 2 naming it; the
packages inside are the list kept beside the Dockerfile.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from replicator.devtools.apache_kafka import ApacheKafkaCluster, ScramUser, Security, start_all
from replicator.devtools.embedded import free_port
from replicator.devtools.images import (
    Engine,
    build_images,
    dockerfile_arguments,
    engine,
    facts,
    kept_packages,
    revision,
)
from replicator.devtools.jvm import cache_root, ensure_dir
from tests.integration.harness import (
    APACHE_KAFKA,
    create_topics,
    holds,
    kafka_cluster,
    oracle,
    produce,
    read,
    wait_until,
)

# A first build on a fresh machine makes the base image and compiles the native extension:
# minutes, once; later runs reuse the engine's layer cache.
pytestmark = pytest.mark.timeout(1500)

PASSWORD = "image-canary-Zr81"
GRACE_MS = 10_000


@dataclass(frozen=True)
class Image:
    engine: Engine
    tag: str


@pytest.fixture(scope="session")
def sidecar_image() -> Image:
    """The sidecar image, built once for the run: the test workers take turns (a file lock),
    and the second finds every layer cached."""
    if not APACHE_KAFKA:
        pytest.skip("the images run beside Apache Kafka (REPLICATOR_TEST_BROKER=kafka)")
    chosen = engine()
    with (ensure_dir(cache_root()) / "images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (built,) = build_images(chosen, tag="test", targets=("sidecar",))
    return Image(chosen, built.tag)


@dataclass
class Container:
    """One ``run`` of the image, detached, read-only, on the host network."""

    image: Image
    name: str
    env: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)  # variable -> engine secret
    port: int = field(default_factory=free_port)

    def start(self, env_file: Path) -> Container:
        variables = {**self.env, "REPLICATOR_HTTP_PORT": str(self.port)}
        env_file.write_text("".join(f"{key}={value}\n" for key, value in variables.items()))
        secrets = [f"--secret={s},type=env,target={v}" for v, s in self.secrets.items()]
        self.image.engine.run(
            "run", "--detach", "--name", self.name, "--network", "host", "--read-only",
            "--tmpfs", "/tmp", "--env-file", str(env_file), *secrets, self.image.tag,
        )  # fmt: skip
        return self

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    def state(self) -> dict[str, Any]:
        out = self.image.engine.run("container", "inspect", self.name).stdout
        return dict(json.loads(out)[0]["State"])

    def logs(self) -> str:
        done = self.image.engine.run("logs", self.name, check=False)
        return done.stdout + done.stderr

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return self.image.engine.run("exec", self.name, *command, check=False)

    def remove(self) -> None:
        self.image.engine.run("rm", "--force", "--time", "1", self.name, check=False)


@pytest.fixture
def clusters() -> Iterator[dict[str, ApacheKafkaCluster]]:
    """dc1 also on a SASL_PLAINTEXT listener that requires its SCRAM user; dc2 plain."""
    user = ScramUser("replicator", PASSWORD, ("SCRAM-SHA-256",))
    found = {
        "dc1": kafka_cluster("dc1", security=Security(users=(user,), sasl_plaintext=True)),
        "dc2": kafka_cluster("dc2"),
    }
    try:
        start_all(list(found.values()))
        yield found
    finally:
        for cluster in found.values():
            cluster.remove()


def sidecar_env(local: str, clusters: dict[str, ApacheKafkaCluster]) -> dict[str, str]:
    """What an operator sets: the clusters (dc1 through SCRAM, its password left to the
    secret), which one is local, the grace; the tests' short session for the takeover."""
    return {
        "REPLICATOR_LOCAL_CLUSTER": local,
        "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": clusters["dc1"].listener("SASL_PLAINTEXT"),
        "REPLICATOR_CLUSTERS__DC1__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "REPLICATOR_CLUSTERS__DC1__SASL_MECHANISM": "SCRAM-SHA-256",
        "REPLICATOR_CLUSTERS__DC1__SASL_USERNAME": "replicator",
        "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": clusters["dc2"].bootstrap_servers,
        "REPLICATOR_SHUTDOWN_GRACE_MS": str(GRACE_MS),
        "REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "10000",
    }


def exact_both_ways(clusters: dict[str, ApacheKafkaCluster], sent: dict[str, list[Any]]) -> None:
    """Every cluster's ``orders`` holds each origin's records once, in order."""
    total = sum(len(records) for records in sent.values())
    for cluster in clusters.values():
        wait_until(holds(cluster, "orders", total), 90, f"orders on {cluster.alias}")
        stored = read(cluster, "orders")
        assert len(stored) == total, cluster.alias
        for origin, records in sent.items():
            found = oracle(records, stored, origin)
            assert not found.missing and not found.duplicates and not found.out_of_order, found


def test_the_sidecar_image_replicates_both_ways_heals_and_stops_as_shipped(
    sidecar_image: Image, clusters: dict[str, ApacheKafkaCluster], tmp_path: Path
) -> None:
    engine_ = sidecar_image.engine
    secret = f"replicator-dc1-password-{free_port()}"
    engine_.run("secret", "rm", secret, check=False)
    (tmp_path / "password").write_text(PASSWORD)
    engine_.run("secret", "create", secret, str(tmp_path / "password"))
    containers: list[Container] = []

    def start(local: str, name: str) -> Container:
        secrets = {"REPLICATOR_CLUSTERS__DC1__SASL_PASSWORD": secret}
        box = Container(sidecar_image, name, sidecar_env(local, clusters), secrets)
        containers.append(box)
        return box.start(tmp_path / f"{name}.env")

    try:
        for cluster in clusters.values():
            create_topics(cluster, orders_REPLICA=3)
        started = time.monotonic()
        tag = f"{free_port()}"
        dc1, dc2 = start("dc1", f"dc1-{tag}"), start("dc2", f"dc2-{tag}")
        for box in (dc1, dc2):
            wait_until(box.ready, 90, f"{box.name} /readyz 200", box.logs)
        ready_after = time.monotonic() - started
        assert dc1.get("/livez")[0] == 200

        # Non-root, read-only root file system, as the image says.
        assert dc1.exec("id", "-u").stdout.strip() == "10001"
        refused = dc1.exec("touch", "/opt/replicator/written")
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused

        sent = {
            alias: produce(c, "orders_REPLICA", 300, partitions=3) for alias, c in clusters.items()
        }
        exact_both_ways(clusters, sent)

        # The image's own HEALTHCHECK, run as the engine runs it.
        health = engine_.run("healthcheck", "run", dc1.name, check=False)
        assert health.returncode == 0, health

        # SIGKILL mid-life, records published meanwhile, a new container resumes exactly.
        engine_.run("kill", "--signal", "KILL", dc1.name)
        sent["dc1"] += produce(clusters["dc1"], "orders_REPLICA", 200, partitions=3, tag="-b")
        dc1b = start("dc1", f"dc1b-{tag}")
        wait_until(dc1b.ready, 90, f"{dc1b.name} /readyz 200", dc1b.logs)
        exact_both_ways(clusters, sent)

        # stop: SIGTERM, drained and closed within the grace, exit 0.
        for box in (dc1b, dc2):
            stopping = time.monotonic()
            engine_.run("stop", "--time", str(GRACE_MS // 1000 + 10), box.name)
            took = time.monotonic() - stopping
            state = box.state()
            assert state["ExitCode"] == 0 and took < GRACE_MS / 1000, (box.name, state, took)
        # The password reached the clients (dc1 answered its SCRAM logins) and no log line.
        for box in containers:
            said = box.logs()
            assert said.strip() and PASSWORD not in said, box.name
    finally:
        for box in containers:
            box.remove()
        engine_.run("secret", "rm", secret, check=False)
    print(f"sidecar image: two containers ready {ready_after:.1f} s after run")


def test_the_sidecar_image_refuses_a_bad_variable_with_exit_2_naming_it(
    sidecar_image: Image,
) -> None:
    done = sidecar_image.engine.run(
        "run", "--rm", "--network", "none", "--read-only",
        "--env", "REPLICATOR_LOCAL_CLUSTER=dc1",
        "--env", "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS=127.0.0.1:9",
        "--env", "REPLICATOR_COMMIT_INTERVAL_MS=soon",
        sidecar_image.tag, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "REPLICATOR_COMMIT_INTERVAL_MS" in done.stdout + done.stderr, done


def test_the_sidecar_image_holds_the_kept_packages_and_says_its_version_and_revision(
    sidecar_image: Image,
) -> None:
    found = facts(sidecar_image.engine, sidecar_image.tag)
    assert sorted(found.packages) == sorted(kept_packages())
    assert found.user == "10001:10001"
    assert found.labels["org.opencontainers.image.version"] == dockerfile_arguments()["VERSION"]
    assert found.labels["org.opencontainers.image.revision"] == revision()
    assert "/livez" in " ".join(found.healthcheck)
