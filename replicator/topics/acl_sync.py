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
said when it covers a replicated topic. Pure logic, no I/O: the sync's loop reads and writes
through :mod:`replicator.kafka.admin`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

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
