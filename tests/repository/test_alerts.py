"""The alerting rules against the product: they name only exported series and labels, every alert
is documented and carries what an on-call needs, the Compose rules file equals the PrometheusRule,
and each alert fires on the exposition the product renders (and stays quiet on a healthy one).

Firing is proven by a small evaluator of the PromQL subset the rules use (selectors, ``offset``,
``rate``/``increase`` over two scrapes one window apart, ``absent``, ``histogram_quantile``,
``sum``/``max``/``min by``, comparisons with a constant, ``and``/``or``/``unless``), run over two
real ``/metrics`` renderings of the product's :class:`Metrics` catalogue driven as the data path
drives it (same label order as the call sites). What it does not model: ``for:`` (an alert here is
"pending"), Prometheus's extrapolation of ``rate``/``increase`` to the window edges (the two
scrapes are the edges), staleness. An expression outside the subset fails the parse, loudly.

Regenerate the Compose rules file from the PrometheusRule:
``python -m tests.repository.test_alerts``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

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


def kubectl() -> str | None:
    return shutil.which("kubectl")


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with its built-in kustomize) not installed")
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
    done = subprocess.run(
        [str(kubectl()), "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    kinds = {doc["kind"]: doc for doc in yaml.safe_load_all(done.stdout) if doc}
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


# -- a small evaluator for the PromQL the rules use --------------------------------------------

Labels = tuple[tuple[str, str], ...]
Vector = dict[Labels, float]
Scrape = dict[Labels, float]


@dataclass(frozen=True)
class RangeVector:
    now: Vector
    before: Vector
    seconds: float


Value = float | Vector | RangeVector

TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![\w])|(?P<duration>\d+(?:ms|[smhdwy]))"
    r"|(?P<string>\"(?:[^\"\\]|\\.)*\")|(?P<name>[a-zA-Z_:][\w:]*)"
    r"|(?P<op>==|!=|>=|<=|=~|!~|[<>=(){}\[\],]))"
)
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}
AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {"sum": sum, "max": max, "min": min}


def seconds_of(duration: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|[smhdwy])", duration).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit]


def signature(labels: Labels) -> Labels:
    return tuple((k, v) for k, v in labels if k != "__name__")


@dataclass
class World:
    """Two scrapes of every target: ``before`` one rule window before ``now``."""

    now: Scrape
    before: Scrape


@dataclass
class Parser:
    """Recursive descent over the PromQL subset; evaluates as it parses."""

    text: str
    world: World
    tokens: list[tuple[str, str]] = field(default_factory=list)
    at: int = 0

    def __post_init__(self) -> None:
        position = 0
        text = self.text.strip()
        while position < len(text):
            match = TOKEN.match(text, position)
            assert match and match.end() > position, f"cannot parse {text[position:]!r}"
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match.group(kind)))
            position = match.end()

    def peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.at + offset
        return self.tokens[index] if index < len(self.tokens) else ("end", "")

    def take(self, expected: str | None = None) -> str:
        _, text = self.peek()
        assert expected is None or text == expected, f"expected {expected!r}, got {text!r}"
        self.at += 1
        return text

    def parse(self) -> Value:
        value = self.union()
        assert self.peek()[0] == "end", f"unparsed: {self.tokens[self.at :]}"
        return value

    def union(self) -> Value:
        left = self.intersection()
        while self.peek() == ("name", "or"):
            self.take()
            right = self.intersection()
            assert isinstance(left, dict) and isinstance(right, dict)
            seen = {signature(k) for k in left}
            left = {**left, **{k: v for k, v in right.items() if signature(k) not in seen}}
        return left

    def intersection(self) -> Value:
        left = self.comparison()
        while self.peek() in (("name", "and"), ("name", "unless")):
            keep = self.take() == "and"
            right = self.comparison()
            assert isinstance(left, dict) and isinstance(right, dict)
            other = {signature(k) for k in right}
            left = {k: v for k, v in left.items() if (signature(k) in other) == keep}
        return left

    def comparison(self) -> Value:
        left = self.primary()
        kind, op = self.peek()
        if kind == "op" and op in COMPARISONS:
            self.take()
            right = self.primary()
            assert isinstance(left, dict) and isinstance(right, float), "vector op constant only"
            test = COMPARISONS[op]
            return {k: v for k, v in left.items() if test(v, right)}
        return left

    def primary(self) -> Value:
        kind, text = self.peek()
        if kind == "number":
            return float(self.take())
        if text == "(":
            self.take("(")
            value = self.union()
            self.take(")")
            return value
        assert kind == "name", f"unexpected {text!r}"
        if text in AGGREGATIONS:
            return self.aggregation()
        if self.peek(1)[1] == "(":
            return self.function()
        return self.selector()

    def grouping(self) -> list[str]:
        self.take("by")
        self.take("(")
        labels = []
        while self.peek()[1] != ")":
            labels.append(self.take())
            if self.peek()[1] == ",":
                self.take(",")
        self.take(")")
        return labels

    def aggregation(self) -> Vector:
        combine = AGGREGATIONS[self.take()]
        by = self.grouping() if self.peek()[1] == "by" else None
        self.take("(")
        inner = self.union()
        self.take(")")
        if by is None and self.peek()[1] == "by":
            by = self.grouping()
        assert isinstance(inner, dict) and by is not None, "aggregations here group by labels"
        grouped: dict[Labels, list[float]] = {}
        for labels, value in inner.items():
            key = tuple((k, v) for k, v in labels if k in by)
            grouped.setdefault(key, []).append(value)
        return {key: combine(values) for key, values in grouped.items()}

    def function(self) -> Value:
        name = self.take()
        self.take("(")
        args = [self.union()]
        while self.peek()[1] == ",":
            self.take(",")
            args.append(self.union())
        self.take(")")
        if name in ("rate", "increase"):
            (window,) = args
            assert isinstance(window, RangeVector)
            result = {}
            for labels, now in window.now.items():
                if labels not in window.before:
                    continue  # one sample in the window: Prometheus returns nothing either
                before = window.before[labels]
                grown = now - before if now >= before else now  # a counter reset
                result[signature(labels)] = grown / window.seconds if name == "rate" else grown
            return result
        if name == "absent":
            (vector,) = args
            assert isinstance(vector, dict)
            return {} if vector else {self.last_equalities: 1.0}
        if name == "histogram_quantile":
            quantile, buckets = args
            assert isinstance(quantile, float) and isinstance(buckets, dict)
            return histogram_quantile(quantile, buckets)
        raise AssertionError(f"function {name} is outside the evaluated subset")

    def selector(self) -> Value:
        name = self.take()
        matchers: list[tuple[str, str, str]] = []
        if self.peek()[1] == "{":
            self.take("{")
            while self.peek()[1] != "}":
                label, op, value = self.take(), self.take(), self.take()
                matchers.append((label, op, value[1:-1]))
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("}")
        self.last_equalities = tuple(sorted((k, v) for k, op, v in matchers if op == "="))
        window = None
        if self.peek()[1] == "[":
            self.take("[")
            window = seconds_of(self.take())
            self.take("]")
        earlier = False
        if self.peek() == ("name", "offset"):
            self.take()
            self.take()
            earlier = True

        def select(scrape: Scrape) -> Vector:
            return {
                labels: value
                for labels, value in scrape.items()
                if dict(labels).get("__name__") == name and matches(dict(labels), matchers)
            }

        if window is not None:
            return RangeVector(select(self.world.now), select(self.world.before), window)
        return select(self.world.before if earlier else self.world.now)

    last_equalities: Labels = ()


def matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for label, op, value in matchers:
        actual = labels.get(label, "")
        found = re.fullmatch(value, actual) is not None if op in ("=~", "!~") else actual == value
        if found != (op in ("=", "=~")):
            return False
    return True


def histogram_quantile(quantile: float, buckets: Vector) -> Vector:
    """Prometheus's bucketQuantile: linear interpolation inside the bucket holding the rank."""
    series: dict[Labels, list[tuple[float, float]]] = {}
    for labels, count in buckets.items():
        le = float(dict(labels)["le"])
        key = tuple((k, v) for k, v in labels if k not in ("le", "__name__"))
        series.setdefault(key, []).append((le, count))
    result: Vector = {}
    for key, points in series.items():
        points.sort()
        total = points[-1][1]
        if points[-1][0] != math.inf or total == 0:
            result[key] = math.nan
            continue
        rank = quantile * total
        index = next(i for i, (_, count) in enumerate(points) if count >= rank)
        if index == len(points) - 1:
            result[key] = points[-2][0]
            continue
        start, below = (0.0, 0.0) if index == 0 else points[index - 1]
        end, count = points[index]
        result[key] = start + (end - start) * (rank - below) / (count - below)
    return result


