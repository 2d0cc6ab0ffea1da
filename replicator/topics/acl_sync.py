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
said when it covers a replicated topic. :class:`AclSync` applies the decisions to a target,
round by round, through an :class:`AclAdmin` (no I/O of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
                        reason="the wildcard topic '*': every topic, not a replicated one",
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


class AclAdmin(Protocol):
    """What an ACL sync needs of one cluster (on Kafka: :mod:`replicator.kafka.admin`'s ACL
    requests; an in-memory fake in the unit tests)."""

    alias: str

    async def describe(self) -> list[AclBinding]:
        """Every topic binding of the cluster."""
        ...

    async def create(self, bindings: Sequence[AclBinding]) -> None: ...

    async def delete(self, bindings: Sequence[AclBinding]) -> None: ...


@dataclass
class AclRound:
    """What one round of a sync did: bindings created and removed on the target, and the
    decisions that left a binding out or changed it, first seen in this round."""

    created: list[AclBinding] = field(default_factory=list)
    removed: list[AclBinding] = field(default_factory=list)
    newly_said: list[AclDecision] = field(default_factory=list)


class AclSync:
    """One flow's topic ACLs kept on its target: each round reads the source's bindings,
    decides what the target must hold (``decide``), creates what it lacks and removes what
    this sync created that is no longer wanted. A binding the sync did not create is never
    removed, even one it would have created. Each left-out or changed binding is reported
    once (:attr:`said`), while it stays so."""

    def __init__(
        self,
        source: AclAdmin,
        target: AclAdmin,
        decide: Callable[[list[AclBinding]], list[AclDecision]],
    ) -> None:
        self._source, self._target, self._decide = source, target, decide
        self.created: set[AclBinding] = set()  # on the target, by this sync, still wanted
        self.said: dict[AclBinding, AclDecision] = {}  # source binding -> its decision
        self.rounds = 0

    async def round(self) -> AclRound:
        decisions = self._decide(await self._source.describe())
        wanted = {d.target for d in decisions if d.target is not None}
        present = set(await self._target.describe())
        done = AclRound()
        done.created = sorted(wanted - present, key=_order)
        done.removed = sorted((self.created - wanted) & present, key=_order)
        await self._target.create(done.created)
        await self._target.delete(done.removed)
        # removed by someone else meanwhile: no longer this sync's to remove
        self.created = ((self.created & present) | set(done.created)) - set(done.removed)
        changed = {d.source: d for d in decisions if d.verdict is not Verdict.COPIED}
        done.newly_said = [d for b, d in changed.items() if self.said.get(b) != d]
        self.said = changed
        self.rounds += 1
        return done

    def counts(self) -> dict[str, int]:
        """Source bindings left out and changed, as the last round decided (for ``/status``
        and the metrics)."""
        found = {verdict.value: 0 for verdict in (Verdict.DOWNGRADED, Verdict.SKIPPED)}
        for decision in self.said.values():
            found[decision.verdict.value] += 1
        return found


def _order(binding: AclBinding) -> tuple[str, ...]:
    return (binding.name, binding.principal, binding.operation, binding.host, str(binding.allow))
