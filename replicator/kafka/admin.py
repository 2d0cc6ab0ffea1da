"""The admin adapter: the topic and ACL requests the product makes of a cluster, in product terms.

Metadata of every topic (never naming one: naming a missing topic may create it), the cluster's
size, CreateTopics, CreatePartitions, DescribeConfigs and IncrementalAlterConfigs, each about many
topics at once; CreateAcls and DeleteAcls, each about many ACLs at once (:class:`AclBinding`). A
config entry comes back typed (:class:`ConfigEntry`: name, value, where the value comes from,
read-only, sensitive), never as the protocol's tuple. aiokafka's admin client has no
IncrementalAlterConfigs and no ACL requests: they are built here, in Kafka's protocol types, and
sent through the admin client's connection (:func:`replicator.kafka.internals.kafka_client`).
What to create, grow or change is decided by the callers (:mod:`replicator.topics.provisioning`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiokafka.errors as kerr
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.admin import (
    CreateAclsRequest_v1,
    DeleteAclsRequest_v1,
    DescribeAclsRequest_v1,
)
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

from replicator.errors import KafkaFailure, NoAuthorizer
from replicator.kafka.internals import a_broker, kafka_client
from replicator.kafka.translation import broker_error, error_name

_T = TypeVar("_T")

# Where a config's value comes from, as DescribeConfigs (v1 and later) says.
TOPIC_OVERRIDE = 1  # DYNAMIC_TOPIC_CONFIG: set on the topic itself
DEFAULT_CONFIG = 5  # DEFAULT_CONFIG: Kafka's built-in default (2-4: broker-wide values)
TOPIC_ALREADY_EXISTS = 36

BrokerErrors = Sequence[tuple[int, str | None]]  # (error code, message) as a broker answered


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a topic, as DescribeConfigs reports it."""

    name: str
    value: str | None
    read_only: bool
    source: int  # TOPIC_OVERRIDE, DEFAULT_CONFIG, or a broker-wide value's source (2-4)
    sensitive: bool

    @property
    def is_override(self) -> bool:
        """Set on the topic itself."""
        return self.source == TOPIC_OVERRIDE

    @property
    def is_default(self) -> bool:
        """Kafka's built-in default."""
        return self.source == DEFAULT_CONFIG


@dataclass(frozen=True)
class TopicSpec:
    """What a topic to create must look like."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


async def describe_partitions(admin: AIOKafkaAdminClient) -> dict[str, list[dict[str, Any]]]:
    """Partition metadata of every topic on a cluster, without naming (auto-creating) any."""
    topics = await admin.describe_topics()
    return {t["topic"]: t["partitions"] for t in topics if t["error_code"] == 0}


async def replication_factor(admin: AIOKafkaAdminClient, configured: int | None) -> int:
    """``configured``, else what a broker defaults to: 3, or fewer on a smaller cluster."""
    if configured is not None:
        return configured
    return min(3, len((await admin.describe_cluster())["brokers"]))


# Partitions created by one CreateTopics request at most. Apache Kafka's controller refuses a
# request creating more than 10,000 in all, whole ("Excessively large number of partitions per
# request", PolicyViolation: ReplicationControlManager.MAX_PARTITIONS_PER_BATCH); half of that
# leaves room for brokers with a lower bound.
MAX_PARTITIONS_PER_REQUEST = 5_000


def creation_requests(
    specs: list[TopicSpec], limit: int = MAX_PARTITIONS_PER_REQUEST
) -> list[list[TopicSpec]]:
    """``specs`` in requests of at most ``limit`` partitions each, in order (a topic larger than
    ``limit`` alone in its request: the broker decides)."""
    return _requests(specs, [spec.partitions for spec in specs], limit)


def growth_requests(
    counts: dict[str, int], limit: int = MAX_PARTITIONS_PER_REQUEST
) -> list[dict[str, int]]:
    """Topics to grow to ``counts`` in requests of at most ``limit`` partitions each, counting
    a topic's whole count (what it adds is at most that), in order."""
    topics = list(counts)
    return [
        {topic: counts[topic] for topic in request}
        for request in _requests(topics, [counts[t] for t in topics], limit)
    ]


def _requests(items: list[_T], sizes: list[int], limit: int) -> list[list[_T]]:
    requests: list[list[_T]] = []
    size = 0
    for item, partitions in zip(items, sizes, strict=True):
        if not requests or size + partitions > limit:
            requests.append([])
            size = 0
        requests[-1].append(item)
        size += partitions
    return requests


