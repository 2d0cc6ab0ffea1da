"""Destination topic provisioning: the real topic ``X`` exists wherever it is replicated to.

Before the first record of ``X_REPLICA`` is sent to a destination cluster, ``X`` is created there
if it is missing, with the source topic's partition count, replication factor and topic-level
configuration overrides. A destination topic with fewer partitions than its source (the source
grew, or it was created smaller) is grown to the source's count (CreatePartitions), as MirrorMaker
2 does; never shrunk, never grown past the source. Where the destination refuses to grow it (a
broker without CreatePartitions, no permission), the topic cannot keep partition numbers, so it is
refused (:class:`TopicMismatch`, with the broker's reason) and reported, never written; a flow
that places records by key uses it as it is. A partition the provisioner has not seen yet (the
source grew since) makes it check the topic again.

Topic-level configs set on the source topic itself are copied at creation (never its defaults
nor broker-wide values: the destination cluster's own apply, :func:`creation_configs`), and then
follow their source every ``REPLICATOR_TOPIC_CONFIG_SYNC_INTERVAL_MS``
(:meth:`TopicProvisioner.sync_configs`); configs
matching ``REPLICATOR_TOPIC_CONFIGS_EXCLUDE`` (MM2's ``config.properties.exclude`` defaults) are
never copied. With ``REPLICATOR_TOPIC_CONFIG_SYNC=mirror``, exactly as MM2's sync does
(:func:`mirrored_config_changes`: lowered too, a source default removing the destination's
override). With ``raise-only`` (:func:`config_changes`) what a destination was given on purpose is
kept: a source override the destination lacks is set, and a source override that *changes* is
followed, but a destination override that differs from a source value the replicator has not seen
change is left alone (an operator's choice); a limit (retention, ``max.message.bytes``) is only
ever raised above the destination's *effective* value, so a destination never loses records
because a source's retention was lowered; a config removed at the source stays on the
destination. Changes are sent with IncrementalAlterConfigs (only what changes; the destination's
other overrides untouched). One DescribeConfigs per cluster and round. A destination that refuses
is reported once per leg, counted
(``replicator_topic_config_sync_failures_total``), and retried less and less often.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import IncompatibleBrokerVersion, InvalidPartitionsError
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

from replicator.config.values import ConfigSync, DefaultsFrom
from replicator.errors import (
    AuthorizationFailed,
    KafkaFailure,
    ReplicatorError,
    TopicMismatch,
    TopicMissing,
    TopicRefused,
)
from replicator.kafka.clients import ClusterClient, broker_error, error_name, said, translate
from replicator.kafka.coalesce import Coalescer
from replicator.kafka.internals import kafka_client

log = structlog.get_logger(__name__)

# Topic-level settings copied from the source topic: only those set on the topic itself (config
# source 1). A default (source 5, Kafka's built-in value) and a broker-wide value (sources 2-4)
# belong to each cluster and are never copied: copied, they would pin the source cluster's
# defaults on the destination as overrides of its own. Read-only and sensitive entries never are.
REPLICATED_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "delete.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.type",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.ms",
    }
)
_TOPIC_OVERRIDE = 1  # DYNAMIC_TOPIC_CONFIG: set on the topic itself
_DEFAULT_CONFIG = 5  # DEFAULT_CONFIG: Kafka's built-in default
# Limits that are only ever raised on a destination (-1: unlimited, the largest).
NEVER_LOWERED = frozenset({"retention.ms", "retention.bytes", "max.message.bytes"})
_TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True)
class TopicSpec:
    """What a destination topic must look like to receive a source topic."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DestinationTopic:
    """What the replicator knows of a destination topic it writes to."""

    name: str
    partitions: int
    # The largest record batch the topic accepts (its max.message.bytes), if the broker says.
    max_message_bytes: int | None = None
    # The source topic's partition count when it was checked (0: unknown).
    source_partitions: int = 0


async def describe_partitions(admin: AIOKafkaAdminClient) -> dict[str, list[dict[str, Any]]]:
    """Partition metadata of every topic on a cluster, without naming (auto-creating) any."""
    topics = await admin.describe_topics()
    return {t["topic"]: t["partitions"] for t in topics if t["error_code"] == 0}


