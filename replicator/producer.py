"""The destination producer: aiokafka's, made safe for resuming from the destination.

A batch whose produce request was sent but never answered (the connection dropped, the request
timed out, the broker answered that the write may have happened) may or may not be in the
destination. aiokafka retries such a batch, which writes it twice when the first attempt had
landed. Two answers, chosen per destination when the producer starts:

- **Idempotent** (the broker granted a producer id: ``InitProducerId``): aiokafka numbers every
  batch, the broker drops a retried batch it already wrote, retries are safe. The producer then
  retries as aiokafka does.
- **Not idempotent** (the broker refused ``InitProducerId``; counted and logged): a batch of
  unknown outcome is never retried. It fails with :class:`OutcomeUnknown`, the batches queued
  behind it for the same partition fail with it, and the partition stays *fenced* in the
  producer (nothing of it is sent) until its sender has read the destination's tail and
  resumed after the last record there (:mod:`replicator.resume`), then calls :func:`unfence`.
  So a batch is written at most once, and never after a later one (no gap).

Order holds either way: aiokafka keeps one request in flight per partition, puts a retried batch
back at the front, and batches never expire here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import aiokafka.errors as kerr
import structlog
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.producer.sender import Sender, SendProduceReqHandler
from aiokafka.record.default_records import DefaultRecordBatch

from replicator.kafka import client_options
from replicator.settings import ClusterSettings, Compression, Settings

log = structlog.get_logger(__name__)


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
    kerr.UnknownError,
)


class _FencingHandler(SendProduceReqHandler):  # type: ignore[misc]
    """Fails a batch of unknown outcome instead of retrying it (non-idempotent producers)."""

    def _can_retry(self, error: Exception, batch: Any) -> bool:
        if isinstance(error, _MAYBE_WRITTEN):
            return False
        return bool(super()._can_retry(error, batch))


class _FencingSender(Sender):  # type: ignore[misc]
    """aiokafka's sender, keeping a partition muted once one of its batches had an unknown
    outcome, until :func:`unfence`."""

    fenced: set[TopicPartition]

    async def _send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        if self._txn_manager is not None:  # idempotent: the broker drops what it already has
            await super()._send_produce_req(node_id, batches)
            return
        handler = _FencingHandler(self, batches)
        await handler.do(node_id)
        self._in_flight.remove(node_id)
        for tp, batch in batches.items():
            failed = batch.future.done() and batch.future.exception() is not None
            if failed and isinstance(batch.future.exception(), _MAYBE_WRITTEN):
                # Keep it muted: nothing queued behind is sent before the sender resumed.
                self.fenced.add(tp)
                _fail_queued(self, tp)
                continue
            self._muted_partitions.remove(tp)


def _fail_queued(sender: Sender, tp: TopicPartition) -> None:
    accumulator = sender._message_accumulator
    queued = accumulator._batches.pop(tp, None) or ()
    for batch in queued:
        batch.failure(exception=OutcomeUnknown(f"queued behind a batch of unknown outcome ({tp})"))


def unknown_outcome(exc: BaseException) -> bool:
    """Whether a batch failed because its outcome (or the one before it) is unknown."""
    return isinstance(exc, (OutcomeUnknown, *_MAYBE_WRITTEN))


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
        **client_options(cluster, settings),
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
