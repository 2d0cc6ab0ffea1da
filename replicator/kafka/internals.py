"""aiokafka's private surface: everything the product needs of the pinned aiokafka beyond its API.

Nothing else in the product reads or writes an underscore attribute of an aiokafka object,
patches an aiokafka class or subclasses one of its internal classes: it calls a function here,
which says what it needs and why the public API does not give it. Three groups:

- **Clients** (consumer, producer, admin): the shared ``AIOKafkaClient`` under each, its metadata
  (age, size, refresh interval, the topics it tracks), one connection dropped, the group
  coordinator's offset fetch with metadata, the fetcher's wait, the client the fetcher sends
  through (:mod:`replicator.kafka.fetch_sessions` puts fetch sessions there), and what the
  fetcher decides at each wake of its loop (:mod:`replicator.kafka.fetch_planner` decides it).
- **The fetch path**: aiokafka's ``PartitionRecords`` and ``FetchResult.getall`` patched, so the
  data path's consumers get decoded records unwrapped, get a record whose header key is not
  UTF-8 with that key as its bytes (:class:`HeaderKey`), and stop at a record the client cannot
  decode otherwise (the policy is :mod:`replicator.kafka.decoding`'s).
- **The producer's sender**: aiokafka's ``Sender`` replaced on one producer by a subclass that
  fences a partition after a failed batch, never retries what :class:`FencingPolicy` forbids, asks
  ``InitProducerId`` at the highest version both sides know, and takes a new producer id when the
  destination lost its state (the policy is :mod:`replicator.kafka.producer`'s); batches that
  never expire; batches built and read back as the producer would, in Python when a record's
  header key must keep its bytes (:class:`BatchFactory`).

:data:`CONTRACT` names every class, method and attribute relied on; :func:`contract_breaks` checks
them against the installed aiokafka, and ``tests/unit/kafka/test_internals.py`` fails naming
each one an upgrade broke. The pin is ``aiokafka==`` :data:`SUPPORTED_AIOKAFKA` in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, Protocol

import aiokafka
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.cluster import ClusterMetadata
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.consumer import fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.consumer.subscription_state import Assignment, SubscriptionState
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.errors import (
    CorruptRecordException,
    KafkaConnectionError,
    KafkaError,
    NodeNotReadyError,
    UnsupportedCodecError,
)
from aiokafka.producer.message_accumulator import BatchBuilder, MessageAccumulator, MessageBatch
from aiokafka.producer.sender import InitPIDHandler, Sender, SendProduceReqHandler
from aiokafka.producer.transaction_manager import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PidAndEpoch,
    TransactionManager,
)
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import (
    Array,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)
from aiokafka.record.default_records import (
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
    _DefaultRecordBatchBuilderPy,
    _DefaultRecordBatchPy,
)
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.util import wait_for as aiokafka_wait_for

from replicator import clock
from replicator.model import native

log = structlog.get_logger(__name__)

SUPPORTED_AIOKAFKA = "0.14.0"


# -- the contract ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reliance:
    """One thing of aiokafka's relied on: an attribute of ``owner`` (a class attribute or method,
    or an instance attribute its methods assign), and what uses it."""

    owner: type | ModuleType
    name: str
    used_for: str

    def broken(self) -> str | None:
        """Why the installed aiokafka no longer has it; ``None`` when it does."""
        if hasattr(self.owner, self.name):
            return None
        for cls in inspect.getmro(self.owner) if isinstance(self.owner, type) else ():
            if cls.__module__.startswith("aiokafka") and _assigns(cls, self.name):
                return None
        return (
            f"aiokafka {aiokafka.__version__}: {_named(self.owner)} "
            f"has no {self.name!r} any more (used for {self.used_for})"
        )


def _named(owner: type | ModuleType) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return owner.__name__


def _assigns(cls: type, name: str) -> bool:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # pragma: no cover - compiled or built-in
        return False
    return re.search(rf"\bself\.{re.escape(name)}\s*(?::[^=]+)?=", source) is not None


CONTRACT: tuple[Reliance, ...] = (
    Reliance(AIOKafkaConsumer, "_client", "a consumer's client: metadata, group offsets"),
    Reliance(AIOKafkaConsumer, "_coordinator", "committed offsets with their metadata"),
    Reliance(AIOKafkaConsumer, "_fetcher", "changing the fetch wait after start"),
    Reliance(AIOKafkaConsumer, "_subscription", "which consumer a poisoned record belongs to"),
    Reliance(AIOKafkaAdminClient, "_client", "the admin's client: probes, raw requests"),
    Reliance(AIOKafkaProducer, "_sender", "the fencing sender"),
    Reliance(AIOKafkaProducer, "_message_accumulator", "batches that never expire, batch builder"),
    Reliance(AIOKafkaConnection, "send", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_writer", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_versions", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_next_correlation_id", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_client_id", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_requests", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_request_timeout", "produce requests written as pieces"),
    Reliance(AIOKafkaConnection, "_loop", "produce requests written as pieces"),
    Reliance(SendProduceReqHandler, "create_request", "produce requests written as pieces"),
    Reliance(AIOKafkaClient, "_topics", "topics the client's metadata tracks"),
    Reliance(AIOKafkaClient, "_metadata_max_age_ms", "the metadata refresh interval"),
    Reliance(AIOKafkaClient, "_conns", "dropping a probe's connection that got no answer"),
    Reliance(AIOKafkaClient, "bootstrap", "bootstrapping again when the metadata lists no broker"),
    Reliance(AIOKafkaClient, "fetch_all_metadata", "listing every topic in one request"),
    Reliance(ClusterMetadata, "_partitions", "how many partitions the metadata holds"),
    Reliance(ClusterMetadata, "_last_successful_refresh_ms", "how old the metadata is"),
    Reliance(GroupCoordinator, "fetch_committed_offsets", "offsets with metadata, one request"),
    Reliance(
        GroupCoordinator, "_send_req", "the membership lease: heartbeats with the instance id"
    ),
    Reliance(GroupCoordinator, "_on_join_complete", "the membership lease: each assignment"),
    Reliance(GroupCoordinator, "_maybe_leave_group", "a static member leaving at a clean stop"),
    Reliance(GroupCoordinator, "_group_instance_id", "the member's static identity"),
    Reliance(GroupCoordinator, "_client", "a static member's LeaveGroup, at the version known"),
    Reliance(GroupCoordinator, "coordinator_id", "a static member's LeaveGroup"),
    Reliance(GroupCoordinator, "generation", "the generation a heartbeat renews"),
    Reliance(GroupCoordinator, "member_id", "a static member's LeaveGroup"),
    Reliance(GroupCoordinator, "reset_generation", "a static member leaving at a clean stop"),
    Reliance(HeartbeatRequest, "_group", "a heartbeat sent again with the instance id"),
    Reliance(HeartbeatRequest, "_generation_id", "a heartbeat sent again with the instance id"),
    Reliance(HeartbeatRequest, "_member_id", "a heartbeat sent again with the instance id"),
    Reliance(SyncGroupRequest, "_generation_id", "the generation a group sync renews"),
    Reliance(fetcher.Fetcher, "_fetch_max_wait_ms", "the fetch wait"),
    Reliance(fetcher.Fetcher, "_client", "fetches sent through fetch sessions"),
    Reliance(fetcher.Fetcher, "_proc_fetch_request", "fetch offsets read from the request"),
    Reliance(FetchRequest, "_topics", "a session's answer read against what it answered"),
    Reliance(FetchRequest, "_max_wait_ms", "a session's request built for what it lists"),
    Reliance(FetchRequest, "_min_bytes", "a session's request built for what it lists"),
    Reliance(FetchRequest, "_max_bytes", "a session's request built for what it lists"),
    Reliance(FetchRequest, "_isolation_level", "a session's request built for what it lists"),
    Reliance(FetchRequest, "_rack_id", "a session's request built for what it lists"),
    Reliance(SubscriptionState, "subscription", "a consumer's current assignment"),
    Reliance(SubscriptionState, "pause", "the fetch planner told of a pause"),
    Reliance(SubscriptionState, "resume", "the fetch planner told of a resume"),
    Reliance(fetcher.Fetcher, "_get_actions_per_node", "the fetch planner in its place"),
    Reliance(fetcher.Fetcher, "_records", "the fetch planner: records buffered, their backoff"),
    Reliance(fetcher.Fetcher, "_in_flight", "the fetch planner: nodes with a request in flight"),
    Reliance(fetcher.Fetcher, "_preferred_read_replica", "the fetch planner: read replicas"),
    Reliance(fetcher.Fetcher, "_fetcher_timeout", "the fetch planner: the idle wake"),
    Reliance(fetcher.Fetcher, "_default_reset_strategy", "the fetch planner: resets by itself"),
    Reliance(fetcher.Fetcher, "request_offset_reset", "the fetch planner told of a reset"),
    Reliance(fetcher.Fetcher, "seek_to", "the fetch planner told of a seek"),
    Reliance(fetcher.Fetcher, "_fetch_min_bytes", "the fetch planner's requests"),
    Reliance(fetcher.Fetcher, "_fetch_max_bytes", "the fetch planner's requests"),
    Reliance(fetcher.Fetcher, "_isolation_level", "the fetch planner's requests"),
    Reliance(fetcher.Fetcher, "_max_partition_fetch_bytes", "the fetch planner's requests"),
    Reliance(fetcher.Fetcher, "_client_rack", "the fetch planner's requests"),
    Reliance(fetcher.FetchResult, "calculate_backoff", "the fetch planner: buffered records"),
    Reliance(fetcher.FetchError, "calculate_backoff", "the fetch planner: a buffered error"),
    Reliance(fetcher, "OffsetResetStrategy", "the fetch planner: resets by itself"),
    Reliance(ClusterMetadata, "_partitions", "the fetch planner: when leaders may have moved"),
    Reliance(Assignment, "active", "forgetting poisoned records of an old assignment"),
    Reliance(Assignment, "state_value", "the position past records never handed over"),
    Reliance(fetcher.PartitionRecords, "_consumer_record", "handing records over unwrapped"),
    Reliance(fetcher.PartitionRecords, "next_fetch_offset", "where an undecodable record is"),
    Reliance(fetcher.PartitionRecords, "_records", "the native path: the fetched bytes"),
    Reliance(fetcher.PartitionRecords, "_aborted_transactions", "the native path's filter"),
    Reliance(fetcher.PartitionRecords, "_isolation_level", "the native path's filter"),
    Reliance(fetcher.PartitionRecords, "_check_crcs", "the native path's CRC checks"),
    Reliance(fetcher.FetchResult, "_partition_records", "the fetch path's records"),
    Reliance(fetcher.FetchResult, "_topic_partition", "the fetch path's partition"),
    Reliance(fetcher.FetchResult, "_assignment", "the fetch path's assignment"),
    Reliance(fetcher.FetchResult, "_update_position", "the position after the records taken"),
    Reliance(fetcher.FetchResult, "check_assignment", "a fetch of a partition still assigned"),
    Reliance(fetcher.FetchResult, "has_more", "a fetch with records left"),
    Reliance(Sender, "_txn_manager", "whether the producer is idempotent"),
    Reliance(Sender, "_message_accumulator", "failing the batches queued behind a failed one"),
    Reliance(Sender, "_muted_partitions", "fencing a partition (one batch in flight each)"),
    Reliance(Sender, "_in_flight", "requests in flight per node (several, one per partition)"),
    Reliance(Sender, "_send_produce_req", "the fencing sender's override, the lease's check"),
    Reliance(Sender, "client", "connected before the lease's check"),
    Reliance(Sender, "_do_init_pid", "InitProducerId at the highest version both sides know"),
    Reliance(SendProduceReqHandler, "_can_retry", "never retrying a batch of unknown outcome"),
    Reliance(SendProduceReqHandler, "_sender", "the handler's sender"),
    Reliance(InitPIDHandler, "create_request", "InitProducerId at a newer version"),
    Reliance(TransactionManager, "_pid_and_epoch", "taking a new producer id"),
    Reliance(TransactionManager, "_pid_waiter", "taking a new producer id"),
    Reliance(TransactionManager, "_sequence_numbers", "numbering partitions from 0 again"),
    Reliance(TransactionManager, "increment_sequence_number", "a batch the lease kept back"),
    Reliance(TransactionManager, "transactional_id", "InitProducerId's request"),
    Reliance(TransactionManager, "transaction_timeout_ms", "InitProducerId's request"),
    Reliance(MessageAccumulator, "_batches", "the batches queued per partition"),
    Reliance(MessageAccumulator, "_batch_ttl", "batches that never expire"),
    Reliance(MessageAccumulator, "_batch_size", "the destination batch size"),
    Reliance(MessageAccumulator, "_compression_type", "the destination batch compression"),
    Reliance(MessageBatch, "_builder", "the producer id a batch was sent with"),
    Reliance(BatchBuilder, "_build", "reading a built batch back"),
    Reliance(BatchBuilder, "_builder", "the producer id a batch was sent with"),
    Reliance(DefaultRecordBatchBuilder, "producer_id", "the producer id a batch was sent with"),
    Reliance(fetcher, "MemoryRecords", "keeping a fetch's bytes for a record aiokafka rejects"),
    Reliance(_DefaultRecordBatchPy, "_maybe_uncompress", "decoding such a record in Python"),
    Reliance(_DefaultRecordBatchPy, "_buffer", "header keys decoded as their bytes"),
    Reliance(_DefaultRecordBatchBuilderPy, "append", "writing a header key as its bytes"),
    Reliance(_DefaultRecordBatchBuilderPy, "set_producer_state", "numbering such a batch"),
    Reliance(BatchBuilder, "_set_producer_state", "numbering such a batch (its C-only assert)"),
)


def contract_breaks() -> list[str]:
    """What the installed aiokafka no longer has of :data:`CONTRACT`, one line each."""
    found = [broken for reliance in CONTRACT if (broken := reliance.broken()) is not None]
    if aiokafka.__version__ != SUPPORTED_AIOKAFKA:
        found.insert(
            0,
            f"aiokafka {aiokafka.__version__} installed, {SUPPORTED_AIOKAFKA} supported: "
            "the fast fetch path stays off (records are wrapped); check every reliance",
        )
    return found


# -- clients --------------------------------------------------------------------------------------


def kafka_client(owner: AIOKafkaConsumer | AIOKafkaAdminClient) -> Any:
    """The ``AIOKafkaClient`` under a consumer or an admin client (for raw requests to a
    group coordinator or a broker, which neither offers)."""
    return owner._client


def fetch_committed(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition]
) -> Awaitable[dict[TopicPartition, Any]]:
    """The group's ``OffsetAndMetadata`` of each of ``partitions``, in one request (aiokafka's
    ``committed()`` asks for one partition and drops the metadata)."""
    found: Awaitable[dict[TopicPartition, Any]] = consumer._coordinator.fetch_committed_offsets(
        partitions
    )
    return found


def set_fetch_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """How long ``consumer``'s next fetches wait for data (aiokafka fixes it at start)."""
    consumer._fetcher._fetch_max_wait_ms = wait_ms


