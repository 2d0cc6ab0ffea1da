"""Topic mapping, include/exclude rules, and the legs a replicator runs."""

from __future__ import annotations

import re

import pytest

from replicator.settings import load_settings
from replicator.topology import Leg, Rejection, TopicRules, legs_for

BASE = {
    "REPLICATOR_LOCAL_CLUSTER": "dc2",
    "REPLICATOR_CLUSTERS__DC1__BOOTSTRAP_SERVERS": "a:1",
    "REPLICATOR_CLUSTERS__DC2__BOOTSTRAP_SERVERS": "b:1",
    "REPLICATOR_CLUSTERS__DC3__BOOTSTRAP_SERVERS": "c:1",
}


def rules(**env: str) -> TopicRules:
    return TopicRules.from_settings(
        load_settings({**BASE, **{f"REPLICATOR_{k.upper()}": v for k, v in env.items()}})
    )


def test_legs_local_first_then_remotes_with_their_own_groups() -> None:
    legs = legs_for(load_settings(BASE))
    assert legs == [Leg("dc2", "dc2"), Leg("dc2", "dc1"), Leg("dc2", "dc3")]
    assert [leg.name for leg in legs] == ["dc2->dc2", "dc2->dc1", "dc2->dc3"]
    assert legs[0].is_local and not legs[1].is_local
    assert len({leg.group_id("replicator") for leg in legs}) == 3
    assert legs[1].group_id("replicator") == "replicator.dc2.dc1"


def test_replica_topic_maps_to_real_topic() -> None:
    r = rules()
    assert r.target("orders_REPLICA") == "orders"
    assert r.target("orders") is None
    assert r.rejection("orders") is Rejection.NOT_A_REPLICA_TOPIC
    assert r.rejection("_REPLICA") is Rejection.NOT_A_REPLICA_TOPIC


def test_target_that_is_itself_a_replica_topic_is_refused() -> None:
    # orders_REPLICA_REPLICA would write into orders_REPLICA: the replicator's own input.
    assert rules().rejection("orders_REPLICA_REPLICA") is Rejection.TARGET_IS_REPLICA_TOPIC


def test_include_and_exclude_apply_to_the_real_topic_name() -> None:
    r = rules(topics_include="orders|payments.*", topics_exclude="payments-internal")
    assert r.target("orders_REPLICA") == "orders"
    assert r.target("payments-eu_REPLICA") == "payments-eu"
    assert r.rejection("orders-old_REPLICA") is Rejection.NOT_INCLUDED
    assert r.rejection("payments-internal_REPLICA") is Rejection.EXCLUDED


def test_internal_topics_are_excluded_by_default() -> None:
    r = rules()
    assert r.rejection("__consumer_offsets_REPLICA") is Rejection.EXCLUDED
    assert r.rejection("_schemas_REPLICA") is Rejection.EXCLUDED


def test_custom_suffix() -> None:
    r = rules(replica_suffix=".mirror")
    assert r.target("orders.mirror") == "orders"
    assert r.target("orders_REPLICA") is None
    assert re.match(r.subscription_pattern, "ordersXmirror") is None


NAMES = [
    "orders_REPLICA",
    "orders",
    "_REPLICA",
    "orders_REPLICA_REPLICA",
    "payments-eu_REPLICA",
    "payments-internal_REPLICA",
    "orders-old_REPLICA",
    "__consumer_offsets_REPLICA",
    "a_REPLICAb_REPLICA",
    "x_REPLICA.y",
    "connect-offsets_REPLICA",
    "ORDERS_REPLICA",
]


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"topics_include": "orders|payments.*", "topics_exclude": "payments-internal"},
        {"topics_include": "[a-z]+", "topics_exclude": "old.*"},
    ],
)
def test_subscription_pattern_selects_exactly_the_replicated_topics(env: dict[str, str]) -> None:
    r = rules(**env)
    pattern = re.compile(r.subscription_pattern)
    for name in NAMES:
        assert (pattern.match(name) is not None) == (r.target(name) is not None), name
