"""Topic ACL syncs: MirrorMaker 2's decisions and the movable policy, binding by binding, each
left-out or changed one said; rounds against in-memory clusters and ledger (what a sync owns)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from replicator.kafka.admin import AclBinding
from replicator.topics.acl_sync import (
    AclSync,
    Owned,
    Verdict,
    mm2_decisions,
    movable_decisions,
)


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


@dataclass
class FakeAcls:
    """A cluster's topic ACLs in memory, with every request counted."""

    alias: str
    bindings: set[AclBinding] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)

    async def describe(self) -> list[AclBinding]:
        self.requests.append("describe")
        return list(self.bindings)

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        self.requests.append(f"create {len(bindings)}")
        self.bindings |= set(bindings)

    async def delete(self, bindings: Sequence[AclBinding]) -> None:
        self.requests.append(f"delete {len(bindings)}")
        self.bindings -= set(bindings)


@dataclass
class FakeLedger:
    """Which bindings each sync created on each cluster, as the checkpoints topics keep it."""

    kept: dict[str, set[tuple[str, AclBinding]]] = field(default_factory=dict)

    async def owned(self, cluster: str) -> Owned:
        return frozenset(self.kept.get(cluster, set()))

    async def record(
        self,
        cluster: str,
        source: str,
        created: Sequence[AclBinding],
        forgotten: Sequence[AclBinding],
    ) -> None:
        held = self.kept.setdefault(cluster, set())
        held |= {(source, b) for b in created}
        held -= {(source, b) for b in forgotten}


def sync_of(source: FakeAcls, target: FakeAcls, ledger: FakeLedger | None = None) -> AclSync:
    return AclSync(
        source,
        target,
        ledger or FakeLedger(),
        lambda found: mm2_decisions(found, primary, ["orders"]),
    )


def on_primary(operation: str, allow: bool = True) -> AclBinding:
    return AclBinding("User:app", "topic", "primary.orders", operation, allow=allow)


async def test_a_round_creates_what_the_target_lacks_and_says_each_change_once() -> None:
    source = FakeAcls("dc1", {on_orders("Read"), on_orders("All"), on_orders("Write")})
    operator_made = AclBinding("User:ops", "topic", "primary.orders", "Describe")
    target = FakeAcls("dc2", {operator_made})
    sync = sync_of(source, target)
    first = await sync.round()
    assert first.created == [on_primary("Read")]  # All became Read: one binding
    assert target.bindings == {operator_made, on_primary("Read")}
    assert sorted(d.verdict for d in first.newly_said) == [Verdict.DOWNGRADED, Verdict.SKIPPED]
    assert sync.counts() == {"downgraded": 1, "skipped": 1}
    again = await sync.round()
    assert again.created == [] and again.removed == [] and again.newly_said == []
    # at most one request of each kind per round, whatever the number of bindings (an empty
    # create or delete sends nothing: replicator.kafka.admin)
    assert target.requests == [
        "describe",
        "create 1",
        "delete 0",
        "describe",
        "create 0",
        "delete 0",
    ]


async def test_removed_at_the_source_is_removed_but_never_what_the_sync_did_not_create() -> None:
    source = FakeAcls("dc1", {on_orders("Read"), on_orders("Describe")})
    # already on the target before the sync: wanted, so not created by it
    target = FakeAcls("dc2", {on_primary("Describe")})
    sync = sync_of(source, target)
    await sync.round()
    source.bindings = set()
    gone = await sync.round()
    assert gone.removed == [on_primary("Read")]
    assert target.bindings == {on_primary("Describe")}, "not the sync's to remove"


async def test_a_binding_removed_by_an_operator_is_made_again_only_while_wanted() -> None:
    source = FakeAcls("dc1", {on_orders("Read")})
    target = FakeAcls("dc2")
    sync = sync_of(source, target)
    await sync.round()
    target.bindings.clear()  # an operator removed it
    back = await sync.round()
    assert back.created == [on_primary("Read")]
    target.bindings.clear()
    source.bindings.clear()
    assert (await sync.round()).removed == [] and sync.owned == 0


