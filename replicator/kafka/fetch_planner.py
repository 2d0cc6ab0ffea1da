"""What a source consumer's fetcher does at each wake of its loop, at a cost in proportion to
what changed since the last wake, not to the partitions assigned.

aiokafka's fetcher decides at every wake of its loop (each fetch answer, each ``getmany`` that
took records, each seek, resume or new assignment, and every ``fetcher_timeout`` when idle) by
walking every assigned partition (``Fetcher._get_actions_per_node``), and hands the future of
every paused partition to ``asyncio.wait`` (each gets a done-callback added and removed): 27 ms
per wake at 10,000 partitions, all paused or none (measured, ``benchmarks.fetch_planning``).
A leg's source consumer holds every partition and pauses nearly all of them; the shared feed's
consumer fetches nearly all of them.

Of the choices (a narrower fix: skip paused partitions in the same walk, one shared future; or
the walk replaced by sets kept up to date), :class:`FetchPlanner` is the latter, in place of
``_get_actions_per_node`` on one consumer's fetcher (through :mod:`replicator.kafka.internals`),
because a walk that skips paused partitions still visits each of them. It returns what aiokafka
returns, decided by aiokafka's rules for each partition it visits, in aiokafka's order of
precedence: records not handed over (the node backs off while they are younger than
``prefetch_backoff``, the partition is not fetched), a request in flight to its node (nothing),
no leader (a metadata refresh), no valid position (an offset reset through the leader), paused
(waits for a resume), else fetched from its position; a node with records backing off or a
reset awaited is not fetched, the partitions of a request are shuffled, the wait is the least
backoff of a node backing off or ``fetcher_timeout``. It visits only the partitions whose
decision may be other than "paused, wait for a resume": those with records buffered (the
fetcher's own buffer), those without a valid position (all of them at an assignment, those
reset since, kept until they have one), those without a leader (found again when the metadata
changes: aiokafka replaces its map of partitions at each update), and those not paused (kept by
the consumer's pause and resume). Every other partition is paused with a position, a leader and
nothing buffered, and waits for a resume: one future per consumer, which any resume completes
(aiokafka's futures per paused partition serve that alone), handed to the loop while any
partition is paused. A wake therefore costs in proportion to the partitions fetched (the feed:
the request holds them all anyway) plus what changed, not to the paused ones.

A preferred read replica (KIP-392, only with a client rack) expires by time, per partition: a
consumer holding one is planned by aiokafka's own walk until it holds none. A consumer whose
``auto_offset_reset`` is not ``none`` may lose a position in a fetch answer (out of range): the
partitions of each answered request are visited once more.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiokafka
from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.kafka import internals
from replicator.kafka.internals import FetchActions, FetcherParts

NO_LEADER = -1


@dataclass(slots=True)
class PlanStats:
    """What a planner did: wakes planned, partitions visited in all (aiokafka's walk visits
    every assigned partition at each), wakes left to aiokafka's walk (a read replica held)."""

    plans: int = 0
    visited: int = 0
    delegated: int = 0


