"""Topic mapping, include/exclude rules, and the legs a replicator runs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.settings import load_settings, topic_regex
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
