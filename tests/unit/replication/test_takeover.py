"""Taking over from MirrorMaker: its saved positions read, and confirmed by the target."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndTimestamp

from replicator.config.values import TakeOver
from replicator.kafka.readers import StoredRecord
from replicator.kafka.roles import LogReader
from replicator.model.handover import Handover
from replicator.model.provenance import ORIGIN
from replicator.replication.takeover import (
    Confirmed,
    Takeover,
    confirm,
    connect_positions,
    decide,
    same_record,
)


def _key(
    cluster: str, topic: str, partition: int, connector: str = "MirrorSourceConnector"
) -> bytes:
    return json.dumps(
        [connector, {"cluster": cluster, "partition": partition, "topic": topic}]
    ).encode()


def _offset(offset: int) -> bytes:
    return json.dumps({"offset": offset}).encode()


def test_connect_positions_are_the_record_after_the_last_one_saved_and_the_last_value_wins() -> (
    None
):
    entries = [
        (_key("primary", "orders", 0), _offset(10)),
        (_key("primary", "orders", 1), _offset(4)),
        (_key("primary", "orders", 0), _offset(41)),  # later: wins
        (_key("primary", "payments", 0), _offset(0)),
        (_key("Primary", "payments", 1), _offset(5)),  # another alias: MM2's are case-sensitive
        (_key("backup", "orders", 0), _offset(99)),  # another direction's
        (_key("primary", "orders", 2, connector="OtherConnector"), _offset(7)),
        (_key("primary", "orders", 1), None),  # deleted
        (b"not json", _offset(3)),
        (_key("primary", "orders", 3), b'{"offset": "x"}'),
    ]
    assert connect_positions(entries, "primary") == {
        TopicPartition("orders", 0): 42,
        TopicPartition("payments", 0): 1,
    }


def _records(offsets: range, tag: str = "") -> list[StoredRecord]:
    return [
        StoredRecord("orders", 0, o, f"k{o}".encode(), f"v{o}{tag}".encode(), (("h", b"1"),), 0)
        for o in offsets
    ]


def _copies(source: list[StoredRecord], base: int) -> list[StoredRecord]:
    """Records as MirrorMaker wrote them to the target: same content, other offsets."""
    return [
        StoredRecord("primary.orders", 0, base + i, r.key, r.value, r.headers, r.timestamp)
        for i, r in enumerate(source)
    ]


def test_stopped_cleanly_the_saved_position_is_confirmed() -> None:
    source = _records(range(0, 120))
    target = _copies(source[:100], base=7)  # the target's offsets differ from the source's
    assert confirm(100, target[-16:], source[84:116]) == Confirmed(100, 0, True)


def test_killed_after_copying_past_its_saved_position_starts_after_the_copies() -> None:
    source = _records(range(0, 200))
    target = _copies(source[:130], base=0)  # copied up to 129, saved only 100
    assert confirm(100, target[-16:], source[84:200]) == Confirmed(130, 30, True)


def test_repeated_payloads_are_told_apart_by_the_run_before_them() -> None:
    # Every record has the same content but one: only the run ending at 105 matches.
    source = [
        StoredRecord("orders", 0, o, b"k", b"same" if o != 103 else b"odd", (), 0)
        for o in range(90, 120)
    ]
    target = _copies(source[: 105 - 90 + 1], base=0)  # up to and including offset 105
    assert confirm(100, target[-16:], source) == Confirmed(106, 6, True)


def test_an_ambiguous_match_starts_at_the_first_so_nothing_is_skipped() -> None:
    source = [StoredRecord("orders", 0, o, b"k", b"same", (), 0) for o in range(90, 120)]
    target = _copies(source[:3], base=0)
    assert confirm(100, target, source) == Confirmed(100, 0, True)


def test_an_empty_target_or_another_writer_leaves_the_saved_position_unconfirmed() -> None:
    source = _records(range(0, 120))
    assert confirm(100, [], source[84:]) == Confirmed(100, 0, False)
    foreign = _copies(_records(range(0, 5), tag="-elsewhere"), base=0)
    assert confirm(100, foreign, source[84:]) == Confirmed(100, 0, False)


def test_a_marker_before_the_position_still_confirms() -> None:
    # Offset 99 is a transaction marker: the source's last record below 100 is 98.
    source = [r for r in _records(range(80, 120)) if r.offset != 99]
    target = _copies([r for r in source if r.offset < 100], base=0)
    assert confirm(100, target[-16:], source) == Confirmed(100, 0, True)


def test_without_a_saved_position_the_target_alone_says_where_its_copies_end() -> None:
    # Killed before it saved any position: its copies end at source offset 57.
    source = _records(range(0, 120))
    target = _copies(source[:58], base=0)
    assert confirm(None, target[-16:], source[40:80]) == Confirmed(58, 0, True)
    assert not confirm(None, target[-16:], source[70:110]).confirmed  # not in the window read


# -- Evidence: a target's own records are never copies -------------------------------------------


def _produced(topic: str, partition: int, at_ms: int, count: int = 10) -> list[StoredRecord]:
    """What MirrorMaker 2's tests produce into each cluster's ``test-topic-1`` before the start:
    the same keys and values in both, written at another time in each."""
    return [
        StoredRecord(topic, partition, o, b"key-%d" % o, b"message-%d" % o, (), at_ms + o)
        for o in range(count)
    ]


def test_equal_content_written_at_another_time_is_no_copy() -> None:
    # Identity naming both ways: each cluster's test-topic-1 holds its own records, the same
    # keys, values and headers as the other's, produced some milliseconds later.
    source = _produced("test-topic-1", 0, at_ms=1_000)
    target_own = _produced("test-topic-1", 0, at_ms=1_250)
    assert not same_record(source[3], target_own[3])
    assert confirm(None, target_own, source) == Confirmed(-1, 0, False)
    assert confirm(None, target_own[-1:], source[-1:]) == Confirmed(-1, 0, False)
    # The same records copied (MirrorMaker keeps the timestamp) are copies.
    assert confirm(None, _copies(source, base=0), source) == Confirmed(10, 0, True)


def test_a_record_claiming_another_origin_is_no_copy() -> None:
    record = StoredRecord("orders", 0, 41, b"k", b"v", (("app", b"1"),), 5)

    def with_origin(raw: bytes) -> StoredRecord:
        return StoredRecord("orders", 0, 7, b"k", b"v", (("app", b"1"), (ORIGIN, raw)), 5)

    assert same_record(record, with_origin(b"primary/orders/0/41"), "primary")  # ours
    assert not same_record(record, with_origin(b"primary/orders/0/40"), "primary")
    assert not same_record(record, with_origin(b"primary/orders/1/41"), "primary")
    assert not same_record(record, with_origin(b"backup/orders/0/41"), "primary")
    assert not same_record(record, with_origin(b"not provenance"), "primary")
    # A source record that carries provenance, copied by MirrorMaker as it is: a copy.
    derived = StoredRecord("orders", 0, 41, b"k", b"v", ((ORIGIN, b"dc3/orders/2/9"),), 5)
    copied = StoredRecord("primary.orders", 0, 3, b"k", b"v", derived.headers, 5)
    assert same_record(derived, copied, "primary")


def test_the_decision_names_the_evidence_of_each_partition() -> None:
    tps = [TopicPartition("orders", p) for p in range(6)]
    saved = {tps[0]: 100, tps[1]: 100, tps[2]: 50}
    found = {
        tps[0]: Confirmed(100, 0, True),  # saved, and the target's last copy agrees
        tps[1]: Confirmed(130, 30, True),  # killed after copying past it
        tps[2]: Confirmed(50, 0, False),  # the target's last records are not copies
        tps[3]: Confirmed(58, 0, True),  # killed before it saved: the target alone
        tps[4]: Confirmed(-1, 0, False),  # the target's own records, nothing saved
    }
    decision = decide(tps, saved, found)
    assert decision.starts == {tps[0]: 100, tps[1]: 130, tps[2]: 50, tps[3]: 58}
    assert decision.partitions() == {
        "confirmed_by_the_target": 3,
        "at_its_saved_position": 1,
        "by_start_from": 2,
    }
    assert decision.which() == {
        "confirmed_by_the_target": {"orders": "0-1,3"},
        "at_its_saved_position": {"orders": "2"},
        "by_start_from": {"orders": "4-5"},
    }
    assert decision.counts["unconfirmed"] == 2
    assert decision.counts["found_by_the_target_only"] == 1
    assert decision.counts["copied_past_its_saved_position"] == 30


def test_the_listing_of_partitions_stays_bounded() -> None:
    tps = [TopicPartition(f"t{n:03}", 0) for n in range(25)]
    which = decide(tps, {}, {}).which()
    assert len(which["by_start_from"]) == 21
    assert which["by_start_from"]["(more topics)"] == "5 topics, 5 partitions"


# -- The takeover end to end, on logs in memory ----------------------------------------------------


@dataclass
class _Record:
    """A fetched record as aiokafka hands it over."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: int = 0


