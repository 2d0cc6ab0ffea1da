"""The alerting rules against the product: they name only exported series and labels, every alert
is documented and carries what an on-call needs, the Compose rules file equals the PrometheusRule,
and each alert fires in its condition and not outside it, as Prometheus evaluates it.

Firing is proven by Prometheus's own ``promtool test rules`` over the unit tests in
``tests/repository/alerts/`` (one case per condition: the series a replicator exports, healthy and
then changed; the alert expected with its labels and rendered annotations; the exact set of
alerts firing). ``promtool`` is the pinned build :mod:`replicator.devtools.promtool` fetches once.

Regenerate the Compose rules file from the PrometheusRule:
``python -m tests.repository.test_alerts``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.devtools.manifests import render
from replicator.devtools.promtool import promtool
from replicator.telemetry.metrics import Metrics
from tests.repository.deployment import (
    DEPLOY,
    KUBERNETES,
    ROOT,
    compose,
    load_yaml,
    manifests,
    mounts,
)

MONITORING = KUBERNETES / "components" / "monitoring"
RULES_FILE = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_DOC = ROOT / "docs" / "operations" / "alerts.md"
JOB = "replicator"  # the Compose job_name, and the Service name a ServiceMonitor's job takes

# Series Prometheus itself adds for every target, with the labels every scraped series gets.
TARGET_LABELS = {"job", "instance"}
SYNTHETIC = {"up": set(TARGET_LABELS)}
SEVERITIES = {"critical", "warning", "info"}
DURATION = re.compile(r"^(0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")
RULE_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations", "record"}
GROUP_KEYS = {"name", "interval", "rules", "limit", "query_offset", "partial_response_strategy"}


# -- the rules as shipped ----------------------------------------------------------------------


@cache
def prometheus_rule() -> dict[str, Any]:
    (doc,) = manifests(MONITORING / "prometheusrule.yaml")
    return doc


def groups() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = prometheus_rule()["spec"]["groups"]
    return found


def alerts() -> list[dict[str, Any]]:
    return [rule for group in groups() for rule in group["rules"] if "alert" in rule]


RULES_HEADER = """\
# The replicator's alerts as a plain Prometheus rules file, loaded by the Compose demo's
# Prometheus (prometheus.yml: rule_files). Generated from
# deploy/kubernetes/components/monitoring/prometheusrule.yaml; do not edit by hand:
#   python -m tests.repository.test_alerts
# Runbooks: docs/operations/alerts.md.
"""


class _Dumper(yaml.SafeDumper):
    """Long texts (descriptions, expressions) as folded blocks, as in the PrometheusRule."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = ">" if len(value) > 80 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def rules_file_text() -> str:
    body = yaml.dump({"groups": groups()}, Dumper=_Dumper, sort_keys=False, width=96)
    return RULES_HEADER + body


def catalogue() -> dict[str, set[str]]:
    """Every series name the product exports, with its label names (scrape labels added)."""
    series: dict[str, set[str]] = dict(SYNTHETIC)
    for spec in Metrics().catalogue:
        names = [spec.name]
        if spec.kind == "histogram":
            names = [spec.name + s for s in ("_bucket", "_sum", "_count")]
        for name in names:
            extra = {"le"} if name.endswith("_bucket") else set()
            series[name] = set(spec.labels) | TARGET_LABELS | extra
    return series


# -- static checks -----------------------------------------------------------------------------

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
KEYWORDS |= {"and", "or", "unless", "inf", "nan"}


