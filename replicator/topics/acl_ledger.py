"""Topic ACL syncs on Kafka: each cluster's ACLs (:class:`ClusterAcls`) and the ledger of what
the syncs created there (:class:`KafkaAclLedger`), the seams :mod:`replicator.topics.acl_sync`
decides through.

The ledger of a cluster is its checkpoints topic (``REPLICATOR_CHECKPOINTS_TOPIC``: one
partition, compacted, never replicated), one record per binding a sync created there, keyed
``{"acl_sync": [source, target, principal, resource, name, pattern, operation, permission,
host]}`` (JSON; no group checkpoint or handover has a key of that shape), its value when it was
created; a tombstone once the sync removed it or forgot it. Every replica of a datacenter and
the sync facing the other way read the same records, so what one created, another may remove,
and no sync copies another's copies back. The topic is read once from its start, then only what
was appended since (each round asks its log end, and reads nothing more when nothing was).

Errors come out in the product's terms, naming the grant that was missing: ``Describe`` on the
cluster to read ACLs, ``Alter`` on the cluster to create or delete them; a cluster that keeps
no ACLs at all is :class:`~replicator.errors.NoAuthorizer`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from replicator import clock
from replicator.config.settings import Settings
from replicator.errors import KafkaFailure, ReplicatorError, TopicRefused
from replicator.kafka.admin import AclBinding, create_acls, delete_acls, describe_acls
from replicator.kafka.clients import ClusterClient, client_options
from replicator.kafka.producer import append, make_producer
from replicator.kafka.readers import partitions_of, read_ranges
from replicator.kafka.translation import translate
from replicator.lifecycle import close_quietly
from replicator.model.handover import CHECKPOINTS_TOPIC_CONFIGS
from replicator.topics.acl_sync import Owned
from replicator.topics.provisioning import ensure_single_partition

_LEDGER = "acl_sync"
_READ_TIMEOUT_S = 30.0


def ledger_key(source: str, target: str, binding: AclBinding) -> bytes:
    """The key of the record saying the sync from ``source`` created ``binding`` on ``target``."""
    b = binding
    fields = [source, target, b.principal, b.resource, b.name]
    fields += ["prefixed" if b.prefixed else "literal", b.operation]
    fields += ["allow" if b.allow else "deny", b.host]
    return json.dumps({_LEDGER: fields}, separators=(",", ":")).encode()


def ledger_entry(key: bytes) -> tuple[str, str, AclBinding] | None:
    """``(source, target, binding)`` of a ledger record's key; ``None`` for any other record
    of the checkpoints topic (a group's checkpoint, a handover: never guessed at)."""
    try:
        named = json.loads(key)
        if not isinstance(named, dict) or _LEDGER not in named:
            return None
        source, target, principal, resource, name, pattern, operation, permission, host = named[
            _LEDGER
        ]
    except (ValueError, TypeError):
        return None
    binding = AclBinding(
        str(principal),
        str(resource),
        str(name),
        str(operation),
        prefixed=pattern == "prefixed",
        allow=permission == "allow",
        host=str(host),
    )
    return str(source), str(target), binding


def _refused(exc: BaseException, alias: str, grant: str, doing: str) -> ReplicatorError:
    """``exc`` as the sync says it: what it was doing where, and the grant a denial asks for."""
    error = translate(exc)
    text = (str(error) or type(exc).__name__).removeprefix(f"ACLs not {doing}: ")
    if "SecurityDisabled" in text:
        return KafkaFailure(
            f"{alias} has no authorizer (authorizer.class.name unset): its ACLs cannot be {doing}",
            retriable=False,
        )
    if "AuthorizationFailed" in text or "Authorization" in type(error).__name__:
        return KafkaFailure(
            f"ACLs of {alias} not {doing}: {text}; grant the replicator's principal {grant} on "
            f"the cluster of {alias} (`replicator acls` prints it)",
            retriable=False,
        )
    return KafkaFailure(f"ACLs of {alias} not {doing}: {text}", retriable=error.retriable)


class ClusterAcls:
    """:class:`~replicator.topics.acl_sync.AclAdmin` of one cluster, through its
    :class:`ClusterClient`'s admin client (one request per call, however many bindings)."""

    def __init__(self, client: ClusterClient) -> None:
        self._client = client
        self.alias = client.alias

    async def describe(self) -> list[AclBinding]:
        try:
            return await describe_acls(await self._client.admin())
        except Exception as exc:
            raise _refused(exc, self.alias, "Describe", "described") from exc

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        try:
            await create_acls(await self._client.admin(), bindings)
        except Exception as exc:
            raise _refused(exc, self.alias, "Alter", "created") from exc

    async def delete(self, bindings: Sequence[AclBinding]) -> None:
        try:
            await delete_acls(await self._client.admin(), bindings)
        except Exception as exc:
            raise _refused(exc, self.alias, "Alter", "deleted") from exc


class _ClusterLedger:
    """One cluster's ledger: its reader's position in the checkpoints topic, what it read."""

    def __init__(self) -> None:
        self.reader: AIOKafkaConsumer | None = None
        self.position: int | None = None
        self.owned: set[tuple[str, str, AclBinding]] = set()  # (source, target, binding)
        self.producer: AIOKafkaProducer | None = None
        self.topic_checked = False


class KafkaAclLedger:
    """:class:`~replicator.topics.acl_sync.AclLedger` in each cluster's checkpoints topic,
    read and written through one reader and one producer per cluster, made on first use."""

    def __init__(self, settings: Settings, clusters: dict[str, ClusterClient]) -> None:
        self._settings = settings
        self._clients = clusters
        self._topic = settings.checkpoints_topic
        self._ledgers = {alias: _ClusterLedger() for alias in clusters}

    async def owned(self, cluster: str) -> Owned:
        ledger = self._ledgers[cluster]
        await self._read_new(cluster, ledger)
        return frozenset((source, b) for source, into, b in ledger.owned if into == cluster)

    async def record(
        self,
        cluster: str,
        source: str,
        created: Sequence[AclBinding],
        forgotten: Sequence[AclBinding],
    ) -> None:
        if not created and not forgotten:
            return
        ledger = self._ledgers[cluster]
        await self._ensure_topic(cluster, ledger)
        if ledger.producer is None:
            # No idempotence needed: a record written twice is the same key, the newest wins.
            producer = make_producer(
                self._clients[cluster].cluster,
                self._settings,
                f"replicator-acl-ledger-{cluster}",
                enable_idempotence=False,
            )
            try:
                await producer.start()
            except Exception as exc:
                await close_quietly(producer.stop())
                raise translate(exc) from exc
            ledger.producer = producer
        at = json.dumps({"at_ms": int(clock.wall() * 1000)}).encode()
        records: list[tuple[bytes, bytes | None]] = [
            (ledger_key(source, cluster, b), at) for b in created
        ]
        tombstones: list[tuple[bytes, bytes | None]] = [
            (ledger_key(source, cluster, b), None) for b in forgotten
        ]
        try:
            await append(ledger.producer, self._topic, [*records, *tombstones])
        except Exception as exc:
            raise translate(exc) from exc
        ledger.owned |= {(source, cluster, b) for b in created}
        ledger.owned -= {(source, cluster, b) for b in forgotten}

    async def _ensure_topic(self, cluster: str, ledger: _ClusterLedger) -> None:
        if ledger.topic_checked:
            return
        admin = await self._clients[cluster].admin()
        factor = self._settings.destination_replication_factor
        errors = await ensure_single_partition(
            admin, self._topic, factor, CHECKPOINTS_TOPIC_CONFIGS
        )
        if errors:
            raise TopicRefused(
                f"checkpoints topic {self._topic} not created in {cluster}: {errors}"
            )
        ledger.topic_checked = True

    async def _read_new(self, cluster: str, ledger: _ClusterLedger) -> None:
        """What was appended to the cluster's ledger since the last read (all, the first time;
        nothing while the topic does not exist)."""
        try:
            if ledger.reader is None:
                reader = AIOKafkaConsumer(
                    **client_options(self._clients[cluster].cluster, self._settings),
                    client_id=f"replicator-acl-ledger-reader-{cluster}",
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",
                )
                await reader.start()
                ledger.reader = reader
            reader = ledger.reader
            partitions = await partitions_of(reader, self._topic)
            if not partitions:
                return
            tp = TopicPartition(self._topic, 0)
            end = (await reader.end_offsets([tp]))[tp]
            if ledger.position is None:
                ledger.position = (await reader.beginning_offsets([tp]))[tp]
            if ledger.position >= end:
                return
            found = await read_ranges(reader, {tp: (ledger.position, end)}, _READ_TIMEOUT_S)
        except Exception as exc:
            raise translate(exc) from exc
        for record in found[tp]:
            entry = ledger_entry(record.key) if record.key is not None else None
            if entry is None:
                continue
            if record.value is None:
                ledger.owned.discard(entry)
            else:
                ledger.owned.add(entry)
        ledger.position = end

    async def close(self) -> None:
        for ledger in self._ledgers.values():
            if ledger.reader is not None:
                await close_quietly(ledger.reader.stop())
            if ledger.producer is not None:
                await close_quietly(ledger.producer.stop())
            ledger.reader = ledger.producer = None
