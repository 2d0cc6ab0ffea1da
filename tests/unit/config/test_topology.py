"""Topic mapping, include/exclude rules, and the legs a replicator runs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.config.loading import load_settings
from replicator.config.topology import (
    FeedPlan,
    Leg,
    Rejection,
    TopicRules,
    colliding_flow_names,
    feeds_for,
    legs_for,
)
from replicator.config.values import topic_regex

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
    assert legs[0].source == legs[0].destination and legs[1].source != legs[1].destination
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
    selection = r.select(["orders.mirror", "ordersXmirror"])
    assert re.match(selection.subscription_pattern, "ordersXmirror") is None
    assert re.match(selection.subscription_pattern, "orders.mirror") is not None


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
    ("include", "exclude", "replicated"),
    [
        ("^orders$", "", ["orders_REPLICA"]),
        ("^(orders|payments-eu)$", "", ["orders_REPLICA", "payments-eu_REPLICA"]),
        ("orders,payments-eu", "", ["orders_REPLICA", "payments-eu_REPLICA"]),
        (" 'orders , payments.*' ", "payments-internal", ["orders_REPLICA", "payments-eu_REPLICA"]),
        ("(?i)ORDERS", "", ["ORDERS_REPLICA", "orders_REPLICA"]),
        ("orders.{0,4}", "orders-old", ["orders_REPLICA"]),
        ("[a-z]{1,6}", "", ["orders_REPLICA"]),
        ("x,(?!)", "", []),
    ],
)
def test_rules_as_users_write_them(include: str, exclude: str, replicated: list[str]) -> None:
    r = rules(topics_include=include, topics_exclude=exclude or "__.*")
    selection = r.select(NAMES)
    assert list(selection.replicated) == replicated
    pattern = re.compile(selection.subscription_pattern)
    assert sorted(name for name in NAMES if pattern.match(name)) == replicated


def test_a_comma_inside_a_class_or_a_quantifier_is_the_regex_s_own() -> None:
    assert topic_regex("a{1,3},[,x]b, c") == "a{1,3}|[,x]b|c"
    assert topic_regex(r"a\,b") == r"a\,b"
    assert topic_regex("orders,") == "orders"


def test_selection_says_why_each_topic_is_rejected() -> None:
    selection = rules(
        topics_include="orders|payments.*", topics_exclude="payments-internal"
    ).select(NAMES)
    assert selection.replicated == ("orders_REPLICA", "payments-eu_REPLICA")
    reasons = selection.by_reason()
    assert reasons["excluded"] == ["payments-internal_REPLICA"]
    assert "orders-old_REPLICA" in reasons["not_included"]
    assert reasons["target_is_replica_topic"] == ["orders_REPLICA_REPLICA"]
    assert "orders" in reasons["not_a_replica_topic"]
    assert "orders" not in selection.replica_topics_rejected()


# Topic names near the rules' edges: the suffix inside, twice, cased differently, dots, dashes.
topic_names = st.lists(
    st.sampled_from(["orders", "pay", "a", "x.y", "A-1", "_REPLICA", "_replica", "__c", ""]),
    min_size=1,
    max_size=4,
).map("".join)

# Regexes as users write them: literals, anchors, alternation, groups, classes, flags, commas.
atoms = st.sampled_from(
    ["orders", "pay", "a", r"x\.y", "A-1", ".*", ".+", "[a-z]+", "[A-Z0-9-]*", "_REPLICA", "__.*"]
)
regexes = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map("|".join),
        st.tuples(inner, inner).map(",".join),
        inner.map(lambda r: f"({r})"),
        inner.map(lambda r: f"^{r}$"),
        inner.map(lambda r: f"(?:{r})?"),
    ),
    max_leaves=4,
).flatmap(lambda r: st.sampled_from([r, f"(?i){r}", f"^{r}", f"{r}$"]))


@settings(max_examples=300, deadline=None)
@given(regexes, regexes, st.lists(topic_names, max_size=12))
def test_what_is_subscribed_is_exactly_what_the_rule_accepts(
    include: str, exclude: str, names: list[str]
) -> None:
    r = rules(topics_include=include, topics_exclude=exclude)
    listing = [n + suffix for n in names for suffix in ("", "_REPLICA")]
    selection = r.select(listing)
    pattern = re.compile(selection.subscription_pattern)
    for name in listing:
        accepted = r.rejection(name) is None
        assert (pattern.match(name) is not None) == accepted, name
        assert (name in selection.replicated) == accepted
        assert (name in selection.rejected) != accepted
        if accepted:  # the rule is the user's regex over the whole real topic name
            real = name.removesuffix("_REPLICA")
            assert re.fullmatch(topic_regex(include), real) is not None


def flow_feeds(**flow: str) -> list[FeedPlan]:
    env = {**BASE, "REPLICATOR_REPLICA_MODE": "false"}
    env |= {f"REPLICATOR_FLOWS__F__{key.upper()}": value for key, value in flow.items()}
    return feeds_for(load_settings(env))


def test_each_flow_is_a_feed_with_one_leg_and_its_own_groups() -> None:
    (feed,) = flow_feeds(source="dc1", target="dc2", group_id="mirror")
    assert feed.source == "dc1" and feed.is_flow and feed.loop_home
    assert feed.legs == (Leg("dc1", "dc2", "f"),)
    assert feed.legs[0].name == "f:dc1->dc2"
    assert feed.group == "mirror"
    assert feed.legs[0].group_id(feed.leg_group_prefix) == "mirror.dc1.dc2"
    (default,) = flow_feeds(source="dc1", target="dc2")
    assert default.group == "replicator.f"


def test_the_replica_mode_and_flows_run_side_by_side() -> None:
    env = {**BASE, "REPLICATOR_FLOWS__B__SOURCE": "dc1", "REPLICATOR_FLOWS__B__TARGET": "dc3"}
    replica, flow = feeds_for(load_settings(env))
    assert not replica.is_flow and replica.group == "replicator.dc2"
    assert [leg.name for leg in replica.legs] == ["dc2->dc2", "dc2->dc1", "dc2->dc3"]
    assert flow.name == "b" and flow.rules.target("orders") == "orders"


@pytest.mark.parametrize(
    ("naming", "extra", "topic", "target"),
    [
        ("identity", {}, "orders", "orders"),
        ("prefix", {"prefix": "dc1_"}, "test", "dc1_test"),
        ("source-alias", {}, "orders", "dc1.orders"),
        ("source-alias", {"separator": "__"}, "orders", "dc1__orders"),
    ],
)
def test_naming_policies(naming: str, extra: dict[str, str], topic: str, target: str) -> None:
    (feed,) = flow_feeds(source="dc1", target="dc2", naming=naming, **extra)
    assert feed.rules.target(topic) == target


def test_flows_select_by_the_whole_source_name_and_leave_internal_topics() -> None:
    (feed,) = flow_feeds(source="dc1", target="dc2", topics_include="orders.*,pay")
    selection = feed.rules.select(["orders", "orders-eu", "pay", "payments", "__consumer_offsets"])
    assert selection.replicated == ("orders", "orders-eu", "pay")
    assert selection.rejected == {
        "payments": Rejection.NOT_INCLUDED,
        "__consumer_offsets": Rejection.NOT_INCLUDED,
    }
    (everything,) = flow_feeds(source="dc1", target="dc2")
    assert everything.rules.rejection("__consumer_offsets") is Rejection.EXCLUDED
    assert everything.rules.rejection("_schemas") is Rejection.EXCLUDED


def test_mm2_cycle_rule_never_sends_a_topic_back_through_a_cluster_it_came_from() -> None:
    (feed,) = flow_feeds(source="dc1", target="dc2", naming="source-alias")
    rules = feed.rules
    assert rules.rejection("dc2.orders") is Rejection.REMOTE_TOPIC_OF_TARGET
    assert rules.rejection("dc3.dc2.orders") is Rejection.REMOTE_TOPIC_OF_TARGET
    assert rules.target("dc3.orders") == "dc1.dc3.orders"  # a chain travels on, as in MM2
    assert rules.target("toa.evehicles") == "dc1.toa.evehicles"


def test_mm2_names_use_the_clusters_topic_alias() -> None:
    env = {
        **BASE,
        "REPLICATOR_CLUSTERS__DC1__TOPIC_ALIAS": "A",
        "REPLICATOR_CLUSTERS__DC2__TOPIC_ALIAS": "B",
        "REPLICATOR_FLOWS__F__SOURCE": "dc1",
        "REPLICATOR_FLOWS__F__TARGET": "dc2",
        "REPLICATOR_FLOWS__F__NAMING": "source-alias",
    }
    flow = feeds_for(load_settings(env))[-1]
    assert flow.rules.target("orders") == "A.orders"
    assert flow.rules.rejection("B.orders") is Rejection.REMOTE_TOPIC_OF_TARGET
    assert flow.rules.describe()["topic_names"] == "A.<topic>"


def test_a_prefix_flow_never_renames_its_own_output_again() -> None:
    (feed,) = flow_feeds(source="dc1", target="dc1", naming="prefix", prefix="copy_")
    assert feed.rules.target("orders") == "copy_orders"
    assert feed.rules.rejection("copy_orders") is Rejection.FLOW_OUTPUT


def flows(**flows: dict[str, str]) -> list[str]:
    env = {**BASE, "REPLICATOR_REPLICA_MODE": "false"}
    for name, options in flows.items():
        prefix = f"REPLICATOR_FLOWS__{name.upper()}__"
        env |= {prefix + key.upper(): value for key, value in options.items()}
    return colliding_flow_names(load_settings(env))


def test_two_flows_whose_names_kafka_takes_for_each_other_are_named() -> None:
    """Kafka refuses dc1_orders beside dc1.orders ('.' and '_' collide in its topic names)."""
    into_dc3 = {"source": "dc1", "target": "dc3"}
    (warning,) = flows(
        mm2={**into_dc3, "naming": "source-alias"},
        prefixed={**into_dc3, "naming": "prefix", "prefix": "dc1_"},
    )
    assert warning.startswith("flows mm2 and prefixed both write into dc3, as dc1.<topic> and ")
    assert "dc1_<topic>" in warning and "another prefix or separator" in warning
    # A separator of MM2's names alike too; a prefix of another cluster's alias is not.
    underscored = {**into_dc3, "naming": "source-alias", "separator": "_"}
    assert len(flows(a={**into_dc3, "naming": "prefix", "prefix": "dc1."}, b=underscored)) == 1
    other_alias = {**into_dc3, "naming": "prefix", "prefix": "dc2_"}
    assert flows(a={**into_dc3, "naming": "source-alias"}, b=other_alias) == []
    assert flows(a={**into_dc3, "naming": "source-alias"}, b=into_dc3) == []  # identity


def test_flows_into_other_clusters_or_into_the_same_names_are_not_collisions() -> None:
    assert (
        flows(
            mm2={"source": "dc1", "target": "dc3", "naming": "source-alias"},
            prefixed={"source": "dc1", "target": "dc2", "naming": "prefix", "prefix": "dc1_"},
        )
        == []
    )
    # Two sources aggregated into one cluster under the same names: Kafka accepts that.
    assert flows(a={"source": "dc1", "target": "dc3"}, b={"source": "dc2", "target": "dc3"}) == []
    prefixed = {"target": "dc3", "naming": "prefix", "prefix": "dc1_"}
    assert flows(a={**prefixed, "source": "dc1"}, b={**prefixed, "source": "dc2"}) == []


def test_a_target_name_longer_than_kafka_allows_is_rejected_with_its_reason() -> None:
    (feed,) = flow_feeds(source="dc1", target="dc2", naming="prefix", prefix="p" * 10)
    assert feed.rules.rejection("t" * 240) is Rejection.TARGET_NAME_TOO_LONG
    assert feed.rules.target("t" * 239) == "p" * 10 + "t" * 239


def test_a_flow_always_copies_its_heartbeats_as_mm2_does() -> None:
    (feed,) = flow_feeds(source="dc1", target="dc2", topics_include="orders")
    assert feed.rules.target("heartbeats") == "heartbeats"
    assert feed.rules.rejection("payments") is Rejection.NOT_INCLUDED
    (mm2,) = flow_feeds(source="dc1", target="dc2", naming="source-alias", topics_include="x")
    assert mm2.rules.target("dc3.heartbeats") == "dc1.dc3.heartbeats"  # the topology shows
    assert mm2.rules.rejection("dc2.heartbeats") is Rejection.REMOTE_TOPIC_OF_TARGET
    (quiet,) = flow_feeds(source="dc1", target="dc2", topics_include="orders", heartbeats="false")
    assert quiet.rules.rejection("heartbeats") is Rejection.NOT_INCLUDED


def test_under_mm2_placement_heartbeats_keep_mm2_names_under_every_policy() -> None:
    """MirrorMaker 2's IdentityReplicationPolicy still names remote heartbeats <source>.heartbeats
    (MirrorClient finds upstream clusters by them); copies from further upstream travel on,
    never back to a cluster they came through."""
    env = {
        **BASE,
        "REPLICATOR_REPLICA_MODE": "false",
        "REPLICATOR_HEARTBEAT_PLACEMENT": "mirrormaker2",
    }
    env |= {"REPLICATOR_FLOWS__F__SOURCE": "dc1", "REPLICATOR_FLOWS__F__TARGET": "dc2"}
    (feed,) = feeds_for(load_settings(env))
    rules = feed.rules
    assert rules.target("orders") == "orders"  # application topics: the flow's own naming
    assert rules.target("heartbeats") == "dc1.heartbeats"
    assert rules.target("dc3.heartbeats") == "dc1.dc3.heartbeats"
    assert rules.rejection("dc2.heartbeats") is Rejection.REMOTE_TOPIC_OF_TARGET
    assert rules.source("dc1.heartbeats") == "heartbeats"
    assert rules.source("orders") == "orders"


def test_a_flow_knows_what_names_its_target_in_a_renamed_copy() -> None:
    env = {
        **BASE,
        "REPLICATOR_CLUSTERS__DC2__TOPIC_ALIAS": "East",
        "REPLICATOR_FLOWS__OUT__SOURCE": "dc1",
        "REPLICATOR_FLOWS__OUT__TARGET": "dc2",
        "REPLICATOR_FLOWS__BACK__SOURCE": "dc2",
        "REPLICATOR_FLOWS__BACK__TARGET": "dc1",
        "REPLICATOR_FLOWS__BACK__NAMING": "prefix",
        "REPLICATOR_FLOWS__BACK__PREFIX": "from_dc2_",
    }
    flows = {plan.name: plan for plan in feeds_for(load_settings(env)) if plan.is_flow}
    assert flows["out"].home_marks == ("dc2", "east", "from_dc2_")
    assert flows["back"].home_marks == ("dc1",)


def test_the_replicators_own_topics_in_use_are_never_replicated_into() -> None:
    # Heartbeats (a flow emits them), checkpoints (groups are synced), dead letters (the policy):
    # no application record is written into them, whatever the include rule says.
    env = {
        **BASE,
        "REPLICATOR_FLOWS__B__SOURCE": "dc2",
        "REPLICATOR_FLOWS__B__TARGET": "dc3",
        "REPLICATOR_SYNC_GROUPS": "app-.*",
        "REPLICATOR_RECORD_TOO_LARGE_POLICY": "dead-letter",
    }
    replica, flow = feeds_for(load_settings(env))
    for topic in ("heartbeats", "replicator-checkpoints", "replicator.dead-letter"):
        assert replica.rules.rejection(topic + "_REPLICA") is Rejection.INTERNAL, topic
    assert replica.rules.target("orders_REPLICA") == "orders"
    # A flow copies its heartbeats (they prove the path), never checkpoints or dead letters.
    assert flow.rules.target("heartbeats") == "heartbeats"
    assert flow.rules.rejection("replicator-checkpoints") is Rejection.INTERNAL
    assert flow.rules.rejection("replicator.dead-letter") is Rejection.INTERNAL


def test_own_topics_not_in_use_leave_application_topics_of_that_name_alone() -> None:
    r = rules()  # no flow (no heartbeats), no group sync, records too large halt
    assert r.target("heartbeats_REPLICA") == "heartbeats"
    assert r.target("replicator.dead-letter_REPLICA") == "replicator.dead-letter"