async def replication_factor(admin: AIOKafkaAdminClient, configured: int | None) -> int:
    """``configured``, else what a broker defaults to: 3, or fewer on a smaller cluster."""
    if configured is not None:
        return configured
    return min(3, len((await admin.describe_cluster())["brokers"]))


BrokerErrors = Sequence[tuple[int, str | None]]  # (error code, message) as a broker answered


async def _request_creation(
    admin: AIOKafkaAdminClient, specs: list[TopicSpec], tolerate: tuple[int, ...] = ()
) -> dict[str, BrokerErrors]:
    """Create ``specs`` in one CreateTopics request: the broker's errors per topic (empty:
    created; codes in ``tolerate`` are not errors)."""
    response = await admin.create_topics(
        [
            NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.configs)
            for s in specs
        ]
    )
    errors: dict[str, list[tuple[int, str | None]]] = {s.name: [] for s in specs}
    for topic, code, message in response.topic_errors:
        if code != 0 and code not in tolerate:
            errors.setdefault(topic, []).append((code, message))
    return dict(errors)


def describe_errors(errors: BrokerErrors) -> list[str]:
    """One line per broker error: ``<Name> (error <code>): <message>``."""
    return [
        f"{error_name(code)} (error {code})" + (f": {message}" if message else "")
        for code, message in errors
    ]


def creation_failure(topic: str, errors: BrokerErrors) -> ReplicatorError | None:
    """What a CreateTopics answer with ``errors`` for ``topic`` means; ``None`` if it succeeded.

    An ACL denial is :class:`AuthorizationFailed`; anything else is :class:`TopicRefused`,
    retriable only if every error the broker gave is (e.g. NotController while it moves).
    """
    if not errors:
        return None
    reason = f"cannot create {topic}: {'; '.join(describe_errors(errors))}"
    translated = [broker_error(code) for code, _ in errors]
    if any(isinstance(error, AuthorizationFailed) for error in translated):
        return AuthorizationFailed(reason)
    return TopicRefused(reason, retriable=all(error.retriable for error in translated))


async def create_topic(
    admin: AIOKafkaAdminClient, spec: TopicSpec, tolerate: tuple[int, ...] = ()
) -> list[str]:
    """Create ``spec``; the broker's errors (see :func:`describe_errors`), empty on success."""
    return describe_errors((await _request_creation(admin, [spec], tolerate))[spec.name])


async def ensure_single_partition(
    admin: AIOKafkaAdminClient, name: str, factor: int | None, configs: dict[str, str]
) -> list[str] | None:
    """Create the one-partition topic ``name`` (the replicator's heartbeats, checkpoints) unless
    it exists: ``None`` when it existed, else the broker's errors (empty: created)."""
    if name in await describe_partitions(admin):
        return None
    spec = TopicSpec(name, 1, await replication_factor(admin, factor), dict(configs))
    return await create_topic(admin, spec, tolerate=(36,))  # 36: already exists


async def _config_entries(admin: AIOKafkaAdminClient, topic: str) -> list[Any]:
    return (await _config_entries_of(admin, [topic])).get(topic, [])


async def _config_entries_of(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, list[Any]]:
    """Every config entry of each of ``topics``, in one DescribeConfigs request, each with its
    source as Apache Kafka reports it (:func:`as_kafka_reports`)."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
    responses = await admin.describe_configs(resources)
    return {
        resource[3]: as_kafka_reports(list(resource[4]))
        for response in responses
        for resource in response.resources
        if resource[0] == 0
    }


def as_kafka_reports(entries: list[Any]) -> list[Any]:
    """A topic's DescribeConfigs entries ``(name, value, read_only, source, sensitive, ...)``
    with each source as Apache Kafka reports it.

    Apache Kafka lists every topic config, each with where its value comes from: set on the
    topic (1), a broker-wide value (2-4) or its built-in default (5). A broker that lists only
    the configs set on the topic labels them defaults (the embedded broker, Tansu 0.6.0: source
    5): an answer that lacks a topic config Kafka always lists is such a broker's, and the
    defaults it names are the topic's own configs.
    """
    if {entry[0] for entry in entries} >= REPLICATED_CONFIGS:
        return entries
    return [
        (*entry[:3], _TOPIC_OVERRIDE, *entry[4:]) if entry[3] == _DEFAULT_CONFIG else entry
        for entry in entries
    ]


async def topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The replicable configs set on ``topic`` itself (what a destination topic is created
    with; neither defaults nor broker-wide values, which are each cluster's own)."""
    return _replicable(await _config_entries(admin, topic))


