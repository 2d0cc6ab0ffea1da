"""Handovers: where a flow took a partition over from the MirrorMaker it replaced.

MirrorMaker's copies carry no provenance, so position translation (``failover/positions.py``)
cannot tell which source record each of them copies. What it needs is one fact per partition,
known when the flow takes the partition over: the target partition held the predecessor's copies
of every source record below ``source_offset`` up to ``target_offset`` (its log end then), and the
flow copies on from there. A group that stands at or past ``source_offset`` in the source has read
everything below ``target_offset`` in the target; one behind it stands among MirrorMaker's copies,
where MirrorMaker's own checkpoint is the translation to use.

A handover is kept in the checkpoints topic of the target (``REPLICATOR_CHECKPOINTS_TOPIC``,
compacted: the newest per partition), under a key no group checkpoint can have. Pure: encoding
and decoding only; the leg writes it (:mod:`replicator.replication.takeover`), the translation
reads it (:mod:`replicator.failover.group_positions`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

CHECKPOINTS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.ms": str(3_600_000),  # compaction can run on what is an hour old
    "min.cleanable.dirty.ratio": "0.1",
}
"""The checkpoints topic's configs, whichever of the leg or the group sync creates it."""


@dataclass(frozen=True, slots=True)
class Handover:
    """``source``/``topic``/``partition`` copied into ``target``/``target_topic`` by
    ``predecessor`` below ``target_offset``; the flow's first copy there is ``source_offset``."""

    source: str
    target: str
    topic: str
    partition: int
    target_topic: str
    source_offset: int
    target_offset: int
    predecessor: str
    at_ms: int

    @property
    def key(self) -> bytes:
        return handover_key(self.source, self.target, self.topic, self.partition)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Handover | None:
        """The handover a record of the checkpoints topic holds; ``None`` for any other record
        (a group's checkpoint, a foreign or older format: never guessed at)."""
        try:
            named = json.loads(key)
            if not isinstance(named, dict) or "takeover" not in named:
                return None
            found = json.loads(value)
            handover = cls(
                source=str(found["source"]),
                target=str(found["target"]),
                topic=str(found["topic"]),
                partition=int(found["partition"]),
                target_topic=str(found["target_topic"]),
                source_offset=int(found["source_offset"]),
                target_offset=int(found["target_offset"]),
                predecessor=str(found["predecessor"]),
                at_ms=int(found["at_ms"]),
            )
        except (ValueError, KeyError, TypeError):
            return None
        return handover if handover.key == key else None


def handover_key(source: str, target: str, topic: str, partition: int) -> bytes:
    """A JSON object, where a group's checkpoint has a JSON list: the two never collide."""
    return json.dumps({"takeover": [source, target, topic, partition]}).encode()
