"""README's configuration and metrics tables are the settings model's and the catalogue's."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.config.settings import ClusterSettings, FlowSettings, Settings
from replicator.devtools.reference import README, SECTIONS, Section, readme_section
from replicator.mirrormaker import mm2_translation
from replicator.telemetry.metrics import Metrics


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.generate.__name__)
def test_readme_table_is_generated_from_the_code(section: Section) -> None:
    assert readme_section(README.read_text(), section) == section.generate(), (
        f"README's {section.generate.__name__} is out of date: "
        "python -m replicator.devtools.reference --update"
    )


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


def test_readme_mm2_side_by_side_is_what_the_translation_prints(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("**Side by side**") :]
    properties = section.split("```properties\n", 1)[1].split("```", 1)[0]
    shown = section.split("```sh\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "connect-mirror-maker.properties"
    config.write_text(properties)
    expected = dict(
        line.split("#", 1)[0].strip().split("=", 1) for line in shown.splitlines() if line
    )
    assert mm2_translation(config).env == expected
