"""The destination producer: aiokafka's, made safe for resuming from the destination.

A batch whose produce request was sent but never answered (the connection dropped, the request
timed out, the broker answered that the write may have happened) may or may not be in the
destination. aiokafka retries such a batch, which writes it twice when the first attempt had
landed. Two answers, chosen per destination when the producer starts:

- **Idempotent** (the broker granted a producer id: ``InitProducerId``): aiokafka numbers every
  batch, the broker drops a retried batch it already wrote, retries are safe. The producer then
  retries as aiokafka does. aiokafka asks for the id with ``InitProducerId`` version 0 only; some
  brokers answer that version with UnknownError and grant versions 3 and later (the embedded
  test broker does; librdkafka asks with version 4), so the request here uses the highest
  version both sides know.
- **Not idempotent** (the broker refused ``InitProducerId``; counted and logged): a batch of
  unknown outcome is never retried. It fails with :class:`OutcomeUnknown`, the batches queued
  behind it for the same partition fail with it, and the partition stays *fenced* in the
  producer (nothing of it is sent) until its sender has read the destination's tail and
  resumed after the last record there (:mod:`replicator.resume`), then calls :func:`unfence`.
  So a batch is written at most once, and never after a later one (no gap).

Either way a destination that lost the producer's state (``UnknownProducerId``,
``OutOfOrderSequenceNumber``: a broker restored without its data) or the partition itself
(``UnknownTopicOrPartition``, never retried blindly) sends the partition back to its sender to
read the destination and resume (:func:`unknown_outcome`); an idempotent producer then takes a
new producer id, once, and numbers every partition from 0 again.

Either way a partition whose batch failed for good (refused) is fenced too: the batch queued
behind the refused one is never sent, so a later resume cannot skip the refused record.

Order holds either way: aiokafka keeps one request in flight per partition, puts a retried batch
back at the front, and batches never expire here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import aiokafka.errors as kerr
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.producer.sender import InitPIDHandler, Sender, SendProduceReqHandler
from aiokafka.producer.transaction_manager import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, PidAndEpoch
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import CompactString, Int16, Int32, Int64, Schema, TaggedFields
from aiokafka.record.default_records import DefaultRecordBatch

from replicator.kafka import client_options
from replicator.settings import ClusterSettings, Compression, Settings


class OutcomeUnknown(kerr.KafkaError):  # type: ignore[misc]
    """A batch was sent but whether the destination wrote it is unknown (or a batch queued
    behind one that was): the partition resumes from the destination's tail."""

    retriable = False


# Errors after which a batch may have been written: the request went out and no clear answer
# came back. Other retriable errors (no leader, not ready, ...) mean nothing was written.
_MAYBE_WRITTEN = (
    kerr.KafkaConnectionError,
    kerr.RequestTimedOutError,
    kerr.NotEnoughReplicasAfterAppendError,
)

# Errors of an idempotent producer whose state the destination lost (a broker restored without
# its data, a cluster rebuilt): nothing was written; the producer takes a new id and the
# partition resumes from the destination, which may have lost records too.
PRODUCER_STATE_LOST = (kerr.UnknownProducerId, kerr.OutOfOrderSequenceNumber)
# The destination partition does not exist (any more): nothing was written. Not retried blindly
# (aiokafka would retry for ever): the partition prepares its topic again and resumes from the
# destination, which may have lost the records it held (a topic deleted, a cluster rebuilt).
TOPIC_GONE = (kerr.UnknownTopicOrPartitionError,)


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


class _InitProducerId:
    """An ``InitProducerId`` request at the highest version both the broker and this module know."""

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int) -> None:
        self._id = transactional_id
        self._timeout = transaction_timeout_ms

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        low, high = versions.get(22, (0, 0))
        for struct in (_InitProducerIdRequestV4, _InitProducerIdRequestV3):
            if low <= struct.API_VERSION <= high:
                return struct(self._id, self._timeout, -1, -1, {})
        return InitProducerIdRequest_v0(self._id, self._timeout)


class _InitPIDHandler(InitPIDHandler):  # type: ignore[misc]
    def create_request(self) -> _InitProducerId:
        manager = self._sender._txn_manager
        return _InitProducerId(manager.transactional_id, manager.transaction_timeout_ms)


class _FencingHandler(SendProduceReqHandler):  # type: ignore[misc]
    """Fails a batch of unknown outcome instead of retrying it, unless the producer is
    idempotent (the broker then drops a batch it already wrote)."""

    def _can_retry(self, error: Exception, batch: Any) -> bool:
        if self._sender._txn_manager is None and isinstance(error, _MAYBE_WRITTEN):
            return False
        if isinstance(error, TOPIC_GONE):
            return False
        return bool(super()._can_retry(error, batch))


class _FencingSender(Sender):  # type: ignore[misc]
    """aiokafka's sender, keeping a partition muted once one of its batches failed (its outcome
    unknown, or refused), until :func:`unfence`: nothing queued behind a failed batch is sent,
    so the destination never holds a later batch without the earlier one."""

    fenced: set[TopicPartition]

    async def _do_init_pid(self, node_id: int) -> bool:
        return bool(await _InitPIDHandler(self).do(node_id))

    async def _send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        handler = _FencingHandler(self, batches)
        await handler.do(node_id)
        self._in_flight.remove(node_id)
        for tp, batch in batches.items():
            if batch.future.done() and batch.future.exception() is not None:
                self.fenced.add(tp)  # stays muted
                _fail_queued(self, tp)
                if isinstance(batch.future.exception(), PRODUCER_STATE_LOST):
                    _new_producer_id(self, batch)
                continue
            self._muted_partitions.remove(tp)