def metadata_age_s(consumer: AIOKafkaConsumer) -> float:
    """Seconds since ``consumer``'s metadata was last refreshed."""
    refreshed_ms: float = consumer._client.cluster._last_successful_refresh_ms
    return time.time() - refreshed_ms / 1000


def metadata_partitions(consumer: AIOKafkaConsumer) -> int:
    """How many partitions ``consumer``'s metadata holds (public: one topic at a time)."""
    return sum(len(by_partition) for by_partition in consumer._client.cluster._partitions.values())


def set_metadata_max_age(consumer: AIOKafkaConsumer, interval_ms: int) -> None:
    """Refresh ``consumer``'s metadata every ``interval_ms`` (aiokafka fixes it at creation)."""
    consumer._client._metadata_max_age_ms = interval_ms


def tracked_topics(consumer: AIOKafkaConsumer) -> set[str]:
    """The topics ``consumer``'s metadata covers."""
    return set(consumer._client._topics)


def set_tracked_topics(consumer: AIOKafkaConsumer, topics: Iterable[str]) -> None:
    """Make ``consumer``'s metadata cover ``topics`` without a request now (aiokafka's
    ``assign`` narrows them to the assigned topics)."""
    consumer._client._topics = set(topics)


async def all_metadata(consumer: AIOKafkaConsumer) -> ClusterMetadata:
    """Every topic of the cluster and its partitions, from one metadata request."""
    cluster: ClusterMetadata = await consumer._client.fetch_all_metadata()
    return cluster


