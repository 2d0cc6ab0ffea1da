"""Taking over from a MirrorMaker: where a flow's partitions start when the MirrorMaker it
replaces stopped, so that the switch copies nothing twice and skips nothing.

A partition the flow never committed starts by ``START_FROM`` (the log start or end). With
``TAKE_OVER`` it starts where its predecessor stood instead, but only on evidence of it:

- MirrorMaker 1 (``mirrormaker1``): the offsets it committed under its consumer group (the
  flow's ``GROUP_ID``) on the source: the next record to copy.
- MirrorMaker 2 (``mirrormaker2``): the source offsets its Connect worker saved in the offsets
  topic on the target (``mm2-offsets.<source>.internal``): the last record copied, per source
  partition, under the key ``["MirrorSourceConnector", {"cluster", "topic", "partition"}]``.

MirrorMaker copies at least once and saves its position periodically, so a MirrorMaker that
was killed (not stopped) may have written records past the position it saved. The target tells
(:func:`confirm`): its last records are compared with the source's around the position; when
they differ the source is read on from the position for the target's last record, and the
partition starts after it. MirrorMaker's copies carry no provenance, so this comparison is the
only way to know them, and it is strict (:func:`same_record`): a target record is a copy of a
source record only when key, value, timestamp and application headers are equal, and a
provenance header it carries names that very record (a replicator's copy; MirrorMaker copies
headers as they are). A target's own records (same-name topics both ways: a target's
applications write where copies land) are never taken for copies: equal content written at
another time differs by its timestamp, and where MirrorMaker 2 never ran on the target (its
offsets topic is not there: a Connect worker creates it before it copies anything) the target
is not looked at at all. Without evidence (no saved position, no confirmed copy) a partition
starts by ``START_FROM``; the log and ``/status`` (each leg's ``takeover``) say which
partitions started by which evidence. Every partition taken over is committed at once under the
leg's group, with a destination mark at the target's log end, so a restart resumes from there
and never reads MirrorMaker's copies as its own.

This module owns the decisions (pure: :func:`connect_positions`, :func:`confirm`,
:func:`decide`) and the reading, marking and committing they need (:class:`Takeover`), which the
leg runs for the partitions it is assigned without a committed offset
(:meth:`replicator.replication.leg.LegRunner.assign`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import TopicPartition

from replicator import clock
from replicator.config.values import TakeOver
from replicator.errors import ProvenanceError
from replicator.kafka.clients import GroupOffsets
from replicator.kafka.readers import StoredRecord, partitions_of, read_ranges
from replicator.kafka.roles import LogReader
from replicator.model.handover import Handover
from replicator.model.provenance import HEADER_NAMES, ORIGIN, parse

# Records compared at each end: the target's last ones against the run of the source's.
_RUN = 16
# How far past its saved position a predecessor's copies are looked for in the source.
_AHEAD_LIMIT = 100_000

CONNECTOR = "MirrorSourceConnector"
"""The connector whose source offsets MirrorMaker 2's dedicated mode saves."""

HANDED_BACK = "replicator hand-back"
"""The metadata of a leg's commit that ``replicator hand-back`` made: the partition was given
back to MirrorMaker, which may have moved it since (its position is taken over again)."""


def default_offsets_topic(source: str) -> str:
    """MirrorMaker 2's Connect offsets topic on the target, for flows from ``source``."""
    return f"mm2-offsets.{source}.internal"


def connect_positions(
    entries: Iterable[tuple[bytes | None, bytes | None]], source: str
) -> dict[TopicPartition, int]:
    """The next source offset to copy of each partition MirrorMaker 2 copied from ``source``,
    from the records of its Connect offsets topic in the order written (``(key, value)``; the
    last value of a key wins, a null value deletes it). ``source`` is the alias as MirrorMaker
    2's file spells it (its keys do). Keys of other connectors or clusters, and entries that do
    not parse, are passed over."""
    found: dict[TopicPartition, int] = {}
    for key, value in entries:
        tp = _connect_partition(key, source)
        if tp is None:
            continue
        offset = _connect_offset(value)
        if offset is None:
            found.pop(tp, None)
        else:
            found[tp] = offset + 1  # Connect saves the last record copied
    return found