@dataclass(slots=True)
class _Plan:
    """One wake's decisions, as aiokafka's walk gathers them."""

    fetchable: defaultdict[int, list[tuple[TopicPartition, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    awaiting_reset: defaultdict[int, list[TopicPartition]] = field(
        default_factory=lambda: defaultdict(list)
    )
    backoff_by_nodes: defaultdict[int | None, list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    invalid_metadata: bool = False
    waits_resume: bool = False


class FetchPlanner:
    """``_get_actions_per_node`` for one consumer's fetcher, kept up to date by the consumer's
    pauses, resumes and offset resets (:meth:`paused`, :meth:`resumed`, :meth:`resetting`) and
    by what the fetcher and its metadata hold at each wake."""

    def __init__(self, parts: FetcherParts) -> None:
        self._parts = parts
        self._assignment: Any = None
        self._unpaused: set[TopicPartition] = set()
        # The same, by the node leading each (as the leaders were last found).
        self._unpaused_by_node: defaultdict[int | None, set[TopicPartition]] = defaultdict(set)
        self._unpositioned: set[TopicPartition] = set()
        self._leaders: dict[TopicPartition, int | None] = {}
        self._leaderless: set[TopicPartition] = set()
        self._leaders_seen: object = None
        self._resumed: asyncio.Future[None] | None = None
        self._sent: dict[int, list[TopicPartition]] = {}
        self.stats = PlanStats()

    # -- told by the consumer ---------------------------------------------------------------------

    def paused(self, tp: TopicPartition) -> None:
        """``tp`` was paused."""
        if self._current():
            self._unpaused.discard(tp)
            self._unpaused_by_node[self._leaders.get(tp)].discard(tp)

    def resumed(self, tp: TopicPartition) -> None:
        """``tp`` was resumed: the loop wakes (if it waits on a resume) and fetches it."""
        if self._current():
            self._unpaused.add(tp)
            self._unpaused_by_node[self._leaders.get(tp)].add(tp)
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    def resetting(self, tps: Iterable[TopicPartition]) -> None:
        """``tps`` await an offset reset (``seek_to_beginning``, ``seek_to_end``)."""
        if self._current():
            self._unpositioned.update(tps)

    def _current(self) -> bool:
        subscription = self._parts.subscription.subscription
        return subscription is not None and subscription.assignment is self._assignment

    # -- at each wake -----------------------------------------------------------------------------

    def plan(self, assignment: Any) -> FetchActions:
        """What aiokafka's ``_get_actions_per_node(assignment)`` returns (the futures waking on
        a resume: one for all)."""
        self._follow(assignment)
        self._refresh_leaders(assignment)
        parts = self._parts
        self.stats.plans += 1
        if parts.read_replicas:
            self.stats.delegated += 1
            return internals.aiokafka_actions(parts, assignment)
        self._answered()
        plan = _Plan()
        visited = self._visit_changed(assignment, plan)
        self.stats.visited += len(visited) + self._visit_unpaused(assignment, plan, visited)
        self._unpositioned = {
            tp for tp in self._unpositioned if not assignment.state_value(tp).has_valid_position
        }
        if len(self._unpaused) < len(self._leaders):  # some partition is paused
            plan.waits_resume = True
        return self._actions(plan)

    def _follow(self, assignment: Any) -> None:
        """Start over at a new assignment: every partition is visited once."""
        if assignment is self._assignment:
            return
        self._assignment = assignment
        states = [(tp, assignment.state_value(tp)) for tp in assignment.tps]
        self._unpaused = {tp for tp, state in states if not state.paused}
        self._unpositioned = {tp for tp, state in states if not state.has_valid_position}
        self._leaders_seen = None
        self._sent.clear()

    def _refresh_leaders(self, assignment: Any) -> None:
        """Each partition's leader, found again when the metadata changed."""
        cluster = internals.fetch_cluster(self._parts)
        version = internals.leaders_version(cluster)
        if version is self._leaders_seen:
            return
        self._leaders_seen = version
        leader = cluster.leader_for_partition
        self._leaders = {tp: leader(tp) for tp in assignment.tps}
        self._leaderless = {
            tp for tp, node in self._leaders.items() if node is None or node == NO_LEADER
        }
        self._unpaused_by_node.clear()
        for tp in self._unpaused:
            self._unpaused_by_node[self._leaders[tp]].add(tp)

    def _answered(self) -> None:
        """The partitions of each request answered since, when an answer may reset a position."""
        if not self._parts.resets_by_itself:
            return
        in_flight = self._parts.in_flight
        for node in [node for node in self._sent if node not in in_flight]:
            self._unpositioned.update(self._sent.pop(node))

    def _visit_changed(self, assignment: Any, plan: _Plan) -> set[TopicPartition]:
        """Decide the partitions with records buffered, without a position or a leader."""
        records, leaders = self._parts.records, self._leaders
        visited: set[TopicPartition] = set()
        for tp, buffered in records.items():
            if tp not in leaders:  # not assigned: aiokafka's walk never sees it
                continue
            visited.add(tp)
            backoff = buffered.calculate_backoff()
            if backoff:
                plan.backoff_by_nodes[leaders[tp]].append(backoff)
        for tp in (*self._unpositioned, *self._leaderless):
            if tp not in visited:
                visited.add(tp)
                self._decide(assignment, tp, plan)
        return visited

    def _decide(self, assignment: Any, tp: TopicPartition, plan: _Plan) -> None:
        """aiokafka's decision for ``tp``, not buffered (after its precedence)."""
        node = self._leaders[tp]
        if node in self._parts.in_flight:
            return
        if node is None or node == NO_LEADER:
            plan.invalid_metadata = True
            return
        state = assignment.state_value(tp)
        if not state.has_valid_position:
            plan.awaiting_reset[node].append(tp)
        elif state.paused:
            plan.waits_resume = True
        else:
            plan.fetchable[node].append((tp, state.position))

    def _visit_unpaused(self, assignment: Any, plan: _Plan, visited: set[TopicPartition]) -> int:
        """Decide the partitions not paused, not visited yet, of the nodes to fetch from (no
        request in flight, no records backing off, no reset awaited): each has a leader and a
        position, so it is fetched. How many were visited."""
        in_flight, fetchable, state_value = (
            self._parts.in_flight,
            plan.fetchable,
            assignment.state_value,
        )
        count = 0
        for node, unpaused in self._unpaused_by_node.items():
            if node is None or node == NO_LEADER or node in in_flight:
                continue
            if node in plan.backoff_by_nodes or node in plan.awaiting_reset:
                continue
            fetched = [(tp, state_value(tp).position) for tp in unpaused if tp not in visited]
            if fetched:
                fetchable[node].extend(fetched)
            count += len(unpaused)
        return count

    def _actions(self, plan: _Plan) -> FetchActions:
        requests: list[tuple[int, Any]] = []
        for node, partitions in plan.fetchable.items():
            if node in plan.backoff_by_nodes or node in plan.awaiting_reset:
                continue
            random.shuffle(partitions)  # as aiokafka: fairer among partitions over time
            by_topic: defaultdict[str, list[tuple[int, int, int]]] = defaultdict(list)
            size = self._partition_fetch_bytes
            for tp, position in partitions:
                by_topic[tp.topic].append((tp.partition, position, size))
            requests.append((node, internals.fetch_request(self._parts, list(by_topic.items()))))
            if self._parts.resets_by_itself:
                self._sent[node] = [tp for tp, _ in partitions]
        if plan.backoff_by_nodes:
            timeout = min(map(max, plan.backoff_by_nodes.values()))
        else:
            timeout = self._parts.idle_timeout
        waiters: list[Any] = [self._resume_waiter()] if plan.waits_resume else []
        return requests, dict(plan.awaiting_reset), timeout, plan.invalid_metadata, waiters

    @property
    def _partition_fetch_bytes(self) -> int:
        return internals.partition_fetch_bytes(self._parts)

    def _resume_waiter(self) -> asyncio.Future[None]:
        if self._resumed is None or self._resumed.done():
            self._resumed = asyncio.get_running_loop().create_future()
        return self._resumed


_planners: weakref.WeakKeyDictionary[AIOKafkaConsumer, FetchPlanner] = weakref.WeakKeyDictionary()


def use_fetch_planner(consumer: AIOKafkaConsumer) -> FetchPlanner | None:
    """Plan a started ``consumer``'s fetches with a :class:`FetchPlanner`; the planner
    (``None``: the installed aiokafka is not the supported one, aiokafka's walk stays)."""
    if aiokafka.__version__ != internals.SUPPORTED_AIOKAFKA:
        return None
    found = _planners.get(consumer)
    if found is None:
        found = _planners[consumer] = install_planner(internals.fetcher_parts(consumer))
    return found


def install_planner(parts: FetcherParts) -> FetchPlanner:
    """A :class:`FetchPlanner` deciding for the fetcher of ``parts``."""
    planner = FetchPlanner(parts)
    internals.install_fetch_planner(
        parts, planner.plan, planner.paused, planner.resumed, planner.resetting
    )
    return planner


def fetch_planner(consumer: AIOKafkaConsumer) -> FetchPlanner | None:
    """``consumer``'s :class:`FetchPlanner`, if one plans its fetches."""
    return _planners.get(consumer)
