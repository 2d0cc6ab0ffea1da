"""Kafka for Spark where the ``spark-sql-kafka-0-10`` connector is not on the classpath.

A batch data source on Spark's Python Data Source API, registered as ``replicator-kafka``, with
the standard connector's contract, so the jobs are written once against either:

- options ``kafka.bootstrap.servers``, ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
  ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` (PEM), ``subscribe``,
  ``startingOffsets``/``endingOffsets`` (JSON ``{"topic": {"0": offset}}``, or
  ``earliest``/``latest``), ``includeHeaders``;
- read schema ``key, value, topic, partition, offset, timestamp, timestampType, headers``;
- write columns ``topic`` (or option ``topic``), ``key``, ``value``, ``headers``, ``partition``,
  and, as an extension the standard sink does not have, ``timestamp`` (kept as the record's).

Each Kafka partition's offset range is one input partition (split further with
``maxOffsetsPerTask``); an executor reads it with its own client, so options (credentials
included) travel to the executors with the plan. Columnar both ways: a read yields one Arrow
record batch per fetch (built column by column, in exactly the Arrow schema Spark checks), a
write takes Arrow batches (``DataSourceArrowWriter``), turns each column into a Python list once
and packs the rows into Kafka record batches per partition. Writes are acknowledged by every
in-sync replica (``acks=all``) before the task reports success; a task writes its rows in order.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.helpers import create_ssl_context
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from replicator.config.clusters import ClusterSettings

FORMAT = "replicator-kafka"
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)
"""The standard connector's read schema (with headers)."""
# JAAS quoted strings escape '"' and '\' with a backslash, as Kafka's parser reads them.
_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_JAAS = re.compile(rf"username={_QUOTED}\s+password={_QUOTED}")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_POLL_MS = 500
_BATCH_BYTES = 512 * 1024  # a Kafka record batch the writer fills per partition


def spark_options(cluster: ClusterSettings) -> dict[str, str]:
    """A cluster's connection settings as the standard Spark Kafka options."""
    options = {
        "kafka.bootstrap.servers": cluster.bootstrap_servers,
        "kafka.security.protocol": cluster.security_protocol.value,
    }
    if cluster.uses_sasl and cluster.sasl_mechanism and cluster.sasl_password is not None:
        options["kafka.sasl.mechanism"] = cluster.sasl_mechanism.value
        module = _LOGIN_MODULES[cluster.sasl_mechanism.value]
        password = cluster.sasl_password.get_secret_value()
        user = _quote(cluster.sasl_username or "")
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={user} password={_quote(password)};"
        )
    if cluster.ssl_cafile:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(cluster.ssl_cafile)
    if cluster.ssl_certfile and cluster.ssl_keyfile:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = str(cluster.ssl_certfile)
        options["kafka.ssl.keystore.key"] = str(cluster.ssl_keyfile)
    return options


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def client_options(options: dict[str, str]) -> dict[str, Any]:
    """aiokafka client options from Spark Kafka options (keys in any case)."""
    o = {k.lower(): v for k, v in options.items()}
    protocol = o.get("kafka.security.protocol", "PLAINTEXT").upper()
    result: dict[str, Any] = {
        "bootstrap_servers": o["kafka.bootstrap.servers"],
        "security_protocol": protocol,
        "request_timeout_ms": 30_000,
    }
    if protocol.startswith("SASL"):
        match = _JAAS.search(o.get("kafka.sasl.jaas.config", ""))
        if match is None:
            raise ValueError("kafka.sasl.jaas.config must hold username=... password=...")
        result["sasl_mechanism"] = o.get("kafka.sasl.mechanism", "PLAIN").upper()
        result["sasl_plain_username"] = _unquote(match[1])
        result["sasl_plain_password"] = _unquote(match[2])
    if protocol.endswith("SSL"):
        context: ssl.SSLContext = create_ssl_context(
            cafile=o.get("kafka.ssl.truststore.location"),
            certfile=o.get("kafka.ssl.keystore.certificate.chain"),
            keyfile=o.get("kafka.ssl.keystore.key"),
        )
        result["ssl_context"] = context
    return result


