"""deploy/ against the product: the image, the Compose file, the Kubernetes manifests and the
dashboard are validated by their official tools and schemas (hadolint, the Compose specification,
the Kubernetes OpenAPI schemas), then cross-checked against the settings model, the HTTP surface
and the metric catalogue, so that none of them can drift from the code unnoticed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from replicator.config.loading import load_settings
from replicator.config.settings import Settings
from replicator.devtools.manifests import Rendered, render
from replicator.telemetry.metrics import Metrics
from tests.repository.deployment import (
    DEPLOY,
    EXAMPLES,
    KUBERNETES,
    ROOT,
    compose,
    dockerfile_stages,
    env_file,
    final_stage,
    healthcheck_command,
    load_yaml,
    manifests,
    mounts,
    named_stage,
    project,
    stage_names,
)

OVERLAYS = sorted(p for p in (KUBERNETES / "overlays").iterdir() if p.is_dir())
DEFAULT_HTTP_PORT = Settings.model_fields["http_port"].default


def tool(name: str) -> str:
    """A command-line tool installed beside this interpreter (the dev extra)."""
    return str(Path(sys.executable).parent / name)


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def settings_of(env: dict[str, Any]) -> Settings:
    """Load a deployment's environment exactly as the replicator would (unknown names fail)."""
    return load_settings({k: str(v) for k, v in env.items()})


def seconds(duration: str) -> float:
    """A Compose duration such as ``30s`` or ``1m30s``."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


# -- the image --------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    done = run_tool(tool("hadolint"), "--failure-threshold", "info", str(DEPLOY / "Dockerfile"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_is_multi_stage_and_runs_the_service_as_non_root_in_exec_form() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    final = final_stage()
    copies = [c.arguments for c in final["COPY"]]
    assert copies == ["--from=build /opt/replicator /opt/replicator"], "final stage: venv only"
    assert not [r for r in final.get("RUN", []) if re.search(r"pip |apt-get|gcc", r.arguments)]
    user = final["USER"][-1].arguments.split(":")[0]
    assert user not in ("root", "0")
    assert final["ENTRYPOINT"][-1].exec_form() == ["replicator"]
    assert final["CMD"][-1].exec_form() == ["run"]
    assert final["STOPSIGNAL"][-1].arguments == "SIGTERM"
    assert final["EXPOSE"][-1].arguments == str(DEFAULT_HTTP_PORT)


def image_environment() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in final_stage()["ENV"]:
        env.update(dict(re.findall(r"(\w+)=(\S+)", instruction.arguments)))
    return env


def test_image_environment_names_real_settings() -> None:
    env = {k: v for k, v in image_environment().items() if k.startswith("REPLICATOR_")}
    assert env, "the image sets its HTTP port and log format"
    settings = settings_of({**env, **env_file(EXAMPLES / "two-datacenters.env")})
    assert settings.http_port == DEFAULT_HTTP_PORT


def test_healthcheck_asks_livez_on_the_configured_port() -> None:
    command = healthcheck_command()
    assert command[:2] == ["python", "-c"]
    assert "/livez" in command[2] and "REPLICATOR_HTTP_PORT" in command[2]


def test_build_context_holds_what_the_dockerfile_copies() -> None:
    admitted = [
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    for stage in dockerfile_stages():
        for instruction in stage:
            if instruction.keyword != "COPY" or instruction.arguments.startswith("--from"):
                continue
            *sources, _ = instruction.arguments.split()
            for source in sources:
                assert (ROOT / source).exists(), source
                assert any(source == a or source.startswith(a + "/") for a in admitted), source


def test_the_image_build_copies_the_license_files() -> None:
    """pyproject names its license files; building the package without them fails."""
    copied = {
        source
        for stage in dockerfile_stages()
        for instruction in stage
        if instruction.keyword == "COPY" and not instruction.arguments.startswith("--from")
        for source in instruction.arguments.split()[:-1]
    }
    license_files = project()["license-files"]
    assert license_files, "pyproject.toml names no license file"
    for name in license_files:
        assert (ROOT / name).is_file(), name
        assert name in copied, f"the Dockerfile does not copy {name}"


def pinned(path: Path) -> dict[str, str]:
    """The ``name==version`` lines of a pin list (comments skipped), by canonical name."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_image_pins_satisfy_the_package_requirements() -> None:
    pins = pinned(DEPLOY / "requirements.txt")
    for requirement in map(Requirement, project()["dependencies"]):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in deploy/requirements.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} vs {requirement}"