def evaluate(expr: str, world: World) -> Vector:
    value = Parser(expr, world).parse()
    assert isinstance(value, dict), f"{expr} is not an instant vector"
    return value


def scrape(metrics: Metrics | None, instance: str) -> Scrape:
    """What Prometheus stores from one scrape of a replicator: its series plus ``up``."""
    target = {"job": JOB, "instance": instance}
    found: Scrape = {(("__name__", "up"), *sorted(target.items())): 0.0 if metrics is None else 1.0}
    if metrics is None:
        return found
    text = metrics.exposition().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {"__name__": sample.name, **sample.labels, **target}
            found[tuple(sorted(labels.items()))] = float(sample.value)
    return found


# -- the product, driven as the data path drives it --------------------------------------------

LEG, REMOTE, FLOW = "dc1->dc1", "dc1->dc2", "mirror"


def healthy(metrics: Metrics) -> None:
    """A replicator at work: traffic, loop skips, ready legs, small lag, fresh heartbeats."""
    m = metrics
    for leg in (LEG, REMOTE):
        m.records_replicated.labels(leg, "orders").inc(5000)
        m.bytes_replicated.labels(leg, "orders").inc(500_000)
        m.records_skipped.labels(leg, "orders", "loop").inc(40)  # the loop rule at work
        m.commits.labels(leg, "ok").inc(10)
        m.rebalances.labels(leg).inc()
        m.leg_ready.labels(leg).set(1)
        m.assigned_partitions.labels(leg).set(3)
        m.leg_partitions.labels(leg, "replicating").set(3)
        for state in ("starting", "stalled", "halted"):
            m.leg_partitions.labels(leg, state).set(0)
        m.topics_blocked.labels(leg).set(0)
        m.commit_lag.labels(leg, "orders").set(120)
        m.commit_lag_max.labels(leg).set(60)
        m.idempotent_producer.labels(leg).set(1)
        for _ in range(200):
            m.latency.labels(leg).observe(0.04)
        m.resume_seconds.labels(leg).observe(0.2)
        m.duplicates_possible.labels(leg, "orders", "unacknowledged_at_release").inc(3)
    m.heartbeats_emitted.labels(FLOW).inc(60)
    m.heartbeat_age.labels(FLOW).set(1.5)
    m.heartbeat_delay.labels(FLOW).set(0.2)
    m.checkpoint_age.labels("billing", "dc1", "dc2").set(45)
    m.checkpoints_written.labels("billing", "dc1", "dc2").inc(6)