def fetch_client(consumer: AIOKafkaConsumer) -> Any:
    """The client a started ``consumer``'s fetcher sends its requests through."""
    return consumer._fetcher._client


def set_fetch_client(consumer: AIOKafkaConsumer, client: Any) -> None:
    """Send a started ``consumer``'s fetches through ``client`` (a stand-in for its
    ``AIOKafkaClient``). aiokafka's ``Fetcher._proc_fetch_request`` reads a fetch answer's
    offsets from the partitions of the request it passed to ``send``, so a client that sends
    fewer keeps those listed there (:mod:`replicator.kafka.fetch_sessions`)."""
    consumer._fetcher._client = client


# -- the fetcher's planning -----------------------------------------------------------------------

# What aiokafka's ``Fetcher._get_actions_per_node`` returns: the fetch requests per node, the
# partitions awaiting an offset reset per node, how long to wait at most, whether metadata must
# be refreshed, and the futures that wake the loop when a paused partition is resumed.
FetchActions = tuple[list[tuple[int, Any]], dict[int, list[TopicPartition]], float, bool, list[Any]]


@dataclass(frozen=True, slots=True)
class FetcherParts:
    """A consumer's fetcher as its planner (:mod:`replicator.kafka.fetch_planner`) reads it.

    ``records``: the fetcher's buffer of fetched records (or a fetch error) not handed over yet,
    per partition, each with its ``calculate_backoff()``; ``in_flight``: the nodes with a request
    in flight; ``read_replicas``: KIP-392's preferred read replicas (empty unless a rack is set);
    all three are the fetcher's own live objects. ``idle_timeout``: the longest wait of its loop
    (seconds); ``resets_by_itself``: whether a fetch answer or a missing commit may reset a
    position by the consumer's ``auto_offset_reset`` (not ``none``)."""

    fetcher: Any
    subscription: SubscriptionState
    records: dict[TopicPartition, Any]
    in_flight: set[int]
    read_replicas: dict[TopicPartition, Any]
    idle_timeout: float
    resets_by_itself: bool


def fetcher_parts_of(owner: Any, subscription: SubscriptionState) -> FetcherParts:
    """The parts of aiokafka's ``Fetcher`` ``owner`` working for ``subscription``."""
    return FetcherParts(
        fetcher=owner,
        subscription=subscription,
        records=owner._records,
        in_flight=owner._in_flight,
        read_replicas=owner._preferred_read_replica,
        idle_timeout=float(owner._fetcher_timeout),
        resets_by_itself=owner._default_reset_strategy != fetcher.OffsetResetStrategy.NONE,
    )


def fetcher_parts(consumer: AIOKafkaConsumer) -> FetcherParts:
    """A started ``consumer``'s fetcher parts."""
    return fetcher_parts_of(consumer._fetcher, consumer._subscription)


def fetch_cluster(parts: FetcherParts) -> ClusterMetadata:
    """The metadata the fetcher finds each partition's leader in."""
    cluster: ClusterMetadata = parts.fetcher._client.cluster
    return cluster


def leaders_version(cluster: ClusterMetadata) -> object:
    """What changes whenever ``cluster``'s partition leaders may have (each metadata update
    replaces aiokafka's map of partitions by a new one)."""
    version: object = cluster._partitions
    return version


class _PlannedFetchRequest(FetchRequest):  # type: ignore[misc]  # aiokafka's, untyped
    """aiokafka's FetchRequest, carrying what its planner knows of it for the fetch session
    that sends it (:class:`replicator.kafka.fetch_sessions.PlannedFetch`)."""

    def __init__(self, *args: Any, planned: object, **options: Any) -> None:
        super().__init__(*args, **options)
        self.planned = planned


def fetch_request(
    parts: FetcherParts,
    topics: list[tuple[str, list[tuple[int, int, int]]]],
    planned: object = None,
) -> Any:
    """The FetchRequest aiokafka's fetcher would send for ``topics`` (its wait, sizes,
    isolation level and rack as they are now), carrying ``planned`` (:func:`planned_of`)."""
    owner = parts.fetcher
    return _PlannedFetchRequest(
        owner._fetch_max_wait_ms,
        owner._fetch_min_bytes,
        owner._fetch_max_bytes,
        owner._isolation_level,
        topics,
        rack_id=owner._client_rack or "",
        planned=planned,
    )


def planned_of(request: FetchRequest) -> object:
    """What the planner that built ``request`` (:func:`fetch_request`) attached to it; ``None``
    for a request built elsewhere (aiokafka's own walk)."""
    return request.planned if isinstance(request, _PlannedFetchRequest) else None


def fetch_request_like(
    request: FetchRequest, topics: list[tuple[str, list[tuple[int, int, int]]]]
) -> FetchRequest:
    """A FetchRequest with ``request``'s wait, sizes, isolation level and rack, for ``topics``
    (a session's incremental request, built for the partitions it lists alone)."""
    return FetchRequest(
        request._max_wait_ms,
        request._min_bytes,
        request._max_bytes,
        request._isolation_level,
        topics,
        rack_id=request._rack_id,
    )


