"""The shipped images and manifests run as an operator runs them, beside the test's Apache Kafka.

Built from ``deploy/Dockerfile`` once per test run (``replicator.devtools.images``: docker, else
podman; the registry's base images, else the local stand-ins). The sidecar image, run read-only
on the host network, configured by ``REPLICATOR_*`` variables only, its SASL password a container
secret mounted as a file: non-root, ``/livez`` and ``/readyz``, records both ways exact, the image's
own ``HEALTHCHECK`` healthy, a SIGKILL then a new container resuming exactly, ``stop`` draining
within the grace with exit 0, no secret in the logs; a bad variable exits 2 naming it; the
packages inside are the list kept beside the Dockerfile. The Spark image's ``replicator audit``:
its exit status is the verdict. Each datacenter's Kubernetes overlay, rendered by kustomize and
played by podman (``kube play``): the pod replicating both ways exactly, its probes answering,
stopped within its termination grace.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.devtools.apache_kafka import ApacheKafkaCluster, ScramUser, Security
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
from replicator.devtools.manifests import Rendered, render
from tests.integration.harness import (
    APACHE_KAFKA,
    copies_of,
    create_topics,
    holds,
    kafka_cluster,
    oracle,
    produce,
    produce_records,
    read,
    running,
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


def _image(target: str) -> Image:
    """One target of ``deploy/Dockerfile``, built for the run: the test workers take turns (a
    file lock), and the second finds every layer cached."""
    if not APACHE_KAFKA:
        pytest.skip("the images run beside Apache Kafka (REPLICATOR_TEST_BROKER=kafka)")
    chosen = engine()
    with (ensure_dir(cache_root()) / "images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (built,) = build_images(chosen, tag="test", targets=(target,))
    return Image(chosen, built.tag)


@pytest.fixture(scope="session")
def sidecar_image() -> Image:
    return _image("sidecar")


@pytest.fixture(scope="session")
def spark_image() -> Image:
    return _image("spark")


@dataclass(frozen=True)
class Secret:
    """dc1's SCRAM password two ways: an engine secret handed in as a variable, and a
    directory holding it as a file (readable by the image's user only) mounted at
    ``/run/secrets``, as a Kubernetes Secret volume is. (podman 4.3 cannot mount an engine
    secret as a file into a read-only root: it fails to make the mount point.)"""

    name: str
    directory: Path
    file: str = "dc1-password"

    def flags(self, variable: str) -> tuple[list[str], dict[str, str]]:
        """The ``run`` flags and variables that hand the password to ``variable``."""
        if variable.endswith("_FILE"):
            mount = f"--volume={self.directory}:/run/secrets:ro"
            return [mount], {variable: f"/run/secrets/{self.file}"}
        return [f"--secret={self.name},type=env,target={variable}"], {}


@pytest.fixture
def dc1_password(tmp_path: Path) -> Iterator[Secret]:
    if not APACHE_KAFKA:
        pytest.skip("the images run beside Apache Kafka (REPLICATOR_TEST_BROKER=kafka)")
    engine_ = engine()
    secret = Secret(f"replicator-dc1-password-{free_port()}", tmp_path / "secrets")
    secret.directory.mkdir()
    written = secret.directory / secret.file
    written.write_text(PASSWORD)
    os.chown(written, 10001, 10001)  # the image's user, as a pod's fsGroup would make it
    written.chmod(0o400)
    engine_.run("secret", "rm", secret.name, check=False)
    engine_.run("secret", "create", secret.name, str(written))
    try:
        yield secret
    finally:
        engine_.run("secret", "rm", secret.name, check=False)


@dataclass
class Container:
    """One ``run`` of the image, detached, read-only, on the host network."""

    image: Image
    name: str
    env: dict[str, str]
    password: tuple[Secret, str] | None = None  # the secret and the variable it is handed to
    port: int = field(default_factory=free_port)

    def start(self, env_file: Path) -> Container:
        variables = {**self.env, "REPLICATOR_HTTP_PORT": str(self.port)}
        flags: list[str] = []
        if self.password is not None:
            flags, more = self.password[0].flags(self.password[1])
            variables.update(more)
        env_file.write_text("".join(f"{key}={value}\n" for key, value in variables.items()))
        self.image.engine.run(
            "run", "--detach", "--name", self.name, "--network", "host", "--read-only",
            "--tmpfs", "/tmp", "--env-file", str(env_file), *flags, self.image.tag,
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
    with running(found):
        yield found


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
    sidecar_image: Image,
    clusters: dict[str, ApacheKafkaCluster],
    dc1_password: Secret,
    tmp_path: Path,
) -> None:
    engine_ = sidecar_image.engine
    containers: list[Container] = []

    def start(local: str, name: str, variable: str = "SASL_PASSWORD_FILE") -> Container:
        password = (dc1_password, f"REPLICATOR_CLUSTERS__DC1__{variable}")
        box = Container(sidecar_image, name, sidecar_env(local, clusters), password)
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
        dc1b = start("dc1", f"dc1b-{tag}", variable="SASL_PASSWORD")  # the secret as a variable
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


def test_the_spark_image_audits_the_clusters_and_its_exit_status_is_the_verdict(
    spark_image: Image,
    clusters: dict[str, ApacheKafkaCluster],
    dc1_password: Secret,
    tmp_path: Path,
) -> None:
    """``replicator audit`` in the Spark image, local mode, configured as the sidecar is (dc1
    through SCRAM, the password from the secret mounted as a file): exit 0 on equal clusters,
    exit 1 once dc2 holds one record twice, that partition named."""
    dc1, dc2 = clusters["dc1"], clusters["dc2"]
    for cluster in (dc1, dc2):
        create_topics(cluster, orders_REPLICA=3, orders=3)
    sent = produce(dc1, "orders_REPLICA", 60, partitions=3)
    copies = copies_of(sent, "orders")
    for cluster in (dc1, dc2):
        produce_records(cluster, "orders", copies)
    env = {k: v for k, v in sidecar_env("dc1", clusters).items() if "SHUTDOWN" not in k}
    mount, variables = dc1_password.flags("REPLICATOR_CLUSTERS__DC1__SASL_PASSWORD_FILE")
    env.update(variables)
    (tmp_path / "audit.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))

    def audit() -> tuple[int, dict[str, Any]]:
        done = spark_image.engine.run(
            "run", "--rm", "--network", "host", "--env-file", str(tmp_path / "audit.env"),
            *mount,
            spark_image.tag, "audit", "--topic", "orders", "--master", "local[2]", "--json", "-",
            check=False, timeout=600,
        )  # fmt: skip
        assert done.returncode in (0, 1), done
        assert PASSWORD not in done.stdout + done.stderr
        return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])

    status, clean = audit()
    assert status == 0, clean
    assert clean["totals"]["expected"] == clean["totals"]["delivered"] == 120, clean["totals"]
    faults = {k: v for k, v in clean["totals"].items() if k not in ("expected", "delivered")}
    assert set(faults.values()) == {0}, faults

    twice = copies[7]
    produce_records(dc2, "orders", [twice])
    status, found = audit()
    assert status == 1, found
    assert found["totals"]["duplicates"] == 1, found["totals"]
    flagged = [(p["cluster"], p["partition"]) for p in found["partitions"] if p["duplicates"]]
    assert flagged == [("dc2", twice.partition)], found["partitions"]


OVERLAYS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "overlays"
CONTAINER = "/spec/template/spec/containers/0"


@pytest.fixture
def overlay_clusters() -> Iterator[dict[str, ApacheKafkaCluster]]:
    """Both clusters on a SASL_PLAINTEXT listener, each with the overlays' principals
    (``replicator-<dc>`` for its own replicator, ``replicator-from-<other>`` for the remote
    one) and the overlays' SCRAM-SHA-512."""

    def users(local: str, remote: str) -> Security:
        names = (f"replicator-{local}", f"replicator-from-{remote}")
        scram = tuple(ScramUser(name, PASSWORD, ("SCRAM-SHA-512",)) for name in names)
        return Security(users=scram, sasl_plaintext=True)

    found = {
        "dc1": kafka_cluster("dc1", security=users("dc1", "dc2")),
        "dc2": kafka_cluster("dc2", security=users("dc2", "dc1")),
    }
    with running(found):
        yield found


def operator_overlay(
    directory: Path, datacenter: str, clusters: dict[str, ApacheKafkaCluster], port: int, tag: str
) -> Path:
    """What an operator writes over ``overlays/<datacenter>``: the image, the brokers' addresses
    (SASL without TLS here), the passwords, the HTTP port and the container's port with it (each
    pod of this host network needs its own) and one replica; names suffixed, so that two
    datacenters' pods share one engine."""
    directory.mkdir()
    config = [f"REPLICATOR_HTTP_PORT={port}"]
    for alias, cluster in clusters.items():
        prefix = f"REPLICATOR_CLUSTERS__{alias.upper()}__"
        config += [
            f"{prefix}BOOTSTRAP_SERVERS={cluster.listener('SASL_PLAINTEXT')}",
            f"{prefix}SECURITY_PROTOCOL=SASL_PLAINTEXT",
        ]
    passwords = [f"REPLICATOR_CLUSTERS__{a.upper()}__SASL_PASSWORD={PASSWORD}" for a in clusters]
    name, version = tag.rsplit(":", 1)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAYS / datacenter, directory)],
        "nameSuffix": f"-{directory.name}",
        "images": [{"name": "replicator", "newName": f"localhost/{name}", "newTag": version}],
        "replicas": [{"name": "replicator", "count": 1}],
        "patches": [
            {
                "target": {"kind": "Deployment", "name": "replicator"},
                "patch": json.dumps(
                    [{"op": "replace", "path": f"{CONTAINER}/ports/0/containerPort", "value": port}]
                ),
            }
        ],
        "configMapGenerator": [
            {"name": "replicator-config", "behavior": "merge", "literals": config}
        ],
        "secretGenerator": [
            {"name": "replicator-credentials", "behavior": "merge", "literals": passwords}
        ],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


