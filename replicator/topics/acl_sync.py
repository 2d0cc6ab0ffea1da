"""Which topic ACLs of a source a sync copies to its target, and how: each binding decided.

MirrorMaker 2 (``MirrorSourceConnector.syncTopicAcls``, ``sync.topic.acls.enabled=true``) copies
the literal topic bindings of the topics it replicates onto their remote topics, renamed as the
topics are: ALLOW ALL becomes ALLOW READ (only the replicator writes a remote topic), ALLOW WRITE
is not copied, DENY is copied as it is, the host kept; prefixed bindings are not read at all. It
says nothing of what it left out or changed (KAFKA-15172). :func:`mm2_decisions` decides the
same, binding by binding, and gives each left-out or changed binding its reason, so that the
sync can count and say it once. Two choices differ from MirrorMaker 2 and say so: a literal
binding on the wildcard topic ``*`` is left out (renamed it would be a topic no one has; kept
by an identity policy it would grant every topic of the target), and a prefixed binding is
said when it covers a replicated topic.

:func:`movable_decisions` is the policy that makes an application movable between datacenters
(``movable``): every binding on a topic whose records move (the _REPLICA mode: each replicated
``<topic>_REPLICA`` and its ``<topic>``; an identity flow: each replicated topic), literal or
prefixed, copied as it is, hosts kept; never one on, or covering, the replicator's own topics.

:class:`AclSync` applies the decisions to a target, round by round, through an
:class:`AclAdmin` per cluster and an :class:`AclLedger` (no I/O of its own). The ledger says
which bindings each sync created on each cluster: a sync removes only its own, and never copies
a binding another sync created on its source, so two syncs facing each other (identity names
both ways) never bring back what an operator removed. Kafka's ledger is each target's
checkpoints topic (:mod:`replicator.topics.acl_ledger`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from replicator.kafka.admin import AclBinding


class Verdict(StrEnum):
    """What the sync does with one source binding."""

    COPIED = "copied"
    DOWNGRADED = "downgraded"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class AclDecision:
    """One source binding, what the target gets for it (``None``: nothing) and why."""

    source: AclBinding
    verdict: Verdict
    target: AclBinding | None = None
    reason: str = ""


def mm2_decisions(
    bindings: Iterable[AclBinding],
    remote_topic: Callable[[str], str | None],
    replicated: Iterable[str] = (),
) -> list[AclDecision]:
    """MirrorMaker 2's decision for every topic binding of the source that concerns a
    replicated topic: ``remote_topic`` names a source topic's remote topic (``None``: not
    replicated by this flow); ``replicated`` lists the source topics replicated, against which
    prefixed bindings are matched. Bindings on topics not replicated, and prefixed ones that
    cover none, concern nothing here and are left out of the answer."""
    topics = sorted(set(replicated))
    decisions = []
    for binding in bindings:
        if binding.resource != "topic":
            continue
        if binding.prefixed:
            covered = [t for t in topics if t.startswith(binding.name)]
            if covered:
                decisions.append(
                    AclDecision(
                        binding,
                        Verdict.SKIPPED,
                        reason=f"a prefixed binding (covers {covered[0]}"
                        f"{f' and {len(covered) - 1} more' if len(covered) > 1 else ''}): "
                        "MirrorMaker 2 copies literal topic bindings only",
                    )
                )
            continue
        if binding.name == "*":
            if remote_topic("*") is not None:  # what MirrorMaker 2 would copy
                decisions.append(
                    AclDecision(
                        binding,
                        Verdict.SKIPPED,
                        reason=_WILDCARD,
                    )
                )
            continue
        target_topic = remote_topic(binding.name)
        if target_topic is None:
            continue
        decisions.append(_decide(binding, target_topic))
    return decisions


def _decide(binding: AclBinding, target_topic: str) -> AclDecision:
    renamed = replace(binding, name=target_topic)
    if binding.allow and binding.operation == "Write":
        return AclDecision(
            binding,
            Verdict.SKIPPED,
            reason="ALLOW Write: only the replicator writes a remote topic",
        )
    if binding.allow and binding.operation == "All":
        return AclDecision(
            binding,
            Verdict.DOWNGRADED,
            replace(renamed, operation="Read"),
            "ALLOW All becomes ALLOW Read: only the replicator writes a remote topic",
        )
    return AclDecision(binding, Verdict.COPIED, renamed)


def movable_decisions(
    bindings: Iterable[AclBinding], moving: Collection[str], internal: Collection[str]
) -> list[AclDecision]:
    """The ``movable`` policy's decision for every topic binding of the source that concerns a
    topic of ``moving`` (the names whose bindings move, kept as they are): a literal binding on
    one of them copied, a prefixed binding covering one copied; a prefixed binding that also
    covers one of the replicator's ``internal`` topics, and the wildcard topic ``*``, left out
    with their reason. Bindings that concern no moving topic are left out of the answer."""
    names = sorted(set(moving) - set(internal))
    decisions = []
    for binding in bindings:
        if binding.resource != "topic":
            continue
        if not binding.prefixed:
            if binding.name == "*" and names:
                decisions.append(AclDecision(binding, Verdict.SKIPPED, reason=_WILDCARD))
            elif binding.name in names:
                decisions.append(AclDecision(binding, Verdict.COPIED, binding))
            continue
        if not any(name.startswith(binding.name) for name in names):
            continue
        own = sorted(t for t in internal if t.startswith(binding.name))
        if own:
            reason = f"a prefixed binding that also covers the replicator's own topic {own[0]}"
            decisions.append(AclDecision(binding, Verdict.SKIPPED, reason=reason))
        else:
            decisions.append(AclDecision(binding, Verdict.COPIED, binding))
    return decisions


_WILDCARD = "the wildcard topic '*': every topic, not a replicated one"


class AclAdmin(Protocol):
    """What an ACL sync needs of one cluster (on Kafka: :mod:`replicator.kafka.admin`'s ACL
    requests; an in-memory fake in the unit tests)."""

    alias: str

    async def describe(self) -> list[AclBinding]:
        """Every topic binding of the cluster."""
        ...

    async def create(self, bindings: Sequence[AclBinding]) -> None: ...

    async def delete(self, bindings: Sequence[AclBinding]) -> None: ...


Owned = frozenset[tuple[str, AclBinding]]
"""Bindings of one cluster that a sync created there, each with that sync's source cluster."""


