"""Kafka options for Spark: cluster settings to the standard options and back, offset ranges."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from replicator.settings import load_settings
from replicator.spark.commands import parse_since
from replicator.spark.kafka_source import KafkaReader, client_options, offsets_json, spark_options

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
    ranges = KafkaReader(options).partitions()
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
        ("a", 0, 0, 4),
        ("a", 0, 4, 8),
        ("a", 0, 8, 10),
    ]  # partition 1 is empty in the range


def test_since_takes_earliest_epoch_milliseconds_or_iso_times() -> None:
    assert parse_since("earliest") is None
    assert parse_since("1700000000000") == 1_700_000_000_000
    assert parse_since("2023-11-14T22:13:20+00:00") == 1_700_000_000_000
