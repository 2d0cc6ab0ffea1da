"""What a leg tells operators: readiness problems, ``/status``, its gauges and the transitions
worth a log line (partitions that stopped being acknowledged, a leg that caught up again).

Everything here stays bounded with thousands of partitions: a readiness problem is one line per
leg and condition (counts, the most common reasons and one example partition of each), ``/status``
summarises a leg (counts by state, lag, reasons) and lists partitions only on request
(:class:`PartitionQuery`: filtered by topic or state, at most ``limit``), the gauges are labelled
per leg, state or topic (never per partition), and a transition is one log line per leg.

Each view is built from one pass over the leg's partitions (:meth:`LegHealth.census`). The states
operators see (:func:`health_state`):

- ``starting``: the destination topic is being prepared or its tail read (``Mode.STARTING``);
  its ``last_error`` names why it has not started yet, if anything failed;
- ``replicating``: ``attached``, ``fetching_alone`` or ``replaying``;
- ``stalled``: open, with a batch the destination has not acknowledged for the stall timeout;
- ``halted``: ``blocked`` or ``failed``.

A leg is ready when its destination is connected and every assigned partition is replicating.
:meth:`LegHealth.problems` and :meth:`LegHealth.status` only read; :meth:`LegHealth.refresh` is
the one place that sets the leg's gauges and logs its transitions (the leg calls it every
second, and before each ``/metrics`` answer).
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from aiokafka import TopicPartition

from replicator import clock
from replicator.config.topology import Leg
from replicator.replication.accounting import Duplicates, Resumptions
from replicator.replication.partition import LegPartition
from replicator.replication.states import FED_ALONE, Halt, Mode
from replicator.telemetry.metrics import Metrics

log = structlog.get_logger(__name__)

LogEnd = Callable[[TopicPartition], "int | None"]

STARTING, REPLICATING, STALLED, HALTED = "starting", "replicating", "stalled", "halted"
STATES = (STARTING, REPLICATING, STALLED, HALTED)
# What ``/status?state=`` accepts: a state above, or a partition's own state (its mode or the
# kind of its halt, as its detail shows it).
DETAIL_STATES = frozenset(STATES) | {m.value for m in Mode} | {h.value for h in Halt}
DEFAULT_LIMIT = 1000  # partitions listed per leg by /status unless ``limit`` says otherwise
_REASONS = 3  # reasons (each with one example partition) per readiness line and /status summary
_EXAMPLES = 3  # partitions named per transition log line
# A starting partition without an error is simply on its way.
_PREPARING = "preparing the destination topic and reading its tail"


# -- what the health view reads of a leg ----------------------------------------------------------


class DestinationView(Protocol):
    """The leg's destination connection, as far as health goes."""

    @property
    def ready(self) -> asyncio.Event: ...

    @property
    def idempotent(self) -> bool | None: ...


class ResetsView(Protocol):
    """The leg's latest offset resets (shown as they are)."""

    @property
    def recent(self) -> Iterable[dict[str, Any]]: ...


class LegView(Protocol):
    """What :class:`LegHealth` reads of a leg: :class:`~replicator.replication.leg.LegRunner`, or a
    fake."""

    @property
    def leg(self) -> Leg: ...

    @property
    def group(self) -> str: ...

    @property
    def partitions(self) -> Mapping[TopicPartition, LegPartition]: ...

    @property
    def destination(self) -> DestinationView: ...

    @property
    def destination_error(self) -> str | None: ...

    @property
    def last_error(self) -> str | None: ...

    @property
    def start_error(self) -> str | None: ...

    @property
    def duplicates(self) -> Duplicates: ...

    @property
    def resumptions(self) -> Resumptions: ...

    @property
    def refused_topics(self) -> Mapping[str, str]: ...

    @property
    def grown_topics(self) -> Mapping[str, int]: ...

    @property
    def topic_config_sync(self) -> Mapping[str, object]: ...

    @property
    def resets(self) -> ResetsView: ...

    @property
    def takeover(self) -> Mapping[str, Any] | None: ...


# -- one pass over a leg's partitions -------------------------------------------------------------