class AclLedger(Protocol):
    """Which bindings the syncs created on each cluster, shared by every replicator (on Kafka:
    each cluster's checkpoints topic; in memory in the unit tests)."""

    async def owned(self, cluster: str) -> Owned:
        """What the syncs into ``cluster`` created there, as the ledger holds it now."""
        ...

    async def record(
        self,
        cluster: str,
        source: str,
        created: Sequence[AclBinding],
        forgotten: Sequence[AclBinding],
    ) -> None:
        """The sync from ``source`` into ``cluster`` owns ``created`` from now on, and no
        longer ``forgotten``."""
        ...


@dataclass
class AclRound:
    """What one round of a sync did: bindings created and removed on the target, and the
    decisions that left a binding out or changed it, first seen in this round."""

    created: list[AclBinding] = field(default_factory=list)
    removed: list[AclBinding] = field(default_factory=list)
    newly_said: list[AclDecision] = field(default_factory=list)


class AclSync:
    """One leg's topic ACLs kept on its target: each round reads the source's bindings (but
    those a sync created there), decides what the target must hold (``decide``), creates what
    it lacks and removes what this sync created that is no longer wanted. A binding the sync
    did not create is never removed, even one it would have created; what it creates is in the
    ledger before it is created, and leaves the ledger once it is removed. Each left-out or
    changed binding is reported once (:attr:`said`), while it stays so."""

    def __init__(
        self,
        source: AclAdmin,
        target: AclAdmin,
        ledger: AclLedger,
        decide: Callable[[list[AclBinding]], list[AclDecision]],
    ) -> None:
        self._source, self._target, self._ledger, self._decide = source, target, ledger, decide
        self.said: dict[AclBinding, AclDecision] = {}  # source binding -> its decision
        self.copied = 0  # bindings the target holds for the source, as the last round decided
        self.owned = 0  # of which this sync created, as the last round left them
        self.rounds = 0

    @property
    def name(self) -> str:
        return f"{self._source.alias}->{self._target.alias}"

    async def round(self) -> AclRound:
        source, target = self._source.alias, self._target.alias
        copies = {binding for _, binding in await self._ledger.owned(source)}
        held = await self._ledger.owned(target)
        mine = {b for into, b in held if into == source}
        others = {b for into, b in held if into != source}  # another source's sync owns them
        decisions = self._decide([b for b in await self._source.describe() if b not in copies])
        wanted = {d.target for d in decisions if d.target is not None}
        done = AclRound()
        # Nothing to hold and nothing held: the target is not asked (it may keep no ACLs).
        present = set(await self._target.describe()) if wanted or mine else set()
        create = wanted - present
        # Wanted too by another source's sync that made it: owned by both, so that neither
        # removes what the other still wants.
        shared = (wanted & present & others) - mine
        dropped = mine - wanted  # no longer wanted (or removed by someone else meanwhile)
        done.created = sorted(create, key=_order)
        done.removed = sorted((dropped & present) - others, key=_order)
        # Owned before it is asked for: a round that fails after this finds it absent and
        # creates it again. Owned again once created: a replica of this sync that forgot it
        # meanwhile (it saw it absent and no longer wanted) does not leave it unowned.
        await self._ledger.record(target, source, sorted(create | shared, key=_order), [])
        try:
            await self._target.create(done.created)
        except Exception:
            await self._forget_uncreated(create)
            raise
        await self._ledger.record(target, source, done.created, [])
        await self._target.delete(done.removed)
        await self._ledger.record(target, source, [], sorted(dropped, key=_order))
        changed = {d.source: d for d in decisions if d.verdict is not Verdict.COPIED}
        done.newly_said = [d for b, d in changed.items() if self.said.get(b) != d]
        self.said = changed
        self.copied = len(wanted)
        self.owned = len((mine | create | shared) - dropped)
        self.rounds += 1
        return done

    async def _forget_uncreated(self, asked: set[AclBinding]) -> None:
        """After a refused creation: what the target does not hold is not this sync's (so that
        a binding an operator grants by hand meanwhile is never taken for one it made). Best
        effort: the round's own failure is what is reported."""
        try:
            present = set(await self._target.describe())
            absent = sorted(asked - present, key=_order)
            await self._ledger.record(self._target.alias, self._source.alias, [], absent)
        except Exception:  # the next round finds them absent and asks again
            return

    def counts(self) -> dict[str, int]:
        """Source bindings left out and changed, as the last round decided (for ``/status``
        and the metrics)."""
        found = {verdict.value: 0 for verdict in (Verdict.DOWNGRADED, Verdict.SKIPPED)}
        for decision in self.said.values():
            found[decision.verdict.value] += 1
        return found


def _order(binding: AclBinding) -> tuple[str, ...]:
    return (binding.name, binding.principal, binding.operation, binding.host, str(binding.allow))
