"""What a source consumer's fetcher does at each wake of its loop, at a cost in proportion to
what changed since the last wake, not to the partitions assigned.

aiokafka's fetcher decides at every wake of its loop (each fetch answer, each ``getmany`` that
took records, each seek, resume or new assignment, and every ``fetcher_timeout`` when idle) by
walking every assigned partition (``Fetcher._get_actions_per_node``: its leader, buffer,
position, pause; then each request's partitions shuffled and grouped by topic), and hands the
future of every paused partition to ``asyncio.wait`` (each gets a done-callback added and
removed). Measured at 10,000 partitions (``benchmarks.fetch_planning``, no broker): 27-39 ms of
CPU per wake, whether all are paused (a leg's source consumer) or none (the shared feed's).

Of the choices: (b) the same walk skipping paused partitions cheaply, one shared future, leaders
cached, still visits every partition and rebuilds every request; (a) replacing the walk by
state kept up to date by what changes it, returning the same decisions. :class:`FetchPlanner`
is (a), in place of ``_get_actions_per_node`` on one consumer's fetcher (through
:mod:`replicator.kafka.internals`, which tells it of every change), because only (a) makes the
feed's wakes cheap too: 0.3 ms per wake at 10,000 partitions, all fetched, and 0.04 ms with all
but 20 paused.

What it keeps: the partitions not paused (told of each pause and resume); those without a
valid position (every one at an assignment; told of each reset; aiokafka's own resets happen
only to partitions it fetched, visited again after each answer when ``auto_offset_reset`` is
not ``none``); each partition's leader (found again when the metadata changes: aiokafka replaces
its map of partitions at each update); and a row per partition fetched with nothing else to
decide (not paused, a position, a leader, nothing buffered), by node and topic, as a request
lists it. A position moves only by a seek (told), a reset (above), or records handed over, which
were buffered first (told by the fetcher's buffer, :func:`~replicator.kafka.internals.
note_records`): a row is made again for the partitions told of since the last wake only, and
for one buffered when it is handed over.

At each wake it decides by aiokafka's rules, in aiokafka's order of precedence, for the
partitions with records buffered (the node backs off while they are younger than
``prefetch_backoff``; the partition is not fetched), without a valid position (an offset reset
through the leader, unless its node has a request in flight) or a leader (a metadata refresh);
every node with no request in flight, no records backing off and no reset awaited is fetched
from its rows; the wait is the least backoff of a node backing off, or ``fetcher_timeout``.
Every other partition is paused, and waits for a resume: one future per consumer, which any
resume completes (aiokafka's future per paused partition serves that alone), handed to the loop
while any partition is paused. aiokafka shuffles each request's partitions so that an answer cut
at the fetch's size limit favours none over time; the rows are rotated instead, topics and
partitions (a copy, not a draw per partition).

A preferred read replica (KIP-392, only with a client rack) expires by time, per partition: a
consumer holding one is planned by aiokafka's own walk until it holds none.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiokafka
from aiokafka import AIOKafkaConsumer, TopicPartition

from replicator.kafka import internals
from replicator.kafka.fetch_sessions import PlannedFetch
from replicator.kafka.internals import FetchActions, FetcherParts

NO_LEADER = -1

# A partition as a fetch request lists it: (partition, from offset, at most max bytes).
Row = tuple[int, int, int]


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
    pauses, resumes, seeks and offset resets (:meth:`paused`, :meth:`resumed`, :meth:`sought`,
    :meth:`resetting`), the records the fetcher buffers (:meth:`buffered`), and what the fetcher
    and its metadata hold at each wake."""

    def __init__(self, parts: FetcherParts) -> None:
        self._parts = parts
        self._assignment: Any = None
        self._unpaused: set[TopicPartition] = set()
        self._unpositioned: set[TopicPartition] = set()
        self._leaders: dict[TopicPartition, int | None] = {}
        self._leaderless: set[TopicPartition] = set()
        self._leaders_seen: object = None
        # What a fetch asks of each partition fetched with nothing else to decide (not paused,
        # a position, a leader, no records buffered), by node and topic: (partition, position,
        # size) as the request lists it. Kept by the partitions whose row may have changed
        # since the last wake (_dirty).
        self._rows: defaultdict[int, defaultdict[str, dict[TopicPartition, Row]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self._row_node: dict[TopicPartition, int] = {}
        self._dirty: set[TopicPartition] = set()
        # The same rows as each node's fetch session takes them, (offset, size) by partition,
        # with the partitions whose entry changed since the last request to the node, and
        # that request's token (generation of the rows, number): the session compares those
        # partitions alone (:class:`~replicator.kafka.fetch_sessions.PlannedFetch`).
        self._wanted: defaultdict[int, dict[TopicPartition, tuple[int, int]]] = defaultdict(dict)
        self._since: defaultdict[int, set[TopicPartition]] = defaultdict(set)
        self._generation = 0
        self._requests: defaultdict[int, int] = defaultdict(int)
        self._turn = 0
        self._resumed: asyncio.Future[None] | None = None
        self._sent: dict[int, list[TopicPartition]] = {}
        self.stats = PlanStats()

    # -- told by the consumer and the fetcher -----------------------------------------------------

    def paused(self, tp: TopicPartition) -> None:
        """``tp`` was paused."""
        if self._current():
            self._unpaused.discard(tp)
            self._dirty.add(tp)

    def resumed(self, tp: TopicPartition) -> None:
        """``tp`` was resumed: the loop wakes (if it waits on a resume) and fetches it."""
        if self._current():
            self._unpaused.add(tp)
            self._dirty.add(tp)
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    def sought(self, tp: TopicPartition) -> None:
        """``tp`` was sought to a position."""
        if self._current():
            self._dirty.add(tp)

    def resetting(self, tps: Iterable[TopicPartition]) -> None:
        """``tps`` await an offset reset (``seek_to_beginning``, ``seek_to_end``)."""
        if self._current():
            self._unpositioned.update(tps)
            self._dirty.update(tps)

    def buffered(self, tp: TopicPartition) -> None:
        """The fetcher buffered records (or an error) of ``tp``: handing them over moves its
        position (the only way a position moves but a seek or a reset)."""
        if self._current():
            self._dirty.add(tp)

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
        self._positioned(assignment)
        self._update_rows(assignment)
        plan = _Plan()
        self._visit_changed(plan)
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
        """Each partition's leader, found again when the metadata changed (every row anew)."""
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
        self._rows.clear()
        self._row_node.clear()
        self._wanted.clear()
        self._since.clear()
        self._generation += 1  # no session holds what these rows ask: each compares all
        self._dirty = set(self._unpaused)

    def _answered(self) -> None:
        """The partitions of each request answered since, when an answer may reset a position."""
        if not self._parts.resets_by_itself:
            return
        in_flight = self._parts.in_flight
        for node in [node for node in self._sent if node not in in_flight]:
            sent = self._sent.pop(node)
            self._unpositioned.update(sent)
            self._dirty.update(sent)

    def _positioned(self, assignment: Any) -> None:
        """Those without a position that have one now (a seek, a reset answered)."""
        state_value = assignment.state_value
        found = {tp for tp in self._unpositioned if state_value(tp).has_valid_position}
        if found:
            self._unpositioned -= found
            self._dirty |= found

    def _update_rows(self, assignment: Any) -> None:
        """Each partition's row as it is now, for those whose row may have changed; those with
        records buffered stay to be looked at again (handing them over moves the position)."""
        records, state_value = self._parts.records, assignment.state_value
        kept: set[TopicPartition] = set()
        self.stats.visited += len(self._dirty)
        size = self._partition_fetch_bytes
        for tp in self._dirty:
            node = self._row_node.pop(tp, None)
            if node is not None:
                del self._rows[node][tp.topic][tp]
                del self._wanted[node][tp]
                self._since[node].add(tp)
            if tp in records:
                kept.add(tp)
            elif tp in self._unpaused and tp not in self._unpositioned:
                node = self._leaders.get(tp)
                if node is not None and node != NO_LEADER:
                    position = state_value(tp).position
                    self._rows[node][tp.topic][tp] = (tp.partition, position, size)
                    self._wanted[node][tp] = (position, size)
                    self._since[node].add(tp)
                    self._row_node[tp] = node
        self._dirty = kept

    def _visit_changed(self, plan: _Plan) -> None:
        """Decide the partitions with records buffered, without a position or a leader: every
        other partition is paused (waits for a resume) or has its row."""
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
                self._decide(tp, plan)
        self.stats.visited += len(visited)

    def _decide(self, tp: TopicPartition, plan: _Plan) -> None:
        """aiokafka's decision for ``tp``, not buffered, without a position or a leader (after
        aiokafka's precedence)."""
        node = self._leaders[tp]
        if node in self._parts.in_flight:
            return
        if node is None or node == NO_LEADER:
            plan.invalid_metadata = True
            return
        plan.awaiting_reset[node].append(tp)  # without a position (_positioned)

    def _actions(self, plan: _Plan) -> FetchActions:
        requests: list[tuple[int, Any]] = []
        in_flight = self._parts.in_flight
        self._turn += 1
        for node, by_topic in self._rows.items():
            if node in in_flight or node in plan.backoff_by_nodes or node in plan.awaiting_reset:
                continue
            topics = _rotated(
                [
                    (topic, _rotated(list(rows.values()), self._turn))
                    for topic, rows in by_topic.items()
                    if rows
                ],
                self._turn,
            )
            if not topics:
                continue
            requests.append(
                (node, internals.fetch_request(self._parts, topics, self._planned(node)))
            )
            if self._parts.resets_by_itself:
                self._sent[node] = [tp for rows in by_topic.values() for tp in rows]
        if plan.backoff_by_nodes:
            timeout = min(map(max, plan.backoff_by_nodes.values()))
        else:
            timeout = self._parts.idle_timeout
        waiters: list[Any] = [self._resume_waiter()] if plan.waits_resume else []
        return requests, dict(plan.awaiting_reset), timeout, plan.invalid_metadata, waiters

    def _planned(self, node: int) -> PlannedFetch:
        """What the request built now for ``node`` fetches, and what changed since the last."""
        number = self._requests[node] = self._requests[node] + 1
        changed = self._since.pop(node, set())
        return PlannedFetch(
            token=(self._generation, number),
            base=(self._generation, number - 1),
            wanted=dict(self._wanted[node]),  # a snapshot: the rows change after this wake
            changed=frozenset(changed),
        )

    @property
    def _partition_fetch_bytes(self) -> int:
        return internals.partition_fetch_bytes(self._parts)

    def _resume_waiter(self) -> asyncio.Future[None]:
        if self._resumed is None or self._resumed.done():
            self._resumed = asyncio.get_running_loop().create_future()
        return self._resumed


T = TypeVar("T")


def _rotated(items: list[T], turn: int) -> list[T]:
    """``items`` starting at another one at each turn: over time, each partition and topic is
    first in its request as often as the others (aiokafka shuffles them, at a cost per
    partition, so that an answer cut at the fetch's size limit favours none)."""
    if len(items) < 2:
        return items
    at = turn % len(items)
    return items[at:] + items[:at]


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
    parts = internals.note_records(parts)
    planner = FetchPlanner(parts)
    internals.install_fetch_planner(parts, planner)
    return planner


def fetch_planner(consumer: AIOKafkaConsumer) -> FetchPlanner | None:
    """``consumer``'s :class:`FetchPlanner`, if one plans its fetches."""
    return _planners.get(consumer)