class _Cluster:
    """What ``fetch_all_metadata`` answers: the topics of a cluster in memory."""

    def __init__(self, logs: dict[TopicPartition, list[StoredRecord]]) -> None:
        self._logs = logs

    def topics(self) -> set[str]:
        return {tp.topic for tp in self._logs}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {tp.partition for tp in self._logs if tp.topic == topic}


class MemoryLogReader:
    """A consumer of no group over a cluster's logs in memory (the reads a takeover makes)."""

    def __init__(self, logs: dict[TopicPartition, list[StoredRecord]]) -> None:
        self.logs = logs
        self._positions: dict[TopicPartition, int] = {}
        self.stopped = False
        client = SimpleNamespace()

        async def fetch_all_metadata() -> _Cluster:
            return _Cluster(self.logs)

        client.fetch_all_metadata = fetch_all_metadata
        self._client = client

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._positions = dict.fromkeys(partitions, 0)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def pause(self, *partitions: TopicPartition) -> None:
        pass

    def resume(self, *partitions: TopicPartition) -> None:
        pass

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        found: dict[TopicPartition, list[Any]] = {}
        for tp in partitions:
            at = self._positions[tp]
            records = [r for r in self.logs.get(tp, []) if r.offset >= at]
            if records:
                found[tp] = [
                    _Record(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records
                ]
            self._positions[tp] = self.highwater(tp)
        return found

    async def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def highwater(self, tp: TopicPartition) -> int:
        records = self.logs.get(tp, [])
        return records[-1].offset + 1 if records else 0

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {tp: self.logs[tp][0].offset if self.logs.get(tp) else 0 for tp in partitions}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.highwater(tp) for tp in partitions}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Any]:
        found: dict[TopicPartition, Any] = {}
        for tp, at in timestamps.items():
            later = [r for r in self.logs.get(tp, []) if r.timestamp >= at]
            found[tp] = OffsetAndTimestamp(later[0].offset, later[0].timestamp) if later else None
        return found


