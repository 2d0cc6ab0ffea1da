"""Handovers (model/handover.py): where a flow took a partition over from a MirrorMaker, whose
copies carry no provenance. Kept beside the checkpoints without being mistaken for one; a group
past the handover is translated exactly through MirrorMaker's copies, one behind it is not
translated at all (MirrorMaker's own checkpoint stands)."""

from __future__ import annotations

import json

from replicator.failover.checkpoints import Checkpoint, key_of
from replicator.failover.group_positions import GroupTranslator
from replicator.failover.positions import Frontier, Origin, TargetIndex
from replicator.model.handover import Handover
from tests.unit.failover.test_group_moves import settings
from tests.unit.failover.test_positions import MemoryLog, run

SOURCE: Origin = ("dc1", "orders", 0)  # the source partition, its records its own origin
COPIES: Origin = ("dc2", "dc1.orders", 0)  # MirrorMaker's copies in the target: no provenance


def handover(source_offset: int = 100, target_offset: int = 120, at_ms: int = 5) -> Handover:
    return Handover(
        "dc1", "dc2", "orders", 0, "dc1.orders", source_offset, target_offset,
        "MirrorMaker 2 (mm2-offsets.dc1.internal on the target)", at_ms,
    )  # fmt: skip


def translator() -> GroupTranslator:
    flow = {"source": "dc1", "target": "dc2", "naming": "source-alias"}
    return GroupTranslator(settings(replica_mode=False, mm2=flow), "dc1", "dc2")


def checkpoint(source_offset: int, target_offset: int) -> Checkpoint:
    return Checkpoint(
        "app", "dc1", "dc2", "orders", 0, "dc1.orders", source_offset, target_offset, 0,
        Frontier({SOURCE: source_offset - 1}), TargetIndex(target_offset), 1,
    )  # fmt: skip


def test_a_handover_is_kept_under_a_key_no_checkpoint_has_and_read_back_whole() -> None:
    kept = handover()
    assert Handover.decode(kept.key, kept.encode()) == kept
    assert isinstance(json.loads(kept.key), dict)  # a checkpoint's key is a list
    cp = checkpoint(10, 10)
    assert Handover.decode(cp.key, cp.encode()) is None
    assert key_of("app", "dc1", "dc2", "orders", 0) != kept.key
    assert Handover.decode(kept.key, b"not json") is None
    other_key = json.dumps({"takeover": ["dc1", "dc2", "orders", 1]}).encode()
    assert Handover.decode(other_key, kept.encode()) is None  # a value under another's key


def test_past_the_handover_mirrormakers_copies_count_as_read() -> None:
    """MirrorMaker copied offsets 0..99 into 120 records (killed once: 20 copied twice); the
    flow copies on from offset 100 at position 120. A group at or past 100 is translated to the
    flow's copy of its next record, nothing read again; without the handover, MirrorMaker's
    copies (no provenance) would look unread and the group would be put back at 0."""
    a = MemoryLog([(SOURCE, i) for i in range(300)])
    b = MemoryLog([(COPIES, i) for i in range(120)] + [(SOURCE, i) for i in range(100, 300)])
    point = translator().handover_point(handover())
    for position in (100, 101, 150, 300):
        result = run(a, position, b, point)
        assert (result.position, result.repeats) == (120 + position - 100, 0), position
    assert run(a, 150, b).position == 0  # what a translation without it finds


def test_the_starting_point_behind_past_and_after_a_later_checkpoint() -> None:
    t = translator()
    kept = handover()
    point = t.handover_point(kept)
    # Behind the handover: not translated (MirrorMaker's checkpoint stands).
    assert t.starting_point("dc1.orders", 99, None, kept) == (None, kept)
    assert t.starting_point("dc1.orders", 99, checkpoint(90, 110), kept) == (None, kept)
    # Past it: from the handover, unless a checkpoint made since is further on.
    assert t.starting_point("dc1.orders", 150, None, kept) == (point, None)
    assert t.starting_point("dc1.orders", 150, checkpoint(90, 110), kept) == (point, None)
    later = checkpoint(130, 150)
    assert t.starting_point("dc1.orders", 150, later, kept) == (later.sync_point, None)
    # A checkpoint past the handover's source offset but before its target offset was made
    # without it (MirrorMaker's copies taken as unread): not trusted.
    stale = checkpoint(130, 0)
    assert t.starting_point("dc1.orders", 150, stale, kept) == (point, None)
    # Another topic's handover, or no position: as before.
    assert t.starting_point("orders", 150, None, kept) == (None, None)
    assert t.starting_point("dc1.orders", None, None, kept) == (None, None)
