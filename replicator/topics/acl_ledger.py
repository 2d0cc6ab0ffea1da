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

import asyncio
import json
from collections.abc import Sequence

from replicator import clock
from replicator.config.settings import Settings
from replicator.errors import KafkaFailure, NoAuthorizer, ReplicatorError, TopicRefused
from replicator.kafka.admin import AclBinding, create_acls, delete_acls, describe_acls
from replicator.kafka.clients import ClusterClient, client_options
from replicator.kafka.producer import InternalTopicWriter
from replicator.kafka.readers import TopicTail
from replicator.kafka.translation import denial, translate
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
    if isinstance(error, NoAuthorizer):
        return NoAuthorizer(alias, f"{alias}: {error}")
    if "AuthorizationFailed" in text or "Authorization" in type(error).__name__:
        return KafkaFailure(
            f"ACLs of {alias} not {doing}: {text}; grant the replicator's principal {grant} on "
            f"the cluster of {alias} (`replicator acls` prints it)",
            retriable=False,
        )
    return KafkaFailure(f"ACLs of {alias} not {doing}: {text}", retriable=error.retriable)


def _ledger_error(exc: BaseException, cluster: str, operation: str, topic: str) -> ReplicatorError:
    """A failure of the ledger in the product's terms; a denial named as the grant it lacks
    (``Read on topic replicator-checkpoints denied by the ACLs of dc1``)."""
    return denial(exc, cluster, topic=(operation, topic))


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
    """One cluster's ledger: its checkpoints topic's tail, read so far, and its writer."""

    def __init__(self, tail: TopicTail, writer: InternalTopicWriter) -> None:
        self.tail, self.writer = tail, writer
        self.owned: set[tuple[str, str, AclBinding]] = set()  # (source, target, binding)
        self.topic_checked = False


class KafkaAclLedger:
    """:class:`~replicator.topics.acl_sync.AclLedger` in each cluster's checkpoints topic,
    read and written through one reader and one producer per cluster, made on first use."""

    def __init__(self, settings: Settings, clusters: dict[str, ClusterClient]) -> None:
        self._settings = settings
        self._clients = clusters
        self._topic = settings.checkpoints_topic
        self._ledgers = {
            alias: _ClusterLedger(
                TopicTail(
                    client_options(client.cluster, settings),
                    self._topic,
                    f"replicator-acl-ledger-reader-{alias}",
                ),
                InternalTopicWriter(
                    client.cluster, settings, self._topic, f"replicator-acl-ledger-{alias}"
                ),
            )
            for alias, client in clusters.items()
        }

    async def owned(self, cluster: str) -> Owned:
        ledger = self._ledgers[cluster]
        try:
            found = await ledger.tail.read_new(_READ_TIMEOUT_S)
        except Exception as exc:
            raise _ledger_error(exc, cluster, "Read, Describe", self._topic) from exc
        for record in found:
            entry = ledger_entry(record.key) if record.key is not None else None
            if entry is None:
                continue
            if record.value is None:
                ledger.owned.discard(entry)
            else:
                ledger.owned.add(entry)
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
        at = json.dumps({"at_ms": int(clock.wall() * 1000)}).encode()
        records: list[tuple[bytes, bytes | None]] = [
            (ledger_key(source, cluster, b), at) for b in created
        ]
        records += [(ledger_key(source, cluster, b), None) for b in forgotten]
        try:
            await ledger.writer.write(records)
        except Exception as exc:
            raise _ledger_error(exc, cluster, "Write", self._topic) from exc
        ledger.owned |= {(source, cluster, b) for b in created}
        ledger.owned -= {(source, cluster, b) for b in forgotten}

    async def _ensure_topic(self, cluster: str, ledger: _ClusterLedger) -> None:
        if ledger.topic_checked:
            return
        admin = await self._clients[cluster].admin()
        factor = self._settings.destination_replication_factor
        try:
            errors = await ensure_single_partition(
                admin, self._topic, factor, CHECKPOINTS_TOPIC_CONFIGS
            )
        except Exception as exc:
            raise _ledger_error(exc, cluster, "Create", self._topic) from exc
        if errors:
            raise TopicRefused(
                f"checkpoints topic {self._topic} not created in {cluster}: {errors}"
            )
        ledger.topic_checked = True

    async def close(self) -> None:
        """Every cluster's reader and writer, together (each closed within a few seconds)."""
        await asyncio.gather(
            *(ledger.tail.close() for ledger in self._ledgers.values()),
            *(ledger.writer.close() for ledger in self._ledgers.values()),
        )