def health_state(partition: LegPartition, now: float, stall_after: float) -> str | None:
    """The state operators see for ``partition``; ``None`` once it is stopped (released)."""
    return _state(partition.mode, partition.oldest_unacked_age(now), stall_after)


def _state(mode: Mode, unacked_age: float, stall_after: float) -> str | None:
    # Stalled as LegPartition.stalled() says (open, a batch unacknowledged for too long), from
    # an age the census also keeps: halted and stopped partitions are the ones not open.
    if mode is Mode.HALTED:
        return HALTED
    if mode is Mode.STOPPED:
        return None
    if unacked_age > stall_after:
        return STALLED
    return STARTING if mode is Mode.STARTING else REPLICATING


def where(tp: TopicPartition) -> str:
    """How a source partition is named in problems and logs: ``orders_REPLICA[3]``."""
    return f"{tp.topic}[{tp.partition}]"


@dataclass
class Reasons:
    """Why partitions of one state are in it: how many share each reason, and the first one."""

    counts: Counter[str] = field(default_factory=Counter)
    first: dict[str, TopicPartition] = field(default_factory=dict)

    def add(self, reason: str, tp: TopicPartition) -> None:
        self.counts[reason] += 1
        self.first.setdefault(reason, tp)

    def top(self) -> list[tuple[str, int, TopicPartition]]:
        """The most common reasons (at most ``_REASONS``): reason, partitions, an example."""
        return [(r, n, self.first[r]) for r, n in self.counts.most_common(_REASONS)]

    def phrase(self) -> str:
        """``orders_REPLICA[3] and 29 more: <reason>; ...``, the most common reasons first."""
        parts = [
            f"{where(tp)}{f' and {n - 1} more' if n > 1 else ''}: {reason}"
            for reason, n, tp in self.top()
        ]
        if (others := len(self.counts) - _REASONS) > 0:
            parts.append(f"{others} other reason{'s' if others > 1 else ''}")
        return "; ".join(parts)

    def shown(self) -> list[dict[str, Any]]:
        return [
            {"reason": reason, "partitions": n, "example": where(tp)}
            for reason, n, tp in self.top()
        ]


@dataclass
class Census:
    """A leg's partitions counted in one pass: what its problems, status and gauges show.

    Lag is known for the partitions whose source log end is known (``lag_unknown`` counts the
    others); ``lag`` sums it per destination topic.
    """

    assigned: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    detached: int = 0
    stalled: set[TopicPartition] = field(default_factory=set)
    longest_unacked: float = 0.0  # seconds, over every open partition
    starting: Reasons = field(default_factory=Reasons)
    halted: Reasons = field(default_factory=Reasons)
    halted_kinds: Counter[str] = field(default_factory=Counter)
    blocked_topics: set[str] = field(default_factory=set)
    topics: set[str] = field(default_factory=set)  # destination topics of assigned partitions
    lag: dict[str, int] = field(default_factory=dict)
    lag_unknown: int = 0
    max_lag: tuple[int, TopicPartition] | None = None

    @property
    def lag_total(self) -> int:
        return sum(self.lag.values())

    @property
    def ready(self) -> bool:
        """Every assigned partition replicating (the connection is judged apart)."""
        return self.counts[REPLICATING] == self.assigned


def take_census(
    partitions: Iterable[LegPartition], now: float, stall_after: float, log_end: LogEnd | None
) -> Census:
    """Count ``partitions`` by state, gather the reasons of those not replicating and, with a
    ``log_end``, their lag per destination topic: one pass, no sorting."""
    census = Census()
    counts, topics, lags = census.counts, census.topics, census.lag
    longest, max_lag, max_tp = 0.0, -1, None
    for partition in partitions:
        age = partition.oldest_unacked_age(now)  # 0 for a partition that is not open
        state = _state(partition.mode, age, stall_after)
        if state is None:
            continue
        tp, topic = partition.tp, partition.target_topic
        counts[state] += 1
        topics.add(topic)
        longest = max(longest, age)
        if state != REPLICATING:
            _why(census, partition, state)
        if partition.mode in FED_ALONE:
            census.detached += 1
        if log_end is None:
            continue
        end, committed = log_end(tp), committed_offset(partition)
        if end is None or committed is None:
            census.lag_unknown += 1
            continue
        lag = end - committed if end > committed else 0
        lags[topic] = lags.get(topic, 0) + lag
        if lag > max_lag:
            max_lag, max_tp = lag, tp
    census.assigned = sum(counts.values())
    census.longest_unacked = longest
    if max_tp is not None:
        census.max_lag = (max_lag, max_tp)
    return census


