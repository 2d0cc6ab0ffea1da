"""Taking over from MirrorMaker: its saved positions read, and confirmed by the target."""

from __future__ import annotations

import json

from aiokafka import TopicPartition

from replicator.kafka.readers import StoredRecord
from replicator.replication.takeover import Confirmed, confirm, connect_positions


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