def _new_producer_id(sender: Sender, batch: Any) -> None:
    """The destination no longer knows the producer id ``batch`` was sent with: ask for a new
    one (the sender asks before its next request) and number every partition from 0 again.
    Once per id: the other partitions' batches of the same id fail the same way."""
    manager = sender._txn_manager
    if manager is None or manager.transactional_id is not None:
        return
    sent_with = getattr(getattr(batch._builder, "_builder", None), "_producer_id", None)
    if sent_with is not None and sent_with != manager.producer_id:
        return  # an older id: already replaced
    manager._pid_and_epoch = PidAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    manager._pid_waiter = asyncio.get_running_loop().create_future()
    manager._sequence_numbers.clear()


def _fail_queued(sender: Sender, tp: TopicPartition) -> None:
    accumulator = sender._message_accumulator
    queued = accumulator._batches.pop(tp, None) or ()
    for batch in queued:
        batch.failure(exception=OutcomeUnknown(f"queued behind a batch of unknown outcome ({tp})"))


def unknown_outcome(exc: BaseException) -> bool:
    """Whether a batch failed because its outcome (or the one before it) is unknown, or the
    destination lost the producer's state or the topic: the partition resumes from the
    destination's tail."""
    return isinstance(exc, (OutcomeUnknown, *_MAYBE_WRITTEN, *PRODUCER_STATE_LOST, *TOPIC_GONE))


def fenced(producer: AIOKafkaProducer, tp: TopicPartition) -> bool:
    return tp in getattr(producer._sender, "fenced", ())


def unfence(producer: AIOKafkaProducer, tp: TopicPartition) -> None:
    """The partition's sender resumed from the destination: drop what is still queued for
    ``tp`` (of the abandoned position) and let the producer send it again."""
    sender = producer._sender
    if tp in getattr(sender, "fenced", ()):
        _fail_queued(sender, tp)
        sender.fenced.discard(tp)
        sender._muted_partitions.discard(tp)


def idempotent(producer: AIOKafkaProducer) -> bool:
    """Whether the started producer holds a producer id from the broker."""
    manager = producer._sender._txn_manager
    return manager is not None and bool(manager.has_pid())


def idempotence_refused(exc: BaseException) -> bool:
    """Whether a producer failed to start because the broker refused it a producer id
    (``InitProducerId``), not because the cluster was unreachable."""
    unreachable = (kerr.KafkaConnectionError, kerr.NodeNotReadyError, kerr.RequestTimedOutError)
    return (
        isinstance(exc, kerr.KafkaError)
        and not isinstance(exc, unreachable)
        and not isinstance(exc, (kerr.AuthenticationFailedError, kerr.SaslAuthenticationFailed))
    )


def make_producer(
    cluster: ClusterSettings,
    settings: Settings,
    client_id: str,
    max_request_size: int | None = None,
    enable_idempotence: bool = True,
) -> AIOKafkaProducer:
    """A destination producer: ``acks=all``, batches kept in order, never written twice.

    Batches never expire: a batch that timed out while a later one succeeded would reorder the
    partition when resent, so retriable errors retry until the destination answers, and delivery
    stalls are reported by the leg instead. ``enable_idempotence=False`` for brokers that refuse
    ``InitProducerId`` (see the module docstring for what is done instead).
    """
    compression = None if settings.compression is Compression.NONE else settings.compression.value
    producer = AIOKafkaProducer(
        **client_options(cluster, settings, discovers_topics=False),
        client_id=client_id,
        acks="all",
        enable_idempotence=enable_idempotence,
        max_batch_size=settings.batch_max_bytes,
        max_request_size=max_request_size or max(settings.batch_max_bytes * 2, 1024 * 1024),
        linger_ms=settings.linger_ms,
        compression_type=compression,
        retry_backoff_ms=200,
    )
    accumulator = producer._message_accumulator
    sender = producer._sender
    if not hasattr(accumulator, "_batch_ttl") or type(sender) is not Sender:  # pragma: no cover
        raise RuntimeError("aiokafka changed: the producer can no longer be made safe to retry")
    accumulator._batch_ttl = float("inf")
    sender.__class__ = _FencingSender
    sender.fenced = set()
    return producer


def batch_factory(producer: AIOKafkaProducer, limit: int | None) -> Callable[[], BatchBuilder]:
    """New destination batches for ``producer``, no larger than ``limit`` bytes if given.

    A destination topic may accept smaller batches (its ``max.message.bytes``) than the producer
    builds. A single record larger than the limit still gets a batch of its own, for the sender
    to apply the oversize policy to.
    """
    accumulator = producer._message_accumulator
    size: int = accumulator._batch_size
    if limit is not None:
        size = max(1, min(size, limit))
    return partial(BatchBuilder, size, accumulator._compression_type)


def batch_records(builder: BatchBuilder) -> list[Any]:
    """The records of a closed batch (key, value, headers, timestamp) as a destination sees them."""
    return list(DefaultRecordBatch(bytes(builder._build())))
