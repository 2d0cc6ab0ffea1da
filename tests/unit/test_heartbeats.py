"""Which origins an identity flow's target never gets (heartbeats.unforwarded): a chain or a
ring of identity flows, told from a mesh by the heartbeats read in the source and the target."""

from __future__ import annotations

from replicator.heartbeats import unforwarded

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
