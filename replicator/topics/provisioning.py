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

Topic configs are copied at creation and then follow their source every
``REPLICATOR_TOPIC_CONFIG_SYNC_INTERVAL_MS`` (:meth:`TopicProvisioner.sync_configs`), as
:mod:`replicator.topics.configs` decides. Changes are sent with IncrementalAlterConfigs (only what
changes; the destination's other overrides untouched). One DescribeConfigs per cluster and round.
A destination that refuses is reported once per leg, counted
(``replicator_topic_config_sync_failures_total``), and retried less and less often.

The provisioner keeps the decisions; the requests go through :class:`TopicAdmin`, which
:class:`ClusterAdmin` implements over :mod:`replicator.kafka.admin`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import structlog
from aiokafka.admin import AIOKafkaAdminClient

from replicator.config.values import ConfigSync, DefaultsFrom
from replicator.errors import (
    AuthorizationFailed,
    ReplicatorError,
    TopicMismatch,
    TopicMissing,
    TopicNotListedYet,
    TopicRefused,
    first_error,
)
from replicator.kafka.admin import (
    TOPIC_ALREADY_EXISTS,
    BrokerErrors,
    ConfigEntry,
    TopicSpec,
    already_grown,
    alter_topic_configs,
    create_topics,
    describe_partitions,
    describe_topic_configs,
    grow_topics,
    replication_factor,
)
from replicator.kafka.clients import ClusterClient
from replicator.kafka.coalesce import Coalescer
from replicator.kafka.translation import (
    broker_error,
    denial,
    denied,
    error_name,
    said,
    translate,
)
from replicator.topics.configs import (
    as_kafka_reports,
    creation_configs,
    max_message_bytes,
    overrides,
    replicable,
    sync_changes,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class DestinationTopic:
    """What the replicator knows of a destination topic it writes to."""

    name: str
    partitions: int
    # The largest record batch the topic accepts (its max.message.bytes), if the broker says.
    max_message_bytes: int | None = None
    # The source topic's partition count when it was checked (0: unknown).
    source_partitions: int = 0


def describe_errors(errors: BrokerErrors) -> list[str]:
    """One line per broker error: ``<Name> (error <code>): <message>``."""
    return [
        f"{error_name(code)} (error {code})" + (f": {message}" if message else "")
        for code, message in errors
    ]


def creation_failure(
    topic: str, errors: BrokerErrors, cluster: str = "the cluster"
) -> ReplicatorError | None:
    """What a CreateTopics answer with ``errors`` for ``topic`` means; ``None`` if it succeeded.

    An ACL denial is :class:`AuthorizationFailed` naming the Create it refused on ``cluster``;
    anything else is :class:`TopicRefused`, retriable only if every error the broker gave is
    (e.g. NotController while it moves).
    """
    if not errors:
        return None
    reason = f"cannot create {topic}: {'; '.join(describe_errors(errors))}"
    translated = [broker_error(code) for code, _ in errors]
    if any(isinstance(error, AuthorizationFailed) for error in translated):
        return denied("Create", f"topic {topic}", cluster)
    return TopicRefused(reason, retriable=all(error.retriable for error in translated))


async def create_topic(
    admin: AIOKafkaAdminClient, spec: TopicSpec, tolerate: tuple[int, ...] = ()
) -> list[str]:
    """Create ``spec``; the broker's errors (see :func:`describe_errors`), empty on success."""
    return describe_errors((await create_topics(admin, [spec], tolerate))[spec.name])


async def ensure_single_partition(
    admin: AIOKafkaAdminClient, name: str, factor: int | None, configs: dict[str, str]
) -> list[str] | None:
    """Create the one-partition topic ``name`` (the replicator's heartbeats, checkpoints) unless
    it exists: ``None`` when it existed, else the broker's errors (empty: created)."""
    if name in await describe_partitions(admin):
        return None
    spec = TopicSpec(name, 1, await replication_factor(admin, factor), dict(configs))
    return await create_topic(admin, spec, tolerate=(TOPIC_ALREADY_EXISTS,))


async def _config_entries(
    admin: AIOKafkaAdminClient, topics: list[str]
) -> dict[str, list[ConfigEntry]]:
    """Every config entry of each of ``topics`` (one DescribeConfigs request), each with its
    source as Apache Kafka reports it (:func:`~replicator.topics.configs.as_kafka_reports`)."""
    found = await describe_topic_configs(admin, topics)
    return {topic: as_kafka_reports(entries) for topic, entries in found.items()}


async def topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The replicable configs set on ``topic`` itself (what a destination topic is created
    with; neither defaults nor broker-wide values, which are each cluster's own)."""
    return replicable((await _config_entries(admin, [topic])).get(topic, []))


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

    async def config_entries(self, topics: list[str]) -> dict[str, list[ConfigEntry]]:
        """Every config entry of each of ``topics`` (one DescribeConfigs request)."""
        ...

    async def create(self, specs: list[TopicSpec]) -> dict[str, BrokerErrors]:
        """Create ``specs`` (one CreateTopics request): the broker's errors per topic (none:
        created; already existing is not an error)."""
        ...

    async def grow(self, counts: dict[str, int]) -> dict[str, BaseException | None]:
        """Grow each topic to its partition count (CreatePartitions): per topic, the error
        (``None``: grown; one that :func:`~replicator.kafka.admin.already_grown` says: it
        already has that many, another client grew it first)."""
        ...

    async def alter(self, configs: dict[str, dict[str, str | None]]) -> None:
        """Set (or, ``None``, delete) these overrides of each topic, leaving its others as they
        are (one IncrementalAlterConfigs request)."""
        ...


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

    async def config_entries(self, topics: list[str]) -> dict[str, list[ConfigEntry]]:
        if not topics:
            return {}
        try:
            return await _config_entries(await self._client.admin(), topics)
        except Exception as exc:
            raise denial(exc, self.alias, topic=("DescribeConfigs", _names(topics))) from exc

    async def create(self, specs: list[TopicSpec]) -> dict[str, BrokerErrors]:
        admin = await self._client.admin()
        return await create_topics(admin, specs, tolerate=(TOPIC_ALREADY_EXISTS,))

    async def grow(self, counts: dict[str, int]) -> dict[str, BaseException | None]:
        return await grow_topics(await self._client.admin(), counts)

    async def alter(self, configs: dict[str, dict[str, str | None]]) -> None:
        try:
            await alter_topic_configs(await self._client.admin(), configs)
        except Exception as exc:
            raise denial(exc, self.alias, topic=("AlterConfigs", _names(list(configs)))) from exc


def _names(topics: list[str], shown: int = 3) -> str:
    """Topics as a denial names them: ``a, b and 7 more``."""
    more = f" and {len(topics) - shown} more" if len(topics) > shown else ""
    return ", ".join(sorted(topics)[:shown]) + more


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
        # Whether the last failure was an ACL denial (the leg is not ready until granted).
        self.sync_denied = False
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
            await self._sync_round(pairs)
        except Exception as exc:
            error = said(exc)
            self.sync_denied = isinstance(first_error(exc), AuthorizationFailed)
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
        self.sync_denied = False
        return True

    async def _sync_round(self, pairs: dict[str, str]) -> None:
        """Make each destination topic of ``pairs`` (destination topic -> source topic) follow
        its source: two DescribeConfigs, at most one IncrementalAlterConfigs."""
        sources = await self._source.config_entries(sorted(set(pairs.values())))
        targets = await self._destination.config_entries(sorted(pairs))
        changed: dict[str, dict[str, str | None]] = {}
        for target_topic, source_topic in sorted(pairs.items()):
            changes = sync_changes(
                sources.get(source_topic, []),
                targets.get(target_topic, []),
                self._seen.get(target_topic),
                self._exclude,
                self._sync,
                self._defaults_from,
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
            self._seen[target_topic] = overrides(sources.get(source_topic, []))

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
        specs = await self._specs(pairs, answers)
        existing = await self._destination.layouts()
        missing = [spec for spec in specs.values() if spec.name not in existing]
        if missing:
            await self._create(missing, specs, answers)
            existing = await self._destination.layouts()

        short: dict[tuple[str, str], str] = {}
        for pair, spec in list(specs.items()):
            found = existing.get(spec.name)
            if found is None:
                del specs[pair]
                answers[pair] = TopicNotListedYet(
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
                max_message_bytes(limits.get(spec.name, [])),
                spec.partitions,
            )
            self._ready[spec.name] = topic
            self._sources[spec.name] = pair[0]
            answers[pair] = topic
        return answers

    async def _specs(
        self,
        pairs: list[tuple[str, str]],
        answers: dict[tuple[str, str], DestinationTopic | BaseException],
    ) -> dict[tuple[str, str], TopicSpec]:
        """What each destination topic must look like, from its source (one Metadata and one
        DescribeConfigs request); a source not in the metadata yet leaves its answer."""
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
        return specs

    async def _create(
        self,
        missing: list[TopicSpec],
        specs: dict[tuple[str, str], TopicSpec],
        answers: dict[tuple[str, str], DestinationTopic | BaseException],
    ) -> None:
        """Create the ``missing`` destination topics in one request; those refused leave
        ``specs`` with their answer (remembered when refused for good)."""
        errors = await self._destination.create(missing)
        created: list[TopicSpec] = []
        for pair, spec in list(specs.items()):
            alias = self._destination.alias
            failure = creation_failure(spec.name, errors.get(spec.name, ()), alias)
            if failure is None:
                if spec in missing:
                    created.append(spec)
                continue
            del specs[pair]
            if failure.retriable or isinstance(failure, AuthorizationFailed):
                answers[pair] = failure  # asked again (a denial: once granted)
            else:  # TopicRefused, for good: remembered
                answers[pair] = self._refuse(spec.name, partial(type(failure), str(failure)))
        _log_created(created, self._destination.alias)

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
            if already_grown(refusal):
                # Already that many (another replicator of this datacenter grew it first): not
                # counted as this leg's.
                log.info(
                    "destination topic already grown", topic=spec.name, partitions=spec.partitions
                )
                continue
            error = denial(refusal, self._destination.alias, topic=("Alter", spec.name))
            if isinstance(error, AuthorizationFailed):
                # Asked again (once granted): meanwhile the partitions beyond wait, saying why.
                answers[pair] = AuthorizationFailed(f"{reason}; {error}", named=True)
            elif error.retriable and not isinstance(refusal, NotImplementedError):
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


_CREATED_EXAMPLES = 3


def _log_created(created: list[TopicSpec], cluster: str) -> None:
    """Topics created in one batch: each said (with its configs) when the batch is small; else
    one line for the batch, each topic at debug (a start-up creating thousands of topics)."""
    level = log.info if len(created) <= _CREATED_EXAMPLES else log.debug
    for spec in created:
        level(
            "destination topic created",
            topic=spec.name,
            partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            configs=spec.configs,
        )
    if len(created) > _CREATED_EXAMPLES:
        log.info(
            "destination topics created",
            cluster=cluster,
            topics=len(created),
            partitions=sum(spec.partitions for spec in created),
            examples=[spec.name for spec in created[:_CREATED_EXAMPLES]],
        )
