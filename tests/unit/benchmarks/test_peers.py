"""MirrorMaker 2's properties over a scale layout: every ``_REPLICA`` topic of the layout and
nothing else, identity names, one task per core, the one-way benchmark's settings otherwise."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from benchmarks.layout import Layout
from benchmarks.peers import (
    MM2_SETTINGS,
    mm2_properties,
    mm2_scale_properties,
    mm2_scale_settings,
    mm2_tasks,
)
from replicator.devtools.embedded import LocalBroker


@dataclass
class Broker:
    bootstrap_servers: str

    def stop(self) -> None:
        pass


BROKERS: dict[str, LocalBroker] = {"dc1": Broker("127.0.0.1:9001"), "dc2": Broker("127.0.0.1:9002")}


def parsed(text: str) -> dict[str, str]:
    return dict(line.split(" = ", 1) for line in text.splitlines())


@pytest.mark.parametrize("token", ["24", "240", "6000", "2000x3", "7x1"])
def test_the_topics_regex_matches_the_layouts_source_topics_only(token: str) -> None:
    layout = Layout.parse(token)
    pattern = re.compile(
        parsed(mm2_scale_properties(BROKERS, layout.source_pattern(), 2))["dc1->dc2.topics"]
    )
    assert all(pattern.fullmatch(topic) for topic in layout.source_topics())
    others = [*layout.real_topics(), "heartbeats", "mm2-offset-syncs.dc2.internal", "bench"]
    assert not any(pattern.fullmatch(topic) for topic in others)


def test_a_layout_flow_is_one_way_identity_with_the_given_tasks() -> None:
    properties = parsed(mm2_scale_properties(BROKERS, Layout.parse("1200").source_pattern(), 2))
    assert properties["clusters"] == "dc1, dc2"
    assert properties["dc1.bootstrap.servers"] == "127.0.0.1:9001"
    assert properties["dc2.bootstrap.servers"] == "127.0.0.1:9002"
    assert properties["dc1->dc2.enabled"] == "true"
    assert properties["dc2->dc1.enabled"] == "false"
    assert properties["replication.policy.class"].endswith(".IdentityReplicationPolicy")
    assert properties["tasks.max"] == "2"  # not one per partition
    for key, value in MM2_SETTINGS.items():
        if key != "tasks.max":
            assert properties[key] == value


def test_the_printed_settings_are_those_of_the_file() -> None:
    pattern = Layout.parse("240").source_pattern()
    printed = mm2_scale_settings(pattern, 3)
    properties = parsed(mm2_scale_properties(BROKERS, pattern, 3))
    assert printed.items() <= properties.items()
    assert printed["tasks.max"] == "3"


def test_one_task_per_core() -> None:
    assert mm2_tasks() >= 1


def test_the_one_way_benchmark_keeps_one_task_per_partition() -> None:
    properties = parsed(mm2_properties(BROKERS, "bench", 8))
    assert properties["dc1->dc2.topics"] == "bench"
    assert properties["tasks.max"] == "8"
