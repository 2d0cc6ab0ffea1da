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
  unknown outcome (no answer, or an error a broker may give after appending the batch, such as
  ``NOT_LEADER_OR_FOLLOWER``, which aiokafka would retry) is never retried. It fails, the
  batches queued behind it for the same partition fail with :class:`OutcomeUnknown`, and the
  partition stays *fenced* in the producer (nothing of it is sent) until its sender has read
  the destination's tail and resumed after the last record there
  (:mod:`replicator.replication.resume`), then calls :func:`unfence`. So a batch is written at
  most once, and never after a later one (no gap).

Either way a destination that lost the producer's state (``UnknownProducerId``,
``OutOfOrderSequenceNumber``: a broker restored without its data) or the partition itself
(``UnknownTopicOrPartition``, never retried blindly) sends the partition back to its sender to
read the destination and resume (:func:`unknown_outcome`); an idempotent producer then takes a
new producer id, once, and numbers every partition from 0 again.

Either way a partition whose batch failed for good (refused) is fenced too: the batch queued
behind the refused one is never sent, so a later resume cannot skip the refused record.

Order holds either way: aiokafka keeps one request in flight per partition, puts a retried batch
back at the front, and batches never expire here.

This module decides (which failures are never retried, what fails the batches queued behind one);
the mechanics in aiokafka's sender are :mod:`replicator.kafka.internals`'s.
"""

from __future__ import annotations

import aiokafka.errors as kerr
from aiokafka import AIOKafkaProducer

from replicator.config.clusters import ClusterSettings
from replicator.config.values import Compression
from replicator.config.views import ProducerSettings
from replicator.errors import OutcomeUnknown
from replicator.kafka.clients import client_options
from replicator.kafka.internals import (
    BatchFactory,
    FencingPolicy,
    batch_factory,
    batch_records,
    idempotent,
    install_fencing,
    unfence,
)

__all__ = [
    "PRODUCER_STATE_LOST",
    "TOPIC_GONE",
    "BatchFactory",
    "batch_factory",
    "batch_records",
    "idempotence_refused",
    "idempotent",
    "make_producer",
    "unfence",
    "unknown_outcome",
]


# Errors after which a batch may have been written: the request went out and no clear answer
# came back, or the broker appended the batch and then answered with an error. A broker
# answers an ``acks=all`` produce once the batch is replicated; when, between the append and
# that answer, the partition stops being led there, or its log directory goes offline, the answer
# is NOT_LEADER_OR_FOLLOWER or KAFKA_STORAGE_ERROR with the batch in the log (Kafka's
# ``DelayedProduce``). Measured on Apache Kafka 4.3: a broker thawed after a freeze longer than
# its session timeout is fenced and elected again, and batches it answered NOT_LEADER_OR_FOLLOWER
# meanwhile were sometimes in its log (a retry wrote them twice), sometimes not. Other retriable
# errors (no leader known, not enough replicas before the append ...) mean nothing was written.
_MAYBE_WRITTEN = (
    kerr.KafkaConnectionError,
    kerr.RequestTimedOutError,
    kerr.NotEnoughReplicasAfterAppendError,
    kerr.NotLeaderForPartitionError,
    kerr.KafkaStorageError,
)

# Errors of an idempotent producer whose state the destination lost (a broker restored without
# its data, a cluster rebuilt): nothing was written; the producer takes a new id and the
# partition resumes from the destination, which may have lost records too.
PRODUCER_STATE_LOST = (kerr.UnknownProducerId, kerr.OutOfOrderSequenceNumber)
# The destination partition does not exist (any more): nothing was written. Not retried blindly
# (aiokafka would retry for ever): the partition prepares its topic again and resumes from the
# destination, which may have lost the records it held (a topic deleted, a cluster rebuilt).
TOPIC_GONE = (kerr.UnknownTopicOrPartitionError,)


def unknown_outcome(exc: BaseException) -> bool:
    """Whether a batch failed because its outcome (or the one before it) is unknown, or the
    destination lost the producer's state or the topic: the partition resumes from the
    destination's tail."""
    return isinstance(exc, (OutcomeUnknown, *_MAYBE_WRITTEN, *PRODUCER_STATE_LOST, *TOPIC_GONE))


def _never_retry(error: BaseException, idempotent: bool) -> bool:
    """A batch that may have been written is never retried without idempotence (the broker would
    not drop the copy); one whose partition is gone is never retried blindly."""
    return (not idempotent and isinstance(error, _MAYBE_WRITTEN)) or isinstance(error, TOPIC_GONE)


_POLICY = FencingPolicy(
    never_retry=_never_retry,
    state_lost=lambda error: isinstance(error, PRODUCER_STATE_LOST),
    queued_error=lambda tp: OutcomeUnknown(f"queued behind a batch of unknown outcome ({tp})"),
)


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
    settings: ProducerSettings,
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
    install_fencing(producer, _POLICY)
    return producer