class _Marks:
    """The destination's log ends and the marks a takeover saves."""

    def __init__(self, target: MemoryLogReader) -> None:
        self._target = target
        self.saved: dict[TopicPartition, tuple[int, int]] = {}

    async def log_ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._target.highwater(tp) for tp in partitions}

    async def save_marks(
        self, marks: dict[TopicPartition, tuple[int, int]], timeout: float
    ) -> None:
        self.saved.update(marks)


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))


@dataclass
class _Flow:
    """One MirrorMaker 2 flow ``primary -> backup`` taken over, on logs in memory."""

    source: MemoryLogReader
    target: MemoryLogReader
    identity: bool = True
    commits: list[dict[TopicPartition, int]] = field(default_factory=list)
    handovers: list[Handover] = field(default_factory=list)
    log: _Log = field(default_factory=_Log)

    def takeover(self) -> tuple[Takeover, _Marks]:
        marks = _Marks(self.target)

        async def new_reader(side: str) -> LogReader:
            return cast(LogReader, self.target if side == "target" else self.source)

        async def commit(offsets: dict[TopicPartition, int]) -> None:
            self.commits.append(offsets)

        async def keep(handovers: list[Handover]) -> None:
            self.handovers.extend(handovers)

        takeover = Takeover(
            kind=TakeOver.MIRRORMAKER2,
            source="primary",
            group="unused",
            topic="mm2-offsets.primary.internal",
            target=(lambda t: t) if self.identity else (lambda t: f"primary.{t}"),
            preserve_partitions=True,
            new_reader=new_reader,
            tail=marks,
            commit=commit,
            keep_handovers=keep,
            clusters=("primary", "backup"),
            timeout=5.0,
            log=self.log,
        )
        return takeover, marks

    async def take(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        takeover, _ = self.takeover()
        self.outcome: dict[str, Any] | None = None
        started = await takeover.take(cast(LogReader, self.source), dict.fromkeys(partitions, None))
        self.outcome = takeover.outcome
        return started


def _test_topic_1(at_ms: int) -> dict[TopicPartition, list[StoredRecord]]:
    return {
        TopicPartition("test-topic-1", p): _produced("test-topic-1", p, at_ms) for p in range(10)
    }


def _offsets_topic(entries: dict[TopicPartition, int]) -> dict[TopicPartition, list[StoredRecord]]:
    topic = TopicPartition("mm2-offsets.primary.internal", 0)
    records = [
        StoredRecord(topic.topic, 0, i, _key("primary", tp.topic, tp.partition), _offset(o), (), 0)
        for i, (tp, o) in enumerate(entries.items())
    ]
    return {topic: records}


async def test_identity_both_ways_where_no_mirrormaker_ran_starts_by_start_from() -> None:
    # The case: 100 records produced in each cluster before the first start, the same
    # keys and values in both; no MirrorMaker ever ran. Nothing is taken for a copy.
    flow = _Flow(MemoryLogReader(_test_topic_1(1_000)), MemoryLogReader(_test_topic_1(1_300)))
    partitions = list(_test_topic_1(0))
    assert await flow.take(partitions) == {}
    assert flow.commits == [] and flow.handovers == []
    assert flow.outcome is not None
    assert flow.outcome["partitions"] == {
        "confirmed_by_the_target": 0,
        "at_its_saved_position": 0,
        "by_start_from": 10,
    }
    assert flow.outcome["which"] == {"by_start_from": {"test-topic-1": "0-9"}}
    assert flow.outcome["offsets_topic_on_the_target"] is False
    ((level, event, fields),) = flow.log.lines
    assert level == "info" and "never ran on the target" in event and "START_FROM" in event
    assert fields["which"] == {"by_start_from": {"test-topic-1": "0-9"}}


async def test_identity_both_ways_after_a_mirrormaker_ran_its_copies_alone_count() -> None:
    # MirrorMaker 2 ran (its offsets topic is there, killed before it saved a position): the
    # target's own records, written at another time, are still no copies; partition 0's last
    # records are MirrorMaker's copies of the source's first three: it starts after them.
    source_logs = _test_topic_1(1_000)
    target_logs = _test_topic_1(1_300)
    tp0 = TopicPartition("test-topic-1", 0)
    copies = [
        StoredRecord("test-topic-1", 0, 10 + i, r.key, r.value, r.headers, r.timestamp)
        for i, r in enumerate(source_logs[tp0][:3])
    ]
    target_logs[tp0] = target_logs[tp0] + copies
    flow = _Flow(
        MemoryLogReader(source_logs), MemoryLogReader({**target_logs, **_offsets_topic({})})
    )
    started = await flow.take(list(source_logs))
    assert started == {tp0: 3}
    assert flow.commits == [{tp0: 3}]
    assert flow.outcome is not None
    assert flow.outcome["partitions"] == {
        "confirmed_by_the_target": 1,
        "at_its_saved_position": 0,
        "by_start_from": 9,
    }
    assert flow.outcome["which"] == {
        "confirmed_by_the_target": {"test-topic-1": "0"},
        "by_start_from": {"test-topic-1": "1-9"},
    }
    assert flow.outcome["unconfirmed"] == 9 and flow.outcome["found_by_the_target_only"] == 1
    levels = [(level, event.split(" (")[0].split(":")[0]) for level, event, _ in flow.log.lines]
    assert levels == [
        (
            "warning",
            "the target's last records are no copies of the source's near the position "
            "MirrorMaker 2",
        ),
        ("info", "took over from MirrorMaker 2"),
    ]


async def test_saved_positions_are_evidence_the_target_confirms_or_not() -> None:
    source_logs = {
        TopicPartition("orders", p): [
            StoredRecord("orders", p, o, b"k%d" % o, b"v%d" % o, (), 10_000 + o) for o in range(20)
        ]
        for p in range(3)
    }
    tp0, tp1, tp2 = sorted(source_logs)
    target_logs = {
        # Stopped cleanly after copying 12: saved 12.
        TopicPartition("primary.orders", 0): [
            StoredRecord("primary.orders", 0, i, r.key, r.value, r.headers, r.timestamp)
            for i, r in enumerate(source_logs[tp0][:12])
        ],
        # Another writer's records only: the saved position stands.
        TopicPartition("primary.orders", 1): [
            StoredRecord("primary.orders", 1, 0, b"k0", b"v0", (), 99)
        ],
        TopicPartition("primary.orders", 2): [],
    }
    offsets = _offsets_topic({tp0: 11, tp1: 4})  # Connect saves the last record copied
    flow = _Flow(
        MemoryLogReader(source_logs), MemoryLogReader({**target_logs, **offsets}), identity=False
    )
    assert await flow.take([tp0, tp1, tp2]) == {tp0: 12, tp1: 5}
    assert flow.outcome is not None
    assert flow.outcome["which"] == {
        "confirmed_by_the_target": {"orders": "0"},
        "at_its_saved_position": {"orders": "1"},
        "by_start_from": {"orders": "2"},
    }
    assert flow.outcome["offsets_topic_on_the_target"] is True