def offsets_json(offsets: dict[TopicPartition, int]) -> str:
    """``{"topic": {"partition": offset}}``, as ``startingOffsets``/``endingOffsets`` take."""
    nested: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return json.dumps(nested)


def _parse_offsets(text: str) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(partition)): int(offset)
        for topic, partitions in json.loads(text).items()
        for partition, offset in partitions.items()
    }


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one Kafka partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaDataSource(DataSource):
    """``spark.read.format("replicator-kafka")`` and ``df.write.format("replicator-kafka")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return KafkaWriter(dict(self.options))


class KafkaReader(DataSourceReader):
    """Reads explicit offset ranges (JSON ``startingOffsets`` and ``endingOffsets``)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = {k.lower(): v for k, v in options.items()}
        self.schema = schema

    def partitions(self) -> list[OffsetRange]:
        starts = self.options.get("startingoffsets", "")
        ends = self.options.get("endingoffsets", "")
        if not starts.startswith("{") or not ends.startswith("{"):
            raise ValueError(
                f"{FORMAT} reads snapshots: give startingOffsets and endingOffsets as JSON"
            )
        start, end = _parse_offsets(starts), _parse_offsets(ends)
        step = int(self.options.get("maxoffsetspertask", "0")) or None
        ranges = []
        for tp in sorted(end):
            first, last = start.get(tp, 0), end[tp]
            cut = first
            while cut < last:
                upper = last if step is None else min(last, cut + step)
                ranges.append(OffsetRange(tp.topic, tp.partition, cut, upper))
                cut = upper
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return  # no ranges: Spark reads one placeholder partition
        loop = asyncio.new_event_loop()
        chunks = _read_range(self.options, partition, arrow_schema(self.schema))
        try:
            while True:
                try:
                    yield loop.run_until_complete(anext(chunks))
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(chunks.aclose())
            loop.close()


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow form of a Spark schema, exactly as Spark checks the batches a reader yields."""
    return to_arrow_schema(schema, timezone="UTC")


def record_batch(records: list[ConsumerRecord[Any, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """Records of one partition as one Arrow batch of the read schema, column by column."""
    count = len(records)
    headers = [r.headers for r in records]
    flat = [h for hs in headers for h in hs]
    ends = list(accumulate((len(hs) for hs in headers), initial=0))
    header_type = schema.field("headers").type
    timestamps = pa.array([r.timestamp for r in records], pa.int64())
    first = records[0]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.repeat(pa.scalar(first.topic, pa.string()), count),
            pa.repeat(pa.scalar(first.partition, pa.int32()), count),
            pa.array([r.offset for r in records], pa.int64()),
            pc.multiply(timestamps, 1000).cast(schema.field("timestamp").type),
            pa.array([r.timestamp_type for r in records], pa.int32()),
            pa.ListArray.from_arrays(
                pa.array(ends, pa.int32()),
                pa.StructArray.from_arrays(
                    [
                        pa.array([k for k, _ in flat], pa.string()),
                        pa.array([v for _, v in flat], pa.binary()),
                    ],
                    fields=list(header_type.value_type),
                ),
                type=header_type,
            ),
        ],
        schema=schema,
    )


async def _read_range(
    options: dict[str, str], partition: OffsetRange, schema: pa.Schema
) -> AsyncGenerator[pa.RecordBatch, None]:
    """The records of one offset range, an Arrow batch per fetch."""
    consumer = AIOKafkaConsumer(
        **client_options(options), enable_auto_commit=False, auto_offset_reset="none"
    )
    await consumer.start()
    tp = TopicPartition(partition.topic, partition.partition)
    try:
        consumer.assign([tp])
        consumer.seek(tp, partition.start)
        position = partition.start
        while position < partition.end:
            fetched = await consumer.getmany(tp, timeout_ms=_POLL_MS)
            records = fetched.get(tp, [])
            if records:
                if records[-1].offset >= partition.end:
                    records = [r for r in records if r.offset < partition.end]
                    position = partition.end
                else:
                    position = records[-1].offset + 1
            if records:
                yield record_batch(records, schema)
            end = consumer.highwater(tp)
            if end is not None and end <= position:
                return  # the range ends past the log end (records compacted away)
    finally:
        await consumer.stop()


@dataclass
class Written(WriterCommitMessage):
    records: int


class KafkaWriter(DataSourceArrowWriter):
    """Writes rows in order with ``acks=all``; a task succeeds once all were acknowledged."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = {k.lower(): v for k, v in options.items()}

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        loop = asyncio.new_event_loop()
        try:
            return Written(loop.run_until_complete(_write_batches(self.options, iterator)))
        finally:
            loop.close()