def spark_pins() -> dict[str, str]:
    """What the spark image's build stage installs on top of the sidecar's pins."""
    (install,) = [
        r.arguments for r in named_stage("build-spark")["RUN"] if " install " in r.arguments
    ]
    return {
        canonicalize_name(name): version
        for name, version in re.findall(r"([A-Za-z0-9_.-]+)==([^\s&]+)", install)
    }


def test_spark_image_is_a_target_of_its_own_with_a_jre_and_the_spark_extra() -> None:
    names = stage_names()
    assert names.index("spark") < len(names) - 1, "the default (last) stage stays the sidecar"
    spark = named_stage("spark")
    copies = [c.arguments for c in spark["COPY"]]
    assert copies == ["--from=build-spark /opt/replicator /opt/replicator"]
    installs = " ".join(r.arguments for r in spark["RUN"])
    assert re.search(r"\bopenjdk-17-jre-headless=17\.", installs), "Java 17, a runtime only"
    assert "rm -rf /var/lib/apt/lists/*" in installs
    assert spark["USER"][-1].arguments.split(":")[0] not in ("root", "0")
    assert spark["ENTRYPOINT"][-1].exec_form() == ["replicator"]
    assert named_stage("build-spark")["FROM"][0].arguments.split()[0] == "build"
    # the sidecar image holds neither Java nor Spark
    final = final_stage()
    assert not [r for r in final.get("RUN", []) if "openjdk" in r.arguments]
    assert [c.arguments for c in final["COPY"]] == ["--from=build /opt/replicator /opt/replicator"]


