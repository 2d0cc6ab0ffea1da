"""MirrorMaker 2's topic ACL decisions, binding by binding, each left-out or changed one said."""

from __future__ import annotations

from replicator.kafka.admin import AclBinding
from replicator.topics.acl_sync import Verdict, mm2_decisions


def primary(topic: str) -> str | None:
    """MirrorMaker 2's default policy from ``primary``, replicating ``orders*`` only."""
    return f"primary.{topic}" if topic.startswith("orders") else None


def on_orders(operation: str, allow: bool = True, host: str = "*") -> AclBinding:
    return AclBinding("User:app", "topic", "orders", operation, allow=allow, host=host)


def test_the_five_bindings_mirror_maker_2_was_measured_with() -> None:
    """ALLOW Read copied, ALLOW All turned into Read, DENY Read copied, ALLOW Write and a
    prefixed binding left out: what MirrorMaker 2 created on primary.orders, with reasons."""
    prefixed = AclBinding("User:app", "topic", "ord", "Read", prefixed=True)
    bindings = [
        on_orders("Read"),
        on_orders("All"),
        on_orders("Read", allow=False),
        on_orders("Write"),
        prefixed,
    ]
    decisions = mm2_decisions(bindings, primary, replicated=["orders"])
    targets = [d.target for d in decisions if d.target is not None]
    assert targets == [
        AclBinding("User:app", "topic", "primary.orders", "Read"),
        AclBinding("User:app", "topic", "primary.orders", "Read"),
        AclBinding("User:app", "topic", "primary.orders", "Read", allow=False),
    ]
    verdicts = {(d.source.operation, d.source.allow, d.source.prefixed): d for d in decisions}
    assert verdicts[("All", True, False)].verdict is Verdict.DOWNGRADED
    assert "becomes ALLOW Read" in verdicts[("All", True, False)].reason
    skipped = [d for d in decisions if d.verdict is Verdict.SKIPPED]
    assert [d.source for d in skipped] == [on_orders("Write"), prefixed]
    assert all(d.reason and d.target is None for d in skipped)
    assert "covers orders" in skipped[1].reason


def test_hosts_principals_and_other_operations_are_kept_as_they_are() -> None:
    source = on_orders("DescribeConfigs", host="10.0.0.7")
    (decision,) = mm2_decisions([source], primary, replicated=["orders"])
    assert decision.verdict is Verdict.COPIED
    assert decision.target == AclBinding(
        "User:app", "topic", "primary.orders", "DescribeConfigs", host="10.0.0.7"
    )
    denied = on_orders("Write", allow=False)
    (kept,) = mm2_decisions([denied], primary, replicated=["orders"])
    assert kept.verdict is Verdict.COPIED and kept.target is not None and not kept.target.allow


def test_what_concerns_no_replicated_topic_is_not_decided() -> None:
    bindings = [
        AclBinding("User:app", "topic", "payments", "Read"),  # not replicated
        AclBinding("User:app", "topic", "pay", "Read", prefixed=True),  # covers nothing
        AclBinding("User:app", "group", "orders", "Read"),  # not a topic
    ]
    assert mm2_decisions(bindings, primary, replicated=["orders"]) == []


def test_the_wildcard_topic_is_left_out_with_its_reason() -> None:
    wildcard = AclBinding("User:app", "topic", "*", "Read")
    (decision,) = mm2_decisions([wildcard], lambda topic: f"primary.{topic}", ["orders"])
    assert decision.verdict is Verdict.SKIPPED and decision.target is None
    assert "wildcard" in decision.reason
