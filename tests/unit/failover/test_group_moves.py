"""Which topics and clusters a group is moved and synced between (topology.counterpart,
group_sync.sync_pairs), the forward-only rule of the group offset sync, and that a position a
sync committed is never synced onward."""

from __future__ import annotations

from aiokafka import TopicPartition

from replicator.config.loading import load_settings
from replicator.config.settings import Settings
from replicator.config.topology import counterpart
from replicator.failover.checkpoints import Checkpoint
from replicator.failover.group_sync import SYNCED, forward_only, reached_by_consumers, sync_pairs
from replicator.failover.positions import Frontier, TargetIndex


def settings(replica_mode: bool = True, **flows: dict[str, str]) -> Settings:
    env = {
        "REPLICATOR_LOCAL_CLUSTER": "dc1",
        "REPLICATOR_REPLICA_MODE": str(replica_mode).lower(),
    }
    for alias, port in (("dc1", 1), ("dc2", 2), ("dc3", 3)):
        env[f"REPLICATOR_CLUSTERS__{alias.upper()}__BOOTSTRAP_SERVERS"] = f"127.0.0.1:{port}"
    for name, options in flows.items():
        for key, value in options.items():
            env[f"REPLICATOR_FLOWS__{name.upper()}__{key.upper()}"] = value
    return load_settings(env)


def test_the_replica_mode_keeps_real_topic_names_and_nothing_else() -> None:
    s = settings()
    assert counterpart(s, "orders", "dc1", "dc2") == ("orders", True)
    assert counterpart(s, "orders_REPLICA", "dc1", "dc2") is None  # what applications write
    assert counterpart(s, "__consumer_offsets", "dc1", "dc2") is None


def test_flows_name_the_copy_and_give_back_the_original() -> None:
    s = settings(
        replica_mode=False,
        mm2={"source": "dc1", "target": "dc2", "naming": "source-alias"},
        go={"source": "dc3", "target": "dc1", "naming": "prefix", "prefix": "dc3_"},
        same={"source": "dc2", "target": "dc3"},
    )
    assert counterpart(s, "orders", "dc1", "dc2") == ("dc1.orders", True)
    assert counterpart(s, "dc1.orders", "dc2", "dc1") == ("orders", True)  # failback
    assert counterpart(s, "orders", "dc3", "dc1") == ("dc3_orders", True)
    assert counterpart(s, "dc3_orders", "dc1", "dc3") == ("orders", True)
    assert counterpart(s, "orders", "dc2", "dc3") == ("orders", True)
    assert counterpart(s, "orders", "dc3", "dc2") == ("orders", True)
    assert counterpart(s, "orders", "dc2", "dc1") is None  # nothing replicates it there
    placed = settings(
        replica_mode=False, keyed={"source": "dc1", "target": "dc2", "preserve_partitions": "false"}
    )
    assert counterpart(placed, "orders", "dc1", "dc2") == ("orders", False)
    assert counterpart(s, "replicator-checkpoints", "dc1", "dc2") is None


def test_groups_are_synced_from_the_local_cluster_and_along_each_flow() -> None:
    assert sync_pairs(settings()) == [("dc1", "dc2"), ("dc1", "dc3")]
    both = settings(mm2={"source": "dc2", "target": "dc3"}, back={"source": "dc1", "target": "dc2"})
    assert sync_pairs(both) == [("dc1", "dc2"), ("dc1", "dc3"), ("dc2", "dc3")]


def test_a_synced_group_is_never_moved_back() -> None:
    a, b, c = (TopicPartition("orders", p) for p in range(3))
    translated = {a: 10, b: 20, c: 30}
    assert forward_only(translated, {a: 12, b: 20, c: None}) == {c: 30}
    assert forward_only(translated, {a: 9, b: 19}) == {a: 10, b: 20, c: 30}


def _checkpoint(partition: int, source_offset: int) -> Checkpoint:
    return Checkpoint(
        "app", "backup", "primary", "primary.orders", partition, "orders", source_offset,
        source_offset, 0, Frontier(), TargetIndex(source_offset), 0,
    )  # fmt: skip


def test_a_position_a_sync_committed_is_no_progress_of_the_group() -> None:
    # Flows both ways: the sync primary -> backup moved the group to 90 in backup; meanwhile it
    # was reset to 10 in primary. Backup's 90 is the sync's, not the group's: never synced back.
    written = [_checkpoint(p, 90) for p in range(4)]
    committed = {
        TopicPartition("primary.orders", 0): (90, SYNCED),  # the sync's: not synced back
        TopicPartition("primary.orders", 1): (90, ""),  # a consumer's: synced
        TopicPartition("primary.orders", 2): (95, SYNCED),  # moved since it was read
        TopicPartition("primary.orders", 3): None,
    }
    assert [c.partition for c in reached_by_consumers(written, committed)] == [1, 2, 3]