@dataclass(frozen=True)
class Scenario:
    name: str
    change: Callable[[Metrics], None]
    fires: tuple[str, ...]  # the first is the alert the scenario is about
    labels: dict[str, str]  # the main alert's labels include these
    before: Callable[[Metrics], None] = lambda m: None  # state already there one window ago


def remote_down(m: Metrics) -> None:
    m.leg_ready.labels(REMOTE).set(0)


def halted(m: Metrics) -> None:
    m.leg_partitions.labels(REMOTE, "halted").set(2)
    m.leg_partitions.labels(REMOTE, "replicating").set(1)
    m.leg_ready.labels(REMOTE).set(0)  # the census makes a leg with a halted partition unready


def stalled(m: Metrics) -> None:
    m.leg_partitions.labels(REMOTE, "stalled").set(1)
    m.leg_ready.labels(REMOTE).set(0)


def starting(m: Metrics) -> None:
    m.leg_partitions.labels(REMOTE, "starting").set(3)
    m.leg_partitions.labels(REMOTE, "replicating").set(0)
    m.leg_ready.labels(REMOTE).set(0)


def blocked(m: Metrics) -> None:
    m.topics_blocked.labels(REMOTE).set(1)
    halted(m)


def backlog(m: Metrics) -> None:
    m.commit_lag.labels(REMOTE, "orders").set(70_000)  # two replicas together: 140,000


def hot_partition(m: Metrics) -> None:
    m.commit_lag_max.labels(REMOTE).set(80_000)


def slow(m: Metrics) -> None:
    for _ in range(1000):
        m.latency.labels(REMOTE).observe(120.0)


def heartbeats_stopped(m: Metrics) -> None:
    m.heartbeat_age.labels(FLOW).set(900)


def lost(m: Metrics) -> None:
    m.records_lost.labels(REMOTE, "orders").inc(17)


def malformed(m: Metrics) -> None:
    m.records_skipped.labels(REMOTE, "orders", "malformed_provenance").inc(2)


def undecodable(m: Metrics) -> None:
    m.records_undecodable.labels(REMOTE, "orders").inc()
    halted(m)


def dead_lettered(m: Metrics) -> None:
    m.records_dead_lettered.labels(REMOTE, "orders").inc()


def reset_below_log_start(m: Metrics) -> None:
    m.offset_resets.labels(REMOTE, "orders", "below_log_start").inc()
    lost(m)


def duplicates(m: Metrics) -> None:
    m.duplicates_written.labels(REMOTE, "orders", "destination_replaced").inc(40)


