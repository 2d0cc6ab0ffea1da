"""The service's topic ACL syncs: one :class:`~replicator.topics.acl_sync.AclSync` per leg into
another cluster whose feed has a policy (``REPLICATOR_ACL_SYNC`` for the ``_REPLICA`` mode,
``REPLICATOR_FLOWS__<NAME>__ACL_SYNC`` per flow, ``mm2`` from a MirrorMaker 2 file), each run
every ``REPLICATOR_ACL_SYNC_INTERVAL_MS`` by one task of the service.

Each round decides from the feed's latest topic selection (none yet: the round waits for the
feed's first listing), says once every binding it left out or changed and every binding it
created or removed, and keeps its counts for ``/status`` and the metrics. A round that fails
(a grant missing, a cluster without an authorizer, a cluster down) is said once per cause,
counted, shown in ``/status`` on that sync only, and retried less and less often while it
refuses for good; the other syncs and every leg's records go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from replicator import clock
from replicator.config.settings import Settings
from replicator.config.topology import FeedPlan, Leg, TopicSelection
from replicator.config.values import INTERNAL_TOPIC_FIELDS, AclPolicy
from replicator.errors import ClusterUnavailable, NoAuthorizer, ReplicatorError, Stopped
from replicator.kafka.admin import AclBinding
from replicator.kafka.clients import ClusterClient
from replicator.kafka.retry import Backoff
from replicator.kafka.translation import translate
from replicator.lifecycle import unless_stopped, wait_any
from replicator.telemetry.metrics import Metrics
from replicator.topics.acl_ledger import ClusterAcls, KafkaAclLedger
from replicator.topics.acl_sync import (
    AclDecision,
    AclRound,
    AclSync,
    mm2_decisions,
    movable_decisions,
)

log = structlog.get_logger(__name__)

_FAILING_CEILING_S = 600.0
_LISTING_WAIT_S = 1.0
_ROUND_TIMEOUT_S = 60.0  # until the feed's first listing, asked again this often
_SHOWN = 20  # left-out or changed bindings listed in /status per sync (all are counted)

Selection = Callable[[FeedPlan], TopicSelection | None]
"""A feed's latest topic selection (``None``: not listed yet)."""


def _text(binding: AclBinding) -> str:
    pattern = "prefixed " if binding.prefixed else ""
    permission = "ALLOW" if binding.allow else "DENY"
    return (
        f"{permission} {binding.operation} on {pattern}topic {binding.name} for "
        f"{binding.principal} from {binding.host}"
    )


@dataclass
class _Leg:
    """One sync and what the service shows of it."""

    plan: FeedPlan
    leg: Leg
    sync: AclSync
    backoff: Backoff
    due: float = 0.0
    last_error: str | None = None
    last_round_at: float | None = None
    waiting: str | None = "not run yet"
    idle: str | None = None  # why the source has nothing to copy (keeps no ACLs)
    failures: int = 0
    created: int = 0
    removed: int = 0
    said: list[AclDecision] = field(default_factory=list)