def set_fetch_topics(
    request: FetchRequest, topics: list[tuple[str, list[tuple[int, int, int]]]]
) -> None:
    """What ``request`` says it fetched, from now on: aiokafka's fetcher reads the fetch offset
    of each partition an answer names from it, after the answer (every one of its partitions
    otherwise, thousands for a few answered)."""
    request._topics = topics


def partition_fetch_bytes(parts: FetcherParts) -> int:
    """How much a fetch asks of each partition at most."""
    size: int = parts.fetcher._max_partition_fetch_bytes
    return size


def aiokafka_actions(parts: FetcherParts, assignment: Assignment) -> FetchActions:
    """What aiokafka's own ``_get_actions_per_node`` decides for ``assignment`` (a walk of
    every assigned partition)."""
    actions: FetchActions = fetcher.Fetcher._get_actions_per_node(parts.fetcher, assignment)
    return actions


class FetchPlannerHooks(Protocol):
    """What a fetch planner decides and is told (:class:`replicator.kafka.fetch_planner.
    FetchPlanner`)."""

    def plan(self, assignment: Any) -> FetchActions: ...
    def paused(self, tp: TopicPartition) -> None: ...
    def resumed(self, tp: TopicPartition) -> None: ...
    def sought(self, tp: TopicPartition) -> None: ...
    def resetting(self, tps: Iterable[TopicPartition]) -> None: ...
    def buffered(self, tp: TopicPartition) -> None: ...


class _NotedRecords(OrderedDict[TopicPartition, Any]):
    """A fetcher's buffer of fetched records that tells ``noted`` of each partition buffered
    (aiokafka only ever stores into it with ``records[tp] = ...``)."""

    def __init__(self, records: dict[TopicPartition, Any]) -> None:
        super().__init__(records)
        self.noted: Callable[[TopicPartition], None] | None = None

    def __setitem__(self, tp: TopicPartition, value: Any) -> None:
        super().__setitem__(tp, value)
        if self.noted is not None:
            self.noted(tp)


def note_records(parts: FetcherParts) -> FetcherParts:
    """``parts`` with the fetcher's buffer replaced by one that can tell of each partition
    buffered (:func:`install_fetch_planner` says whom)."""
    records = _NotedRecords(parts.records)
    parts.fetcher._records = records
    return replace(parts, records=records)


def install_fetch_planner(parts: FetcherParts, planner: FetchPlannerHooks) -> None:
    """Make ``planner`` decide each wake of the fetcher's loop in place of aiokafka's walk, and
    tell it of every pause, resume, seek and offset reset asked of the consumer, once done, and
    of every partition the fetcher buffers records of (``parts`` from :func:`note_records`).
    On this fetcher and subscription only; nothing else in aiokafka pauses, resumes, moves or
    loses a position (``Fetcher.seek_to`` is the consumer's seek; records handed over move a
    position; a reset comes from a seek to an end, a fetch answer or a missing commit)."""
    subscription = parts.subscription
    pause, resume = subscription.pause, subscription.resume
    owner = parts.fetcher
    seek_to, request_reset = owner.seek_to, owner.request_offset_reset

    def pausing(tp: TopicPartition) -> None:
        pause(tp)
        planner.paused(tp)

    def resuming(tp: TopicPartition) -> None:
        resume(tp)
        planner.resumed(tp)

    def seeking(tp: TopicPartition, offset: int) -> None:
        seek_to(tp, offset)
        planner.sought(tp)

    def reset(tps: Iterable[TopicPartition], strategy: int) -> Any:
        tps = list(tps)
        waiting = request_reset(tps, strategy)
        planner.resetting(tps)
        return waiting

    if isinstance(parts.records, _NotedRecords):
        parts.records.noted = planner.buffered
    subscription.pause = pausing
    subscription.resume = resuming
    owner.seek_to = seeking
    owner.request_offset_reset = reset
    owner._get_actions_per_node = planner.plan


def drop_connection(client: AIOKafkaClient, node: int | str, group: ConnectionGroup) -> None:
    """Close ``client``'s connection to ``node`` (a node id, or ``"bootstrap"``) in ``group``, so
    the next request opens a new one (not behind a request that never got an answer)."""
    stale = client._conns.pop((node, group), None)
    if stale is not None:
        stale.close()


async def a_broker(client: AIOKafkaClient) -> int:
    """A broker of ``client``'s cluster to send a request to, bootstrapping again first when the
    client's metadata lists none.

    A KRaft broker its controller holds fenced answers a metadata request with no broker (seen
    once in the suite after a broker was frozen past its session; not reproduced on demand).
    aiokafka keeps that answer, holds the bootstrap connection for its
    next refresh and asks again only at ``metadata_max_age_ms`` (minutes) or when a consumer or
    producer forces it: an admin client or a coordinator lookup meanwhile finds no node (aiokafka
    asserts "Did we not perform bootstrap?"). Bootstrapping again (a fresh connection per
    server, the stale one closed) is what the public API offers; if the cluster still lists no
    broker, a retriable :class:`~aiokafka.errors.NodeNotReadyError` says so."""
    node: int | None = client.get_random_node()
    if node is None:
        drop_connection(client, "bootstrap", ConnectionGroup.DEFAULT)
        await client.bootstrap()
        node = client.get_random_node()
    if node is None:
        raise NodeNotReadyError("the cluster's metadata lists no broker (starting, or fenced)")
    return node


# -- the fetch path -------------------------------------------------------------------------------

READ_COMMITTED = 1  # aiokafka's isolation level number (fetcher.READ_COMMITTED)
_decompress = native.decompressor(
    lambda codec: UnsupportedCodecError(f"Unknown compression codec {codec:#04x}")
)


def _decoded(tp: Any, record: Any) -> Any:
    return record


_wrapped_init = fetcher.PartitionRecords.__init__
_wrapped_getall = fetcher.FetchResult.getall

# Set by install_fetch_path: the key decoder that marks the data path's consumers, the one that
# marks those whose records stay bytes (the native path), and what to do with an undecodable
# record (the fetch's assignment, the partition, its offset, why).
_marker: Callable[[bytes], bytes] | None = None
_set_marker: Callable[[bytes], bytes] | None = None
_on_undecodable: Callable[[Any, TopicPartition, int, str], None] | None = None


def _init(
    self: Any, tp: Any, records: Any, aborted: Any, offset: int, key_decoder: Any, *rest: Any
) -> None:
    """aiokafka's ``PartitionRecords.__init__``; the records of a fetch by a consumer marked with
    the data path's key decoder are handed over as decoded (one instance attribute, no cost per
    record)."""
    _wrapped_init(self, tp, records, aborted, offset, key_decoder, *rest)
    if key_decoder is _marker:
        self._consumer_record = _decoded
    elif key_decoder is not None and key_decoder is _set_marker:
        self._consumer_record = _decoded
        self._record_sets = True


