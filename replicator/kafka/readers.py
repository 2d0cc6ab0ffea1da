"""Reading a topic back exactly: every record of every partition, up to its log end.

Log-end offsets are taken from fetch responses (the high watermark), never from ListOffsets
alone, which some brokers answer wrongly after multi-record batches. Used to count and verify
replicated data (the demo, the tests, ``replicator rpo``); not part of the replication data
path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError
from aiokafka.protocol.metadata import MetadataRequest

from replicator import clock
from replicator.kafka.internals import a_broker, all_metadata, kafka_client
from replicator.kafka.translation import translate
from replicator.lifecycle import close_quietly
from replicator.model.provenance import Provenance, parse


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as stored in a topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: int = 0  # 0: CreateTime (the producer's), 1: LogAppendTime (the broker's)

    @property
    def provenance(self) -> Provenance | None:
        return parse(self.headers)

    @classmethod
    def of(cls, record: ConsumerRecord[bytes, bytes], tp: TopicPartition) -> StoredRecord:
        """The record a consumer returned from ``tp``, as stored (a data-path consumer's
        records, unwrapped, do not say their topic and partition)."""
        return cls(
            tp.topic,
            tp.partition,
            record.offset,
            record.key,
            record.value,
            tuple(record.headers),
            record.timestamp,
            record.timestamp_type,
        )


async def cluster_partitions(consumer: AIOKafkaConsumer) -> dict[str, list[int]]:
    """Every topic of the cluster and its partitions, from one metadata request (asking for
    every topic: naming a missing one may create it). Read from the answer itself: a consumer's
    own metadata covers only the topics it is assigned once it is assigned some."""
    cluster = await all_metadata(consumer)
    return {topic: sorted(cluster.partitions_for_topic(topic) or ()) for topic in cluster.topics()}


async def partitions_of(consumer: AIOKafkaConsumer, *topics: str) -> list[TopicPartition]:
    """Every partition of ``topics`` that exist, in order, without creating any: one request."""
    found = await cluster_partitions(consumer)
    return [TopicPartition(topic, p) for topic in topics for p in found.get(topic, ())]


async def read_topic(
    bootstrap_servers: str, topic: str, timeout: float = 30.0, **client_options: object
) -> list[StoredRecord]:
    """Every record of ``topic``, partition by partition in offset order."""
    found = await read_topics(bootstrap_servers, [topic], timeout, **client_options)
    return found[topic]


async def read_topics(
    bootstrap_servers: str, topics: list[str], timeout: float = 30.0, **client_options: object
) -> dict[str, list[StoredRecord]]:
    """Every record of each of ``topics`` (one consumer for all), partition by partition."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **client_options,
    )
    try:
        await consumer.start()
        partitions = await partitions_of(consumer, *topics)
        records: dict[TopicPartition, list[StoredRecord]] = {tp: [] for tp in partitions}
        if partitions:
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
        done: set[TopicPartition] = set()
        deadline = clock.monotonic() + timeout
        while len(done) < len(partitions):
            if clock.monotonic() > deadline:
                behind = {
                    f"{tp.topic}[{tp.partition}]": (
                        await consumer.position(tp),
                        consumer.highwater(tp),
                    )
                    for tp in partitions
                    if tp not in done
                }
                raise TimeoutError(
                    f"reading {', '.join(topics)} did not reach the log end in {timeout}s: "
                    f"partition: (position, log end) {behind}"
                )
            fetched = await consumer.getmany(timeout_ms=200)
            for tp, batch in fetched.items():
                records[tp].extend(StoredRecord.of(r, tp) for r in batch)
            for tp in partitions:
                if tp in done:
                    continue
                end = consumer.highwater(tp)
                if end is not None and await consumer.position(tp) >= end:
                    done.add(tp)
        found: dict[str, list[StoredRecord]] = {topic: [] for topic in topics}
        for tp in partitions:
            found[tp.topic].extend(records[tp])
        return found
    finally:
        await consumer.stop()


async def read_ranges(
    consumer: AIOKafkaConsumer,
    ranges: dict[TopicPartition, tuple[int, int]],
    timeout: float = 30.0,
) -> dict[TopicPartition, list[StoredRecord]]:
    """The records of each partition in ``[start, end)``, read by one started consumer of no
    group: every partition assigned at once, so N partitions cost a few fetches, not N.

    A range past what the partition holds ends at its high watermark (control records and
    aborted records are never handed over, so fewer records than offsets may come back)."""
    found: dict[TopicPartition, list[StoredRecord]] = {tp: [] for tp in ranges}
    batches = _in_ranges(consumer, ranges, timeout, consumer.highwater, "reading")
    async for tp, batch in batches:
        found[tp].extend(StoredRecord.of(r, tp) for r in batch)
    return found


