"""The Grafana dashboard shows every metric family the product exports (the catalogue the metrics
reference is generated from), so that a new metric cannot ship without a panel unnoticed.

test_deploy.py checks the other way round: every query names exported series and labels only.
"""

from __future__ import annotations

import json
import re
from typing import Any

from replicator.telemetry.metrics import Metrics
from tests.repository.deployment import DEPLOY

# Families deliberately left off the dashboard, each with the reason. Empty today: every family
# has a panel. Adding one here needs a reason a reviewer accepts.
NOT_ON_THE_DASHBOARD: dict[str, str] = {}

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def panels() -> list[dict[str, Any]]:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "replicator.json").read_text())
    found: list[dict[str, Any]] = dashboard["panels"]
    return found


def families_shown() -> set[str]:
    """The metric families the panels' queries name (histogram series as their family)."""
    histograms = {spec.name for spec in Metrics().catalogue if spec.kind == "histogram"}
    shown = set()
    for panel in panels():
        for target in panel.get("targets", []):
            for name in re.findall(r"\breplicator_\w+", target["expr"]):
                families = {name.removesuffix(suffix) for suffix in HISTOGRAM_SERIES}
                shown.add(next(iter(families & histograms), name))
    return shown


def test_every_exported_family_has_a_panel() -> None:
    exported = {spec.name for spec in Metrics().catalogue}
    missing = exported - families_shown() - NOT_ON_THE_DASHBOARD.keys()
    assert not missing, f"no panel shows {sorted(missing)}: add one or list it with a reason"


def test_families_left_out_are_real_and_really_left_out() -> None:
    exported = {spec.name for spec in Metrics().catalogue}
    assert NOT_ON_THE_DASHBOARD.keys() <= exported, "a family left out that is not exported"
    assert not NOT_ON_THE_DASHBOARD.keys() & families_shown(), "listed as left out, yet shown"
    assert all(reason.strip() for reason in NOT_ON_THE_DASHBOARD.values())


def test_the_check_sees_a_missing_family() -> None:
    shown = families_shown()
    assert "replicator_replication_latency_seconds" in shown, "histograms count by family"
    assert "replicator_heartbeat_age_seconds" in shown
    assert "replicator_made_up_total" not in shown