def movable(
    source: FakeAcls, target: FakeAcls, ledger: FakeLedger, moving: tuple[str, ...]
) -> AclSync:
    return AclSync(
        source, target, ledger, lambda found: movable_decisions(found, moving, ["heartbeats"])
    )


def test_movable_copies_literal_and_prefixed_bindings_as_they_are_never_onto_own_topics() -> None:
    app_read = AclBinding("User:app", "topic", "orders", "Read", host="10.0.0.7")
    app_write = AclBinding("User:app", "topic", "orders_REPLICA", "Write")
    denied = AclBinding("User:intern", "topic", "orders", "Read", allow=False)
    prefixed = AclBinding("User:app", "topic", "ord", "Describe", prefixed=True)
    too_wide = AclBinding("User:app", "topic", "", "Read", prefixed=True)  # every topic
    wildcard = AclBinding("User:app", "topic", "*", "Read")
    elsewhere = AclBinding("User:app", "topic", "payments", "Read")  # moves with no topic
    own = AclBinding("User:replicator", "topic", "heartbeats", "Write")
    decisions = movable_decisions(
        [app_read, app_write, denied, prefixed, too_wide, wildcard, elsewhere, own],
        ["orders", "orders_REPLICA", "heartbeats"],
        ["heartbeats"],
    )
    copied = [d.target for d in decisions if d.verdict is Verdict.COPIED]
    assert copied == [app_read, app_write, denied, prefixed]  # the same, hosts kept
    skipped = {d.source: d.reason for d in decisions if d.verdict is Verdict.SKIPPED}
    assert set(skipped) == {too_wide, wildcard}
    assert "own topic heartbeats" in skipped[too_wide]
    assert "wildcard" in skipped[wildcard]


async def test_two_syncs_facing_each_other_never_bring_back_what_an_operator_removed() -> None:
    """Identity names both ways: each side's copies are in the ledger, so neither copies the
    other's copies back, and a removal on either side is followed on the other."""
    ledger = FakeLedger()
    mine = AclBinding("User:app", "topic", "orders", "Read")
    theirs = AclBinding("User:bi", "topic", "orders", "Read")
    dc1, dc2 = FakeAcls("dc1", {mine}), FakeAcls("dc2", {theirs})
    there = movable(dc1, dc2, ledger, ("orders",))
    back = movable(dc2, dc1, ledger, ("orders",))
    for _ in range(2):
        await there.round()
        await back.round()
    assert dc1.bindings == dc2.bindings == {mine, theirs}
    assert (there.owned, back.owned) == (1, 1)
    dc1.bindings.discard(mine)  # the operator removes the original in dc1
    for _ in range(2):
        await back.round()  # dc2's copy of it is not dc2's own: never copied back
        await there.round()
    assert dc1.bindings == dc2.bindings == {theirs}
    assert ledger.kept == {"dc1": {("dc2", theirs)}, "dc2": set()}


async def test_replicas_of_one_datacenter_share_what_their_sync_created() -> None:
    """Two replicas run the same sync: what one created, the other removes when it is no longer
    wanted; neither takes the other's creations for an operator's."""
    ledger = FakeLedger()
    dc1, dc2 = FakeAcls("dc1", {on_orders("Read")}), FakeAcls("dc2")
    first, second = sync_of(dc1, dc2, ledger), sync_of(dc1, dc2, ledger)
    assert (await first.round()).created == [on_primary("Read")]
    assert (await second.round()).created == []
    assert second.owned == 1
    dc1.bindings.clear()
    assert (await second.round()).removed == [on_primary("Read")]
    assert dc2.bindings == set() and ledger.kept["dc2"] == set()


