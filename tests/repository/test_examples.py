"""The example environment files are valid configurations; the example consumer reads provenance;
the example producer falls back from idempotence on a broker that refuses it, saying so."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiokafka import errors as kafka_errors

from replicator.config.loading import load_settings
from replicator.config.topology import TopicRules, legs_for
from replicator.config.values import SecurityProtocol
from replicator.model import provenance
from replicator.model.provenance import Provenance, Tagger
from tests.repository.deployment import EXAMPLES, env_file


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


def _example(name: str) -> ModuleType:
    """``examples/<name>.py``, loaded as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_consumer_example_reads_the_provenance_header_as_the_replicator_writes_it() -> None:
    consumer = _example("consumer")
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


# -- the example producer on a broker that refuses idempotence ---------------------------------


class FakeProducer:
    """Stands in for AIOKafkaProducer at the example's seam: ``start`` fails as told."""

    made: list[FakeProducer] = []

    def __init__(self, fail_with: BaseException | None, **options: Any) -> None:
        self.options = options
        self.fail_with = fail_with
        self.started = self.stopped = False
        FakeProducer.made.append(self)

    async def start(self) -> None:
        if self.fail_with is not None and self.options["enable_idempotence"]:
            raise self.fail_with
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


def factory(fail_with: BaseException | None) -> Callable[..., FakeProducer]:
    FakeProducer.made = []
    return functools.partial(FakeProducer, fail_with)


def start(argv: list[str], fail_with: BaseException | None) -> Any:
    producer = _example("producer")
    args = producer.parse_args(["--bootstrap-servers", "127.0.0.1:9092", *argv])
    return asyncio.run(producer.start_producer(args, factory(fail_with)))


def test_producer_falls_back_to_acks_all_when_the_broker_refuses_idempotence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # what aiokafka raises from start() when the broker answers InitProducerId with an error
    started = start([], kafka_errors.UnknownError())
    refused, plain = FakeProducer.made
    assert refused.options["enable_idempotence"] is True and refused.stopped
    assert started is plain and plain.started
    assert plain.options["enable_idempotence"] is False and plain.options["acks"] == "all"
    said = capsys.readouterr()
    assert said.out == "", "stdout keeps only the JSON summary"
    (line,) = said.err.splitlines()
    assert "refused an idempotent producer" in line and "UnknownError" in line
    assert "acks=all" in line


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.KafkaConnectionError("Unable to bootstrap"),
        kafka_errors.SaslAuthenticationFailed("bad password"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_producer_does_not_take_an_unreachable_cluster_for_a_refusal(
    error: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(type(error)):
        start([], error)
    (only,) = FakeProducer.made
    assert only.stopped
    assert capsys.readouterr().err == ""


def test_producer_without_idempotence_asks_for_none(capsys: pytest.CaptureFixture[str]) -> None:
    started = start(["--no-idempotence"], kafka_errors.UnknownError())
    (only,) = FakeProducer.made
    assert started is only and only.options["enable_idempotence"] is False
    assert capsys.readouterr().err == ""


def test_producer_granted_idempotence_keeps_it(capsys: pytest.CaptureFixture[str]) -> None:
    started = start([], None)
    (only,) = FakeProducer.made
    assert started is only and only.options["enable_idempotence"] is True
    assert capsys.readouterr().err == ""