@dataclass
class _Columns:
    """One Arrow batch of rows to write, as Python lists (one conversion per column)."""

    topics: list[str]
    keys: list[bytes | None]
    values: list[bytes | None]
    partitions: list[int | None]
    timestamps: list[int | None]  # milliseconds
    headers: list[list[tuple[str, bytes | None]]]

    @classmethod
    def of(cls, batch: pa.RecordBatch, default_topic: str | None) -> _Columns:
        count = batch.num_rows
        names = set(batch.schema.names)

        def column(name: str) -> list[Any]:
            return batch.column(name).to_pylist() if name in names else [None] * count

        topics = column("topic")
        if default_topic is not None:
            topics = [t or default_topic for t in topics]
        if None in topics or "" in topics:
            raise ValueError("rows need a topic column, or the topic option")
        timestamps: list[int | None] = [None] * count
        if "timestamp" in names:
            stamps = batch.column("timestamp")
            if pa.types.is_timestamp(stamps.type):  # Spark's own: microseconds, truncated
                stamps = stamps.cast(pa.timestamp("ms", tz=stamps.type.tz), safe=False)
            timestamps = stamps.cast(pa.int64()).to_pylist()
        headers: list[list[tuple[str, bytes | None]]] = [[] for _ in range(count)]
        if "headers" in names:
            column_of_lists = batch.column("headers")
            entries = column_of_lists.values  # not sliced: the offsets index into it as they are
            pairs = list(
                zip(
                    entries.field("key").to_pylist(),
                    entries.field("value").to_pylist(),
                    strict=True,
                )
            )
            headers = [pairs[a:b] for a, b in pairwise(column_of_lists.offsets.to_pylist())]
        return cls(topics, column("key"), column("value"), column("partition"), timestamps, headers)


async def _write_batches(options: dict[str, str], batches: Iterator[pa.RecordBatch]) -> int:
    """Write the rows of ``batches`` in order; return once every one was acknowledged.

    Rows with a partition are packed into batches per partition (one ``send_batch`` per full
    batch, in order, as the replicator does); rows without one go through the partitioner.
    """
    producer = AIOKafkaProducer(
        **client_options(options),
        acks="all",
        enable_idempotence=False,
        linger_ms=5,
        max_batch_size=_BATCH_BYTES,
        max_request_size=16 * 1024 * 1024,
    )
    await producer.start()
    default_topic = options.get("topic")
    written = 0
    open_batches: dict[tuple[str, int], Any] = {}
    pending: list[asyncio.Future[Any]] = []

    async def flush(where: tuple[str, int]) -> None:
        batch = open_batches.pop(where)
        batch.close()
        pending.append(await producer.send_batch(batch, where[0], partition=where[1]))

    try:
        for arrow in batches:
            rows = _Columns.of(arrow, default_topic)
            written += arrow.num_rows
            for topic, partition, key, value, timestamp, headers in zip(
                rows.topics,
                rows.partitions,
                rows.keys,
                rows.values,
                rows.timestamps,
                rows.headers,
                strict=True,
            ):
                if partition is None:
                    pending.append(
                        await producer.send(
                            topic, key=key, value=value, timestamp_ms=timestamp, headers=headers
                        )
                    )
                    continue
                where = (topic, partition)
                batch = open_batches.get(where)
                if batch is None:
                    batch = open_batches[where] = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=timestamp, headers=headers) is None:
                    await flush(where)
                    batch = open_batches[where] = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=timestamp, headers=headers)
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending.clear()
        for where in list(open_batches):
            await flush(where)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return written