async def create_topics(
    admin: AIOKafkaAdminClient, specs: list[TopicSpec], tolerate: tuple[int, ...] = ()
) -> dict[str, BrokerErrors]:
    """Create ``specs``, in as few CreateTopics requests as the broker takes
    (:data:`MAX_PARTITIONS_PER_REQUEST` partitions each): the broker's errors per topic (empty:
    created; codes in ``tolerate`` are not errors)."""
    errors: dict[str, list[tuple[int, str | None]]] = {s.name: [] for s in specs}
    for request in creation_requests(specs):
        response = await admin.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.configs)
                for s in request
            ]
        )
        for topic, code, message in response.topic_errors:
            if code != 0 and code not in tolerate:
                errors.setdefault(topic, []).append((code, message))
    return dict(errors)


async def grow_topics(
    admin: AIOKafkaAdminClient, counts: dict[str, int]
) -> dict[str, BaseException | None]:
    """Grow each topic to its partition count (CreatePartitions, in requests the controller
    takes: :func:`growth_requests`): per topic, the error (``None``: grown)."""
    found: dict[str, BaseException | None] = {}
    for request in growth_requests(counts):
        found |= await _grow(admin, request)
    return found


async def _grow(
    admin: AIOKafkaAdminClient, counts: dict[str, int]
) -> dict[str, BaseException | None]:
    try:  # aiokafka raises for the first topic refused: then each is asked alone
        await admin.create_partitions(
            {topic: NewPartitions(total_count=count) for topic, count in counts.items()}
        )
        return dict.fromkeys(counts)
    except Exception as exc:
        if len(counts) == 1:
            return {topic: exc for topic in counts}
    found: dict[str, BaseException | None] = {}
    for topic, count in counts.items():
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=count)})
            found[topic] = None
        except Exception as exc:
            found[topic] = exc
    return found


def already_grown(error: BaseException | None) -> bool:
    """Whether a topic's growth was refused because it already has that many partitions
    (another client grew it first)."""
    return isinstance(error, kerr.InvalidPartitionsError)


def _entry(raw: Any) -> ConfigEntry:
    """A DescribeConfigs entry ``(name, value, read_only, source, sensitive, ...)``, typed."""
    return ConfigEntry(raw[0], raw[1], bool(raw[2]), int(raw[3]), bool(raw[4]))