class AclSyncs:
    """Every ACL sync of one replicator, run by one task until stop."""

    def __init__(
        self,
        settings: Settings,
        plans: list[FeedPlan],
        metrics: Metrics,
        clusters: dict[str, ClusterClient],
        selection: Selection,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._selection = selection
        self._ledger: KafkaAclLedger | None = None  # made with the first sync
        self._every = settings.acl_sync_interval_ms / 1000
        # One round is a handful of requests: a frozen cluster holds the other syncs this long.
        self._round_timeout = max(_ROUND_TIMEOUT_S, 3 * settings.request_timeout_ms / 1000)
        internal = {getattr(settings, name) for name in INTERNAL_TOPIC_FIELDS}
        self.legs: list[_Leg] = []
        for plan in plans:
            if plan.acl_sync is AclPolicy.OFF:
                continue
            for leg in plan.legs:
                if leg.destination == leg.source:
                    continue
                if self._ledger is None:
                    self._ledger = KafkaAclLedger(settings, clusters)
                sync = AclSync(
                    ClusterAcls(clusters[leg.source]),
                    ClusterAcls(clusters[leg.destination]),
                    self._ledger,
                    self._decider(plan, internal),
                )
                backoff = Backoff(base=self._every, ceiling=max(self._every, _FAILING_CEILING_S))
                self.legs.append(_Leg(plan, leg, sync, backoff))

    def _decider(
        self, plan: FeedPlan, internal: set[str]
    ) -> Callable[[list[AclBinding]], list[AclDecision]]:
        def decide(bindings: list[AclBinding]) -> list[AclDecision]:
            selection = self._selection(plan) or TopicSelection(())
            replicated = selection.replicated
            if plan.acl_sync is AclPolicy.MM2:
                return mm2_decisions(bindings, plan.rules.target, replicated)
            moving = set(replicated)
            if not plan.is_flow:  # <topic>_REPLICA, and the <topic> it is copied into
                moving |= {t for s in replicated if (t := plan.rules.target(s)) is not None}
            return movable_decisions(bindings, moving, internal)

        return decide

    async def run(self, stop: asyncio.Event) -> None:
        if not self.legs:
            return
        for entry in self.legs:
            log.info(
                "topic ACLs synced",
                sync=entry.sync.name,
                policy=str(entry.plan.acl_sync),
                feed=entry.plan.name,
                every_s=self._every,
                **(
                    {"as": "MirrorMaker 2's sync.topic.acls, and its removals followed"}
                    if entry.plan.acl_sync is AclPolicy.MM2
                    else {}
                ),
            )
        try:
            while not stop.is_set():
                now = clock.monotonic()
                for entry in self.legs:
                    if entry.due <= now and not stop.is_set():
                        await unless_stopped(self._round(entry), stop)
                wake = min(entry.due for entry in self.legs)
                await wait_any((stop,), max(0.0, wake - clock.monotonic()))
        except Stopped:
            return
        finally:
            if self._ledger is not None:
                await self._ledger.close()

    async def _round(self, entry: _Leg) -> None:
        name = entry.sync.name
        if self._selection(entry.plan) is None:
            entry.waiting = "waiting for the feed's first topic listing"
            entry.due = clock.monotonic() + min(self._every, _LISTING_WAIT_S)
            return
        entry.waiting = None
        try:
            async with asyncio.timeout(self._round_timeout):
                done = await entry.sync.round()
        except TimeoutError:
            self._failed(
                entry,
                ClusterUnavailable(
                    f"a round took longer than {self._round_timeout:g} s (a cluster that does "
                    f"not answer: {entry.leg.source} or {entry.leg.destination})"
                ),
            )
            return
        except NoAuthorizer as exc:
            if exc.cluster != entry.leg.source:
                self._failed(entry, exc)
                return
            # Nothing to copy: said once, asked again seldom (MirrorMaker 2 does the same).
            if entry.idle != str(exc):
                log.info("topic ACLs not synced: the source keeps none", sync=name, why=str(exc))
            entry.idle = entry.waiting = str(exc)
            entry.last_error = None
            entry.due = clock.monotonic() + max(self._every, _FAILING_CEILING_S)
            return
        except Exception as exc:  # said once per cause; the next round tries again
            self._failed(entry, exc)
            return
        entry.idle = None
        self._done(entry, done)

    def _failed(self, entry: _Leg, exc: Exception) -> None:
        name = entry.sync.name
        error: ReplicatorError = translate(exc)
        text = str(error) or type(exc).__name__
        entry.failures += 1
        self._metrics.acl_sync_failures.labels(name).inc()
        if text != entry.last_error:
            log.warning("topic ACL sync failed", sync=name, error=text)
            entry.backoff.delay(True)  # another cause: something changed, asked again soon
        entry.last_error = text
        entry.due = clock.monotonic() + entry.backoff.delay(error.retriable)

    def _done(self, entry: _Leg, done: AclRound) -> None:
        name = entry.sync.name
        if entry.last_error is not None:
            log.info("topic ACL sync recovered", sync=name)
        entry.last_error = None
        entry.last_round_at = clock.wall()
        entry.due = clock.monotonic() + entry.backoff.delay(True)
        for decision in done.newly_said:
            log.warning(
                f"topic ACL binding {decision.verdict}",
                sync=name,
                binding=_text(decision.source),
                reason=decision.reason,
                **({"on_target": _text(decision.target)} if decision.target else {}),
            )
        if done.created:
            log.info("topic ACL bindings created", sync=name, bindings=_listed(done.created))
        if done.removed:
            log.info("topic ACL bindings removed", sync=name, bindings=_listed(done.removed))
        entry.created += len(done.created)
        entry.removed += len(done.removed)
        self._metrics.acl_sync_changes.labels(name, "created").inc(len(done.created))
        self._metrics.acl_sync_changes.labels(name, "removed").inc(len(done.removed))
        entry.said = sorted(entry.sync.said.values(), key=lambda d: _text(d.source))
        self.refresh()

    def refresh(self) -> None:
        """The gauges of every sync, as their last rounds left them."""
        for entry in self.legs:
            gauge = self._metrics.acl_sync_bindings
            counts = entry.sync.counts()
            gauge.labels(entry.sync.name, "copied").set(entry.sync.copied)
            gauge.labels(entry.sync.name, "owned").set(entry.sync.owned)
            for state, count in counts.items():
                gauge.labels(entry.sync.name, state).set(count)

    def status(self) -> dict[str, Any]:
        """What ``/status`` shows under ``acl_sync``, by sync (``source->target``)."""
        return {
            entry.sync.name: {
                "feed": entry.plan.name,
                "policy": str(entry.plan.acl_sync),
                "rounds": entry.sync.rounds,
                "last_round_at": entry.last_round_at,
                "waiting": entry.waiting,
                "last_error": entry.last_error,
                "failures": entry.failures,
                "copied": entry.sync.copied,
                "owned": entry.sync.owned,
                "created": entry.created,
                "removed": entry.removed,
                **entry.sync.counts(),
                "left_out_or_changed": [
                    {"binding": _text(d.source), "verdict": str(d.verdict), "reason": d.reason}
                    for d in entry.said[:_SHOWN]
                ],
            }
            for entry in self.legs
        }


def _listed(bindings: list[AclBinding], shown: int = 10) -> list[str]:
    more = [f"and {len(bindings) - shown} more"] if len(bindings) > shown else []
    return [_text(b) for b in bindings[:shown]] + more