def _record_set(self: Any) -> Any:
    """The records of the fetched partition as one record set kept as bytes (the native path:
    decoded, filtered and positioned as aiokafka's ``PartitionRecords`` would); ``None`` when
    its bytes hold a batch of a format before v2 (decoded by aiokafka instead)."""
    records = self._partition_records
    kept = records._records
    if not isinstance(kept, _KeptRecords):
        return None
    aborted = [(int(pid), int(first)) for pid, first in records._aborted_transactions]
    try:
        found = native.decode(
            kept.raw,
            records.next_fetch_offset,
            aborted,
            records._isolation_level == READ_COMMITTED,
            bool(records._check_crcs),
            _decompress,
        )
    except native.native().CorruptBatch as exc:  # fetched again, as aiokafka does
        raise CorruptRecordException(f"{exc} - {self._topic_partition}") from None
    if found is None:
        return None
    records.next_fetch_offset = found.next_offset
    self._update_position()
    self._partition_records = None
    if found.stopped_at is not None:
        error = found.error
        if isinstance(error, KafkaError):
            raise error
        if _on_undecodable is not None:
            reason = f"{type(error).__name__}: {error}"
            _on_undecodable(self._assignment, self._topic_partition, found.stopped_at, reason)
    return found.records


def _getall(self: Any, max_records: int | None = None) -> Any:
    """aiokafka's ``FetchResult.getall``, stopping before a record it cannot decode (for the
    marked consumers; the others get aiokafka's own); a record set kept as bytes for those
    marked for the native path."""
    if self._partition_records is None or "_consumer_record" not in vars(self._partition_records):
        return list(_wrapped_getall(self, max_records))
    if not self.check_assignment(self._topic_partition) or not self.has_more():
        return []
    if "_record_sets" in vars(self._partition_records):
        found = _record_set(self)
        if found is not None:
            return found
    return _decoded_records(self, max_records)


def _decoded_records(self: Any, max_records: int | None) -> list[Any]:
    """The records of a marked consumer's fetch as aiokafka decodes them, up to one it cannot."""
    tp = self._topic_partition
    records = self._partition_records
    taken: list[Any] = []
    try:
        for record in records:
            taken.append(record)
            if max_records is not None and len(taken) >= max_records:
                self._update_position()
                break
        else:
            self._update_position()
            self._partition_records = None
    except KafkaError:
        raise  # a corrupt batch (CRC) is fetched again, as aiokafka does
    except Exception as exc:  # undecodable: the position stays on it (unless only a key is)
        kept = _kept_bytes(records, exc)
        # A header key that is not UTF-8: the rest of its batch decoded in Python.
        rest = _with_raw_keys(kept, records.next_fetch_offset) if kept is not None else None
        if rest is not None:
            more, records.next_fetch_offset = rest
            taken.extend(more)
        self._update_position()
        self._partition_records = None
        if rest is not None:
            return taken  # the next fetch starts after that batch
        if _on_undecodable is not None:
            _on_undecodable(
                self._assignment, tp, records.next_fetch_offset, f"{type(exc).__name__}: {exc}"
            )
    return taken


class HeaderKey(str):
    """A record header key that is not UTF-8 (the wire format allows any bytes; Java clients
    write them): its text decoded with ``surrogateescape``, and :meth:`encode` gives back its
    exact bytes, so a copy of the record carries the key unchanged."""

    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return str.encode(self, encoding, "surrogateescape")

    @property
    def raw(self) -> bytes:
        """The key's bytes as written."""
        return self.encode()


_BATCH_FRAMING = 12  # a record batch's base offset and length
_MAGIC_AT = 16  # the offset of a record batch's magic byte


class _KeptBytes(bytes):
    """A slice of a batch being decoded in Python: its text as a :class:`HeaderKey` when it is
    not UTF-8 (the only ``decode`` a record batch makes is of a header key)."""

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        try:
            return bytes.decode(self, encoding)
        except UnicodeDecodeError:
            return HeaderKey(bytes.decode(self, encoding, "surrogateescape"))


class _RawKeyBuffer(bytearray):
    """A record batch's (uncompressed) bytes whose slices are :class:`_KeptBytes`."""

    def __getitem__(self, index: Any) -> Any:
        found = bytearray.__getitem__(self, index)
        return _KeptBytes(found) if isinstance(index, slice) else found


class _KeptRecords(MemoryRecords):  # type: ignore[misc]  # aiokafka's C class, untyped
    """aiokafka's ``MemoryRecords`` keeping the fetched bytes, to decode again in Python a
    batch the C decoder rejects (a header key that is not UTF-8)."""

    __slots__ = ("raw",)

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.raw = data


def _kept_bytes(records: Any, exc: Exception) -> bytes | None:
    """The fetched bytes of ``records`` when ``exc`` is a header key that is not UTF-8."""
    if not isinstance(exc, UnicodeDecodeError):
        return None
    kept = getattr(records, "_records", None)
    return kept.raw if isinstance(kept, _KeptRecords) else None


def _with_raw_keys(data: bytes, offset: int) -> tuple[list[Any], int] | None:
    """The records at or after ``offset`` of the batch of ``data`` holding it, decoded in Python
    with header keys that are not UTF-8 kept as :class:`HeaderKey`, and the offset after that
    batch; ``None`` if no batch holds it or it cannot be decoded even so."""
    pos = 0
    try:
        # Each batch: base offset (int64), length (int32) of what follows; magic at byte 16.
        while pos + _BATCH_FRAMING <= len(data):
            _, length = struct.unpack_from(">qi", data, pos)
            end = pos + _BATCH_FRAMING + length
            if end > len(data):
                break  # a partial batch ends a fetch answer
            if data[pos + _MAGIC_AT] == 2:
                batch = _DefaultRecordBatchPy(data[pos:end])
                if batch.next_offset > offset:
                    batch._maybe_uncompress()
                    batch._buffer = _RawKeyBuffer(batch._buffer)
                    return [r for r in batch if r.offset >= offset], batch.next_offset
            pos = end
    except Exception as exc:  # undecodable in Python too: halted there by the caller
        log.debug("a batch undecodable in Python too", error=repr(exc))
    return None


class _RawKeysBatch(BatchBuilder):  # type: ignore[misc]  # aiokafka's class, untyped
    """aiokafka's ``BatchBuilder`` over its Python record builder, which takes header keys kept
    as bytes; aiokafka asserts its C builder when the producer numbers the batch."""

    def __init__(self, size: int, compression: int) -> None:
        super().__init__(size, compression)
        self._builder = _DefaultRecordBatchBuilderPy(2, compression, 0, -1, -1, 0, size)

    def _set_producer_state(self, producer_id: int, producer_epoch: int, sequence: int) -> None:
        self._builder.set_producer_state(producer_id, producer_epoch, sequence)


class BatchFactory:
    """New destination batches: aiokafka's (its C builder), or, for a record with a header key
    kept as bytes (:class:`HeaderKey`, which the C builder refuses), one built in Python."""

    __slots__ = ("codec", "limit")

    def __init__(self, size: int, compression: int) -> None:
        self.limit, self.codec = size, compression

    def __call__(self) -> BatchBuilder:
        return BatchBuilder(self.limit, self.codec)

    def raw_keys(self) -> BatchBuilder:
        """A batch whose header keys may be :class:`HeaderKey` (slower: Python)."""
        return _RawKeysBatch(self.limit, self.codec)


