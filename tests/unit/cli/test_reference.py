"""The reference pages' generated tables are the code's: the settings model, the metric
catalogue, the typer app and the HTTP routes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replicator.cli.reference import (
    CONFIGURATION_GROUPS,
    DOCS,
    HTTP,
    SECTIONS,
    Section,
    anchor,
    cli_reference,
    configuration_table,
    generated_part,
    http_endpoints,
    update,
)
from replicator.config.clusters import ClusterSettings, FlowSettings
from replicator.config.settings import Settings
from replicator.mirrormaker import mm2_translation
from replicator.service import http
from replicator.telemetry.metrics import Metrics


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.generate.__name__)
def test_reference_page_is_generated_from_the_code(section: Section) -> None:
    assert generated_part(section.path.read_text(), section) == section.generate(), (
        f"{section.path.relative_to(DOCS.parent)}: {section.generate.__name__} is out of date: "
        "python -m replicator.cli.reference --update"
    )


def test_update_rewrites_only_the_generated_part(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\nbefore\n\n{HTTP.start}\nstale\n{HTTP.end}\n\nafter\n")
    section = Section(page, HTTP.start, HTTP.end, HTTP.generate)
    assert update((section,)) == [page]
    text = page.read_text()
    assert text.startswith("# Page\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert generated_part(text, section) == http_endpoints()
    assert update((section,)) == []  # current: nothing rewritten


def test_every_setting_has_a_description() -> None:
    for model in (Settings, ClusterSettings, FlowSettings):
        undocumented = [n for n, f in model.model_fields.items() if not f.description]
        assert not undocumented, f"{model.__name__}: {undocumented}"


def test_catalogue_lists_every_exported_metric_once() -> None:
    metrics = Metrics()
    names = [spec.name for spec in metrics.catalogue]
    assert len(names) == len(set(names))
    exported = {m.name for m in metrics.registry.collect()}
    # prometheus_client names a counter's family without "_total"
    assert {n.removesuffix("_total") for n in names} == exported


def test_every_route_is_described() -> None:
    """Each route the server registers has its bullet in ``replicator/service/http.py``'s
    docstring, which the generated table shows."""
    table = http_endpoints()
    routes = re.findall(r"^\| [A-Z, ]+ \| `(/\w*)` \| (.*) \|$", table, re.M)
    assert {path for path, _ in routes} == {"/livez", "/readyz", "/status", "/metrics"}
    undescribed = [path for path, answers in routes if not answers.strip()]
    assert not undescribed, f"routes missing from {http.__name__}'s docstring: {undescribed}"


def test_cli_reference_names_every_command_and_option() -> None:
    text = cli_reference()
    for command in ("run", "mirror-maker", "mm2", "demo", "sandbox", "check-config", "lag"):
        assert f"### `replicator {command}`" in text
    for command in ("failover", "backfill", "audit", "topics ensure"):
        assert f"### `replicator {command}`" in text
    for option in ("`--group`", "`--execute`", "`--from-checkpoint`", "`--print-env`", "`--mm2`"):
        assert option in text


def test_mm2_side_by_side_is_what_the_translation_prints(tmp_path: Path) -> None:
    text = (DOCS / "guides" / "migrating-mm2.md").read_text()
    section = text[text.index("## Side by side") :]
    properties = section.split("```properties\n", 1)[1].split("```", 1)[0]
    shown = section.split("```sh\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "connect-mirror-maker.properties"
    config.write_text(properties)
    expected = dict(
        line.split("#", 1)[0].strip().split("=", 1) for line in shown.splitlines() if line
    )
    assert mm2_translation(config).env == expected


def test_the_configuration_reference_is_grouped_with_an_anchor_per_variable() -> None:
    table = configuration_table()
    every = re.findall(r"`(REPLICATOR_[A-Z0-9_<>]+)`", table)
    rows = [line for line in table.splitlines() if line.startswith("| <a id=")]
    assert len(rows) == len({line.split('"')[1] for line in rows}), "one anchor per variable"
    assert f'<a id="{anchor("REPLICATOR_LOCAL_CLUSTER")}"></a>' in table
    assert 'id="replicator_clusters__alias__bootstrap_servers"' in table
    assert len(re.findall(r"^## ", table, re.MULTILINE)) == len(CONFIGURATION_GROUPS)
    assert "REPLICATOR_GROUP_SESSION_TIMEOUT_MS" in every
    # Defaults as an operator writes them in the environment.
    assert "`True`" not in table and "`False`" not in table
    assert "| `true` |" in table and "| `false` |" in table