@dataclass
class PlayedPod:
    """One overlay as podman plays it: the rendered Deployment's pod and its ConfigMap, its
    Secret in the engine's store, and the probes the kubelet would ask."""

    engine: Engine
    rendered: Rendered
    directory: Path
    probes: dict[str, str] = field(default_factory=dict)  # probe -> URL
    pod: str = ""

    def play(self) -> PlayedPod:
        for secret in self.rendered.secrets:
            # podman 4.3 plays no Secret document: it reads a Secret's data, as JSON, from
            # its own store under the Secret's name
            data = self.directory / f"{secret['metadata']['name']}.json"
            data.write_text(json.dumps(secret["data"]))
            name = secret["metadata"]["name"]
            self.engine.run("secret", "rm", name, check=False)
            self.engine.run("secret", "create", name, str(data))
        documents = [self.on_host_network(doc) for doc in self.rendered.played]
        played = self.directory / "played.yaml"
        played.write_text(yaml.safe_dump_all(documents))
        (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
        self.pod = f"{deployment['metadata']['name']}-pod-0"  # podman's name for it
        self.engine.run("kube", "play", str(played), timeout=300)
        return self

    def on_host_network(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The pod on the host's network, where the test's brokers listen (on loopback), its
        named port resolved into the probes as the kubelet resolves it: podman 4.3 publishes
        every containerPort, which a host network refuses. Podman runs the liveness probe as
        its health check, restarting the container when it fails, but an ``httpGet`` as
        ``curl`` inside the container, which the image has no need of (the kubelet asks from
        outside): the same request is made by the image's Python instead."""
        if doc["kind"] != "Deployment":
            return doc
        spec = doc["spec"]["template"]["spec"]
        spec["hostNetwork"] = True
        (container,) = spec["containers"]
        ports = {p["name"]: p["containerPort"] for p in container.pop("ports")}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            action = container[probe]["httpGet"]
            action["port"] = ports.get(action["port"], action["port"])
            self.probes[probe] = f"http://127.0.0.1:{action['port']}{action['path']}"
        live = container["livenessProbe"]
        del live["httpGet"]
        # podman 4.3 hands an exec probe to a shell as one line: the quotes are the shell's
        request = f"import urllib.request as u; u.urlopen('{self.probes['livenessProbe']}')"
        live["exec"] = {"command": ["python", "-c", f'"{request}"']}
        return doc

    @property
    def container(self) -> str:
        return f"{self.pod}-replicator"

    def answers(self, probe: str) -> bool:
        try:
            with urllib.request.urlopen(self.probes[probe], timeout=5) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    def logs(self) -> str:
        done = self.engine.run("logs", self.container, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        if self.pod:
            self.engine.run("pod", "rm", "--force", self.pod, check=False)
        for secret in self.rendered.secrets:
            self.engine.run("secret", "rm", secret["metadata"]["name"], check=False)


def test_the_kubernetes_overlays_rendered_by_kustomize_run_in_podman_kube_play(
    sidecar_image: Image, overlay_clusters: dict[str, ApacheKafkaCluster], tmp_path: Path
) -> None:
    """Each datacenter's overlay as kustomize renders it, with what an operator sets over it,
    played by podman: the Deployment's pod (non-root, read-only root), configured by its
    ConfigMap and Secret only, its probes answering, records both ways exact, a stop within
    the termination grace with exit 0. The kinds podman does not run are validated against the
    API schemas by tests/repository/test_deploy.py."""
    engine_ = sidecar_image.engine
    if engine_.name != "podman":
        pytest.skip("kube play is podman's")
    pods: list[PlayedPod] = []
    try:
        for cluster in overlay_clusters.values():
            create_topics(cluster, orders_REPLICA=3)
        tag = str(free_port())
        for datacenter in overlay_clusters:
            overlay = operator_overlay(
                tmp_path / f"{datacenter}-{tag}",
                datacenter,
                overlay_clusters,
                free_port(),
                sidecar_image.tag,
            )
            rendered = Rendered.of(render(overlay))
            pod = PlayedPod(engine_, rendered, overlay)
            pods.append(pod)
            pod.play()
        for pod in pods:
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                wait_until(partial(pod.answers, probe), 90, f"{pod.pod} {probe}", pod.logs)
            # the liveness probe as podman's health check: healthy (urlopen raises on a 503)
            inspected = json.loads(engine_.run("container", "inspect", pod.container).stdout)
            assert pod.probes["livenessProbe"] in " ".join(
                inspected[0]["Config"]["Healthcheck"]["Test"]
            )
            health = engine_.run("healthcheck", "run", pod.container, check=False)
            assert health.returncode == 0, health
            assert engine_.run("exec", pod.container, "id", "-u").stdout.strip() == "10001"
            refused = engine_.run("exec", pod.container, "touch", "/opt/written", check=False)
            assert "Read-only file system" in refused.stderr, refused

        sent = {
            alias: produce(c, "orders_REPLICA", 300, partitions=3)
            for alias, c in overlay_clusters.items()
        }
        exact_both_ways(overlay_clusters, sent)

        # the kubelet's stop: SIGTERM, SIGKILL after terminationGracePeriodSeconds
        (deployment,) = [d for d in pods[0].rendered.played if d["kind"] == "Deployment"]
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        for pod in pods:
            restarts = engine_.run(
                "container", "inspect", "--format", "{{.RestartCount}}", pod.container
            )
            assert restarts.stdout.strip() == "0", (pod.pod, restarts)
            stopping = time.monotonic()
            engine_.run("pod", "stop", "--time", str(grace), pod.pod, timeout=120)
            took = time.monotonic() - stopping
            state = json.loads(engine_.run("container", "inspect", pod.container).stdout)[0]
            assert state["State"]["ExitCode"] == 0 and took < grace, (pod.pod, took, state)
            said = pod.logs()
            assert said.strip() and PASSWORD not in said, pod.pod
    finally:
        for pod in pods:
            pod.remove()