def connect_key(cluster: str, tp: TopicPartition) -> bytes:
    """The key MirrorMaker 2's Connect worker saves ``tp``'s position under, byte for byte as
    its JSON converter writes it (Connect finds a position by these bytes)."""
    partition = {"cluster": cluster, "partition": tp.partition, "topic": tp.topic}
    return json.dumps([CONNECTOR, partition], separators=(",", ":")).encode()


def connect_value(position: int) -> bytes:
    """The value that makes MirrorMaker 2 resume ``tp`` at ``position`` (it saves the last
    record copied)."""
    return json.dumps({"offset": position - 1}, separators=(",", ":")).encode()


def _connect_partition(key: bytes | None, source: str) -> TopicPartition | None:
    try:
        connector, partition = json.loads(key or b"")
        cluster, topic, number = partition["cluster"], partition["topic"], partition["partition"]
    except (ValueError, TypeError, KeyError):
        return None
    if connector != CONNECTOR or not isinstance(cluster, str) or not isinstance(topic, str):
        return None
    if cluster != source or not isinstance(number, int):
        return None
    return TopicPartition(topic, number)


def _connect_offset(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        offset = json.loads(value)["offset"]
    except (ValueError, TypeError, KeyError):
        return None
    return offset if isinstance(offset, int) and offset >= 0 else None


async def read_connect_positions(
    reader: LogReader, topic: str, source: str, timeout: float
) -> dict[TopicPartition, int]:
    """:func:`connect_positions` of MirrorMaker 2's offsets ``topic``, read whole by ``reader``
    (a started consumer of no group on the target); nothing if the topic does not exist."""
    tps = await partitions_of(reader, topic)
    if not tps:
        return {}
    begins = await reader.beginning_offsets(tps)
    ends = await reader.end_offsets(tps)
    found = await read_ranges(reader, {tp: (begins[tp], ends[tp]) for tp in tps}, timeout)
    return connect_positions([(r.key, r.value) for tp in tps for r in found[tp]], source)


def same_record(a: StoredRecord, b: StoredRecord, cluster: str | None = None) -> bool:
    """Whether ``b`` (in the target) is a copy of ``a`` (in the source of cluster ``cluster``),
    as MirrorMaker writes one or as the replicator does: the same key, value, timestamp and
    application headers (provenance set aside), and no claim to be another record's copy.

    A provenance header on ``b`` is such a claim: it is a copy of ``a`` only if ``a`` carries
    the same header (MirrorMaker copies headers as they are) or it names ``a`` itself, its
    topic, partition and offset (and ``cluster``, when given): the replicator's copy. Equal
    content written at another time (a target's own record in a same-name topic) differs by
    its timestamp; a target whose topic keeps the broker's append time (``LogAppendTime``)
    holds no record MirrorMaker's copies can be told by."""
    if (a.key, a.value, a.timestamp) != (b.key, b.value, b.timestamp):
        return False
    if _application(a) != _application(b):
        return False
    return _claims_nothing_else(a, b, cluster)


def _application(record: StoredRecord) -> tuple[tuple[str, bytes | None], ...]:
    return tuple(h for h in record.headers if h[0] not in HEADER_NAMES)


def _claims_nothing_else(a: StoredRecord, b: StoredRecord, cluster: str | None) -> bool:
    """Whether ``b``'s provenance, if any, is ``a``'s own (copied as is) or names ``a``."""
    claimed = [raw for key, raw in b.headers if key == ORIGIN]
    if claimed == [raw for key, raw in a.headers if key == ORIGIN]:
        return True  # none, or copied as it was
    try:
        origin = parse(b.headers)
    except ProvenanceError:
        return False
    return origin is not None and (
        (origin.topic, origin.partition, origin.offset) == (a.topic, a.partition, a.offset)
        and (cluster is None or origin.cluster == cluster)
    )


@dataclass(frozen=True, slots=True)
class Confirmed:
    """Where a partition taken over starts, as the target confirms it.

    ``position``: the next source offset to copy; ``ahead``: records the target held past the
    predecessor's saved position (written after it last saved it, not copied again);
    ``confirmed``: the target's last record was found in the source (``False``: the target
    held none of the source's records, or another writer's last; the saved position is used).
    """

    position: int
    ahead: int
    confirmed: bool


def confirm(
    saved: int | None,
    target_tail: Sequence[StoredRecord],
    source: Sequence[StoredRecord],
    cluster: str | None = None,
) -> Confirmed:
    """Where to start a partition its predecessor saved at ``saved`` (``None``: it saved no
    position, so the whole of ``source`` is looked at).

    ``target_tail``: the target partition's last records, oldest first; ``source``: the
    source's records (of cluster ``cluster``) from shortly below ``saved`` on, as far as read.
    The partition starts after the source record the target holds last: the first record from
    the last one below ``saved`` on whose run up to it matches the target's last records
    (:func:`same_record`; a run, not one record: payloads repeat). The first, not the last,
    such record: were the match ambiguous, a record copied twice is counted; one skipped would
    be lost."""
    if saved is None:
        found = confirm(-1, target_tail, source, cluster)
        return Confirmed(found.position, 0, found.confirmed) if found.confirmed else found
    if not target_tail:
        return Confirmed(saved, 0, False)
    below = [i for i, record in enumerate(source) if record.offset < saved]
    first = below[-1] if below else 0  # the source's last record before the position
    for i in range(first, len(source)):
        record = source[i]
        depth = min(len(target_tail), i + 1)
        if all(same_record(source[i - j], target_tail[-1 - j], cluster) for j in range(depth)):
            position = max(saved, record.offset + 1)
            return Confirmed(position, position - saved, True)
    return Confirmed(saved, 0, False)


CONFIRMED_BY_THE_TARGET = "confirmed_by_the_target"
"""Started after the last record the target holds as a copy (at or past a saved position)."""
AT_ITS_SAVED_POSITION = "at_its_saved_position"
"""Started at the position the predecessor saved (the target confirmed no copy past it)."""
BY_START_FROM = "by_start_from"
"""No evidence of the predecessor (no saved position, no confirmed copy): ``START_FROM``."""
OUTCOMES = (CONFIRMED_BY_THE_TARGET, AT_ITS_SAVED_POSITION, BY_START_FROM)

_LISTED_TOPICS = 20  # topics named per outcome in /status and the log; the rest counted


@dataclass(frozen=True, slots=True)
class Decision:
    """Where each partition a takeover looked at starts, and on which evidence.

    ``starts``: the next source offset of each partition taken over (the others start by
    ``START_FROM``); ``evidence``: each partition's outcome (one of :data:`OUTCOMES`);
    ``counts``: what was found on the way (``unconfirmed``: the target held records that are
    no copies of the source's; ``found_by_the_target_only``: confirmed with no saved position;
    ``copied_past_its_saved_position``: records; ``target_missing``: partitions whose target
    partition does not exist, a saved position notwithstanding)."""

    starts: dict[TopicPartition, int]
    evidence: dict[TopicPartition, str]
    counts: Counter[str]

    def partitions(self) -> dict[str, int]:
        """How many partitions started by each outcome."""
        return partition_counts(self.evidence)

    def which(self) -> dict[str, dict[str, str]]:
        """The partitions of each outcome, by topic (:func:`which`)."""
        return which(self.evidence)


def partition_counts(evidence: Mapping[TopicPartition, str]) -> dict[str, int]:
    """How many of the partitions of ``evidence`` started by each outcome."""
    found = Counter(evidence.values())
    return {outcome: found[outcome] for outcome in OUTCOMES}


def which(evidence: Mapping[TopicPartition, str]) -> dict[str, dict[str, str]]:
    """The partitions of each outcome, by topic, as ranges (``0-3,7``); at most
    :data:`_LISTED_TOPICS` topics each, the others counted under ``(more topics)``: the size
    stays bounded whatever the number of partitions."""
    by_outcome: dict[str, dict[str, list[int]]] = {}
    for tp, outcome in sorted(evidence.items()):
        by_outcome.setdefault(outcome, {}).setdefault(tp.topic, []).append(tp.partition)
    shown: dict[str, dict[str, str]] = {}
    for outcome in OUTCOMES:
        topics = by_outcome.get(outcome)
        if not topics:
            continue
        names = sorted(topics)
        listed = {name: _ranges(topics[name]) for name in names[:_LISTED_TOPICS]}
        rest = names[_LISTED_TOPICS:]
        if rest:
            partitions = sum(len(topics[name]) for name in rest)
            listed["(more topics)"] = f"{len(rest)} topics, {partitions} partitions"
        shown[outcome] = listed
    return shown


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 3, 7]`` as ``0-3,7``."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def decide(
    partitions: Iterable[TopicPartition],
    saved: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, Confirmed],
    target_missing: int = 0,
) -> Decision:
    """Where each of ``partitions`` starts, from the evidence: ``saved``, the positions the
    predecessor saved (those whose target is gone already left out), and ``found``, what the
    target's records confirmed (:func:`confirm`; only where its records could be copies at
    all). A confirmed copy moves the start to after it; a saved position stands without one;
    with neither, nothing is taken: ``START_FROM``."""
    starts: dict[TopicPartition, int] = {}
    evidence: dict[TopicPartition, str] = {}
    counts: Counter[str] = Counter(
        target_missing=target_missing,
        copied_past_its_saved_position=0,
        found_by_the_target_only=0,
        unconfirmed=0,
    )
    for tp in partitions:
        position, confirmed = saved.get(tp), found.get(tp)
        if confirmed is not None and not confirmed.confirmed:
            counts["unconfirmed"] += 1
        if confirmed is not None and confirmed.confirmed:
            starts[tp] = confirmed.position
            evidence[tp] = CONFIRMED_BY_THE_TARGET
            counts["copied_past_its_saved_position"] += confirmed.ahead
            counts["found_by_the_target_only"] += position is None
        elif position is not None:
            starts[tp] = position
            evidence[tp] = AT_ITS_SAVED_POSITION
        else:
            evidence[tp] = BY_START_FROM
    return Decision(starts, evidence, counts)