def test_spark_image_pins_are_the_spark_extra_and_what_pyspark_accepts() -> None:
    pins = spark_pins()
    extra = [Requirement(r) for r in project()["optional-dependencies"]["spark"]]
    for requirement in extra:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} of the spark extra is not pinned in the spark stage"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} vs {requirement}"
    # PySpark's own dependencies (from its installed metadata, the dev environment has the extra)
    try:
        needed = metadata.requires("pyspark") or []
    except metadata.PackageNotFoundError:
        pytest.skip("pyspark is not installed here (the spark extra)")
    for line in needed:
        requirement = Requirement(line)
        if requirement.marker is not None:
            continue  # an extra of PySpark's we do not install
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} (needed by pyspark) is not pinned in the spark stage"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} vs {requirement}"
    sidecar = {
        canonicalize_name(line.partition("==")[0])
        for line in (DEPLOY / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert not pins.keys() & sidecar, "a spark pin would override a sidecar pin"


# -- Docker Compose ---------------------------------------------------------------------------


def replicator_services() -> dict[str, dict[str, Any]]:
    """Services that run ``replicator run`` (the image's default command)."""
    return {
        name: service
        for name, service in compose()["services"].items()
        if service.get("image") == "replicator:local"
        and "command" not in service
        and "entrypoint" not in service
    }


def test_compose_file_follows_the_compose_specification() -> None:
    path = str(DEPLOY / "docker-compose.yml")
    done = run_tool(tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_replicators_are_configured_by_environment_only() -> None:
    services = compose()["services"]
    replicators = replicator_services()
    assert set(replicators) == {"replicator-dc1", "replicator-dc2"}
    kafka_ports = {
        name: re.search(r"PLAINTEXT://:(\d+)", s["environment"]["KAFKA_LISTENERS"])
        for name, s in services.items()
        if s.get("image", "").startswith("apache/kafka")
    }
    locals_seen = set()
    for name, service in replicators.items():
        assert "env_file" not in service and "volumes" not in service, name
        settings = settings_of(service["environment"])
        locals_seen.add(settings.local_cluster)
        for cluster in settings.clusters.values():
            for server in cluster.servers:
                host, port = server.rsplit(":", 1)
                listener = kafka_ports.get(host)
                assert listener is not None and listener.group(1) == port, server
        published = [p.split(":") for p in service["ports"]]
        assert [p[-1] for p in published] == [str(settings.http_port)]
        assert all(p[0] == "127.0.0.1" for p in published), "the demo listens on loopback only"
        assert seconds(service["stop_grace_period"]) * 1000 > settings.shutdown_grace_ms
    assert locals_seen == {"dc1", "dc2"}


PROJECT_IMAGES = {"replicator:local": None, "replicator-spark:local": "spark"}  # tag: target


def test_every_service_of_the_project_image_can_build_it() -> None:
    """No Compose version may try to pull replicator:local: whichever service starts first
    builds it; services of one tag build it the same way (one image)."""
    services = compose()["services"]
    ours = {n: s for n, s in services.items() if s.get("image") in PROJECT_IMAGES}
    assert {"topics", "replicator-dc1", "orders-app-dc1", "audit"} <= ours.keys()
    builds: dict[str, list[dict[str, Any]]] = {}
    for name, service in ours.items():
        assert "build" in service, f"{name} uses {service['image']} but cannot build it"
        build = service["build"]
        assert build["dockerfile"] == "deploy/Dockerfile", name
        assert (DEPLOY / build["context"] / build["dockerfile"]).exists(), name
        assert build.get("target") == PROJECT_IMAGES[service["image"]], name
        builds.setdefault(service["image"], []).append(build)
    for tag, same in builds.items():
        assert all(b == same[0] for b in same), f"services of {tag} build it differently"
    assert not [
        s for s in services.values() if "build" in s and s.get("image") not in PROJECT_IMAGES
    ]


def test_compose_runs_the_product_image_and_the_example_apps() -> None:
    services = compose()["services"]
    settings_of(services["topics"]["environment"])
    audit = services["audit"]
    settings_of(audit["environment"])
    assert audit["command"][0] == "audit" and audit["profiles"] == ["jobs"], "on demand only"
    for name, service in services.items():
        if service.get("entrypoint") == ["python"]:
            script = service["command"][0]
            assert script.startswith("/examples/"), name
            examples = DEPLOY / mounts(service)["/examples"]
            assert (examples / script.removeprefix("/examples/")).exists()


def test_prometheus_scrapes_every_replicator_and_grafana_gets_the_dashboard() -> None:
    prometheus = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    targets = {
        target
        for job in prometheus["scrape_configs"]
        for group in job["static_configs"]
        for target in group["targets"]
    }
    expected = {
        f"{name}:{settings_of(s['environment']).http_port}"
        for name, s in replicator_services().items()
    }
    assert targets == expected
    assert {job["metrics_path"] for job in prometheus["scrape_configs"]} == {"/metrics"}
    grafana = compose()["services"]["grafana"]
    volumes = mounts(grafana)
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "replicator.yml")
    dashboards_in_container = provider["providers"][0]["options"]["path"]
    on_disk = DEPLOY / volumes[dashboards_in_container]
    assert (on_disk / "replicator.json").exists()
    datasources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"


# -- Kubernetes -------------------------------------------------------------------------------


def kubernetes_resources() -> list[Path]:
    """Manifests of built-in kinds. The monitoring component's PrometheusRule and ServiceMonitor
    are custom resources kubernetes-validate has no schema for (it would only warn and pass):
    tests/repository/test_alerts.py validates them against the operator's CRDs."""
    return sorted(
        p
        for p in KUBERNETES.rglob("*.yaml")
        if p.name != "kustomization.yaml"
        and "overlays" not in p.parts
        and not p.is_relative_to(KUBERNETES / "components" / "monitoring")
    )


@pytest.mark.parametrize("path", kubernetes_resources(), ids=lambda p: p.name)
def test_kubernetes_manifest_validates_against_the_api_schema(path: Path) -> None:
    done = run_tool(tool("kubernetes-validate"), "--strict", "--quiet", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


@cache
def rendered(overlay: Path) -> tuple[dict[str, Any], ...]:
    """An overlay as kustomize renders it (the pinned standalone build)."""
    return tuple(render(overlay))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_rendered_overlay_validates_against_the_api_schema_where_podman_cannot_run_it(
    overlay: Path,
) -> None:
    """What ``kubectl apply -k`` would send, each document strictly against the API's schema
    (an unknown field fails); podman's ``kube play`` runs the pod, its ConfigMap and Secret
    (tests/integration/test_images.py), but not the Service, the PodDisruptionBudget or the
    topology spread, which only these schemas and the selectors below check."""
    documents = rendered(overlay)
    for doc in documents:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    split = Rendered.of(documents)
    assert sorted(d["kind"] for d in split.played) == ["ConfigMap", "Deployment"]
    assert [d["kind"] for d in split.secrets] == ["Secret"]
    by_kind = {d["kind"]: d for d in split.not_played}
    assert sorted(by_kind) == ["PodDisruptionBudget", "Service"]
    (deployment,) = [d for d in split.played if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert {d["metadata"]["namespace"] for d in documents} == {"kafka-replication"}
    assert by_kind["Service"]["spec"]["selector"].items() <= labels.items()
    assert (
        by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    )
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    # the generated names (content hashes) are the ones the pod refers to
    (container,) = pod["spec"]["containers"]
    names = {d["kind"]: d["metadata"]["name"] for d in documents}
    assert container["envFrom"] == [
        {"configMapRef": {"name": names["ConfigMap"]}},
        {"secretRef": {"name": names["Secret"]}},
    ]


@cache
def base() -> dict[str, dict[str, Any]]:
    """The base's resources by kind."""
    kustomization = load_yaml(KUBERNETES / "base" / "kustomization.yaml")
    found: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in manifests(KUBERNETES / "base" / name):
            found[doc["kind"]] = doc
    return found


def check_pod(
    pod: dict[str, Any], container: dict[str, Any], settings: Settings, readiness: str | None
) -> None:
    """Probes, port and termination grace of a replicator container, against its settings."""
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (port_name,) = [name for name, number in ports.items() if number == settings.http_port]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": port_name}
    if readiness is None:
        assert "readinessProbe" not in container
    else:
        assert container["readinessProbe"]["httpGet"] == {"path": readiness, "port": port_name}
    if "startupProbe" in container:
        assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    assert container["args"] == ["run"]
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["terminationGracePeriodSeconds"] * 1000 >= settings.shutdown_grace_ms + 5000


def test_base_deployment_is_probed_drained_and_disruption_budgeted() -> None:
    deployment, pdb, service = (
        base()["Deployment"],
        base()["PodDisruptionBudget"],
        base()["Service"],
    )
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["replicas"] >= 2
    assert pod["spec"]["enableServiceLinks"] is False
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (container,) = pod["spec"]["containers"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(container["ports"][0]["containerPort"])
    assert annotations["prometheus.io/path"] == "/metrics"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    kustomization = load_yaml(KUBERNETES / "base" / "kustomization.yaml")
    version = project()["version"]
    assert kustomization["images"] == [{"name": container["image"], "newTag": version}]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_configures_its_datacenter_from_a_config_map_and_a_secret(overlay: Path) -> None:
    kustomization = load_yaml(overlay / "kustomization.yaml")
    assert kustomization["resources"] == ["../../base"]
    (config_map,) = kustomization["configMapGenerator"]
    (secret,) = kustomization["secretGenerator"]
    pod = base()["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    sources = container["envFrom"]
    assert {"configMapRef": {"name": config_map["name"]}} in sources
    assert {"secretRef": {"name": secret["name"]}} in sources
    plain = {k: v for f in config_map["envs"] for k, v in env_file(overlay / f).items()}
    secrets = {k: v for f in secret["envs"] for k, v in env_file(overlay / f).items()}
    assert not [k for k in plain if k.endswith("PASSWORD")], "passwords belong in the Secret"
    assert secrets and all(k.endswith("__SASL_PASSWORD") for k in secrets)
    settings = settings_of({**plain, **secrets})
    assert settings.local_cluster == overlay.name
    assert {c.sasl_username for c in settings.clusters.values()} == {
        f"replicator-{overlay.name}",
        f"replicator-from-{overlay.name}",
    }, "one principal per cluster"
    # local scope: a remote outage must not hold a rolling update (it shows in the metrics)
    check_pod(pod["spec"], container, settings, readiness="/readyz?scope=local")


def overlay_replicas(overlay: Path) -> int:
    """The replicas an overlay runs: its kustomization's ``replicas`` knob, else the base's."""
    deployment = base()["Deployment"]
    name = deployment["metadata"]["name"]
    knobs = load_yaml(overlay / "kustomization.yaml").get("replicas", [])
    assert all(knob["name"] == name for knob in knobs), f"{knobs} must name {name}"
    counts = [int(knob["count"]) for knob in knobs]
    return counts[-1] if counts else int(deployment["spec"]["replicas"])


def test_disruption_budget_lets_one_replica_go_at_a_time() -> None:
    pdb = base()["PodDisruptionBudget"]
    assert pdb["apiVersion"] == "policy/v1"
    spec = pdb["spec"]
    # maxUnavailable, not minAvailable: it holds whatever replicas an overlay sets.
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
    # A local outage makes every replica unready: a drain must still be able to evict them.
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_datacenter_runs_several_replicas_and_rolls_them_one_rebalance_at_a_time(
    overlay: Path,
) -> None:
    deployment, pdb = base()["Deployment"], base()["PodDisruptionBudget"]
    replicas = overlay_replicas(overlay)
    assert replicas >= 2, "one replica per datacenter stops replication at every restart"
    assert replicas > pdb["spec"]["maxUnavailable"], "a drain would take every replica at once"
    strategy = deployment["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    # One pod joins (one rebalance) before one leaves; never below the replicas.
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # The next step waits for the rebalance of the last join to settle.
    assert deployment["spec"]["minReadySeconds"] >= 10
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz?scope=local"


def test_sidecar_example_runs_beside_a_broker_and_is_configured_like_the_deployment() -> None:
    docs = list(manifests(KUBERNETES / "examples" / "kafka-with-replicator-sidecar.yaml"))
    by_kind = {doc["kind"]: doc for doc in docs}
    env = {**by_kind["ConfigMap"]["data"], **by_kind["Secret"]["stringData"]}
    settings = settings_of(env)
    pod = by_kind["StatefulSet"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"kafka", "replicator"}
    local = settings.clusters[settings.local_cluster].servers
    assert local == [f"localhost:{containers['kafka']['ports'][0]['containerPort']}"]
    # the broker alone decides its pod's readiness; the replicator must not take it out of DNS
    check_pod(pod, containers["replicator"], settings, readiness=None)
    assert containers["kafka"]["readinessProbe"]
    assert by_kind["Service"]["spec"]["publishNotReadyAddresses"] is True
    assert pod["enableServiceLinks"] is False, "injected *_PORT variables would be unknown settings"
    wait = containers["kafka"]["lifecycle"]["preStop"]["exec"]["command"]
    assert wait[0] == "sleep" and float(wait[1]) * 1000 > settings.shutdown_grace_ms


# -- the Grafana dashboard --------------------------------------------------------------------


@cache
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (DEPLOY / "grafana" / "dashboards" / "replicator.json").read_text()
    )
    return loaded


def catalogue() -> dict[str, set[str]]:
    """Every series name the replicator exports, with its label names."""
    series: dict[str, set[str]] = {}
    for spec in Metrics().catalogue:
        names = [spec.name]
        if spec.kind == "histogram":
            names = [spec.name + s for s in ("_bucket", "_sum", "_count")]
        for name in names:
            series[name] = set(spec.labels) | ({"le"} if name.endswith("_bucket") else set())
    return series


def test_dashboard_queries_name_exported_metrics_and_labels_only() -> None:
    exported = catalogue()
    expressions = [
        (panel["title"], target["expr"], target.get("legendFormat", ""))
        for panel in dashboard()["panels"]
        for target in panel["targets"]
    ]
    used = set()
    for title, expr, legend in expressions:
        metrics = re.findall(r"\breplicator_[a-z_]+", expr)
        assert metrics, title
        labels = set().union(*(exported.get(m, set()) for m in metrics))
        for metric in metrics:
            assert metric in exported, f"{title}: {metric} is not exported"
            used.add(metric.removesuffix("_bucket"))
        selected = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr))
        grouped = {
            label.strip()
            for group in re.findall(r"\bby\s*\(([^)]*)\)", expr)
            for label in group.split(",")
        }
        shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        for label in selected | grouped | shown:
            assert label in labels, f"{title}: label {label} not on {metrics}"
    variables = dashboard()["templating"]["list"]
    for variable in variables:
        if variable["type"] == "query":
            metric, label = re.findall(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])[0]
            assert label in exported[metric]
    wanted = {
        "replicator_records_replicated_total",  # throughput per leg
        "replicator_commit_lag_records",  # lag per topic
        "replicator_commit_lag_max_records",  # the most one partition lags, per leg
        "replicator_leg_partitions",  # partitions by state (starting, stalled, halted...)
        "replicator_replication_latency_seconds",  # latency percentiles
        "replicator_records_skipped_total",  # skipped
        "replicator_send_errors_total",  # failed
        "replicator_leg_ready",  # readiness
    }
    assert wanted <= used


def test_dashboard_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, panel["title"]
        cells |= area


def test_image_package_list_is_the_requirements_and_the_wheel() -> None:
    """deploy/image-packages.txt (read from a built sidecar image) names exactly the pins of
    deploy/requirements.txt plus the replicator wheel at pyproject.toml's version, the version
    the Dockerfile's labels default to."""
    version = project()["version"]
    expected = {**pinned(DEPLOY / "requirements.txt"), "replicator": version}
    assert pinned(DEPLOY / "image-packages.txt") == expected
    assert f"ARG VERSION={version}\n" in (DEPLOY / "Dockerfile").read_text()