def referenced(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and label names a PromQL expression refers to."""
    labels: set[str] = set()
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    for matchers in re.findall(r"\{([^}]*)\}", text):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    text = re.sub(r"\{[^}]*\}", " ", text)
    for grouping in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        labels |= {label.strip() for label in grouping.split(",") if label.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = {
        name
        for name in re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", text)
        if name.lower() not in KEYWORDS
    }
    return names, labels


def unknown_references(expr: str) -> list[str]:
    """What an expression names that the product does not export (empty when all is known)."""
    exported = catalogue()
    names, labels = referenced(expr)
    problems = [f"metric {name} is not exported" for name in sorted(names - exported.keys())]
    known = set().union(*(exported.get(name, set()) for name in names)) if names else set()
    problems += [f"label {label} is not on {sorted(names)}" for label in sorted(labels - known)]
    if not names:
        problems.append("names no metric")
    return problems


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: r["alert"])
def test_alert_names_only_exported_series_and_labels(rule: dict[str, Any]) -> None:
    assert unknown_references(rule["expr"]) == []


def test_a_misspelt_metric_or_label_is_caught() -> None:
    assert unknown_references("replicator_leg_ready == 0") == []
    assert unknown_references("replicator_leg_redy == 0") == [
        "metric replicator_leg_redy is not exported"
    ]
    assert unknown_references('increase(replicator_records_lost_totl{leg="a"}[5m]) > 0')
    assert unknown_references('replicator_leg_partitions{stat="halted"} > 0')
    assert unknown_references("sum by (leg, topik) (replicator_commit_lag_records) > 1")
    assert unknown_references("rate(replicator_replication_latency_seconds[5m]) > 1"), (
        "a histogram is exported as _bucket, _sum and _count only"
    )
    names, _ = referenced(rule_expr("ReplicatorLatencyHigh"))
    assert names == {"replicator_replication_latency_seconds_bucket"}


def rule_expr(name: str) -> str:
    (expr,) = [rule["expr"] for rule in alerts() if rule["alert"] == name]
    return str(expr)


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: r["alert"])
def test_alert_says_how_long_how_bad_what_and_where_to_look(rule: dict[str, Any]) -> None:
    assert set(rule) <= RULE_KEYS
    assert DURATION.match(str(rule["for"])), rule["for"]
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    anchor = rule["alert"].lower()
    assert annotations["runbook_url"] == f"docs/operations/alerts.md#{anchor}"
    assert re.fullmatch(r"Replicator[A-Z]\w+", rule["alert"])
    _, labels = referenced(rule["expr"])
    shown = set(re.findall(r"\$labels\.(\w+)", annotations["summary"] + annotations["description"]))
    exported = catalogue()
    names, _ = referenced(rule["expr"])
    available = set().union(*(exported[n] for n in names)) | labels
    assert shown <= available, f"{rule['alert']} shows labels its series do not have"
    if available & {"leg", "flow", "group"}:
        assert shown & {"leg", "flow", "group"}, "the description names the leg, flow or group"


def test_rule_groups_have_unique_names_and_known_fields() -> None:
    names = [group["name"] for group in groups()]
    assert len(set(names)) == len(names)
    assert all(set(group) <= GROUP_KEYS for group in groups())
    alert_names = [rule["alert"] for rule in alerts()]
    assert len(set(alert_names)) == len(alert_names)


def test_every_alert_has_a_runbook_section_in_the_docs() -> None:
    text = ALERTS_DOC.read_text()
    sections = re.findall(r"^## (\S+)\s*$", text, re.MULTILINE)
    for rule in alerts():
        assert rule["alert"] in sections, f"docs/operations/alerts.md: no '## {rule['alert']}'"
    documented = {s for s in sections if s.startswith("Replicator")}
    assert documented == {rule["alert"] for rule in alerts()}, "a documented alert is not shipped"


def test_the_alerts_cover_what_operations_needs() -> None:
    used = set()
    for rule in alerts():
        names, _ = referenced(rule["expr"])
        used |= names
    assert {
        "up",  # the process down or not scraped
        "replicator_leg_ready",
        "replicator_leg_partitions",  # halted, stalled, starting
        "replicator_topics_blocked",
        "replicator_commit_lag_records",
        "replicator_commit_lag_max_records",
        "replicator_replication_latency_seconds_bucket",  # lag in seconds
        "replicator_heartbeat_age_seconds",
        "replicator_records_lost_total",
        "replicator_records_skipped_total",
        "replicator_duplicates_written_total",
        "replicator_checkpoint_age_seconds",
        "replicator_send_errors_total",
        "replicator_offset_resets_total",
        "replicator_records_dead_lettered_total",
    } <= used


# -- the two forms of the rules ----------------------------------------------------------------


def test_compose_rules_file_holds_the_prometheus_rule_groups() -> None:
    shipped = load_yaml(RULES_FILE)
    assert shipped == {"groups": groups()}, "regenerate: python -m tests.repository.test_alerts"
    assert RULES_FILE.read_text() == rules_file_text()


def test_compose_prometheus_loads_the_rules_file() -> None:
    prometheus = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    service = compose()["services"]["prometheus"]
    in_container = mounts(service)
    config_dir = "/etc/prometheus"
    assert in_container[f"{config_dir}/prometheus.yml"] == "./prometheus/prometheus.yml"
    for rule_file in prometheus["rule_files"]:
        path = rule_file if rule_file.startswith("/") else f"{config_dir}/{rule_file}"
        assert (DEPLOY / in_container[path]).resolve() == RULES_FILE.resolve()
    assert {job["job_name"] for job in prometheus["scrape_configs"]} == {JOB}


# -- the Prometheus Operator resources ---------------------------------------------------------


def test_monitoring_component_holds_the_rule_and_a_monitor_of_the_base_service() -> None:
    kustomization = load_yaml(MONITORING / "kustomization.yaml")
    assert kustomization["kind"] == "Component"
    by_kind = {
        doc["kind"]: doc
        for name in kustomization["resources"]
        for doc in manifests(MONITORING / name)
    }
    assert set(by_kind) == {"PrometheusRule", "ServiceMonitor"}
    assert all(d["apiVersion"] == "monitoring.coreos.com/v1" for d in by_kind.values())
    monitor = by_kind["ServiceMonitor"]["spec"]
    (service,) = manifests(KUBERNETES / "base" / "service.yaml")
    base = load_yaml(KUBERNETES / "base" / "kustomization.yaml")
    service_labels = {**service["metadata"].get("labels", {}), **base["labels"][0]["pairs"]}
    assert monitor["selector"]["matchLabels"].items() <= service_labels.items()
    # without the CRD models (the test below), at least the fields used, as the CRD spells them
    assert set(monitor) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    (endpoint,) = monitor["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels"}
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    # the operator names the job after the Service: what the ReplicatorDown rules select
    assert service["metadata"]["name"] == JOB and "jobLabel" not in monitor


def test_an_overlay_with_the_monitoring_component_builds(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "kafka-replication",
                "resources": [os.path.relpath(KUBERNETES / "base", overlay)],
                "components": [os.path.relpath(MONITORING, overlay)],
            }
        )
    )
    kinds = {doc["kind"]: doc for doc in render(overlay)}
    assert {"Deployment", "Service", "PrometheusRule", "ServiceMonitor"} <= set(kinds)
    assert kinds["ServiceMonitor"]["metadata"]["namespace"] == "kafka-replication"
    labels = kinds["Service"]["metadata"]["labels"]
    assert kinds["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def crd_models() -> Any:
    """The prometheus-operator CRDs as pydantic models (cloudcoil), when installed."""
    return pytest.importorskip(
        "cloudcoil.models.prometheus_operator.v1",
        reason="cloudcoil-models-prometheus-operator (the operator's CRD schemas) not installed",
    )


def unknown_fields(model: Any, data: Any, path: str) -> list[str]:
    """Keys of ``data`` that the CRD model does not define (the models ignore extra keys)."""
    import typing

    from pydantic import BaseModel

    def models_in(annotation: Any) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]

    if not isinstance(data, dict):
        return []
    fields = {f.alias or name: f for name, f in model.model_fields.items()}
    problems = []
    for key, value in data.items():
        if key not in fields:
            problems.append(f"{path}.{key}")
            continue
        for sub in models_in(fields[key].annotation)[:1]:
            for item in value if isinstance(value, list) else [value]:
                problems += unknown_fields(sub, item, f"{path}.{key}")
    return problems


@pytest.mark.parametrize("name", ["prometheusrule.yaml", "servicemonitor.yaml"])
def test_monitoring_resources_validate_against_the_operator_crds(name: str) -> None:
    v1 = crd_models()
    for doc in manifests(MONITORING / name):
        model = getattr(v1, doc["kind"])
        model.model_validate(doc)
        assert unknown_fields(model, doc, doc["kind"]) == []


# -- the rules evaluated by Prometheus's own promtool -------------------------------------------

PROMTOOL_TESTS = Path(__file__).parent / "alerts"
"""promtool's unit tests of the rules: per case, a replicator's series over time (the healthy
ones plus what the case changes), the alert expected with its labels and rendered annotations, no
alert before the case nor before its ``for:``, and the exact set of alerts firing
(``ALERTS{alertstate="firing"}``), so no other alert fires with it."""

FIRING = 'ALERTS{alertstate="firing"}'
SERIES = re.compile(r"^([a-zA-Z_:][\w:]*)\{(.*)\}$")


def promtool_run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool()), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def promtool_tests() -> list[Path]:
    return sorted(PROMTOOL_TESTS.glob("*.yml"))


@cache
def promtool_cases() -> list[dict[str, Any]]:
    return [case for path in promtool_tests() for case in load_yaml(path)["tests"]]


def test_promtool_accepts_the_rules_file() -> None:
    done = promtool_run("check", "rules", RULES_FILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    done = promtool_run("test", "rules", *promtool_tests())
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_promtool_tests_fail_when_a_rule_changes(tmp_path: Path) -> None:
    """The unit tests bite: the same tests against a rules file whose lag threshold moved fail."""
    rules = tmp_path / RULES_FILE.relative_to(ROOT)
    rules.parent.mkdir(parents=True)
    text = RULES_FILE.read_text()
    assert "(replicator_commit_lag_records) > 100000" in text
    rules.write_text(text.replace("(replicator_commit_lag_records) > 100000", "(x) > 100000"))
    test = tmp_path / (PROMTOOL_TESTS / "lag.yml").relative_to(ROOT)
    test.parent.mkdir(parents=True)
    shutil.copy(PROMTOOL_TESTS / "lag.yml", test)
    done = promtool_run("test", "rules", test)
    assert done.returncode != 0 and "ReplicatorLagHigh" in done.stdout + done.stderr


def test_the_promtool_tests_load_the_shipped_rules_file() -> None:
    for path in promtool_tests():
        (rule_file,) = load_yaml(path)["rule_files"]
        assert (path.parent / rule_file).resolve() == RULES_FILE.resolve(), path.name


def test_every_alert_is_proven_to_fire_by_a_promtool_test() -> None:
    proven = {
        test["alertname"]
        for case in promtool_cases()
        for test in case.get("alert_rule_test", [])
        if test.get("exp_alerts")
    }
    assert proven == {rule["alert"] for rule in alerts()}


def test_each_promtool_case_names_every_alert_firing_and_none_before() -> None:
    """Where a case expects an alert, the set of all firing alerts at that time is checked too
    (no other alert fires with it), and a case that changes a healthy replicator fires nothing
    before the change."""
    for case in promtool_cases():
        exact = {
            test["eval_time"]: test["exp_samples"]
            for test in case.get("promql_expr_test", [])
            if test["expr"] == FIRING
        }
        assert exact, f"{case['name']}: no check of every alert firing"
        for test in case.get("alert_rule_test", []):
            if test.get("exp_alerts"):
                assert test["eval_time"] in exact, f"{case['name']}: {test['eval_time']}"
                assert exact[test["eval_time"]], case["name"]
        if case["input_series"] and case.get("alert_rule_test"):
            assert any(samples == [] for samples in exact.values()), case["name"]


def test_each_promtool_case_waits_out_the_alerts_for() -> None:
    """An alert with a ``for:`` is expected not to fire a minute before it has held that long."""
    waits = {rule["alert"] for rule in alerts() if str(rule["for"]) not in ("0", "0m", "0s")}
    quiet = {
        test["alertname"]
        for case in promtool_cases()
        for test in case.get("alert_rule_test", [])
        if not test.get("exp_alerts")
    }
    assert waits <= quiet, f"no case shows these still pending: {sorted(waits - quiet)}"


def test_the_promtool_inputs_are_series_the_product_exports() -> None:
    """The cases feed the rules the series and labels the product exports, with the scrape's."""
    exported = catalogue()
    for case in promtool_cases():
        for item in case["input_series"]:
            match = SERIES.match(item["series"])
            assert match, item["series"]
            name, matchers = match.groups()
            labels = set(re.findall(r"(\w+)=\"", matchers))
            assert name in exported, f"{case['name']}: {name} is not exported"
            assert labels == exported[name], f"{case['name']}: {item['series']}"


def test_the_expected_annotations_are_fully_rendered() -> None:
    for case in promtool_cases():
        for test in case.get("alert_rule_test", []):
            for alert in test.get("exp_alerts", []):
                for text in alert["exp_annotations"].values():
                    assert "{{" not in text and "<no value>" not in text, text


if __name__ == "__main__":
    RULES_FILE.write_text(rules_file_text())
    print(f"wrote {RULES_FILE.relative_to(ROOT)}", file=sys.stderr)
