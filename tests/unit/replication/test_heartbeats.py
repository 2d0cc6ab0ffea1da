"""Which origins an identity flow's target never gets (heartbeats.unforwarded): a chain or a
ring of identity flows, told from a mesh by the heartbeats read in the source and the target."""

from __future__ import annotations

import struct
from typing import Any

from replicator.config.loading import load_settings
from replicator.config.topology import feeds_for
from replicator.replication.heartbeats import emissions, mm2_heartbeat, stale_for, unforwarded

AFTER = 5.0


def test_an_origin_reaching_the_source_but_never_the_target_is_a_chain() -> None:
    # dc1 -> dc2 -> dc3: dc1's heartbeats arrive in dc2, never in dc3.
    assert unforwarded({"dc1": 99.0}, {"dc2": 99.0}, "dc3", 0.0, 100.0, AFTER) == ["dc1"]


def test_a_mesh_and_a_copy_back_home_are_not() -> None:
    # dc1 also flows into dc3 directly (a mesh), and dc3's own copies come home to dc3.
    into_target = {"dc1": 98.0, "dc2": 99.0}
    assert unforwarded({"dc1": 99.0, "dc3": 99.0}, into_target, "dc3", 0.0, 100.0, AFTER) == []


def test_nothing_is_said_before_both_sides_were_watched_long_enough() -> None:
    assert unforwarded({"dc1": 99.0}, {}, "dc3", 97.0, 100.0, AFTER) == []
    # An origin whose heartbeats stopped arriving in the source (its flow removed) is not one.
    assert unforwarded({"dc1": 90.0}, {}, "dc3", 0.0, 100.0, AFTER) == []
    # One whose heartbeats stopped arriving in the target (that flow removed, or stalled) is.
    assert unforwarded({"dc1": 99.0}, {"dc1": 90.0}, "dc3", 0.0, 100.0, AFTER) == ["dc1"]


def _mm2_strings(raw: bytes) -> list[str]:
    found, at = [], 0
    while at < len(raw):
        (size,) = struct.unpack_from(">h", raw, at)
        found.append(raw[at + 2 : at + 2 + size].decode())
        at += 2 + size
    return found


def test_mm2_heartbeats_are_written_in_mirrormaker_2s_format() -> None:
    key, value = mm2_heartbeat("primary", "backup", 1_700_000_000_123)
    assert _mm2_strings(key) == ["primary", "backup"]  # sourceClusterAlias, targetClusterAlias
    assert struct.unpack(">hq", value) == (0, 1_700_000_000_123)  # version 0, timestamp


def test_where_a_flow_writes_its_heartbeats() -> None:
    base = {
        "REPLICATOR_LOCAL_CLUSTER": "b",
        "REPLICATOR_REPLICA_MODE": "false",
        "REPLICATOR_CLUSTERS__A__BOOTSTRAP_SERVERS": "a:9092",
        "REPLICATOR_CLUSTERS__B__BOOTSTRAP_SERVERS": "b:9092",
        "REPLICATOR_FLOWS__F__SOURCE": "a",
        "REPLICATOR_FLOWS__F__TARGET": "b",
    }
    clients: dict[str, Any] = {"a": object(), "b": object()}

    def where(**env: str) -> list[tuple[str, list[str], tuple[int, ...] | str]]:
        settings = load_settings({**base, **env})
        (plan,) = feeds_for(settings)
        found = emissions(settings, plan, clients["a"], clients["b"])
        assert all(e.client is clients[e.alias] for e in found)
        return [
            (e.alias, _mm2_strings(e.key), struct.unpack(">hq", e.value(7)))
            if settings.heartbeat_placement.value == "mirrormaker2"
            else (e.alias, [e.key.decode()], e.value(7).decode())
            for e in found
        ]

    assert where() == [("a", ["f"], '{"flow":"f","source":"a","target":"b","emitted_ms":7}')]
    mm2 = {"REPLICATOR_HEARTBEAT_PLACEMENT": "mirrormaker2"}
    assert where(**mm2) == [("b", ["a", "b"], (0, 7))]
    reverse = {**mm2, "REPLICATOR_FLOWS__F__REVERSE_HEARTBEATS": "true"}
    assert where(**reverse) == [("b", ["a", "b"], (0, 7)), ("a", ["b", "a"], (0, 7))]


def test_the_age_grows_from_the_start_until_a_first_heartbeat_is_seen() -> None:
    # Never seen: the age counts from the flow's start, so a flow that never delivers one stalls.
    assert stale_for(None, started=1_000.0, now=1_400.0) == 400.0
    # Seen: the age counts from the newest heartbeat's emission.
    assert stale_for(1_390_000, started=1_000.0, now=1_400.0) == 10.0
    assert stale_for(1_401_000, started=1_000.0, now=1_400.0) == 0.0  # a clock ahead: never < 0