class TargetMarks(Protocol):
    """What a takeover needs of the leg's destination: its log ends, and its marks saved
    (:class:`~replicator.replication.resume.DestinationTail`)."""

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...

    async def save_marks(
        self, marks: dict[TopicPartition, tuple[int, int]], timeout: float
    ) -> None: ...


@dataclass
class Takeover:
    """The predecessor of one leg, and how its partitions are taken over.

    ``group``: the flow's consumer group on the source (MirrorMaker 1's); ``topic``: MirrorMaker
    2's offsets topic on the target; ``target``: a source topic's name on the target;
    ``new_reader``: a started consumer of no group on the source or the target (closed after
    use); ``commit``: commits source offsets under the leg's group; ``keep_handovers``: keeps
    where each partition whose numbers the flow keeps was taken over, for the translation of
    groups' positions (:mod:`replicator.model.handover`); ``clusters``: the flow's source and
    target, as the product names them.
    """

    kind: TakeOver
    source: str
    group: str
    topic: str
    target: Callable[[str], str | None]
    preserve_partitions: bool
    new_reader: Callable[[str], Awaitable[LogReader]]
    tail: TargetMarks
    commit: Callable[[dict[TopicPartition, int]], Awaitable[None]]
    keep_handovers: Callable[[list[Handover]], Awaitable[None]]
    clusters: tuple[str, str]
    timeout: float
    log: Any
    outcome: dict[str, Any] | None = None  # what the last take found (``/status``)
    # Each partition the last take looked at, and on which evidence it started (OUTCOMES).
    evidence: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def predecessor(self) -> str:
        if self.kind is TakeOver.MIRRORMAKER1:
            return f"MirrorMaker 1 (group {self.group} on {self.source})"
        return f"MirrorMaker 2 ({self.topic} on the target)"

    async def take(
        self,
        consumer: LogReader,
        committed: dict[TopicPartition, int | None],
        handed_back: frozenset[TopicPartition] = frozenset(),
    ) -> dict[TopicPartition, int]:
        """Where the partitions the predecessor stands on start: those the leg never committed
        (``committed`` is ``None``) that it left a position or copies of, and those the flow
        handed back (``handed_back``: their last commit is ``replicator hand-back``'s, tagged
        :data:`HANDED_BACK`) that it moved past, or left where they were given. Never a
        partition the leg committed itself since: its committed offset may have moved back (a
        replay, an operator's rewind) below a position MirrorMaker saved long ago. Committed
        under the leg's group, with their destination marks, before they are returned; the
        others resume as they are, or start by ``START_FROM``."""
        if not handed_back and all(offset is not None for offset in committed.values()):
            return {}  # every partition the leg's own: nothing to read
        target_reader = await self.new_reader("target")
        try:
            return await self._take(consumer, target_reader, committed, handed_back)
        finally:
            await target_reader.stop()

    async def _take(
        self,
        consumer: LogReader,
        target_reader: LogReader,
        committed: dict[TopicPartition, int | None],
        handed_back: frozenset[TopicPartition],
    ) -> dict[TopicPartition, int]:
        positions, ran = await self._positions(consumer, target_reader, list(committed))

        def ahead(tp: TopicPartition, position: int) -> bool:
            mine = committed[tp]
            return mine is None or (tp in handed_back and position >= mine)

        saved = {tp: p for tp, p in positions.items() if tp in committed and ahead(tp, p)}
        partitions = [tp for tp in committed if committed[tp] is None or tp in saved]
        if not partitions:
            return {}
        targets = await self._existing_targets(target_reader, partitions)
        gone = [tp for tp in saved if tp not in targets]
        for tp in gone:  # its copies went with the topic: START_FROM (or its own offset)
            del saved[tp]
        found: dict[TopicPartition, Confirmed] = {}
        if self.kind is TakeOver.MIRRORMAKER2 and self.preserve_partitions and targets and ran:
            # MirrorMaker 2 keeps partition numbers: its copies say how far it got. Only where
            # it ran: a target it never copied into holds none of its copies, whatever it holds.
            found = await self._confirm(target_reader, partitions, saved, targets)
        decision = decide(partitions, saved, found, target_missing=len(gone))
        starts = decision.starts
        self.evidence = decision.evidence
        self.outcome = {
            "from": self.predecessor,
            "partitions": decision.partitions(),
            "which": decision.which(),
            **decision.counts,
        }
        if self.kind is TakeOver.MIRRORMAKER2:
            self.outcome["offsets_topic_on_the_target"] = ran
        self._warn_unconfirmed(decision.counts)
        if not starts:
            self._log_none(partitions, decision, ran)
            return {}
        ends = await self.tail.log_ends([targets[tp] for tp in starts if tp in targets])
        marks = {targets[tp]: (ends[targets[tp]], starts[tp]) for tp in starts if tp in targets}
        if marks:
            # Before the offsets: a mark whose offsets were never committed is taken over again.
            await self.tail.save_marks(marks, self.timeout)
        if self.preserve_partitions:
            # Before the offsets too: taken over again, the same handover is kept again.
            await self.keep_handovers(self._handovers(starts, targets, ends))
        await self.commit(starts)
        self._log_taken(decision)
        return starts

    async def _positions(
        self,
        consumer: LogReader,
        target_reader: LogReader,
        partitions: list[TopicPartition],
    ) -> tuple[dict[TopicPartition, int], bool]:
        """The positions the predecessor saved: MirrorMaker 1's group offsets of ``partitions``
        in the source, MirrorMaker 2's Connect offsets in the target; and whether it left a
        trace there at all (MirrorMaker 2's offsets topic exists on the target: its Connect
        worker creates it before it copies anything)."""
        if self.kind is TakeOver.MIRRORMAKER1:
            found = await GroupOffsets(consumer, self.group).fetch(partitions)
            return {tp: offset for tp, offset in found.items() if offset is not None}, True
        if not await partitions_of(target_reader, self.topic):
            return {}, False
        positions = await read_connect_positions(
            target_reader, self.topic, self.source, self.timeout
        )
        return positions, True

    def _handovers(
        self,
        starts: dict[TopicPartition, int],
        targets: dict[TopicPartition, TopicPartition],
        ends: dict[TopicPartition, int],
    ) -> list[Handover]:
        """Where the predecessor handed each partition over, for those it copied some of."""
        at_ms = int(clock.wall() * 1000)
        handovers = []
        for tp, start in starts.items():
            target = targets.get(tp)
            if target is not None and ends[target] > 0:  # MirrorMaker copied some
                source_cluster, target_cluster = self.clusters
                handovers.append(
                    Handover(
                        source=source_cluster,
                        target=target_cluster,
                        topic=tp.topic,
                        partition=tp.partition,
                        target_topic=target.topic,
                        source_offset=start,
                        target_offset=ends[target],
                        predecessor=self.predecessor,
                        at_ms=at_ms,
                    )
                )
        return handovers

    def _log_taken(self, decision: Decision) -> None:
        """Say what was taken over, on which evidence, and what started by ``START_FROM``."""
        where = decision.partitions()
        self.log.info(
            f"took over from {self.predecessor}",
            partitions=len(decision.starts),
            by_policy=where[BY_START_FROM],
            **{k: v for k, v in where.items() if k != BY_START_FROM},
            **decision.counts,
            which=decision.which(),
        )

    def _log_none(self, partitions: list[TopicPartition], decision: Decision, ran: bool) -> None:
        """Say that nothing was taken over, and why."""
        if not ran:
            self.log.info(
                f"nothing of {self.predecessor} to take over: it never ran on the target (its "
                "offsets topic is not there), so no record there is taken for its copy: "
                "START_FROM applies",
                partitions=len(partitions),
                which=decision.which(),
            )
            return
        self.log.info(
            f"nothing of {self.predecessor} to take over (no position saved, no copy of the "
            "source's records on the target): START_FROM applies",
            partitions=len(partitions),
            **decision.counts,
            which=decision.which(),
        )

    def _warn_unconfirmed(self, counts: Counter[str]) -> None:
        """Warn of the partitions whose target holds records that are no copies."""
        if counts["unconfirmed"]:
            self.log.warning(
                "the target's last records are no copies of the source's near the position "
                f"{self.predecessor} saved, or anywhere they were looked for (key, value, "
                "timestamp and headers compared: the target's own records, another writer's, "
                "or records the source no longer holds): those partitions start at the saved "
                "position, or by START_FROM without one (records may be copied again)",
                partitions=counts["unconfirmed"],
            )

    async def _existing_targets(
        self, target_reader: LogReader, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, TopicPartition]:
        """The target partition of each of ``partitions`` that exists (same number)."""
        named = {tp: self.target(tp.topic) for tp in partitions}
        names = {name for name in named.values() if name is not None}
        existing = set(await partitions_of(target_reader, *sorted(names)))
        return {
            tp: TopicPartition(name, tp.partition)
            for tp, name in named.items()
            if name is not None and TopicPartition(name, tp.partition) in existing
        }

    async def _confirm(
        self,
        target_reader: LogReader,
        partitions: list[TopicPartition],
        saved: dict[TopicPartition, int],
        targets: dict[TopicPartition, TopicPartition],
    ) -> dict[TopicPartition, Confirmed]:
        """Where each partition whose target holds records starts, after the source record
        the target holds last: looked for around the saved position, else (none saved: killed
        before it saved one) around the target's last timestamp, which MirrorMaker keeps."""
        wanted = [targets[tp] for tp in partitions if tp in targets]
        starts = await target_reader.beginning_offsets(wanted)
        ends = await target_reader.end_offsets(wanted)
        tails = await read_ranges(
            target_reader,
            {tp: (max(starts[tp], ends[tp] - _RUN), ends[tp]) for tp in wanted},
            self.timeout,
        )
        held = {tp: tails[targets[tp]] for tp in partitions if tp in targets and tails[targets[tp]]}
        if not held:
            return {}
        source_reader = await self.new_reader("source")
        try:
            tps = list(held)
            begins = await source_reader.beginning_offsets(tps)
            source_ends = await source_reader.end_offsets(tps)
            at_time = await source_reader.offsets_for_times(
                {tp: held[tp][-1].timestamp for tp in tps if tp not in saved}
            )
            centre = {
                tp: saved[tp]
                if tp in saved
                else (at_time[tp].offset if at_time.get(tp) else source_ends[tp])
                for tp in tps
            }
            runs = await read_ranges(
                source_reader,
                {
                    tp: (
                        max(begins[tp], centre[tp] - _RUN),
                        min(source_ends[tp], centre[tp] + _RUN),
                    )
                    for tp in tps
                },
                self.timeout,
            )
            result: dict[TopicPartition, Confirmed] = {}
            for tp in tps:
                cluster = self.clusters[0]
                confirmed = confirm(saved.get(tp), held[tp], runs[tp], cluster)
                further_from = max(begins[tp], centre[tp] + _RUN)
                if not confirmed.confirmed and source_ends[tp] > further_from:
                    # Killed, not stopped: its copies may reach further past its position.
                    further_to = min(source_ends[tp], centre[tp] + _AHEAD_LIMIT)
                    further = await read_ranges(
                        source_reader, {tp: (further_from, further_to)}, self.timeout
                    )
                    confirmed = confirm(saved.get(tp), held[tp], runs[tp] + further[tp], cluster)
                result[tp] = confirmed
            return result
        finally:
            await source_reader.stop()