def _why(census: Census, partition: LegPartition, state: str) -> None:
    """Gather why a partition that is not replicating is stalled, starting or halted."""
    tp = partition.tp
    if state == STALLED:
        census.stalled.add(tp)
    elif state == STARTING:
        census.starting.add(partition.last_error or _PREPARING, tp)
    elif state == HALTED:
        kind = partition.state
        census.halted_kinds[kind] += 1
        census.halted.add(f"{kind}: {partition.last_error}", tp)
        if partition.halt_kind is Halt.BLOCKED:
            census.blocked_topics.add(partition.target_topic)


# -- which partitions /status lists ---------------------------------------------------------------


@dataclass(frozen=True)
class PartitionQuery:
    """Which partitions ``/status`` lists one by one, and how many at most per leg.

    ``topics`` match a source topic (``orders_REPLICA``) or its destination topic (``orders``);
    ``states`` a state of :data:`STATES` or a partition's own state (``attached``, ``blocked``...);
    empty means any.
    """

    topics: frozenset[str] = frozenset()
    states: frozenset[str] = frozenset()
    limit: int = DEFAULT_LIMIT

    PARAMETERS = ("partitions", "topic", "state", "limit")

    @classmethod
    def parse(cls, params: Iterable[tuple[str, str]]) -> PartitionQuery | None:
        """The query ``/status``'s parameters ask for; ``None``: the summary only.

        ``partitions=all``, ``topic`` and ``state`` (repeated, or comma-separated) and ``limit``
        each ask for the list. :class:`ValueError` names a parameter or value it does not take.
        """
        asked, limit = False, DEFAULT_LIMIT
        topics: set[str] = set()
        states: set[str] = set()
        for name, value in params:
            asked = True
            values = [v.strip() for v in value.split(",") if v.strip()]
            if name == "partitions":
                if value != "all":
                    raise ValueError("partitions takes one value: all")
            elif name == "topic":
                topics.update(values)
            elif name == "state":
                unknown = sorted(set(values) - DETAIL_STATES)
                if unknown or not values:
                    raise ValueError(
                        f"state {', '.join(unknown) or 'is empty'}: one of "
                        f"{', '.join(STATES)}, or a partition state "
                        f"({', '.join(sorted(DETAIL_STATES - set(STATES)))})"
                    )
                states.update(values)
            elif name == "limit":
                if not value.isdecimal():
                    raise ValueError(f"limit must be a whole number of partitions, not {value!r}")
                limit = int(value)
            else:
                raise ValueError(
                    f"unknown parameter {name}: /status takes {', '.join(cls.PARAMETERS)}"
                )
        return cls(frozenset(topics), frozenset(states), limit) if asked else None

    def matches(self, partition: LegPartition, state: str | None) -> bool:
        """Whether ``partition``, in health ``state``, is listed."""
        if self.topics and not (
            partition.tp.topic in self.topics or partition.target_topic in self.topics
        ):
            return False
        return not self.states or state in self.states or partition.state in self.states

    def shown(self) -> dict[str, Any]:
        return {"topics": sorted(self.topics), "states": sorted(self.states), "limit": self.limit}


# -- the view -------------------------------------------------------------------------------------


