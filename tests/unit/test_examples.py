"""The example environment files are valid configurations."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.settings import SecurityProtocol, load_settings
from replicator.topology import TopicRules, legs_for
from tests.unit.deployment import EXAMPLES, env_file


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.env")), ids=lambda p: p.name)
def test_example_environment_is_valid(path: Path) -> None:
    settings = load_settings(env_file(path))
    assert len(legs_for(settings)) == len(settings.clusters) >= 2


def test_three_datacenter_example_has_separate_credentials() -> None:
    settings = load_settings(env_file(EXAMPLES / "three-datacenters-sasl-ssl.env"))
    assert [leg.name for leg in legs_for(settings)] == [
        "eu-west->eu-west",
        "eu-west->ap-south",
        "eu-west->us-east",
    ]
    users = {c.sasl_username for c in settings.clusters.values()}
    assert len(users) == 2 and "replicator-eu-west" in users
    assert all(c.security_protocol is SecurityProtocol.SASL_SSL for c in settings.clusters.values())
    rules = TopicRules.from_settings(settings)
    assert rules.target("customers-eu_REPLICA") == "customers-eu"
    assert rules.target("audit_REPLICA") is None
