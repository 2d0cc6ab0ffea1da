"""A bulk job pointed at nothing says so (spark/commands.py ``nothing_to_check``): no topic
selected, a topic no cluster holds, or topics holding no record never pass as checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from replicator.mirrormaker import mm2_translation
from replicator.spark import commands
from replicator.spark.commands import nothing_to_check
from replicator.topics import snapshot

SUFFIX = "_REPLICA"


def test_records_to_compare_pass() -> None:
    snapshots = {
        "dc1": {TopicPartition("orders_REPLICA", 0): (0, 5), TopicPartition("orders", 0): (0, 9)},
        "dc2": {TopicPartition("orders", 0): (0, 4)},
    }
    assert nothing_to_check(["orders"], snapshots, SUFFIX, named=True) == []
    # Only the real topic holds records (they were trimmed from the replica topic): compared.
    only_real = {"dc1": {TopicPartition("orders", 0): (3, 9)}}
    assert nothing_to_check(["orders"], only_real, SUFFIX, named=False) == []


def test_an_empty_selection_is_named() -> None:
    (problem,) = nothing_to_check([], {"dc1": {}}, SUFFIX, named=False)
    assert "matches nothing" in problem and "--topic" in problem


def test_a_topic_no_cluster_holds_is_named_with_the_clusters() -> None:
    snapshots = {"dc1": {TopicPartition("orders", 0): (0, 1)}, "dc2": {}}
    (problem,) = nothing_to_check(["orders", "nosuchtopic"], snapshots, SUFFIX, named=True)
    assert problem == (
        "topic nosuchtopic (given with --topic): neither nosuchtopic nor nosuchtopic_REPLICA "
        "exists in dc1, dc2"
    )


def test_topics_without_a_record_anywhere_are_named() -> None:
    empty = {
        "dc1": {TopicPartition("orders_REPLICA", p): (7, 7) for p in range(3)},
        "dc2": {TopicPartition("orders", 0): (0, 0)},
    }
    (problem,) = nothing_to_check(["orders"], empty, SUFFIX, named=False)
    assert problem.startswith("topic orders: no record to check")


def test_the_flows_audit_lists_each_source_clusters_topics_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two flows from one cluster: its topics are listed once, and each flow's rules select
    its routes from that one list."""
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters=a, b, c\na.bootstrap.servers=a:9092\nb.bootstrap.servers=b:9092\n"
        "c.bootstrap.servers=c:9092\na->b.enabled=true\na->c.enabled=true\na->c.topics=orders\n"
    )
    settings = mm2_translation(config).settings()
    listed: list[Any] = []

    async def cluster_topics(client: dict[str, Any]) -> set[str]:
        listed.append(client["bootstrap_servers"])
        return {"orders", "payments", "heartbeats"}

    monkeypatch.setattr(snapshot, "cluster_topics", cluster_topics)
    routes, problems = commands.flow_routes(settings, ["a", "b", "c"], [])
    assert listed == [["a:9092"]] and problems == []  # one listing, of cluster a
    assert sorted((r.target, r.topic, r.target_topic) for r in routes) == [
        ("b", "orders", "a.orders"),
        ("b", "payments", "a.payments"),
        ("c", "orders", "a.orders"),
    ]