def replaced(m: Metrics) -> None:
    m.partitions_replaced.labels(REMOTE, "orders").inc()


def send_errors(m: Metrics) -> None:
    m.send_errors.labels(REMOTE, "orders", "KafkaTimeoutError").inc(5)


def commit_failures(m: Metrics) -> None:
    m.commits.labels(REMOTE, "failed").inc(3)


def config_sync_refused(m: Metrics) -> None:
    m.topic_config_sync_failures.labels(REMOTE).inc()


def checkpoints_stale(m: Metrics) -> None:
    m.checkpoint_age.labels("billing", "dc1", "dc2").set(3600)
    m.checkpoint_failures.labels("dc1", "dc2").inc()


REMOTE_LEG = {"leg": REMOTE}
ORDERS = {"leg": REMOTE, "topic": "orders"}
NOT_READY = "ReplicatorLegNotReady"
HALTED = "ReplicatorPartitionsHalted"
SCENARIOS = [
    Scenario("a remote leg is down", remote_down, (NOT_READY,), REMOTE_LEG),
    Scenario("partitions halted", halted, (HALTED, NOT_READY), REMOTE_LEG),
    Scenario(
        "a partition stalled", stalled, ("ReplicatorPartitionsStalled", NOT_READY), REMOTE_LEG
    ),
    Scenario(
        "partitions starting",
        starting,
        ("ReplicatorPartitionsStuckStarting", NOT_READY),
        REMOTE_LEG,
    ),
    Scenario(
        "a topic blocked", blocked, ("ReplicatorTopicsBlocked", HALTED, NOT_READY), REMOTE_LEG
    ),
    Scenario("lag summed over the replicas", backlog, ("ReplicatorLagHigh",), ORDERS),
    Scenario("one partition lags", hot_partition, ("ReplicatorPartitionLagHigh",), REMOTE_LEG),
    Scenario("latency p99 two minutes", slow, ("ReplicatorLatencyHigh",), REMOTE_LEG),
    Scenario(
        "heartbeats stopped", heartbeats_stopped, ("ReplicatorHeartbeatStale",), {"flow": FLOW}
    ),
    Scenario("the first loss since the start", lost, ("ReplicatorRecordsLost",), ORDERS),
    Scenario("another loss", lost, ("ReplicatorRecordsLost",), ORDERS, before=lost),
    Scenario(
        "malformed provenance skipped",
        malformed,
        ("ReplicatorRecordsSkipped",),
        {**ORDERS, "reason": "malformed_provenance"},
    ),
    Scenario(
        "more malformed provenance",
        malformed,
        ("ReplicatorRecordsSkipped",),
        {**ORDERS, "reason": "malformed_provenance"},
        before=malformed,
    ),
    Scenario(
        "an undecodable record",
        undecodable,
        ("ReplicatorRecordsUndecodable", HALTED, NOT_READY),
        ORDERS,
    ),
    Scenario("a record dead-lettered", dead_lettered, ("ReplicatorRecordsDeadLettered",), ORDERS),
    Scenario(
        "positions reset below the log start",
        reset_below_log_start,
        ("ReplicatorOffsetResets", "ReplicatorRecordsLost"),
        {**ORDERS, "reason": "below_log_start"},
    ),
    Scenario(
        "duplicates written",
        duplicates,
        ("ReplicatorDuplicatesWritten",),
        {**ORDERS, "reason": "destination_replaced"},
    ),
    Scenario(
        "a destination partition replaced",
        replaced,
        ("ReplicatorDestinationPartitionReplaced",),
        ORDERS,
    ),
    Scenario(
        "send errors go on",
        send_errors,
        ("ReplicatorSendErrors",),
        {**ORDERS, "error": "KafkaTimeoutError"},
        before=send_errors,
    ),
    Scenario(
        "commits fail",
        commit_failures,
        ("ReplicatorCommitsFailing",),
        REMOTE_LEG,
        before=commit_failures,
    ),
    Scenario(
        "topic config sync refused",
        config_sync_refused,
        ("ReplicatorTopicConfigSyncFailing",),
        REMOTE_LEG,
    ),
    Scenario(
        "checkpoints stale",
        checkpoints_stale,
        ("ReplicatorCheckpointsStale",),
        {"group": "billing", "source": "dc1", "cluster": "dc2"},
    ),
]


def firing(world: World) -> dict[str, list[dict[str, str]]]:
    """Alert name -> the label sets it fires with (rule labels added)."""
    found: dict[str, list[dict[str, str]]] = {}
    for rule in alerts():
        for labels in evaluate(rule["expr"], world):
            found.setdefault(rule["alert"], []).append({**dict(labels), **rule["labels"]})
    return found


