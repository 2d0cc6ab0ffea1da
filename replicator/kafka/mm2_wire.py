"""MirrorMaker 2's records, encoded as MirrorMaker 2 encodes them: in Kafka's protocol types.

MirrorMaker 2 writes its ``Heartbeat`` and ``Checkpoint`` records with the Kafka protocol's own
struct encoding (big-endian integers, length-prefixed strings), as its schemas define them. Tools
that read them (``MirrorClient``, ``RemoteClusterUtils``) expect exactly these bytes. The callers
say what a record holds (:mod:`replicator.replication.heartbeats`,
:mod:`replicator.failover.checkpoints`); the encoding is here, at the Kafka boundary.
"""

from __future__ import annotations

from aiokafka.protocol.types import Int16, Int32, Int64, Schema, String

# MirrorMaker 2's ``Heartbeat`` record: the key the two cluster aliases, the value its version
# and the timestamp.
_HEARTBEAT_KEY = Schema(
    ("sourceClusterAlias", String("utf-8")), ("targetClusterAlias", String("utf-8"))
)
_HEARTBEAT_VALUE = Schema(("version", Int16), ("timestamp", Int64))

# MirrorMaker 2's ``Checkpoint`` record: the value is its header (the version) followed by the
# version-0 value.
_CHECKPOINT_KEY = Schema(
    ("group", String("utf-8")), ("topic", String("utf-8")), ("partition", Int32)
)
_CHECKPOINT_VALUE = Schema(
    ("version", Int16), ("upstreamOffset", Int64), ("offset", Int64), ("metadata", String("utf-8"))
)


def heartbeat_record(source: str, target: str, timestamp_ms: int) -> tuple[bytes, bytes]:
    """A version-0 heartbeat's key and value."""
    return _HEARTBEAT_KEY.encode((source, target)), _HEARTBEAT_VALUE.encode((0, timestamp_ms))


def checkpoint_record(
    group: str, topic: str, partition: int, upstream_offset: int, offset: int, metadata: str = ""
) -> tuple[bytes, bytes]:
    """A version-0 checkpoint's key and value: ``group``'s position in ``topic`` (the target's
    name) and ``partition``, ``upstream_offset`` in the source and ``offset`` in the target."""
    key = _CHECKPOINT_KEY.encode((group, topic, partition))
    return key, _CHECKPOINT_VALUE.encode((0, upstream_offset, offset, metadata))
