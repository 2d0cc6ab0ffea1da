"""The group consumer's timings: Kafka's session by default, heartbeats within it, and a rebalance
that ends before the join request times out."""

from __future__ import annotations

import pytest

from replicator.config.loading import load_settings
from replicator.kafka.clients import group_timings, make_consumer

BASE = {
    "REPLICATOR_LOCAL_CLUSTER": "dc1",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "a:1",
}


@pytest.mark.parametrize(
    ("env", "timings"),
    [
        ({}, (45_000, 3_000, 25_000)),  # Kafka's session; a join inside the 30 s request
        ({"REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "10000"}, (10_000, 3_000, 10_000)),
        ({"REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "6000"}, (6_000, 2_000, 6_000)),
        (
            {
                "REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "60000",
                "REPLICATOR_REQUEST_TIMEOUT_MS": "90000",
            },
            (60_000, 3_000, 60_000),
        ),
    ],
)
def test_a_member_heartbeats_within_its_session_and_rejoins_within_a_request(
    env: dict[str, str], timings: tuple[int, int, int]
) -> None:
    found = group_timings(load_settings({**BASE, **env}))
    assert (
        found["session_timeout_ms"],
        found["heartbeat_interval_ms"],
        found["rebalance_timeout_ms"],
    ) == timings


async def test_the_source_consumer_is_made_with_them() -> None:
    settings = load_settings({**BASE, "REPLICATOR_GROUP_SESSION_TIMEOUT_MS": "12000"})
    consumer = make_consumer(settings.clusters["dc1"], settings, "replicator.dc1", "feed")
    try:  # not started: aiokafka holds the options until it joins
        assert (consumer._session_timeout_ms, consumer._heartbeat_interval_ms) == (12_000, 3_000)
        assert consumer._rebalance_timeout_ms == 12_000
    finally:
        await consumer.stop()
