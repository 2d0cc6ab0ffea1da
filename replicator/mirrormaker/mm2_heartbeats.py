"""MirrorMaker 2's heartbeat properties: each flow's ``HEARTBEATS`` and the one interval.

``emit.heartbeats.enabled`` (top-level or ``A->B.``) becomes the flow's
``REPLICATOR_FLOWS__<NAME>__HEARTBEATS`` (true is the default, as in MirrorMaker 2);
``emit.heartbeats.interval.seconds`` becomes ``REPLICATOR_HEARTBEAT_INTERVAL_MS``, one setting for
every flow: where flows disagree the smallest interval applies to all, with a note. A negative
interval turns a flow's heartbeats off, as MirrorMaker 2 reads it. They go where MirrorMaker 2
puts them (``REPLICATOR_HEARTBEAT_PLACEMENT=mirrormaker2``): a flow A->B writes ``A->B``
heartbeats into B's ``heartbeats``; where no flow B->A is enabled, MirrorMaker 2 still runs that
direction's heartbeat connector (unless ``B->A.emit.heartbeats.enabled=false``), which writes
``B->A`` heartbeats into A's ``heartbeats``: the flow's ``REVERSE_HEARTBEATS``. A's topic is
copied to B as ``A.heartbeats`` under every replication policy, identity included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replicator.errors import ConfigError
from replicator.mirrormaker.translation import Builder, flow_var
from replicator.mirrormaker.values import parse_bool, parse_int

ENABLED = "emit.heartbeats.enabled"
INTERVAL = "emit.heartbeats.interval.seconds"
KEYS = frozenset({ENABLED, INTERVAL})
_DEFAULT_SECONDS = 1  # MirrorMaker 2's emit.heartbeats.interval.seconds, and the replicator's 1 s

WHERE_NOTE = (
    "as MirrorMaker 2 writes them (REPLICATOR_HEARTBEAT_PLACEMENT=mirrormaker2): each flow "
    "writes its heartbeats into its target's heartbeats topic (MirrorMaker 2's record format), "
    "and copies its source's as <source>.heartbeats under every policy; /status and the "
    "metrics show each flow's heartbeat age and delay, read from that copy"
)
TOPIC_NOTE = (
    "not used: a heartbeat topic is created where heartbeats are written (if missing) with one "
    "partition, compacted, and the flow's REPLICATION_FACTOR (else "
    "REPLICATOR_DESTINATION_REPLICATION_FACTOR, else 3, or fewer on a smaller cluster)"
)


@dataclass
class _Interval:
    flow: str
    milliseconds: int
    origin: str | None  # None: MirrorMaker 2's default


@dataclass
class Heartbeats:
    """The heartbeat properties of every flow, read one flow at a time (:meth:`flow`), and the
    one interval decided once all are read (:meth:`finish`)."""

    label: str  # the MM2 file, for messages
    intervals: list[_Interval] = field(default_factory=list)
    given: dict[str, None] = field(default_factory=dict)  # interval origins, in order
    explained: bool = False

    def flow(self, b: Builder, flow: str, scoped: dict[str, tuple[str, str]]) -> None:
        """One flow's properties (top-level ones overridden by its ``A->B.`` ones)."""
        enabled = scoped.get(ENABLED)
        interval = scoped.get(INTERVAL)
        if interval is not None:
            self.given[interval[1]] = None
        if enabled is not None:
            flag = parse_bool(enabled[0])
            if flag is None:
                raise ConfigError(enabled[1], f"expected true or false, got {enabled[0].strip()!r}")
            if not flag:
                b.set(flow_var(flow, "HEARTBEATS"), "false", enabled[1])
                return
            self._explain(b, enabled[1])
        if interval is None:
            self.intervals.append(_Interval(flow, _DEFAULT_SECONDS * 1000, None))
            return
        seconds = parse_int(interval[0], interval[1])
        if seconds < 0:
            b.set(flow_var(flow, "HEARTBEATS"), "false", interval[1])
            b.note(interval[1], "negative: no heartbeats, as MirrorMaker 2 reads it")
            return
        if seconds == 0:
            raise ConfigError(
                interval[1],
                "0 would emit heartbeats without pause: give a number of seconds, or "
                f"{ENABLED}=false",
            )
        self._explain(b, interval[1])
        self.intervals.append(_Interval(flow, seconds * 1000, interval[1]))

    def reverse(self, b: Builder, flow: str, pair: str, scoped: dict[str, tuple[str, str]]) -> None:
        """The heartbeats MirrorMaker 2 writes into ``flow``'s source for the reverse direction
        ``pair`` (``B->A``), which no flow runs: on unless its properties (``scoped``) turn
        them off."""
        enabled = scoped.get(ENABLED)
        interval = scoped.get(INTERVAL)
        if enabled is not None and parse_bool(enabled[0]) is False:
            return
        if interval is not None and parse_int(interval[0], interval[1]) < 0:
            return
        where = (enabled or interval or (None, f"{pair}.{ENABLED} (MirrorMaker 2's default)"))[1]
        b.set(flow_var(flow, "REVERSE_HEARTBEATS"), "true", where)
        b.note(
            where,
            f"no flow {pair} is enabled, but MirrorMaker 2 runs its heartbeats: {pair} "
            f"heartbeats are written into {pair.split('->')[1]}'s heartbeats topic (write access "
            f"there; {pair}.{ENABLED}=false turns them off) and copied by flow {flow}, proving "
            "its path",
        )

    def _explain(self, b: Builder, origin: str) -> None:
        if not self.explained:
            b.note(origin, WHERE_NOTE)
            self.explained = True

    def finish(self, b: Builder) -> None:
        """``REPLICATOR_HEARTBEAT_INTERVAL_MS``: the smallest interval of the flows that emit;
        and MirrorMaker 2's placement of heartbeats, for every flow."""
        b.set("HEARTBEAT_PLACEMENT", "mirrormaker2", f"{self.label} (MirrorMaker 2's heartbeats)")
        used = {i.origin for i in self.intervals}
        for origin in self.given:
            if origin not in used:
                b.note(origin, "ignored: no flow it applies to emits heartbeats")
        if not any(i.origin for i in self.intervals):
            return  # MirrorMaker 2's default interval is the replicator's
        smallest = min(self.intervals, key=lambda i: i.milliseconds)
        origin = smallest.origin or f"{INTERVAL} (MirrorMaker 2's default, in {self.label})"
        b.set("HEARTBEAT_INTERVAL_MS", str(smallest.milliseconds), origin)
        if len({i.milliseconds for i in self.intervals}) > 1:
            listed = ", ".join(
                f"{i.flow}: {i.milliseconds} ms"
                + (f" ({i.origin})" if i.origin else " (MirrorMaker 2's default)")
                for i in self.intervals
            )
            b.note(
                origin,
                "REPLICATOR_HEARTBEAT_INTERVAL_MS is one interval for every flow: the smallest, "
                f"{smallest.milliseconds} ms, applies to all ({listed})",
            )
