"""Checkpoints as MirrorMaker 2 writes them (``checkpoints.mm2_record``, ``mm2_topic``): what
MirrorClient.remoteConsumerOffsets and RemoteClusterUtils.translateOffsets read."""

from __future__ import annotations

import struct
from pathlib import Path

from replicator.failover.checkpoints import Checkpoint, mm2_record, mm2_topic
from replicator.failover.positions import Frontier, TargetIndex
from replicator.mirrormaker import mm2_translation


def checkpoint(group: str, target_topic: str, source_offset: int, target_offset: int) -> Checkpoint:
    return Checkpoint(
        group=group,
        source="primary",
        target="backup",
        topic="orders",
        partition=7,
        target_topic=target_topic,
        source_offset=source_offset,
        target_offset=target_offset,
        repeats=0,
        frontier=Frontier(),
        index=TargetIndex(end=target_offset),
        at_ms=1_700_000_000_000,
    )


def read_mm2(key: bytes, value: bytes) -> tuple[str, str, int, int, int, str]:
    """MM2's Checkpoint.deserializeRecord: key (group STRING, topic STRING, partition INT32),
    value (version INT16 = 0, upstream INT64, downstream INT64, metadata STRING)."""

    def string(raw: bytes, at: int) -> tuple[str, int]:
        (size,) = struct.unpack_from(">h", raw, at)
        return raw[at + 2 : at + 2 + size].decode(), at + 2 + size

    group, at = string(key, 0)
    topic, at = string(key, at)
    (partition,) = struct.unpack_from(">i", key, at)
    assert at + 4 == len(key)
    version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
    assert version == 0
    metadata, end = string(value, 18)
    assert end == len(value)
    return group, topic, partition, upstream, downstream, metadata


def test_a_checkpoint_in_mm2s_format_names_the_target_topic_and_both_offsets() -> None:
    key, value = mm2_record(checkpoint("app-é", "primary.orders", 120, 97))
    assert read_mm2(key, value) == ("app-é", "primary.orders", 7, 120, 97, "")
    assert key[:2] == struct.pack(">h", len("app-é".encode()))  # a length in bytes, not chars


def test_mm2s_checkpoints_topic_is_named_by_the_sources_alias_and_the_flows_separator(
    tmp_path: Path,
) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters=Primary, backup\nPrimary.bootstrap.servers=p:9092\n"
        "backup.bootstrap.servers=b:9092\nPrimary->backup.enabled=true\n"
        "replication.policy.separator=_\n"
    )
    settings = mm2_translation(config).settings()
    assert settings.mm2_checkpoints
    assert mm2_topic(settings, "primary", "backup") == "Primary_checkpoints_internal"
