"""The example environment files are valid configurations; the example consumer reads provenance."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from replicator.config.settings import SecurityProtocol, load_settings
from replicator.config.topology import TopicRules, legs_for
from replicator.model import provenance
from replicator.model.provenance import Provenance, Tagger
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


def _consumer_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("consumer_example", EXAMPLES / "consumer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_consumer_example_reads_the_provenance_header_as_the_replicator_writes_it() -> None:
    consumer = _consumer_example()
    written = Tagger("dc2", "orders_REPLICA", 3).tag([("trace-id", b"t1")], 1042)
    assert consumer.origin(written) == ("dc2", "orders_REPLICA", 3, 1042)
    assert consumer.origin_cluster(written) == "dc2"
    derived = [
        (provenance.UPSTREAM, b"dc1/orders_REPLICA/0/5"),
        *Provenance("dc3", "enriched_REPLICA", 0, 7).headers(),
    ]
    assert consumer.origin_cluster(derived) == "dc3"
    for headers in ([], [("app", b"x")], [(provenance.ORIGIN, b"not/provenance")]):
        assert consumer.origin(headers) is None
        assert consumer.origin_cluster(headers) == "unknown"