def install_fetch_path(
    marker: Callable[[bytes], bytes],
    on_undecodable: Callable[[Any, TopicPartition, int, str], None],
    set_marker: Callable[[bytes], bytes] | None = None,
) -> bool:
    """Hand the records of consumers made with ``key_deserializer=marker`` over as aiokafka
    decoded them, those of consumers made with ``set_marker`` as one native record set per
    partition and fetch, and stop their fetches before a record they cannot decode, calling
    ``on_undecodable(assignment, tp, offset, error)``. Process-wide, once; ``False`` (nothing
    patched) on an aiokafka version other than the supported one."""
    global _marker, _set_marker, _on_undecodable
    if aiokafka.__version__ != SUPPORTED_AIOKAFKA or not hasattr(
        fetcher.PartitionRecords, "_consumer_record"
    ):
        return False
    _marker, _set_marker, _on_undecodable = marker, set_marker, on_undecodable
    fetcher.PartitionRecords.__init__ = _init
    fetcher.FetchResult.getall = _getall
    fetcher.MemoryRecords = _KeptRecords
    return True


def assignment_of(consumer: Any) -> Any:
    """``consumer``'s current assignment object (what a fetch notes an undecodable record
    against), ``None`` when it has none."""
    subscription = consumer._subscription.subscription
    return subscription.assignment if subscription is not None else None


def fetched_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """Where ``consumer`` fetches ``tp`` next, without a request (``None``: not assigned, or no
    position yet). Past the last record handed over when a fetch ended in records the client
    never hands over: transaction markers, aborted transactions' records."""
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    if assignment is None:  # none yet, or between two (a rebalance)
        return None
    state = assignment.state_value(tp)
    if state is None or not state.has_valid_position:
        return None
    position: int = state.position
    return position


def assignment_active(assignment: Any) -> bool:
    """Whether ``assignment`` is still some consumer's current one."""
    return bool(assignment.active)


# -- the group member's lease ---------------------------------------------------------------------


class _HeartbeatResponseV3(Response):  # type: ignore[misc]
    API_KEY = 12
    API_VERSION = 3
    SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16))


class _HeartbeatRequestV3(RequestStruct):  # type: ignore[misc]
    """Heartbeat v3 (KIP-345): with the member's instance id, so that a member whose identity
    another process took is answered FENCED_INSTANCE_ID, not UNKNOWN_MEMBER_ID (aiokafka sends
    v1, and a fenced static member would rejoin and fence the newer one in turn)."""

    API_KEY = 12
    API_VERSION = 3
    RESPONSE_TYPE = _HeartbeatResponseV3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),
    )


class _StaticHeartbeat:
    """aiokafka's heartbeat of a static member, at v3 where the broker grants it."""

    def __init__(self, request: HeartbeatRequest, instance_id: str) -> None:
        self._request = request
        self._instance_id = instance_id

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        low, high = versions.get(12, (0, 0))
        if low <= 3 <= high:
            r = self._request
            return _HeartbeatRequestV3(r._group, r._generation_id, r._member_id, self._instance_id)
        return self._request.prepare(versions)


class _LeaveGroupResponseV3(Response):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):  # type: ignore[misc]
    """LeaveGroup v3 (KIP-345): a static member leaves by its instance id."""

    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class _StaticLeave:
    def __init__(self, group: str, member_id: str, instance_id: str) -> None:
        self._args = (group, [(member_id, instance_id)])

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        low, high = versions.get(13, (0, 0))
        if not low <= 3 <= high:
            raise KafkaError("the broker does not grant LeaveGroup v3 (static members)")
        return _LeaveGroupRequestV3(*self._args)


_NO_ERROR = 0
_FENCED_INSTANCE_ID = 82
# The coordinator no longer counts the member in its generation: ILLEGAL_GENERATION,
# UNKNOWN_MEMBER_ID. Any other error (the coordinator moving or loading, a rebalance under way)
# renews nothing and ends nothing: the lease runs out by itself if it lasts.
_MEMBERSHIP_LOST = frozenset({22, 25})
_GROUP_REQUESTS = (HeartbeatRequest, SyncGroupRequest, JoinGroupRequest)


class Membership(Protocol):
    """What the group client tells its member's lease (:class:`~replicator.kafka.membership.
    MembershipLease` is one)."""

    def renewed(self, sent_at: float, generation: int) -> None: ...

    def lost(self) -> None: ...

    def fence(self, reason: str) -> None: ...

    def assigned(self, partitions: Iterable[TopicPartition], generation: int) -> None: ...


def install_membership(consumer: AIOKafkaConsumer, membership: Membership) -> None:
    """Tell ``membership`` of each heartbeat and group sync the coordinator accepted (with the
    time it was sent), of each one it refused, and of each assignment (before the consumer's
    rebalance listener hears of it); send a static member's heartbeats with its instance id,
    and let it leave the group by that id when the consumer closes (aiokafka never does: the
    partitions of a static member that stopped for good would wait out its session).

    A heartbeat, join or sync answered FENCED_INSTANCE_ID (another process joined under the same
    instance id) fences the lease, which the feed reads to stop (it never writes again); nothing
    is raised inside aiokafka, whose rebalance would take a foreign error for its own death.
    Called after the consumer started and before it subscribes (its first join comes after).
    """
    _MembershipHooks(consumer._coordinator, membership).install()


class _MembershipHooks:
    """The group coordinator's requests, sync and leave, as :func:`install_membership` says."""

    def __init__(self, coordinator: GroupCoordinator, membership: Membership) -> None:
        self._coordinator = coordinator
        self._membership = membership
        self._instance_id: str | None = coordinator._group_instance_id
        self._send_req = coordinator._send_req
        self._on_join_complete = coordinator._on_join_complete
        self._leave_group = coordinator._maybe_leave_group

    def install(self) -> None:
        coordinator = self._coordinator
        coordinator._send_req = self.send
        coordinator._on_join_complete = self.join_complete
        coordinator._maybe_leave_group = self.leave

    async def send(self, request: Any) -> Any:
        heartbeat = isinstance(request, HeartbeatRequest)
        if heartbeat and self._instance_id is not None:
            request = _StaticHeartbeat(request, self._instance_id)
        sent_at = clock.monotonic()
        response = await self._send_req(request)
        if heartbeat or isinstance(request, _GROUP_REQUESTS):
            self._answered(request, response.error_code, sent_at)
        return response

    def _answered(self, request: Any, code: int, sent_at: float) -> None:
        coordinator, membership = self._coordinator, self._membership
        if code == _FENCED_INSTANCE_ID:
            membership.fence(
                f"another process joined group {coordinator.group_id} as instance "
                f"{self._instance_id!r}: this one stops writing (give each replica its own "
                "REPLICATOR_INSTANCE_ID)"
            )
        elif isinstance(request, JoinGroupRequest):
            return  # a join renews nothing: the sync that follows says the member is in
        elif code == _NO_ERROR:
            sync = isinstance(request, SyncGroupRequest)
            membership.renewed(sent_at, request._generation_id if sync else coordinator.generation)
        elif code in _MEMBERSHIP_LOST:
            membership.lost()

    async def join_complete(
        self, generation: int, member_id: str, protocol: str, assignment_bytes: bytes
    ) -> Any:
        assignment = ConsumerProtocol.ASSIGNMENT.decode(assignment_bytes)
        self._membership.assigned(assignment.partitions(), generation)
        return await self._on_join_complete(generation, member_id, protocol, assignment_bytes)

    async def leave(self) -> None:
        coordinator, instance_id = self._coordinator, self._instance_id
        if instance_id is None or coordinator.generation <= 0:
            await self._leave_group()
            return
        node = coordinator.coordinator_id
        try:
            if node is not None:
                request = _StaticLeave(coordinator.group_id, coordinator.member_id, instance_id)
                await coordinator._client.send(node, request, group=ConnectionGroup.COORDINATION)
        except KafkaError as exc:
            log.warning("a static member could not leave its group", error=str(exc))
        else:
            log.info("left the group", group=coordinator.group_id, instance_id=instance_id)
        coordinator.reset_generation()