async def test_a_refused_round_owns_nothing_and_the_next_makes_it_good() -> None:
    ledger = FakeLedger()
    dc1, dc2 = FakeAcls("dc1", {on_orders("Read")}), RefusingAcls("dc2")
    sync = sync_of(dc1, dc2, ledger)
    with pytest.raises(PermissionError):
        await sync.round()
    assert ledger.kept["dc2"] == set(), "refused: nothing made, nothing owned"
    dc2.bindings.add(on_primary("Read"))  # an operator grants it by hand meanwhile
    assert (await sync.round()).created == [] and sync.owned == 0
    dc2.bindings.clear()
    dc2.refusing = False
    assert (await sync.round()).created == [on_primary("Read")]
    assert dc2.bindings == {on_primary("Read")} and sync.owned == 1


@dataclass
class RefusingAcls(FakeAcls):
    refusing: bool = True

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        if self.refusing and bindings:
            raise PermissionError("Alter on cluster denied")
        await super().create(bindings)


def test_a_ledger_key_names_its_sync_and_binding_and_no_other_record_is_taken_for_one() -> None:
    from replicator.failover.checkpoints import key_of
    from replicator.model.handover import handover_key
    from replicator.topics.acl_ledger import ledger_entry, ledger_key

    binding = AclBinding("User:a b", "topic", "ord", "Read", prefixed=True, allow=False, host="h")
    assert ledger_entry(ledger_key("dc1", "dc2", binding)) == ("dc1", "dc2", binding)
    assert ledger_entry(key_of("g", "dc1", "dc2", "orders", 0)) is None
    assert ledger_entry(handover_key("dc1", "dc2", "orders", 0)) is None
    assert ledger_entry(b"not json") is None


async def test_a_replica_forgetting_while_another_creates_leaves_no_binding_unowned() -> None:
    """Replica one records X and is about to create it; the source binding goes; replica two
    sees X owned, absent and unwanted, and forgets it; then one's creation lands. One owns it
    again after creating, so the next round removes it."""
    ledger = FakeLedger()
    dc1, dc2 = FakeAcls("dc1", {on_orders("Read")}), FakeAcls("dc2")
    one, two = sync_of(dc1, dc2, ledger), sync_of(dc1, dc2, ledger)
    creating = dc2.create

    async def interleaved(bindings: Sequence[AclBinding]) -> None:
        if bindings:
            dc1.bindings.clear()
            dc2.create = creating  # type: ignore[method-assign]
            await two.round()  # forgets what one recorded
        await creating(bindings)

    dc2.create = interleaved  # type: ignore[method-assign]
    await one.round()
    assert dc2.bindings == {on_primary("Read")}
    assert ledger.kept["dc2"] == {("dc1", on_primary("Read"))}, "owned again once created"
    assert (await two.round()).removed == [on_primary("Read")]
    assert dc2.bindings == set()


async def test_two_sources_wanting_one_binding_on_a_target_share_it() -> None:
    """dc1 and dc2 both hold X (identity names, movable): the sync that made it on dc3 and the
    one that found it there both own it, so X stays while either source still has it."""
    ledger = FakeLedger()
    x = AclBinding("User:app", "topic", "orders", "Read")
    dc1, dc2, dc3 = FakeAcls("dc1", {x}), FakeAcls("dc2", {x}), FakeAcls("dc3")
    first, second = movable(dc1, dc3, ledger, ("orders",)), movable(dc2, dc3, ledger, ("orders",))
    assert (await first.round()).created == [x]
    assert (await second.round()).created == []
    assert ledger.kept["dc3"] == {("dc1", x), ("dc2", x)}
    dc1.bindings.clear()
    assert (await first.round()).removed == [], "dc2's sync still wants it"
    assert dc3.bindings == {x} and ledger.kept["dc3"] == {("dc2", x)}
    dc2.bindings.clear()
    assert (await second.round()).removed == [x]
    assert dc3.bindings == set()