async def count_ranges(
    consumer: AIOKafkaConsumer,
    ranges: dict[TopicPartition, tuple[int, int]],
    timeout: float = 30.0,
) -> dict[TopicPartition, int]:
    """How many records each partition holds in ``[start, end)``, as ``consumer`` reads them
    (with ``isolation_level="read_committed"``: committed data only, no transaction marker or
    aborted record), counted without keeping them; a range ends at the partition's last stable
    offset (records of a transaction still open are not counted)."""
    counted = dict.fromkeys(ranges, 0)
    batches = _in_ranges(consumer, ranges, timeout, consumer.last_stable_offset, "counting")
    async for tp, batch in batches:
        counted[tp] += len(batch)
    return counted


async def _in_ranges(
    consumer: AIOKafkaConsumer,
    ranges: dict[TopicPartition, tuple[int, int]],
    timeout: float,
    log_end: Callable[[TopicPartition], int | None],
    doing: str,
) -> AsyncIterator[tuple[TopicPartition, list[ConsumerRecord[bytes, bytes]]]]:
    """Each fetched batch of the records in ``[start, end)`` of every partition, all assigned at
    once to one started consumer of no group; a partition is done at its range's end or at
    ``log_end`` (as the fetch answers give it), whichever comes first."""
    wanted = {tp: bounds for tp, bounds in ranges.items() if bounds[0] < bounds[1]}
    if not wanted:
        return
    consumer.assign(list(wanted))
    for tp, (start, _) in wanted.items():
        consumer.seek(tp, start)
    pending = set(wanted)
    deadline = clock.monotonic() + timeout
    while pending:
        if clock.monotonic() > deadline:
            raise TimeoutError(f"{doing} {len(pending)} partitions did not end in {timeout}s")
        fetched = await consumer.getmany(*pending, timeout_ms=200)
        for tp, batch in fetched.items():
            end = wanted[tp][1]
            yield tp, [r for r in batch if r.offset < end]
        for tp in list(pending):
            last = log_end(tp)
            reached = await consumer.position(tp)
            if reached >= wanted[tp][1] or (last is not None and reached >= last):
                pending.discard(tp)
                consumer.pause(tp)


class TopicTail:
    """What was appended to partition 0 of one topic since the last :meth:`read_new`: from its
    log start the first time, then only what came after, through one consumer of no group kept
    between reads (the replicator's single-partition internal topics: the ACL ledger). The
    end is the high watermark the fetch answers give, never ListOffsets. Errors come out in
    the product's terms."""

    def __init__(self, client_options: dict[str, Any], topic: str, client_id: str) -> None:
        self._options = client_options
        self._topic = topic
        self._client_id = client_id
        self._consumer: AIOKafkaConsumer | None = None
        self._position: int | None = None  # the next offset to read, once the topic exists

    async def read_new(self, timeout: float = 30.0) -> list[StoredRecord]:
        """The records appended since the last read (none while the topic does not exist); a
        read that fails leaves the position where it was, for the next one to read again."""
        try:
            return await self._read(timeout)
        except Exception as exc:
            raise translate(exc) from exc

    async def _read(self, timeout: float) -> list[StoredRecord]:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **self._options,
                client_id=self._client_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            try:
                await consumer.start()
            except BaseException:
                await close_quietly(consumer.stop())
                raise
            self._consumer = consumer
        consumer = self._consumer
        tp = TopicPartition(self._topic, 0)
        if self._position is None:
            if not await partitions_of(consumer, self._topic):
                # A listing leaves out a topic the principal may not describe: asked by name
                # (never created by the asking), a denial is told from an absence.
                await _refuse_if_denied(consumer, self._topic)
                return []
            self._position = (await consumer.beginning_offsets([tp]))[tp]
        found = await read_ranges(consumer, {tp: (self._position, _NO_END)}, timeout)
        records = found[tp]
        self._position = max([self._position, *(r.offset + 1 for r in records)])
        return records

    async def close(self) -> None:
        if self._consumer is not None:
            await close_quietly(self._consumer.stop())
            self._consumer = None


_NO_END = 2**63 - 1  # a range to the high watermark, whatever it is
_TOPIC_AUTHORIZATION_FAILED = 29


async def _refuse_if_denied(consumer: AIOKafkaConsumer, topic: str) -> None:
    """Raise the broker's denial when it refuses the principal ``topic`` (one metadata request
    naming it, auto-creation off); return when the topic is only absent."""
    client = kafka_client(consumer)
    request = MetadataRequest([topic], allow_auto_topic_creation=False)
    response = await client.send(await a_broker(client), request)
    for code, name, *_ in response.topics:
        if name == topic and code == _TOPIC_AUTHORIZATION_FAILED:
            raise TopicAuthorizationFailedError(topic)