# -- the producer's sender ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FencingPolicy:
    """What the fencing sender asks its owner (:mod:`replicator.kafka.producer`).

    ``never_retry(error, idempotent)``: a batch that failed so is failed, not retried;
    ``state_lost(error)``: the destination lost the producer's state (take a new id);
    ``queued_error(tp)``: what the batches queued behind a failed one of ``tp`` fail with.
    """

    never_retry: Callable[[BaseException, bool], bool]
    state_lost: Callable[[BaseException], bool]
    queued_error: Callable[[TopicPartition], BaseException]
    not_owned: Callable[[], BaseException]  # a batch the lease kept from the network


class Lease(Protocol):
    """What the fencing sender asks of its member's lease (:class:`~replicator.kafka.
    membership.MembershipLease`)."""

    length: float
    lapses: int

    def valid(self) -> bool: ...

    def overdue(self) -> bool: ...

    async def until_valid(self, timeout: float) -> bool: ...


class _InitProducerIdResponseV3(Response):  # type: ignore[misc]
    API_KEY = 22
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class _InitProducerIdResponseV4(_InitProducerIdResponseV3):
    API_VERSION = 4


class _InitProducerIdRequestV3(RequestStruct):  # type: ignore[misc]
    """InitProducerId v3 (KIP-360): flexible, with the current producer id and epoch (-1: new)."""

    FLEXIBLE_VERSION = True
    API_KEY = 22
    API_VERSION = 3
    RESPONSE_TYPE = _InitProducerIdResponseV3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class _InitProducerIdRequestV4(_InitProducerIdRequestV3):
    API_VERSION = 4
    RESPONSE_TYPE = _InitProducerIdResponseV4


class InitProducerId:
    """An ``InitProducerId`` request at the highest version both the broker and this module know
    (aiokafka asks with version 0 only; some brokers answer that with UnknownError and grant
    version 3 and later)."""

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int) -> None:
        self._id = transactional_id
        self._timeout = transaction_timeout_ms

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        low, high = versions.get(22, (0, 0))
        for request in (_InitProducerIdRequestV4, _InitProducerIdRequestV3):
            if low <= request.API_VERSION <= high:
                return request(self._id, self._timeout, -1, -1, {})
        return InitProducerIdRequest_v0(self._id, self._timeout)


class _InitPIDHandler(InitPIDHandler):  # type: ignore[misc]
    def create_request(self) -> InitProducerId:
        manager = self._sender._txn_manager
        return InitProducerId(manager.transactional_id, manager.transaction_timeout_ms)


class _PiecewiseProduce(ProduceRequest):  # type: ignore[misc]
    """A produce request written to the socket as pieces, each batch's bytes as they are, in one
    vectored write. aiokafka encodes a request by joining its fields level by level, and the
    size and header in front of that: every byte of every batch copied about eight times
    (measured: a tenth of the replicator's CPU with 1 KiB records)."""


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_DATA = struct.Struct(">ii")  # partition, the batch's length


def produce_pieces(request_struct: Any) -> list[Any]:
    """A ``ProduceRequest`` v3 to v8 body as aiokafka's ``encode()`` writes it, in pieces:
    the batches' buffers themselves, and the fields between them."""
    head = bytearray()
    pieces: list[Any] = []
    transactional_id = request_struct.transactional_id
    if transactional_id is None:
        head += _INT16.pack(-1)
    else:
        encoded = transactional_id.encode()
        head += _INT16.pack(len(encoded)) + encoded
    head += _ACKS_TIMEOUT.pack(request_struct.required_acks, request_struct.timeout)
    head += _INT32.pack(len(request_struct.topics))
    for topic, partitions in request_struct.topics:
        name = topic.encode()
        head += _INT16.pack(len(name)) + name + _INT32.pack(len(partitions))
        for partition, data in partitions:
            if data is None:
                head += _PARTITION_DATA.pack(partition, -1)
                continue
            head += _PARTITION_DATA.pack(partition, len(data))
            pieces += (bytes(head), data)
            head = bytearray()
    if head:
        pieces.append(bytes(head))
    return pieces


_wrapped_send = AIOKafkaConnection.send


def _send(self: Any, request: Any, expect_response: bool = True) -> Any:
    """aiokafka's ``AIOKafkaConnection.send``; a :class:`_PiecewiseProduce` at v3 or later is
    written as pieces (the same bytes on the wire)."""
    if type(request) is not _PiecewiseProduce or self._writer is None:
        return _wrapped_send(self, request, expect_response)
    request_struct = request.prepare(self._versions)
    if request_struct.API_VERSION < 3:
        return _wrapped_send(self, request, expect_response)
    correlation_id = self._next_correlation_id()
    header = request_struct.build_request_header(
        correlation_id=correlation_id, client_id=self._client_id
    ).encode()
    body = produce_pieces(request_struct)
    size = len(header) + sum(len(piece) for piece in body)
    try:
        self._writer.writelines([_INT32.pack(size), header, *body])
    except OSError as err:
        self.close(reason=CloseReason.CONNECTION_BROKEN)
        raise KafkaConnectionError(
            f"Connection at {self._host}:{self._port} broken: {err}"
        ) from err
    if not expect_response:
        return self._writer.drain()
    future = self._loop.create_future()
    self._requests.append((correlation_id, request_struct, future))
    return aiokafka_wait_for(future, self._request_timeout)


class _FencingHandler(SendProduceReqHandler):  # type: ignore[misc]
    """Fails a batch its policy never retries, instead of retrying it; its request is written as
    pieces (:class:`_PiecewiseProduce`)."""

    def create_request(self) -> Any:
        request = super().create_request()
        request.__class__ = _PiecewiseProduce
        return request

    def _can_retry(self, error: Exception, batch: Any) -> bool:
        sender = self._sender
        if sender.policy.never_retry(error, sender._txn_manager is not None):
            return False
        return bool(super()._can_retry(error, batch))


