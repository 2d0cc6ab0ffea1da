"""The Kafka data source's pure parts: cluster settings to the standard options and back, offset
ranges and how they are split into tasks, and records to Arrow batches and back (the columnar
read and write paths, checked against the exact Arrow schema Spark requires)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from aiokafka import ConsumerRecord, TopicPartition

from replicator.config.loading import load_settings
from replicator.spark.commands import parse_since
from replicator.spark.frames import MIN_OFFSETS_PER_TASK, offsets_per_task
from replicator.spark.kafka_source import (
    SCHEMA,
    KafkaReader,
    _Columns,
    arrow_schema,
    client_options,
    offsets_json,
    record_batch,
    spark_options,
)

SECRET = "s3cr3t-for-spark"


@pytest.mark.parametrize("secret", [SECRET, 'quote" back\\slash\\" end'])
def test_sasl_credentials_travel_as_the_standard_jaas_option_and_come_back(secret: str) -> None:
    settings = load_settings(
        {
            "REPLICATOR_LOCAL_CLUSTER": "dc1",
            "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "k1:9093,k2:9093",
            "REPLICATOR_CLUSTERS__DC1__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "REPLICATOR_CLUSTERS__DC1__SASL_MECHANISM": "SCRAM-SHA-512",
            "REPLICATOR_CLUSTERS__DC1__SASL_USERNAME": "replicator",
            "REPLICATOR_CLUSTERS__DC1__SASL_PASSWORD": secret,
        }
    )
    options = spark_options(settings.clusters["dc1"])
    assert options["kafka.bootstrap.servers"] == "k1:9093,k2:9093"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
    )
    # Option keys reach a Python data source lower-cased.
    client = client_options({k.lower(): v for k, v in options.items()})
    assert client["security_protocol"] == "SASL_PLAINTEXT"
    assert client["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (client["sasl_plain_username"], client["sasl_plain_password"]) == ("replicator", secret)


def test_offset_ranges_become_input_partitions_split_on_request() -> None:
    starts = offsets_json({TopicPartition("a", 0): 0, TopicPartition("a", 1): 5})
    ends = offsets_json({TopicPartition("a", 0): 10, TopicPartition("a", 1): 5})
    options = {"startingOffsets": starts, "endingOffsets": ends, "maxOffsetsPerTask": "4"}
    ranges = KafkaReader(options, SCHEMA).partitions()
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
        ("a", 0, 0, 4),
        ("a", 0, 4, 8),
        ("a", 0, 8, 10),
    ]  # partition 1 is empty in the range


def test_since_takes_earliest_epoch_milliseconds_or_iso_times() -> None:
    assert parse_since("earliest") is None
    assert parse_since("1700000000000") == 1_700_000_000_000
    assert parse_since("2023-11-14T22:13:20+00:00") == 1_700_000_000_000


def test_ranges_split_to_about_two_tasks_per_core_never_into_small_tasks() -> None:
    million = [(0, 125_000)] * 8
    assert offsets_per_task(million, 2) == 250_000  # 8 tasks: no partition split
    assert offsets_per_task([(0, 1_000_000)], 2) == 250_000  # one partition: 4 tasks
    assert offsets_per_task(million, 64) == MIN_OFFSETS_PER_TASK
    assert offsets_per_task([(10, 10)], 2) == MIN_OFFSETS_PER_TASK


def _record(offset: int, key: bytes | None, headers: list[tuple[str, bytes]]) -> Any:
    return ConsumerRecord(
        topic="orders_REPLICA",
        partition=3,
        offset=offset,
        timestamp=1_700_000_000_123 + offset,
        timestamp_type=0,
        key=key,
        value=b"v%d" % offset,
        checksum=None,
        serialized_key_size=-1,
        serialized_value_size=2,
        headers=headers,
    )


def test_records_become_one_arrow_batch_of_exactly_the_schema_spark_checks() -> None:
    records = [
        _record(7, b"k", [("trace-id", b"t7"), ("replicator", b"dc2/orders_REPLICA/3/1")]),
        _record(8, None, []),
        _record(9, b"", [("empty", b"")]),
    ]
    batch = record_batch(records, arrow_schema(SCHEMA))
    assert batch.schema.equals(arrow_schema(SCHEMA))
    assert batch.to_pylist() == [
        {
            "key": r.key,
            "value": r.value,
            "topic": "orders_REPLICA",
            "partition": 3,
            "offset": r.offset,
            "timestamp": datetime.fromtimestamp(r.timestamp / 1000, tz=UTC),
            "timestampType": 0,
            "headers": [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in records
    ]


def test_arrow_rows_to_write_come_back_as_records_even_from_a_sliced_batch() -> None:
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    rows = pa.RecordBatch.from_pydict(
        {
            "topic": ["a", "a", "b", "a"],
            "key": [b"k0", None, b"k2", b"k3"],
            "value": [b"v0", b"v1", None, b"v3"],
            "headers": [
                [{"key": "h", "value": b"0"}],
                [],
                [{"key": "x", "value": None}, {"key": "y", "value": b"2"}],
                [{"key": "z", "value": b"3"}],
            ],
            "partition": [0, 0, 1, None],
            "timestamp": [1, 2, 3, None],
        },
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("headers", pa.list_(header)),
                ("partition", pa.int32()),
                ("timestamp", pa.int64()),
            ]
        ),
    )
    for batch, first in ((rows, 0), (rows.slice(1), 1)):
        columns = _Columns.of(batch, None)
        expected = [
            [("h", b"0")],
            [],
            [("x", None), ("y", b"2")],
            [("z", b"3")],
        ][first:]
        assert columns.headers == expected
        assert columns.keys == [b"k0", None, b"k2", b"k3"][first:]
        assert columns.partitions == [0, 0, 1, None][first:]
        assert columns.timestamps == [1, 2, 3, None][first:]
    # Spark's own timestamps (microseconds) arrive as milliseconds; the topic option fills in.
    stamps = pa.array([datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)])
    spark_rows = pa.RecordBatch.from_arrays(
        [stamps.cast(pa.timestamp("us", tz="UTC")), pa.array([None], pa.string())],
        names=["timestamp", "topic"],
    )
    columns = _Columns.of(spark_rows, "orders")
    assert (columns.timestamps, columns.topics) == ([1_700_000_000_123], ["orders"])
    with pytest.raises(ValueError, match="topic"):
        _Columns.of(spark_rows, None)