async def describe_topic_configs(
    admin: AIOKafkaAdminClient, topics: list[str]
) -> dict[str, list[ConfigEntry]]:
    """Every config entry of each of ``topics``, in one DescribeConfigs request, as the broker
    reports them (a topic it cannot describe, unknown say, is left out; an ACL denying it raises
    TopicAuthorizationFailedError naming the topics: their configs would be taken for none)."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
    responses = await admin.describe_configs(resources)
    denied = sorted(
        resource[3]
        for response in responses
        for resource in response.resources
        if resource[0] == _TOPIC_AUTHORIZATION_FAILED
    )
    if denied:
        raise kerr.TopicAuthorizationFailedError(", ".join(denied))
    return {
        resource[3]: [_entry(raw) for raw in resource[4]]
        for response in responses
        for resource in response.resources
        if resource[0] == 0
    }


_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
_TOPIC_AUTHORIZATION_FAILED = kerr.TopicAuthorizationFailedError.errno


class _IncrementalAlterConfigsResponseV0(Response):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "responses",
            Array(
                ("error_code", Int16),
                ("error_message", String("utf-8")),
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
            ),
        ),
    )


class _IncrementalAlterConfigsRequestV0(RequestStruct):  # type: ignore[misc]
    """IncrementalAlterConfigs v0 (KIP-339): each config set or deleted on its own, the other
    overrides of the resource untouched (AlterConfigs, deprecated, replaces them all)."""

    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = _IncrementalAlterConfigsResponseV0
    SCHEMA = Schema(
        (
            "resources",
            Array(
                ("resource_type", Int8),
                ("resource_name", String("utf-8")),
                (
                    "configs",
                    Array(
                        ("name", String("utf-8")),
                        ("config_operation", Int8),
                        ("value", String("utf-8")),
                    ),
                ),
            ),
        ),
        ("validate_only", Boolean),
    )


class _IncrementalAlterConfigs:
    """An IncrementalAlterConfigs request of topic configs (``None``: delete the override)."""

    API_KEY = 44

    def __init__(self, configs: dict[str, dict[str, str | None]]) -> None:
        self._resources = [
            (
                ConfigResourceType.TOPIC.value,
                topic,
                [
                    (name, _SET if value is not None else _DELETE, value)
                    for name, value in c.items()
                ],
            )
            for topic, c in sorted(configs.items())
        ]

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        low, high = versions.get(self.API_KEY, (0, -1))
        if not low <= 0 <= high:
            raise IncompatibleBrokerVersion(
                "the broker does not support IncrementalAlterConfigs (Kafka 2.3 and later do)"
            )
        return _IncrementalAlterConfigsRequestV0(self._resources, False)


async def alter_topic_configs(
    admin: AIOKafkaAdminClient, configs: dict[str, dict[str, str | None]]
) -> None:
    """Set (or, ``None``, delete) these overrides of each topic, leaving its others as they are
    (one IncrementalAlterConfigs request); :class:`~replicator.errors.KafkaFailure` naming each
    config the broker refused."""
    client = kafka_client(admin)
    response = await client.send(await a_broker(client), _IncrementalAlterConfigs(configs))
    refused = [
        f"{name}: {error_name(code)}{f' ({message})' if message else ''}"
        for code, message, _, name in response.responses
        if code != 0
    ]
    denied = [
        name for code, _, _, name in response.responses if code == _TOPIC_AUTHORIZATION_FAILED
    ]
    if denied:  # said by the caller as the AlterConfigs it needs (translation.denial)
        raise kerr.TopicAuthorizationFailedError(", ".join(sorted(denied)))
    if refused:
        first = broker_error(next(r[0] for r in response.responses if r[0] != 0))
        raise KafkaFailure(
            f"topic configs refused: {'; '.join(refused)}", retriable=first.retriable
        )


# Kafka's ACL codes (org.apache.kafka.common.resource.ResourceType, PatternType and
# org.apache.kafka.common.acl.AclOperation, AclPermissionType), as CreateAcls and DeleteAcls
# carry them; the names are kafka-acls' own.
_RESOURCE_TYPES = {"topic": 2, "group": 3, "cluster": 4, "transactional-id": 5}
_LITERAL, _PREFIXED = 3, 4
_ACL_OPERATIONS = {
    "All": 2,
    "Read": 3,
    "Write": 4,
    "Create": 5,
    "Delete": 6,
    "Alter": 7,
    "Describe": 8,
    "ClusterAction": 9,
    "DescribeConfigs": 10,
    "AlterConfigs": 11,
    "IdempotentWrite": 12,
}
_DENY, _ALLOW = 2, 3
_ANY = 1  # a filter's "any" (pattern type, operation, permission)
_ACL_VERSION = 1  # the ACL requests v1 (Kafka 2.0 and later; 4.0 dropped v0)
_ACL_ANSWERS = {30: "creation_responses", 31: "filter_responses"}  # each binding's answer
_RESOURCE_NAMES = {code: name for name, code in _RESOURCE_TYPES.items()}
_OPERATION_NAMES = {code: name for name, code in _ACL_OPERATIONS.items()}


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` (``User:alice``) allowed, or denied, one ``operation`` (``Read``,
    ``DescribeConfigs``: kafka-acls' names) on one resource (``topic``, ``group``, ``cluster``,
    ``transactional-id``) named literally or by prefix, from ``host`` (``*``: any)."""

    principal: str
    resource: str
    name: str
    operation: str
    prefixed: bool = False
    allow: bool = True
    host: str = "*"

    def wire(self) -> tuple[int, str, int, str, str, int, int]:
        """The binding as CreateAcls carries it (and DeleteAcls, as an exact filter)."""
        if self.resource not in _RESOURCE_TYPES or self.operation not in _ACL_OPERATIONS:
            raise ValueError(f"not a Kafka ACL: {self}")
        return (
            _RESOURCE_TYPES[self.resource],
            self.name,
            _PREFIXED if self.prefixed else _LITERAL,
            self.principal,
            self.host,
            _ACL_OPERATIONS[self.operation],
            _ALLOW if self.allow else _DENY,
        )


class _AclRequest:
    """An ACL request v1: CreateAcls (API 30) or DeleteAcls (API 31) of many bindings at once
    (``fields``: their rows), or DescribeAcls (API 29) of one filter (its fields)."""

    def __init__(self, struct: type[RequestStruct], *fields: Any) -> None:
        self.API_KEY = struct.API_KEY
        self._struct = struct
        self._fields = fields

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        low, high = versions.get(self.API_KEY, (0, -1))
        if not low <= _ACL_VERSION <= high:
            raise IncompatibleBrokerVersion(
                "the broker does not support ACL requests v1 (Kafka 2.0 and later do)"
            )
        return self._struct(*self._fields)


