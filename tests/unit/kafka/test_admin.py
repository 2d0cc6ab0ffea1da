"""The admin adapter: DescribeConfigs answers come back as typed config entries; ACL bindings
go many to a request, in Kafka's codes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiokafka.errors as kerr
import pytest
from aiokafka.admin import NewPartitions
from aiokafka.protocol.admin import CreateAclsRequest_v1, DeleteAclsRequest_v1

from replicator.errors import KafkaFailure
from replicator.kafka.admin import (
    MAX_PARTITIONS_PER_REQUEST,
    AclBinding,
    ConfigEntry,
    TopicSpec,
    _acl_refusals,
    _AclRequest,
    create_topics,
    describe_topic_configs,
    grow_topics,
    growth_requests,
)
from replicator.kafka.translation import denial


class DescribingAdmin:
    """Answers DescribeConfigs as aiokafka's admin client does: resource tuples
    ``(error_code, error_message, resource_type, resource_name, entries)``."""

    def __init__(self, resources: list[tuple[Any, ...]]) -> None:
        self.resources = resources

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        return [SimpleNamespace(resources=self.resources)]


async def test_config_entries_are_typed_and_unknown_topics_left_out() -> None:
    admin = DescribingAdmin(
        [
            (0, None, 2, "orders", [("retention.ms", "1000", False, 1, False, [])]),
            (0, None, 2, "keys", [("segment.bytes", None, True, 5, True, [])]),
            (3, "unknown", 2, "gone", []),
        ]
    )
    found = await describe_topic_configs(admin, ["orders", "keys", "gone"])
    assert found == {
        "orders": [ConfigEntry("retention.ms", "1000", False, 1, False)],
        "keys": [ConfigEntry("segment.bytes", None, True, 5, True)],
    }
    assert found["orders"][0].is_override and not found["orders"][0].is_default
    assert found["keys"][0].is_default


async def test_config_entries_an_acl_denies_are_an_error_naming_the_topics() -> None:
    """Left out, a denied topic's configs would be taken for none (a destination created
    without them, a sync that removes them)."""
    admin = DescribingAdmin(
        [
            (0, None, 2, "orders", [("retention.ms", "1000", False, 1, False, [])]),
            (29, "denied", 2, "secret", []),
            (29, "denied", 2, "hidden", []),
        ]
    )
    with pytest.raises(kerr.TopicAuthorizationFailedError) as raised:
        await describe_topic_configs(admin, ["orders", "secret", "hidden"])
    assert raised.value.args == ("hidden, secret",)
    error = denial(raised.value, "dc2", topic=("DescribeConfigs", None))
    assert str(error) == "DescribeConfigs on topic hidden, secret denied by the ACLs of dc2"


class CreatingAdmin:
    """Answers CreateTopics as Apache Kafka's controller does: a request creating more than
    10,000 partitions in all is refused whole (PolicyViolation, 44), else each topic created
    unless it exists (36)."""

    def __init__(self, existing: set[str]) -> None:
        self.existing = existing
        self.requests: list[list[Any]] = []

    async def create_topics(self, topics: list[Any]) -> Any:
        self.requests.append(topics)
        errors: list[tuple[str, int, str | None]]
        if sum(t.num_partitions for t in topics) > 10_000:
            errors = [(t.name, 44, "Excessively large number of partitions per request.")
                      for t in topics]  # fmt: skip
            return SimpleNamespace(topic_errors=errors)
        errors = [(t.name, 36 if t.name in self.existing else 0, None) for t in topics]
        self.existing |= {t.name for t in topics}
        return SimpleNamespace(topic_errors=errors)


async def test_ten_thousand_partitions_are_created_in_requests_the_controller_takes() -> None:
    """1,667 topics of 6 partitions (10,002): one request would be refused whole, for every
    topic; they go in requests of at most 5,000 partitions, each topic once, in order."""
    specs = [TopicSpec(f"t{n:04d}", 6, 1) for n in range(1_667)]
    admin = CreatingAdmin(existing={"t0005"})
    errors = await create_topics(admin, specs, tolerate=(36,))
    assert errors == {spec.name: [] for spec in specs}
    sizes = [sum(t.num_partitions for t in request) for request in admin.requests]
    assert sizes == [4_998, 4_998, 6] and max(sizes) <= MAX_PARTITIONS_PER_REQUEST
    asked = [t.name for request in admin.requests for t in request]
    assert asked == [spec.name for spec in specs]
    refused = await create_topics(CreatingAdmin(set()), [TopicSpec("big", 20_000, 1)])
    assert refused == {"big": [(44, "Excessively large number of partitions per request.")]}


class GrowingAdmin:
    """Answers CreatePartitions as aiokafka's admin client does over Apache Kafka's controller:
    a request adding more than 10,000 partitions in all is refused whole (aiokafka raises the
    first topic's error), a topic that has its count already is refused alone."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.requests: list[dict[str, int]] = []

    async def create_partitions(self, topics: dict[str, NewPartitions]) -> None:
        asked = {topic: new.total_count for topic, new in topics.items()}
        self.requests.append(asked)
        if sum(asked[t] - self.counts[t] for t in asked) > 10_000:
            raise kerr.PolicyViolationError("Excessively large number of partitions per request.")
        for topic, count in asked.items():
            if count <= self.counts[topic]:
                raise kerr.InvalidPartitionsError(f"{topic} has {self.counts[topic]} already")
        self.counts |= asked


async def test_ten_thousand_new_partitions_grow_in_requests_the_controller_takes() -> None:
    """1,667 topics each grown from 1 to 6 partitions (8,335 new, 10,002 in all) and one that
    has its count already: in requests of at most 5,000 partitions (counted whole), every
    topic grown but that one, which is refused alone."""
    counts = {f"t{n:04d}": 1 for n in range(1_667)} | {"grown": 6}
    admin = GrowingAdmin(dict(counts))
    wanted = dict.fromkeys(counts, 6)
    found = await grow_topics(admin, wanted)
    assert admin.counts == wanted
    assert [t for t, error in found.items() if error is not None] == ["grown"]
    assert isinstance(found["grown"], kerr.InvalidPartitionsError)
    assert list(found) == list(wanted)
    whole = [sum(request.values()) for request in growth_requests(wanted)]
    assert whole == [4_998, 4_998, 12] and max(whole) <= MAX_PARTITIONS_PER_REQUEST


def test_a_topic_larger_than_a_request_is_asked_alone() -> None:
    assert growth_requests({"a": 2, "big": 7_000, "b": 3}, limit=5_000) == [
        {"a": 2},
        {"big": 7_000},
        {"b": 3},
    ]


def test_acl_bindings_carry_kafkas_codes_and_many_go_in_one_request() -> None:
    bindings = [
        AclBinding("User:r", "topic", "orders", "Read"),
        AclBinding("User:r", "group", "replicator.", "DescribeConfigs", prefixed=True),
        AclBinding("User:r", "cluster", "kafka-cluster", "Alter", allow=False, host="10.0.0.7"),
    ]
    rows = [binding.wire() for binding in bindings]
    request = _AclRequest(CreateAclsRequest_v1, rows).prepare({30: (1, 3)})
    assert request.API_VERSION == 1
    assert list(request.creations) == [
        (2, "orders", 3, "User:r", "*", 3, 3),
        (3, "replicator.", 4, "User:r", "*", 10, 3),
        (4, "kafka-cluster", 3, "User:r", "10.0.0.7", 7, 2),
    ]


def test_an_acl_request_a_broker_cannot_take_and_an_unknown_operation_are_refused() -> None:
    with pytest.raises(kerr.IncompatibleBrokerVersion):
        _AclRequest(DeleteAclsRequest_v1, []).prepare({31: (0, 0)})
    with pytest.raises(ValueError, match="not a Kafka ACL"):
        AclBinding("User:r", "topic", "orders", "Fly").wire()


def test_refused_acls_are_named_and_retriable_as_the_brokers_error_is() -> None:
    bindings = [
        AclBinding("User:r", "topic", "a", "Read"),
        AclBinding("User:r", "topic", "b", "Write"),
    ]
    _acl_refusals("created", bindings, [(0, None), (0, None)])  # nothing refused: no error
    with pytest.raises(KafkaFailure, match="Write on topic b for User:r") as moved:
        _acl_refusals("created", bindings, [(0, None), (41, "not the controller")])
    assert moved.value.retriable
    with pytest.raises(KafkaFailure, match="Read on topic a") as denied:
        _acl_refusals("deleted", bindings, [(31, None), (0, None)])
    assert not denied.value.retriable