def replicas(change: Callable[[Metrics], None]) -> list[Metrics]:
    """Two replicas of a datacenter, both healthy, then ``change`` applied to both."""
    found = []
    for _ in range(2):
        metrics = Metrics()
        healthy(metrics)
        change(metrics)
        found.append(metrics)
    return found


def world_of(before: list[Metrics | None], now: list[Metrics | None]) -> World:
    def merged(targets: list[Metrics | None]) -> Scrape:
        scrapes: Scrape = {}
        for index, metrics in enumerate(targets):
            scrapes.update(scrape(metrics, f"replicator-{index}:8080"))
        return scrapes

    return World(now=merged(now), before=merged(before))


def test_a_healthy_replicator_fires_nothing() -> None:
    earlier = replicas(lambda m: None)
    later = replicas(lambda m: None)
    for metrics in later:  # more traffic, more loop skips, more possible duplicates
        healthy(metrics)
        metrics.leg_ready.labels(REMOTE).set(1)
    assert firing(world_of(list(earlier), list(later))) == {}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_alert_fires_on_the_products_exposition(scenario: Scenario) -> None:
    earlier = replicas(scenario.before)
    later = replicas(scenario.before)
    for metrics in later:
        scenario.change(metrics)
    fired = firing(world_of(list(earlier), list(later)))
    assert set(fired) == set(scenario.fires)
    main = fired[scenario.fires[0]]
    assert any(scenario.labels.items() <= labels.items() for labels in main), main
    for alert in scenario.fires:
        for labels in fired[alert]:
            rendered = render(alert, labels)
            assert "{{" not in rendered and "<no value>" not in rendered, rendered


def render(alert: str, labels: dict[str, str]) -> str:
    """The alert's summary and description as Alertmanager would show them."""
    (rule,) = [r for r in alerts() if r["alert"] == alert]
    text = rule["annotations"]["summary"] + " " + rule["annotations"]["description"]

    def label(match: re.Match[str]) -> str:
        return labels.get(match.group(1), "<no value>")

    text = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", label, text)
    return re.sub(r"\{\{\s*\$value\s*\}\}", "1", text)


def test_every_alert_is_proven_by_a_scenario_or_a_target_state() -> None:
    proven = {name for s in SCENARIOS for name in s.fires}
    proven |= {"ReplicatorDown", "ReplicatorMetricsAbsent"}  # the next test
    assert proven == {rule["alert"] for rule in alerts()}


def test_a_replicator_down_and_no_replicator_at_all_fire() -> None:
    one, two = replicas(lambda m: None)
    fired = firing(world_of([one, two], [one, None]))
    assert set(fired) == {"ReplicatorDown"}
    assert fired["ReplicatorDown"][0]["instance"] == "replicator-1:8080"
    fired = firing(World(now={}, before={}))
    assert set(fired) == {"ReplicatorMetricsAbsent"}
    assert fired["ReplicatorMetricsAbsent"] == [{"job": JOB, "severity": "warning"}]


def test_an_old_loss_does_not_fire_again() -> None:
    earlier, later = replicas(lost), replicas(lost)
    assert firing(world_of(list(earlier), list(later))) == {}


def test_the_evaluator_follows_promql_on_counters_and_histograms() -> None:
    series: Labels = (("__name__", "c_total"), ("leg", "a"))
    world = World(now={series: 5.0}, before={})
    assert evaluate("increase(c_total[5m]) > 0", world) == {}, "one sample: no increase"
    assert evaluate("c_total > 0 unless c_total offset 5m", world) == {series: 5.0}
    world = World(now={series: 2.0}, before={series: 7.0})
    assert evaluate("increase(c_total[5m])", world) == {(("leg", "a"),): 2.0}, "a reset"
    assert evaluate("rate(c_total[1m])", world) == {(("leg", "a"),): 2.0 / 60}
    buckets: Scrape = {
        (("__name__", "h_bucket"), ("le", le)): count
        for le, count in (("1.0", 50.0), ("10.0", 100.0), ("+Inf", 100.0))
    }
    world = World(now=buckets, before={})
    assert evaluate("histogram_quantile(0.5, h_bucket)", world) == {(): 1.0}
    assert evaluate("histogram_quantile(0.75, h_bucket)", world) == {(): 5.5}
    with pytest.raises(AssertionError):
        evaluate("predict_linear(c_total[5m], 60) > 0", world)


if __name__ == "__main__":
    RULES_FILE.write_text(rules_file_text())
    print(f"wrote {RULES_FILE.relative_to(ROOT)}", file=sys.stderr)
