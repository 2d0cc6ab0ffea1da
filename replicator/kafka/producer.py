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
read the destination and resume (:func:`outcome_error` says which, in the product's terms:
:class:`OutcomeUnknown`, :class:`TopicGone`, :class:`ProducerStateLost`); an idempotent
producer then takes a new producer id, once, and numbers every partition from 0 again.

Either way a partition whose batch failed for good (refused) is fenced too: the batch queued
behind the refused one is never sent, so a later resume cannot skip the refused record.

Order holds either way: aiokafka keeps one request in flight per partition, puts a retried batch
back at the front, and batches never expire here.

This module decides (which failures are never retried, what fails the batches queued behind one);
the mechanics in aiokafka's sender are :mod:`replicator.kafka.internals`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import aiokafka.errors as kerr
from aiokafka import AIOKafkaProducer, TopicPartition

from replicator.config.clusters import ClusterSettings
from replicator.config.values import Compression
from replicator.config.views import ProducerSettings
from replicator.errors import (
    ClusterUnavailable,
    OutcomeUnknown,
    OwnershipUnsure,
    ProducerStateLost,
    ReplicatorError,
    TopicGone,
)
from replicator.kafka.clients import (
    ClusterClient,
    client_options,
    idempotence_refused,
    track_topics,
)
from replicator.kafka.internals import (
    BatchFactory,
    FencingPolicy,
    Lease,
    batch_factory,
    batch_records,
    idempotent,
    install_fencing,
    unfence,
)
from replicator.kafka.roles import RecordProducer
from replicator.kafka.translation import translate
from replicator.lifecycle import close_quietly