class _FencingSender(Sender):  # type: ignore[misc]
    """aiokafka's sender, keeping a partition muted once one of its batches failed, until
    :func:`unfence`: nothing queued behind a failed batch is sent, so the destination never
    holds a later batch without the earlier one."""

    fenced: set[TopicPartition]
    policy: FencingPolicy
    lease: Lease | None
    # Told of the records of a request answered long after the lease ran out (possible
    # duplicates: they may have landed after a new owner read the destination).
    answered_late: Callable[[TopicPartition, int], None] | None

    async def _do_init_pid(self, node_id: int) -> bool:
        return bool(await _InitPIDHandler(self).do(node_id))

    async def _send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        lease = self.lease
        if lease is not None and not await self._covered(lease, node_id):
            self._withhold(lease, batches)
        else:
            handler = _FencingHandler(self, batches)
            await handler.do(node_id)
            if lease is not None and lease.overdue() and self.answered_late is not None:
                for tp, batch in batches.items():
                    self.answered_late(tp, batch.record_count)
        self._in_flight.remove(node_id)
        for tp, batch in batches.items():
            if batch.future.done() and batch.future.exception() is not None:
                self.fenced.add(tp)  # stays muted
                _fail_queued(self, tp)
                if self.policy.state_lost(batch.future.exception()):
                    _new_producer_id(self, batch)
                continue
            self._muted_partitions.remove(tp)

    async def _covered(self, lease: Lease, node_id: int) -> bool:
        """Whether the lease runs as the request is handed to the network (connected first, so
        that the check comes right before the request is written; waiting one lease length at
        most for a heartbeat, in the epoch the wait began in)."""
        await self.client.ready(node_id)
        return lease.valid() or await lease.until_valid(lease.length)

    def _withhold(self, lease: Lease, batches: dict[TopicPartition, Any]) -> None:
        """Fail ``batches`` as not sent: the member may no longer own their partitions (its
        heartbeats went unanswered, or were refused); they resume from the destination if it
        does. Their sequence numbers, given as they were drained, are given back, unless the
        producer took a new id meanwhile (numbered from 0 again)."""
        lease.lapses += 1
        manager = self._txn_manager
        for tp, batch in batches.items():
            sent_with = _numbered_by(batch)
            if manager is not None and sent_with == manager.producer_id:
                manager.increment_sequence_number(tp, -batch.record_count)
            if not batch.future.done():
                batch.failure(exception=self.policy.not_owned())


def _numbered_by(batch: Any) -> int | None:
    """The producer id a drained batch was numbered with: its aiokafka builder's (until built),
    or a native batch's own (:mod:`replicator.model.native`)."""
    builder = batch._builder
    return getattr(getattr(builder, "_builder", builder), "producer_id", None)


def _new_producer_id(sender: Sender, batch: Any) -> None:
    """The destination no longer knows the producer id ``batch`` was sent with: ask for a new
    one (the sender asks before its next request) and number every partition from 0 again.
    Once per id: the other partitions' batches of the same id fail the same way."""
    manager = sender._txn_manager
    if manager is None or manager.transactional_id is not None:
        return
    sent_with = _numbered_by(batch)
    if sent_with is not None and sent_with != manager.producer_id:
        return  # an older id: already replaced
    manager._pid_and_epoch = PidAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    manager._pid_waiter = asyncio.get_running_loop().create_future()
    manager._sequence_numbers.clear()


class NodeRequests:
    """The produce requests a sender has in flight, at most ``limit`` to each node.

    aiokafka's sender keeps one request in flight per node: while it travels, the batches that
    became ready for the node's other partitions wait for its answer. Across a long link that
    puts the partitions in phases behind each other's requests (one request a round trip, each
    carrying the few partitions ready when the previous one left): measured across a 50 ms
    link, a partition sent a batch every 0.56 s instead of every 0.14 s. A partition keeps one
    request in flight at most (muted until it is answered), so its order holds as before, and
    an idempotent producer's sequences stay in order; Kafka's own producer allows five per
    connection (``max.in.flight.requests.per.connection``).
    """

    __slots__ = ("_counts", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: dict[int, int] = {}

    def add(self, node: int) -> None:
        self._counts[node] = self._counts.get(node, 0) + 1

    def remove(self, node: int) -> None:
        left = self._counts[node] - 1
        if left:
            self._counts[node] = left
        else:
            del self._counts[node]

    def __contains__(self, node: object) -> bool:
        """Whether ``node`` takes no more requests now (what aiokafka's drain asks)."""
        return isinstance(node, int) and self._counts.get(node, 0) >= self.limit

    def __bool__(self) -> bool:
        return bool(self._counts)

    def in_flight(self, node: int) -> int:
        """Requests in flight to ``node``."""
        return self._counts.get(node, 0)


REQUESTS_PER_NODE = 5
"""Produce requests in flight to one node at most (Kafka's producer's default)."""


def _fail_queued(sender: Any, tp: TopicPartition) -> None:
    queued = sender._message_accumulator._batches.pop(tp, None) or ()
    for batch in queued:
        batch.failure(exception=sender.policy.queued_error(tp))


def install_fencing(
    producer: AIOKafkaProducer,
    policy: FencingPolicy,
    lease: Lease | None = None,
    answered_late: Callable[[TopicPartition, int], None] | None = None,
) -> None:
    """Give a producer not started yet the fencing sender, and batches that never expire (a
    batch that timed out while a later one succeeded would reorder the partition when resent);
    with a ``lease``, a produce request goes out only while it runs, and ``answered_late`` is
    told of the records of one answered long after it ran out; several requests in flight to a
    node, one per partition (:class:`NodeRequests`), each written as pieces
    (:class:`_PiecewiseProduce`)."""
    accumulator = producer._message_accumulator
    sender = producer._sender
    if not hasattr(accumulator, "_batch_ttl") or type(sender) is not Sender:  # pragma: no cover
        raise RuntimeError("aiokafka changed: the producer can no longer be made safe to retry")
    accumulator._batch_ttl = float("inf")
    AIOKafkaConnection.send = _send  # what only this sender's requests take (one class for all)
    sender._in_flight = NodeRequests(REQUESTS_PER_NODE)
    sender.__class__ = _FencingSender
    sender.fenced = set()
    sender.policy = policy
    sender.lease = lease
    sender.answered_late = answered_late


def unfence(producer: AIOKafkaProducer, tp: TopicPartition) -> None:
    """Drop what is still queued for ``tp`` and let ``producer`` send it again."""
    sender = producer._sender
    if tp in getattr(sender, "fenced", ()):
        _fail_queued(sender, tp)
        sender.fenced.discard(tp)
        sender._muted_partitions.discard(tp)


def idempotent(producer: AIOKafkaProducer) -> bool:
    """Whether the started producer holds a producer id from the broker."""
    manager = producer._sender._txn_manager
    return manager is not None and bool(manager.has_pid())


def batch_factory(producer: AIOKafkaProducer, limit: int | None) -> BatchFactory:
    """New batches as ``producer`` builds them (its size and compression), no larger than
    ``limit`` bytes if given."""
    accumulator = producer._message_accumulator
    size: int = accumulator._batch_size
    if limit is not None:
        size = max(1, min(size, limit))
    return BatchFactory(size, accumulator._compression_type)


def batch_records(builder: BatchBuilder) -> list[Any]:
    """The records of a closed batch (key, value, headers, timestamp) as a destination sees them."""
    return list(DefaultRecordBatch(bytes(builder._build())))
