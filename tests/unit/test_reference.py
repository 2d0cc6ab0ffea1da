"""README's configuration table is the settings model's."""

from __future__ import annotations

from replicator.reference import README, configuration_table, readme_section
from replicator.settings import ClusterSettings, Settings


def test_readme_lists_every_setting_as_the_model_defines_it() -> None:
    assert readme_section(README.read_text()) == configuration_table(), (
        "README's configuration table is out of date: python -m replicator.reference --update"
    )


def test_every_setting_has_a_description() -> None:
    for model in (Settings, ClusterSettings):
        undocumented = [n for n, f in model.model_fields.items() if not f.description]
        assert not undocumented, f"{model.__name__}: {undocumented}"