class LegHealth:
    """The operator's view of one leg."""

    def __init__(self, runner: LegView, metrics: Metrics, stall_after: float) -> None:
        self._runner = runner
        self._metrics = metrics
        self._stall_after = stall_after
        self._stalled: set[TopicPartition] = set()
        self._starting = 0
        self._alone = 0
        self._lag_topics: set[str] = set()  # topics whose lag gauge is exported
        self._log = log.bind(leg=runner.leg.name)

    def census(self, log_end: LogEnd | None = None, now: float | None = None) -> Census:
        """The leg's partitions counted now (with their lag when ``log_end`` is given)."""
        now = clock.monotonic() if now is None else now
        return take_census(self._runner.partitions.values(), now, self._stall_after, log_end)

    def problems(self, now: float | None = None) -> list[str]:
        """Why this leg is not ready; empty when it is. At most one line per condition."""
        return self._problems(self.census(now=now))

    def _connection_problem(self) -> str | None:
        runner, name = self._runner, self._runner.leg.name
        if not runner.destination.ready.is_set():
            return f"leg {name} not connected: {runner.last_error or 'starting'}"
        if runner.destination_error is not None:
            return (
                f"leg {name}: destination {runner.leg.destination} unreachable: "
                f"{runner.destination_error}"
            )
        if runner.start_error is not None:
            return f"leg {name}: {runner.start_error}"
        sync = runner.topic_config_sync
        if sync.get("denied"):
            return f"leg {name}: topic config sync refused: {sync.get('last_error')}"
        return None

    def _problems(self, census: Census) -> list[str]:
        name, counts, of = self._runner.leg.name, census.counts, census.assigned
        found = [problem] if (problem := self._connection_problem()) else []
        if counts[STARTING]:
            found.append(
                f"leg {name}: {counts[STARTING]} of {of} partitions starting "
                f"({census.starting.phrase()})"
            )
        if counts[HALTED]:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(census.halted_kinds.items()))
            found.append(
                f"leg {name}: {counts[HALTED]} of {of} partitions halted "
                f"({kinds}; {census.halted.phrase()})"
            )
        if counts[STALLED]:
            examples = ", ".join(where(tp) for tp in heapq.nsmallest(_EXAMPLES, census.stalled))
            if (more := counts[STALLED] - _EXAMPLES) > 0:
                examples += f" and {more} more"
            found.append(
                f"leg {name}: {counts[STALLED]} of {of} partitions stalled: unacknowledged for "
                f"up to {census.longest_unacked:.0f}s ({examples})"
            )
        return found

    def status(
        self, log_end: LogEnd, now: float | None = None, detail: PartitionQuery | None = None
    ) -> dict[str, Any]:
        """The leg in ``/status``: a summary, and the partitions ``detail`` asks for."""
        now = clock.monotonic() if now is None else now
        runner = self._runner
        census = self.census(log_end, now)
        max_lag = census.max_lag
        shown: dict[str, Any] = {
            "leg": runner.leg.name,
            "source": runner.leg.source,
            "destination": runner.leg.destination,
            "group": runner.group,
            "connected": runner.destination.ready.is_set() and runner.destination_error is None,
            # True: retries are deduplicated by the destination; False: it refused a producer id,
            # and batches of unknown outcome resume from its tail instead; None: not connected.
            "idempotent_producer": runner.destination.idempotent,
            # Records written twice that could not be prevented (known), and records whose
            # fate was unknown when their partition was given up (an upper bound).
            "duplicates": runner.duplicates.shown(),
            "assigned_partitions": census.assigned,
            "partition_states": dict(census.counts),
            "detached_partitions": census.detached,
            "starting_reasons": census.starting.shown(),
            "halted_reasons": census.halted.shown(),
            "longest_unacknowledged_seconds": round(census.longest_unacked, 1),
            "lag": {
                "records": census.lag_total,
                "partitions_unknown": census.lag_unknown,
                "max_partition": None
                if max_lag is None
                else {
                    "topic": max_lag[1].topic,
                    "partition": max_lag[1].partition,
                    "records": max_lag[0],
                },
                "topics": [
                    {"topic": topic, "records": lag}
                    for topic, lag in heapq.nlargest(
                        _REASONS, census.lag.items(), key=lambda item: item[1]
                    )
                ],
            },
            "last_error": runner.last_error,
            "refused_topics": dict(runner.refused_topics),
            "partitions_added": dict(runner.grown_topics),
            "topic_config_sync": dict(runner.topic_config_sync),
            "offset_resets": list(runner.resets.recent),
            "takeover": None if runner.takeover is None else dict(runner.takeover),
        }
        if detail is not None:
            shown.update(self._detail(detail, log_end, now))
        return shown

    def _detail(self, query: PartitionQuery, log_end: LogEnd, now: float) -> dict[str, Any]:
        """The partitions ``query`` matches, in topic and partition order, at most its limit."""
        after = self._stall_after
        matched = sorted(
            tp
            for tp, partition in self._runner.partitions.items()
            if query.matches(partition, health_state(partition, now, after))
        )
        listed = []
        for tp in matched[: query.limit]:
            partition = self._runner.partitions[tp]
            entry = partition.status(now, after)
            end, committed = log_end(tp), committed_offset(partition)
            entry["log_end_offset"] = end
            entry["lag"] = None if end is None or committed is None else max(0, end - committed)
            listed.append(entry)
        return {
            "partitions": listed,
            "partitions_matched": len(matched),
            "partitions_truncated": len(matched) - len(listed),
        }

    def refresh(self, log_end: LogEnd, now: float | None = None) -> None:
        """Set the leg's gauges and log what changed since the last refresh."""
        now = clock.monotonic() if now is None else now
        census = self.census(log_end, now)
        name, metrics = self._runner.leg.name, self._metrics
        ready = census.ready and self._connection_problem() is None
        metrics.leg_ready.labels(name).set(1 if ready else 0)
        metrics.assigned_partitions.labels(name).set(census.assigned)
        for state, count in census.counts.items():
            metrics.leg_partitions.labels(name, state).set(count)
        metrics.topics_blocked.labels(name).set(len(census.blocked_topics))
        self._export_lag(census)
        self._log_transitions(census, now)

    def _export_lag(self, census: Census) -> None:
        """Lag per destination topic; a topic no partition is assigned of any more is removed.

        A topic whose partitions' log ends are all unknown keeps the value it had.
        """
        name, metrics = self._runner.leg.name, self._metrics
        for topic, lag in census.lag.items():
            metrics.commit_lag.labels(name, topic).set(lag)
        for topic in self._lag_topics - census.topics:
            metrics.commit_lag.remove(name, topic)
        self._lag_topics = (self._lag_topics & census.topics) | census.lag.keys()
        if census.max_lag is not None:
            metrics.commit_lag_max.labels(name).set(census.max_lag[0])
        elif not census.assigned:
            metrics.commit_lag_max.labels(name).set(0)

    def _log_transitions(self, census: Census, now: float) -> None:
        """One line per leg and change: partitions stalled or acknowledged again, every
        partition started, the leg fetching alone or caught up."""
        partitions = self._runner.partitions
        stalled = census.stalled
        if new := stalled - self._stalled:
            self._log.warning(
                "destination stopped acknowledging",
                partitions=len(new),
                stalled=len(stalled),
                seconds=round(census.longest_unacked),
                examples=[where(tp) for tp in heapq.nsmallest(_EXAMPLES, new)],
            )
        if again := {tp for tp in self._stalled - stalled if tp in partitions}:
            self._log.info(
                "destination acknowledging again",
                partitions=len(again),
                stalled=len(stalled),
                examples=[where(tp) for tp in heapq.nsmallest(_EXAMPLES, again)],
            )
        self._stalled = stalled
        starting = census.counts[STARTING]
        # Partitions that started between two censuses are said too (their resumptions).
        started = self._starting or self._runner.resumptions.pending
        if started and not starting and census.assigned:
            self._log.info(
                "every assigned partition started",
                partitions=census.assigned,
                **self._runner.resumptions.take(),
            )
        self._starting = starting
        alone = census.detached
        if alone and not self._alone:
            self._log.info("leg behind the shared fetch, fetching alone", partitions=alone)
        elif self._alone and not alone and census.assigned:
            self._log.info("leg caught up: every partition is back on the shared fetch")
        self._alone = alone

    def forget(self, partition: LegPartition) -> None:
        """``partition`` was released: no transition is logged for it any more (its topic's lag
        series goes at the next refresh if no partition of the topic is left)."""
        self._stalled.discard(partition.tp)


def committed_offset(partition: LegPartition) -> int | None:
    """The leg's committed offset for a partition: the last commit, else where it started."""
    tracker = partition.tracker
    if tracker is not None and tracker.committed is not None:
        return tracker.committed
    return partition.position if tracker is None else tracker.committable
