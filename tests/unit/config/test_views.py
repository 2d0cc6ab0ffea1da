"""Narrow views of the settings: each holds exactly what its component reads, frozen."""

from __future__ import annotations

import dataclasses

import pytest

from replicator.config.loading import load_settings
from replicator.config.values import Compression

BASE = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "kafka-1.dc1:9092",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "kafka-1.dc2:9092",
    "REPLICATOR_REQUEST_TIMEOUT_MS": "12000",
    "REPLICATOR_METADATA_MAX_AGE_MS": "700",
    "REPLICATOR_PROBE_TIMEOUT_MS": "900",
    "REPLICATOR_BATCH_MAX_BYTES": "65536",
    "REPLICATOR_LINGER_MS": "7",
    "REPLICATOR_COMPRESSION": "zstd",
    "REPLICATOR_DEAD_LETTER_TOPIC": "__parked",
    "REPLICATOR_DESTINATION_REPLICATION_FACTOR": "2",
}


def test_client_timings_hold_the_settings_every_client_reads() -> None:
    timings = load_settings(BASE).client_timings()
    assert (timings.request_timeout_ms, timings.metadata_max_age_ms) == (12_000, 700)
    assert timings.probe_timeout_ms == 900
    with pytest.raises(dataclasses.FrozenInstanceError):
        timings.request_timeout_ms = 1  # type: ignore[misc]


def test_the_dead_letter_view_holds_its_topic_cluster_and_producer() -> None:
    settings = load_settings(BASE)
    view = settings.dead_letters()
    assert view.topic == "__parked"
    assert view.cluster == settings.clusters["dc1"]
    assert view.replication_factor == 2
    producer = view.producer
    assert (producer.batch_max_bytes, producer.linger_ms) == (65_536, 7)
    assert producer.compression is Compression.ZSTD
    assert (producer.request_timeout_ms, producer.probe_timeout_ms) == (12_000, 900)