async def topic_overrides(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` itself (what AlterConfigs replaces)."""
    return _overrides(await _config_entries(admin, topic))


def _overrides(entries: list[Any]) -> dict[str, str]:
    return {
        entry[0]: entry[1]
        for entry in entries
        if entry[3] == _TOPIC_OVERRIDE and entry[1] is not None and not entry[4]
    }


def _effective(entries: list[Any]) -> dict[str, str]:
    return {entry[0]: entry[1] for entry in entries if entry[1] is not None and not entry[4]}


def _at_least(current: str, wanted: str) -> bool:
    """Whether limit ``current`` is at least ``wanted`` (-1 is unlimited)."""
    try:
        have, want = int(current), int(wanted)
    except ValueError:
        return False
    return have < 0 or (want >= 0 and have >= want)


def mirrored_config_changes(
    source: dict[str, str],
    source_effective: dict[str, str],
    destination: dict[str, str],
    exclude: re.Pattern[str],
    defaults_from: DefaultsFrom,
) -> dict[str, str | None]:
    """The changes that make a destination topic's copied configs its source's, as MirrorMaker
    2's config sync makes them (``None``: delete the destination's override).

    A replicable config not excluded that the source overrides is set to the source's value,
    lower or higher; one the source leaves at its default loses the destination's override
    (``defaults_from`` target: the destination's own default applies), or is set to the
    source's default (``defaults_from`` source).
    """
    changes: dict[str, str | None] = {}
    for name in sorted(REPLICATED_CONFIGS):
        if exclude.fullmatch(name):
            continue
        current = destination.get(name)
        if name in source:
            wanted: str | None = source[name]
        elif defaults_from is DefaultsFrom.SOURCE:
            wanted = source_effective.get(name)
            if wanted is None:
                continue  # the source does not say its default: nothing to follow
        else:
            wanted = None
        if current != wanted:
            changes[name] = wanted
    return changes


def config_changes(
    source: dict[str, str],
    destination: dict[str, str],
    effective: dict[str, str],
    seen: dict[str, str] | None,
    exclude: re.Pattern[str],
) -> dict[str, str]:
    """The destination overrides to set so that a destination topic follows its source.

    ``source``: the source topic's overrides; ``destination``: the destination topic's overrides;
    ``effective``: the destination's effective values (whatever set them); ``seen``: the source
    overrides at the previous round (``None``: none yet, after a start). A replicable config not
    excluded is set when the destination has no override for it, or when the source changed it
    since the previous round; a limit is set only above the destination's effective value.
    """
    changes: dict[str, str] = {}
    for name, value in sorted(source.items()):
        if name not in REPLICATED_CONFIGS or exclude.fullmatch(name):
            continue
        current = destination.get(name)
        if current == value:
            continue
        changed = seen is not None and seen.get(name) != value
        if current is not None and not changed:
            continue  # the destination was given its own value: kept until the source changes
        now = effective.get(name, current)
        if name in NEVER_LOWERED and now is not None and _at_least(now, value):
            continue
        changes[name] = value
    return changes


@dataclass(frozen=True)
class TopicLayout:
    """A topic as a cluster's metadata describes it."""

    partitions: int
    replication_factor: int


class TopicAdmin(Protocol):
    """The requests the provisioner makes of one cluster, each about many topics at once."""

    alias: str

    async def layouts(self) -> dict[str, TopicLayout]:
        """Every topic of the cluster (one Metadata request, naming none: naming a missing
        topic may create it)."""
        ...

    async def config_entries(self, topics: list[str]) -> dict[str, list[Any]]:
        """Every config entry of each of ``topics`` (one DescribeConfigs request)."""
        ...

    async def create(self, specs: list[TopicSpec]) -> dict[str, BrokerErrors]:
        """Create ``specs`` (one CreateTopics request): the broker's errors per topic (none:
        created; already existing is not an error)."""
        ...

    async def grow(self, counts: dict[str, int]) -> dict[str, BaseException | None]:
        """Grow each topic to its partition count (CreatePartitions): per topic, the error
        (``None``: grown; :class:`InvalidPartitionsError`: it already has that many, another
        client grew it first)."""
        ...

    async def alter(self, configs: dict[str, dict[str, str | None]]) -> None:
        """Set (or, ``None``, delete) these overrides of each topic, leaving its others as they
        are (one IncrementalAlterConfigs request)."""
        ...


SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


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
                [(name, SET if value is not None else DELETE, value) for name, value in c.items()],
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


class ClusterAdmin:
    """:class:`TopicAdmin` of a cluster, through its :class:`ClusterClient`'s admin client."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client
        self.alias = client.alias

    async def layouts(self) -> dict[str, TopicLayout]:
        partitions = await describe_partitions(await self._client.admin())
        return {
            topic: TopicLayout(len(found), max((len(p["replicas"]) for p in found), default=0))
            for topic, found in partitions.items()
        }

    async def config_entries(self, topics: list[str]) -> dict[str, list[Any]]:
        if not topics:
            return {}
        return await _config_entries_of(await self._client.admin(), topics)

    async def create(self, specs: list[TopicSpec]) -> dict[str, BrokerErrors]:
        admin = await self._client.admin()
        return await _request_creation(admin, specs, tolerate=(_TOPIC_ALREADY_EXISTS,))

    async def grow(self, counts: dict[str, int]) -> dict[str, BaseException | None]:
        admin = await self._client.admin()
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

    async def alter(self, configs: dict[str, dict[str, str | None]]) -> None:
        admin = await self._client.admin()
        client = kafka_client(admin)
        response = await client.send(client.get_random_node(), _IncrementalAlterConfigs(configs))
        refused = [
            f"{name}: {error_name(code)}{f' ({message})' if message else ''}"
            for code, message, _, name in response.responses
            if code != 0
        ]
        if refused:
            first = broker_error(next(r[0] for r in response.responses if r[0] != 0))
            raise KafkaFailure(
                f"topic configs refused: {'; '.join(refused)}", retriable=first.retriable
            )


class TopicProvisioner:
    """Ensures real topics on one destination cluster, once per topic, for one leg.

    Partitions ask one by one (:meth:`ensure`); the topics asked for meanwhile are prepared
    together (:mod:`replicator.kafka.coalesce`): one Metadata request per cluster, one
    DescribeConfigs of the sources, one CreateTopics, one CreatePartitions and one DescribeConfigs
    of the destinations per round, whatever the number of topics (:attr:`rounds` counts them).
    """

    def __init__(
        self,
        source: TopicAdmin,
        destination: TopicAdmin,
        replication_factor: int | None,
        preserve_partitions: bool = True,
        configs_exclude: re.Pattern[str] | None = None,
        on_grown: Callable[[str, int], None] | None = None,
        on_sync_failed: Callable[[], None] | None = None,
        sync: ConfigSync = ConfigSync.RAISE_ONLY,
        defaults_from: DefaultsFrom = DefaultsFrom.TARGET,
    ) -> None:
        self._source = source
        self._destination = destination
        self._replication_factor = replication_factor
        # False (a flow placing records by key): a destination with fewer partitions is used.
        self._preserve_partitions = preserve_partitions
        self._ready: dict[str, DestinationTopic] = {}
        self._rounds: Coalescer[tuple[str, str], DestinationTopic] = Coalescer(self._provision)
        # Topics refused for good, with the reason and how to raise it again (a fresh exception
        # per caller: one instance raised in many tasks would collect all their tracebacks).
        self.refused: dict[str, str] = {}
        self._refusals: dict[str, Callable[[], ReplicatorError]] = {}
        # Partitions this provisioner added, per destination topic (shown in /status).
        self.grown: dict[str, int] = {}
        self._exclude = configs_exclude or re.compile(r"(?!)")
        self._sources: dict[str, str] = {}  # destination topic -> its source topic
        # Config sync: the configs set per destination topic, the source overrides seen at the
        # last round, and the last failure (reported once until a round succeeds).
        self.synced: dict[str, dict[str, str | None]] = {}
        self._sync = sync
        self._defaults_from = defaults_from
        self._seen: dict[str, dict[str, str]] = {}
        self.sync_error: str | None = None
        self._on_sync_failed = on_sync_failed
        self._on_grown = on_grown

    @property
    def rounds(self) -> int:
        """Preparation rounds made so far (each a fixed handful of requests)."""
        return self._rounds.rounds

    async def ensure(
        self, source_topic: str, target_topic: str, partition: int = 0
    ) -> DestinationTopic:
        """Return once ``target_topic`` can receive ``source_topic`` (its ``partition``); raise
        if it cannot.

        Callers for one topic wait for one attempt. A retriable failure is not remembered, so the
        next call tries again; one that is not (:class:`TopicMismatch`, a refused creation) is
        remembered until :meth:`forget`. A source partition beyond the count last seen (the
        source grew) checks the topic again, and grows the destination.
        """
        known = self._ready.get(target_topic)
        if known is not None and partition < known.source_partitions:
            return known
        if known is not None:
            self.forget(target_topic)
        refusal = self._refusals.get(target_topic)
        if refusal is not None:
            raise refusal()
        return await self._rounds.get((source_topic, target_topic))

    async def sync_configs(self) -> bool:
        """One round of config sync over every provisioned destination topic; ``False`` when
        it failed (reported once until a round succeeds: the caller backs off)."""
        pairs = {t: src for t, src in self._sources.items() if t in self._ready}
        if not pairs:
            return True
        try:
            sources = await self._source.config_entries(sorted(set(pairs.values())))
            targets = await self._destination.config_entries(sorted(pairs))
            changed: dict[str, dict[str, str | None]] = {}
            for target_topic, source_topic in sorted(pairs.items()):
                entries = targets.get(target_topic, [])
                current = _overrides(entries)
                source_entries = sources.get(source_topic, [])
                source = _overrides(source_entries)
                changes: dict[str, str | None]
                if self._sync is ConfigSync.MIRROR:
                    changes = mirrored_config_changes(
                        source,
                        _effective(source_entries),
                        current,
                        self._exclude,
                        self._defaults_from,
                    )
                else:
                    seen = self._seen.get(target_topic)
                    changes = dict(
                        config_changes(source, current, _effective(entries), seen, self._exclude)
                    )
                if changes:
                    changed[target_topic] = changes
            if changed:
                await self._destination.alter(changed)
            for target_topic, changes in changed.items():
                self.synced[target_topic] = {**self.synced.get(target_topic, {}), **changes}
                log.info(
                    "destination topic configs follow the source",
                    cluster=self._destination.alias,
                    topic=target_topic,
                    changes=changes,
                )
            for target_topic, source_topic in pairs.items():
                self._seen[target_topic] = _overrides(sources.get(source_topic, []))
        except Exception as exc:
            error = said(exc)
            if self.sync_error is None:
                log.warning(
                    "topic config sync failed: destination topics keep the configs they have",
                    cluster=self._destination.alias,
                    error=error,
                )
            self.sync_error = error
            if self._on_sync_failed is not None:
                self._on_sync_failed()
            return False
        if self.sync_error is not None:
            log.info("topic config sync works again", cluster=self._destination.alias)
        self.sync_error = None
        return True

    def forget_refusal(self, target_topic: str) -> None:
        """Ask again for a topic refused before (partitions assigned anew: an operator may have
        fixed the destination meanwhile)."""
        self.refused.pop(target_topic, None)
        self._refusals.pop(target_topic, None)

    def forget(self, target_topic: str) -> None:
        """Check ``target_topic`` again on next use (after it was deleted, say)."""
        self._ready.pop(target_topic, None)
        self.refused.pop(target_topic, None)
        self._refusals.pop(target_topic, None)

    def _refuse(self, target_topic: str, error: Callable[[], ReplicatorError]) -> ReplicatorError:
        """Remember that ``target_topic`` is refused for good; the error to raise now."""
        self._refusals[target_topic] = error
        raised = error()
        self.refused[target_topic] = str(raised)
        return raised

    async def _provision(
        self, pairs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], DestinationTopic | BaseException]:
        """One round: prepare every (source topic, destination topic) pair asked for."""
        try:
            return await self._provision_all(pairs)
        except ReplicatorError:
            raise
        except Exception as exc:
            raise translate(exc) from exc

    async def _provision_all(
        self, pairs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], DestinationTopic | BaseException]:
        answers: dict[tuple[str, str], DestinationTopic | BaseException] = {}
        sources = await self._source.layouts()
        wanted = sorted({s for s, _ in pairs if sources.get(s)})
        source_entries = await self._source.config_entries(wanted)
        specs: dict[tuple[str, str], TopicSpec] = {}
        for pair in pairs:
            source_topic, target_topic = pair
            layout = sources.get(source_topic)
            if layout is None or not layout.partitions:
                answers[pair] = TopicMissing(
                    f"source topic {source_topic} not in the metadata of {self._source.alias} yet"
                )
                continue
            kept = creation_configs(
                source_entries.get(source_topic, []), self._exclude, self._sync, self._defaults_from
            )
            replication = self._replication_factor or layout.replication_factor
            specs[pair] = TopicSpec(target_topic, layout.partitions, replication, kept)

        existing = await self._destination.layouts()
        missing = [spec for spec in specs.values() if spec.name not in existing]
        if missing:
            errors = await self._destination.create(missing)
            for pair, spec in list(specs.items()):
                failure = creation_failure(spec.name, errors.get(spec.name, ()))
                if failure is None:
                    if spec in missing:
                        log.info(
                            "destination topic created",
                            topic=spec.name,
                            partitions=spec.partitions,
                            replication_factor=spec.replication_factor,
                            configs=spec.configs,
                        )
                    continue
                del specs[pair]
                if failure.retriable:
                    answers[pair] = failure
                else:  # TopicRefused or AuthorizationFailed, for good: remembered
                    answers[pair] = self._refuse(spec.name, partial(type(failure), str(failure)))
            existing = await self._destination.layouts()

        short: dict[tuple[str, str], str] = {}
        for pair, spec in list(specs.items()):
            found = existing.get(spec.name)
            if found is None:
                del specs[pair]
                answers[pair] = TopicMissing(
                    f"destination topic {spec.name} created on {self._destination.alias} "
                    "but not in its metadata yet"
                )
                continue
            reason = partition_shortfall(pair[0], spec.partitions, spec.name, found.partitions)
            if reason is not None and self._preserve_partitions:
                short[pair] = reason
        if short:
            existing = await self._grow(specs, existing, short, answers)

        limits = await self._destination.config_entries(sorted({s.name for s in specs.values()}))
        for pair, spec in specs.items():
            topic = DestinationTopic(
                spec.name,
                existing[spec.name].partitions,
                _max_message_bytes(limits.get(spec.name, [])),
                spec.partitions,
            )
            self._ready[spec.name] = topic
            self._sources[spec.name] = pair[0]
            answers[pair] = topic
        return answers

    async def _grow(
        self,
        specs: dict[tuple[str, str], TopicSpec],
        existing: dict[str, TopicLayout],
        short: dict[tuple[str, str], str],
        answers: dict[tuple[str, str], DestinationTopic | BaseException],
    ) -> dict[str, TopicLayout]:
        """Grow the destination topics with fewer partitions than their source, in one request;
        those refused or not yet grown in the metadata leave ``specs`` with their answer."""
        counts = {specs[pair].name: specs[pair].partitions for pair in short}
        refusals = await self._destination.grow(counts)
        for pair, reason in short.items():
            spec = specs[pair]
            refusal = refusals.get(spec.name)
            if refusal is None:
                self._grown(spec.name, existing[spec.name].partitions, spec.partitions)
                continue
            if isinstance(refusal, InvalidPartitionsError):
                # Already that many (another replicator of this datacenter grew it first): not
                # counted as this leg's.
                log.info(
                    "destination topic already grown", topic=spec.name, partitions=spec.partitions
                )
                continue
            error = translate(refusal)
            if error.retriable and not isinstance(refusal, NotImplementedError):
                answers[pair] = error
            else:
                said_ = str(error) or type(refusal).__name__
                detail = f"{reason}; adding partitions was refused: {said_}"
                answers[pair] = self._refuse(spec.name, partial(TopicMismatch, detail))
            del specs[pair]
        grown = await self._destination.layouts()
        for pair in [p for p in short if p in specs]:
            spec = specs[pair]
            if grown.get(spec.name, existing[spec.name]).partitions < spec.partitions:
                del specs[pair]  # grown, not in the metadata yet: retried
                answers[pair] = TopicMissing(
                    f"{spec.name} grown to {spec.partitions} partitions on "
                    f"{self._destination.alias}, not in its metadata yet"
                )
        return grown

    def _grown(self, target_topic: str, have: int, total: int) -> None:
        self.grown[target_topic] = self.grown.get(target_topic, 0) + total - have
        if self._on_grown is not None:
            self._on_grown(target_topic, total - have)
        log.info(
            "destination topic grown to the source's partition count",
            cluster=self._destination.alias,
            topic=target_topic,
            partitions_before=have,
            partitions=total,
        )


def _replicable(entries: list[Any]) -> dict[str, str]:
    """The replicable configs set on the topic itself among a topic's config entries."""
    return {
        name: value
        for name, value in _overrides(entries).items()
        if name in REPLICATED_CONFIGS and not _read_only(entries, name)
    }


def _read_only(entries: list[Any], name: str) -> bool:
    return any(entry[0] == name and entry[2] for entry in entries)


def creation_configs(
    entries: list[Any],
    exclude: re.Pattern[str],
    sync: ConfigSync = ConfigSync.RAISE_ONLY,
    defaults_from: DefaultsFrom = DefaultsFrom.TARGET,
) -> dict[str, str]:
    """The configs a destination topic is created with, from its source topic's config
    ``entries``: the replicable configs set on the source topic, the excluded ones left out
    (the destination cluster's defaults apply to the rest). With mirror sync and defaults from
    the source (MM2's ``use.defaults.from=source``), also the source's value of every other
    replicable config: what the first sync round would set anyway."""
    overrides = _replicable(entries)
    if sync is ConfigSync.MIRROR and defaults_from is DefaultsFrom.SOURCE:
        wanted = mirrored_config_changes(overrides, _effective(entries), {}, exclude, defaults_from)
        return {name: value for name, value in wanted.items() if value is not None}
    return {name: value for name, value in overrides.items() if not exclude.fullmatch(name)}


def _max_message_bytes(entries: list[Any]) -> int | None:
    for entry in entries:
        if entry[0] == "max.message.bytes" and entry[1] is not None:
            return int(entry[1])
    return None


def partitions_to_add(destination_partitions: int, source_partitions: int) -> int | None:
    """The partition count to grow a destination topic to, or ``None``: only ever up to the
    source's count (Kafka cannot shrink a topic, and more than the source is not asked for)."""
    return source_partitions if destination_partitions < source_partitions else None


def partition_shortfall(
    source_topic: str, source_partitions: int, target_topic: str, target_partitions: int
) -> str | None:
    """Why ``target_topic`` cannot receive ``source_topic`` partition for partition, if so."""
    if target_partitions >= source_partitions:
        return None
    return (
        f"destination topic {target_topic} has {target_partitions} partitions, "
        f"source {source_topic} has {source_partitions}: partition numbers cannot be kept"
    )