async def _send_acls(
    admin: AIOKafkaAdminClient, struct: type[RequestStruct], bindings: Sequence[AclBinding]
) -> list[tuple[int, str | None]]:
    if not bindings:
        return []
    client = kafka_client(admin)
    request = _AclRequest(struct, [binding.wire() for binding in bindings])
    response = await _ask_acls(client, request)
    return [(row[0], row[1]) for row in getattr(response, _ACL_ANSWERS[struct.API_KEY])]


_SECURITY_DISABLED = 54


async def _ask_acls(client: Any, request: _AclRequest) -> Any:
    """An ACL request's answer; :class:`~replicator.errors.NoAuthorizer` from a broker that
    has no ACL requests (its ``cluster`` left for the caller to name)."""
    try:
        return await client.send(await a_broker(client), request)
    except IncompatibleBrokerVersion as exc:
        raise NoAuthorizer("", f"the broker answers no ACL requests ({exc})") from exc


def _acl_refusals(
    verb: str, bindings: Sequence[AclBinding], answers: list[tuple[int, str | None]]
) -> None:
    refused = [
        f"{b.operation} on {b.resource} {b.name} for {b.principal}: {error_name(code)}"
        f"{f' ({message})' if message else ''}"
        for b, (code, message) in zip(bindings, answers, strict=True)
        if code != 0
    ]
    if any(code == _SECURITY_DISABLED for code, _ in answers):
        raise NoAuthorizer("", "no authorizer (authorizer.class.name unset): no ACLs kept")
    if refused:  # retriable as the broker's first error is, as alter_topic_configs says it
        codes = {code for code, _ in answers if code != 0}
        first = broker_error(next(code for code, _ in answers if code != 0))
        if len(codes) == 1 and len(refused) > _SHOWN_REFUSALS:  # one cause: said once
            raise KafkaFailure(
                f"ACLs not {verb}: {len(refused)} of {len(bindings)} refused with "
                f"{error_name(next(iter(codes)))}: {'; '.join(refused[:_SHOWN_REFUSALS])} "
                f"and {len(refused) - _SHOWN_REFUSALS} more",
                retriable=first.retriable,
            )
        raise KafkaFailure(f"ACLs not {verb}: {'; '.join(refused)}", retriable=first.retriable)


_SHOWN_REFUSALS = 3


async def create_acls(admin: AIOKafkaAdminClient, bindings: Sequence[AclBinding]) -> None:
    """Add every one of ``bindings`` (one CreateAcls request; an ACL already there stays);
    :class:`~replicator.errors.KafkaFailure` naming each the cluster refused."""
    _acl_refusals("created", bindings, await _send_acls(admin, CreateAclsRequest_v1, bindings))


async def delete_acls(admin: AIOKafkaAdminClient, bindings: Sequence[AclBinding]) -> None:
    """Remove exactly ``bindings`` (one DeleteAcls request, each an exact filter; one not
    there matches nothing); :class:`~replicator.errors.KafkaFailure` naming each refused."""
    _acl_refusals("deleted", bindings, await _send_acls(admin, DeleteAclsRequest_v1, bindings))


async def describe_acls(admin: AIOKafkaAdminClient, resource: str = "topic") -> list[AclBinding]:
    """Every ACL on ``resource``s of a cluster, of any name, pattern (literal or prefixed),
    principal, host, operation and permission (one DescribeAcls request). Operations this
    module has no name for are left out; a cluster without an authorizer (``SECURITY_DISABLED``)
    or without ACL requests is :class:`~replicator.errors.NoAuthorizer`."""
    client = kafka_client(admin)
    request = _AclRequest(
        DescribeAclsRequest_v1, _RESOURCE_TYPES[resource], None, _ANY, None, None, _ANY, _ANY
    )
    response = await _ask_acls(client, request)
    if response.error_code == _SECURITY_DISABLED:
        raise NoAuthorizer("", "no authorizer (authorizer.class.name unset): no ACLs kept")
    if response.error_code != 0:
        failure = broker_error(response.error_code)
        said = f" ({response.error_message})" if response.error_message else ""
        raise KafkaFailure(
            f"ACLs not described: {error_name(response.error_code)}{said}",
            retriable=failure.retriable,
        )
    return [
        AclBinding(
            principal,
            _RESOURCE_NAMES[kind],
            name,
            _OPERATION_NAMES[operation],
            prefixed=pattern == _PREFIXED,
            allow=permission == _ALLOW,
            host=host,
        )
        for kind, name, pattern, acls in response.resources
        if kind in _RESOURCE_NAMES and pattern in (_LITERAL, _PREFIXED)
        for principal, host, operation, permission in acls
        if operation in _OPERATION_NAMES and permission in (_ALLOW, _DENY)
    ]