__all__ = [
    "BatchFactory",
    "append",
    "batch_factory",
    "batch_records",
    "idempotence_refused",
    "idempotent",
    "knows_topic",
    "learn_partitions",
    "make_producer",
    "outcome_error",
    "send_batch",
    "unfence",
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
_PRODUCER_STATE_LOST = (kerr.UnknownProducerId, kerr.OutOfOrderSequenceNumber)
# The destination partition does not exist (any more): nothing was written. Not retried blindly
# (aiokafka would retry for ever): the partition prepares its topic again and resumes from the
# destination, which may have lost the records it held (a topic deleted, a cluster rebuilt).
_TOPIC_GONE = (kerr.UnknownTopicOrPartitionError,)


def outcome_error(exc: BaseException) -> ReplicatorError:
    """A failed send or batch in the product's terms: :class:`OutcomeUnknown` (its outcome, or
    that of the batch before it, is unknown), :class:`TopicGone` and
    :class:`ProducerStateLost` (nothing written, the destination's state changed under the
    producer), each of which makes the partition resume from the destination's tail; anything
    else as :func:`translate` says (refused, denied, unavailable ...)."""
    if isinstance(exc, ReplicatorError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, _TOPIC_GONE):
        return TopicGone("the destination partition does not exist (any more)", kind=name)
    if isinstance(exc, _PRODUCER_STATE_LOST):
        return ProducerStateLost(
            "the destination lost the producer's state (restored or rebuilt)", kind=name
        )
    if isinstance(exc, _MAYBE_WRITTEN):
        return OutcomeUnknown(f"a batch's outcome is unknown ({name})")
    return translate(exc)


async def send_batch(
    producer: AIOKafkaProducer, builder: Any, topic: str, partition: int
) -> asyncio.Future[int]:
    """Hand a closed batch to ``producer``; its future resolves to the offset the destination
    wrote it at (-1: written, at an offset it does not say) or fails with :func:`outcome_error`.

    Raises :class:`TopicGone` when the producer waited in vain for a topic its metadata no
    longer lists (deleted, a cluster rebuilt), :class:`ClusterUnavailable` when it waited in
    vain for a destination that is not draining; anything else as :func:`outcome_error` says.
    """
    try:
        sent = await producer.send_batch(builder, topic, partition=partition)
    except kerr.KafkaTimeoutError as exc:
        if not knows_topic(producer, topic):
            raise TopicGone(
                f"{topic} is not in the destination's metadata (any more)",
                kind=kerr.UnknownTopicOrPartitionError.__name__,
            ) from exc
        raise ClusterUnavailable("destination not acknowledging") from exc
    except Exception as exc:
        raise outcome_error(exc) from exc
    answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def settle(done: asyncio.Future[Any]) -> None:
        if answered.done():
            return
        if done.cancelled():
            answered.cancel()
            return
        error = done.exception()
        if error is None:
            answered.set_result(done.result().offset)
            return
        if getattr(error, "invalid_metadata", False):
            # The partition is led elsewhere now, its broker or topic is gone. aiokafka
            # refreshes the metadata before a retry; a batch that may be written is never
            # retried by a producer that is not idempotent (NOT_LEADER_OR_FOLLOWER among them),
            # so the refresh is asked for here: the next batch goes to the new leader, not to
            # the old one until the periodic refresh minutes later.
            producer.client.force_metadata_update()
        answered.set_exception(outcome_error(error))

    sent.add_done_callback(settle)
    return answered


async def append(
    producer: AIOKafkaProducer, topic: str, records: Iterable[tuple[bytes, bytes | None]]
) -> int:
    """Send ``(key, value)`` records to ``topic``'s one partition (the replicator's internal
    topics: checkpoints, handovers; a value ``None`` is a tombstone), then wait for every
    acknowledgement; how many."""
    sent = [await producer.send(topic, key=k, value=v, partition=0) for k, v in records]
    for future in sent:
        await future
    return len(sent)


def knows_topic(producer: AIOKafkaProducer, topic: str) -> bool:
    """Whether the producer's metadata lists ``topic``."""
    return bool(producer.client.cluster.partitions_for_topic(topic))


async def learn_partitions(
    producer: AIOKafkaProducer, wanted: list[tuple[str, int]]
) -> set[tuple[str, int]]:
    """Make the producer's metadata cover each topic with at least its count of partitions (a
    send to a partition it does not know would fail for good), in one metadata request; the
    ``(topic, count)`` pairs it still does not cover are returned.

    Every topic asked for is tracked, not only those short now: once the client tracks topics,
    each metadata answer covers those alone, so a topic known only from the first answer (all
    topics) would drop out of it when another is added."""
    client = producer.client

    def short() -> set[tuple[str, int]]:
        return {
            (topic, count)
            for topic, count in wanted
            if len(client.cluster.partitions_for_topic(topic) or ()) < count
        }

    await track_topics(client, [topic for topic, _ in wanted])
    if short():
        await client.force_metadata_update()
    return short()


def _never_retry(error: BaseException, idempotent: bool) -> bool:
    """A batch that may have been written is never retried without idempotence (the broker would
    not drop the copy); one whose partition is gone is never retried blindly."""
    return (not idempotent and isinstance(error, _MAYBE_WRITTEN)) or isinstance(error, _TOPIC_GONE)


_POLICY = FencingPolicy(
    never_retry=_never_retry,
    state_lost=lambda error: isinstance(error, _PRODUCER_STATE_LOST),
    queued_error=lambda tp: OutcomeUnknown(f"queued behind a batch of unknown outcome ({tp})"),
    not_owned=lambda: OwnershipUnsure(
        "not sent: the source group's lease ran out (heartbeats unanswered or refused)"
    ),
)


def make_producer(
    cluster: ClusterSettings,
    settings: ProducerSettings,
    client_id: str,
    max_request_size: int | None = None,
    enable_idempotence: bool = True,
    lease: Lease | None = None,
    answered_late: Callable[[TopicPartition, int], None] | None = None,
) -> AIOKafkaProducer:
    """A destination producer: ``acks=all``, batches kept in order, never written twice.

    Batches never expire: a batch that timed out while a later one succeeded would reorder the
    partition when resent, so retriable errors retry until the destination answers, and delivery
    stalls are reported by the leg instead. ``enable_idempotence=False`` for brokers that refuse
    ``InitProducerId`` (see the module docstring for what is done instead). With a ``lease``
    (the source group member's, :mod:`replicator.kafka.membership`), a batch goes out only
    while it runs; ``answered_late`` is told of the records of a request answered long after
    it ran out (possible duplicates).
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
    install_fencing(producer, _POLICY, lease, answered_late)
    return producer


async def start_producer(
    client: ClusterClient,
    settings: ProducerSettings,
    client_id: str,
    max_request_size: int | None = None,
) -> RecordProducer:
    """Start a producer of ``client``'s cluster (:func:`make_producer`): idempotent until the
    cluster refuses a producer id, which is learnt once for the cluster
    (:meth:`ClusterClient.producer_failed`), and the producer made again without. A failure to
    start is raised in the product's terms."""
    asked = client.idempotence
    producer = make_producer(
        client.cluster, settings, client_id, max_request_size, enable_idempotence=asked
    )
    try:
        await producer.start()
    except BaseException as exc:
        await close_quietly(producer.stop())
        if not isinstance(exc, Exception):
            raise
        client.producer_failed(exc)
        if asked and not client.idempotence:  # refused: again without
            return await start_producer(client, settings, client_id, max_request_size)
        raise translate(exc) from exc
    started: RecordProducer = producer
    return started


class InternalTopicWriter:
    """Appends keyed records to partition 0 of one of the replicator's internal topics of one
    cluster (the ACL ledger), each acknowledged, through one producer made on first use. No
    idempotence needed: a record written twice is the same key, the newest wins. Errors come
    out in the product's terms."""

    def __init__(
        self, cluster: ClusterSettings, settings: ProducerSettings, topic: str, client_id: str
    ) -> None:
        self._cluster, self._settings = cluster, settings
        self._topic, self._client_id = topic, client_id
        self._producer: AIOKafkaProducer | None = None

    async def write(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Append ``records`` (a value ``None``: a tombstone); how many, all acknowledged."""
        try:
            if self._producer is None:
                producer = make_producer(
                    self._cluster, self._settings, self._client_id, enable_idempotence=False
                )
                try:
                    await producer.start()
                except BaseException:
                    await close_quietly(producer.stop())
                    raise
                self._producer = producer
            return await append(self._producer, self._topic, records)
        except Exception as exc:
            raise translate(exc) from exc

    async def close(self) -> None:
        if self._producer is not None:
            await close_quietly(self._producer.stop())
            self._producer = None
