"""The topic watch: the selection's transitions, what it logs once, and what it exports."""

from __future__ import annotations

import re

from structlog.testing import capture_logs

from replicator.config.topology import TopicRules
from replicator.telemetry.metrics import Metrics
from replicator.topics.watching import TopicWatch


def watch(include: str = ".*") -> tuple[TopicWatch, Metrics]:
    metrics = Metrics()
    rules = TopicRules(re.compile(include), re.compile("__.*"), suffix="_REPLICA")
    return TopicWatch(rules, metrics, "dc1"), metrics


def gauge(metrics: Metrics, selection: str) -> float | None:
    return metrics.registry.get_sample_value(
        "replicator_source_topics", {"feed": "replica", "selection": selection}
    )


def test_rules_matching_nothing_warn_once_naming_the_rules_and_the_rejected_topics() -> None:
    topics, metrics = watch("^ordres$")
    with capture_logs() as logs:
        assert topics.listed(["orders_REPLICA", "orders", "__consumer_offsets"]) is True
        assert topics.listed(["orders_REPLICA", "orders", "__consumer_offsets"]) is False
    (warning,) = logs
    assert warning["log_level"] == "warning"
    assert warning["include"] == "^ordres$"
    assert warning["rejected"] == {"not_included": ["orders_REPLICA"]}
    assert topics.subscription_pattern == r"(?!)"
    assert gauge(metrics, "replicated") == 0
    assert gauge(metrics, "not_included") == 1
    assert gauge(metrics, "not_a_replica_topic") == 2


def test_a_new_replicated_topic_changes_the_subscription_and_is_logged() -> None:
    topics, metrics = watch()
    topics.listed(["a_REPLICA"])
    with capture_logs() as logs:
        assert topics.listed(["a_REPLICA", "b_REPLICA", "b"]) is True
        assert topics.listed(["a_REPLICA", "b_REPLICA", "b", "c"]) is False  # not replicated
    assert [entry["event"] for entry in logs] == ["topic selection", "topic selection"]
    assert logs[0]["replicated"] == ["a_REPLICA", "b_REPLICA"]
    assert re.match(topics.subscription_pattern, "b_REPLICA")
    assert not re.match(topics.subscription_pattern, "b")
    assert gauge(metrics, "replicated") == 2
    status = topics.status()
    assert status["replicated"] == ["a_REPLICA", "b_REPLICA"]
    assert status["rejected"] == {"not_a_replica_topic": ["b", "c"]}


def test_a_failed_listing_keeps_the_selection_and_is_logged_once() -> None:
    topics, _ = watch()
    topics.listed(["a_REPLICA"])
    with capture_logs() as logs:
        topics.listing_failed("timeout")
        topics.listing_failed("timeout")
    assert len(logs) == 1
    assert topics.status()["last_error"] == "timeout"
    assert topics.status()["replicated"] == ["a_REPLICA"]
    assert topics.listed(["a_REPLICA"]) is False
    assert topics.status()["last_error"] is None


def test_long_lists_are_capped_in_status() -> None:
    topics, _ = watch()
    topics.listed([f"t{i}" for i in range(120)])
    shown = topics.status()["rejected"]["not_a_replica_topic"]
    assert len(shown) == 51 and shown[-1] == "... and 70 more"
