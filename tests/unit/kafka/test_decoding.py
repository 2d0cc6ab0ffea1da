"""A fetch that meets a record the client cannot decode (kafka/decoding.py, kafka/internals.py):
the records before it are handed over, the position stays on it, and the consumer that fetched it
is told which."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord

from replicator.kafka.decoding import as_fetched, take_poisoned, use_decoded_records
from replicator.kafka.internals import HeaderKey, _decoded, _getall, _with_raw_keys
from replicator.kafka.producer import BatchFactory
from replicator.model.batching import Target, build
from replicator.model.provenance import Tagger

TP = TopicPartition("orders_REPLICA", 0)


class _Records:
    """aiokafka's PartitionRecords: offsets from ``first``; the one at ``bad`` raises."""

    def __init__(self, first: int, last: int, bad: int | None, error: Exception) -> None:
        self.next_fetch_offset = first
        self._consumer_record = _decoded  # what a data-path consumer's records carry
        self._iterator = self._records(first, last, bad, error)

    def _records(self, first: int, last: int, bad: int | None, error: Exception) -> Iterator[int]:
        for offset in range(first, last + 1):
            if offset == bad:
                raise error
            self.next_fetch_offset = offset + 1
            yield offset

    def __iter__(self) -> Iterator[int]:
        return self._iterator


class _Result:
    """aiokafka's FetchResult, as much of it as ``getall`` uses."""

    def __init__(self, records: _Records, assignment: Any) -> None:
        self._topic_partition = TP
        self._partition_records: _Records | None = records
        self._assignment = assignment
        self.position: int | None = None

    def check_assignment(self, tp: TopicPartition) -> bool:
        return True

    def has_more(self) -> bool:
        return self._partition_records is not None

    def _update_position(self) -> None:
        assert self._partition_records is not None
        self.position = self._partition_records.next_fetch_offset


def _consumer(assignment: Any) -> Any:
    return SimpleNamespace(
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment))
    )


@pytest.fixture(autouse=True)
def _fast_path() -> None:
    """The fetch path installed, as ``replicator run`` installs it (its undecodable records are
    noted for their consumers)."""
    assert use_decoded_records()


def test_the_records_before_an_undecodable_one_are_handed_over_and_it_is_named() -> None:
    mine, other = SimpleNamespace(active=True), SimpleNamespace(active=True)
    bad = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    result = _Result(_Records(40, 99, 50, bad), mine)
    assert _getall(result) == list(range(40, 50))
    assert result.position == 50 and not result.has_more()
    elsewhere = _Result(_Records(0, 9, 3, bad), other)
    assert _getall(elsewhere) == [0, 1, 2]
    (poison,) = take_poisoned(_consumer(mine))
    assert (poison.tp, poison.offset) == (TP, 50) and "UnicodeDecodeError" in poison.error
    assert take_poisoned(_consumer(mine)) == []  # taken once
    (theirs,) = take_poisoned(_consumer(other))  # another consumer's record is kept for it
    assert theirs.offset == 3


def test_a_whole_fetch_is_handed_over_and_a_corrupt_batch_is_fetched_again() -> None:
    assignment = SimpleNamespace(active=True)
    whole = _Result(_Records(0, 4, None, ValueError()), assignment)
    assert _getall(whole) == [0, 1, 2, 3, 4] and whole.position == 5
    corrupt = _Result(_Records(0, 4, 2, CorruptRecordException("crc")), assignment)
    with pytest.raises(CorruptRecordException):
        _getall(corrupt)
    assert take_poisoned(_consumer(assignment)) == []


def _fetched(key_deserializer: Any) -> list[Any]:
    """Three records fetched, as aiokafka's fetcher hands them to a consumer made with
    ``key_deserializer``."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for offset in range(3):
        builder.append(offset, 1_000 + offset, b"k%d" % offset, b"v", [("h", b"1")])
    records = PartitionRecords(
        TP, MemoryRecords(bytes(builder.build())), [], 0, key_deserializer, None, True, 0
    )
    subscription = SubscriptionState()
    subscription.assign_from_user({TP})
    assignment = subscription.subscription.assignment
    assignment.state_value(TP).reset_to(0)
    result = FetchResult(TP, assignment=assignment, partition_records=records, backoff=0)
    return list(result.getall())


async def test_only_the_data_paths_consumers_get_records_unwrapped() -> None:
    """The fast path is per consumer: a checkpoint or failover reader in the same process gets
    aiokafka's ConsumerRecord (with its topic and partition), never the bare decoded record."""
    assert use_decoded_records()
    wrapped = _fetched(None)
    assert [type(r) for r in wrapped] == [ConsumerRecord] * 3
    assert [(r.topic, r.partition, r.offset, r.key) for r in wrapped] == [
        (TP.topic, 0, n, b"k%d" % n) for n in range(3)
    ]
    bare = _fetched(as_fetched)
    assert not any(isinstance(r, ConsumerRecord) for r in bare)
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in bare] == [
        (n, b"k%d" % n, b"v", [("h", b"1")]) for n in range(3)
    ]


def _read_back(builder: Any) -> list[Any]:
    """A built batch's records, header keys that are not UTF-8 kept as their bytes (numbered
    first, as an idempotent producer numbers it)."""
    builder._set_producer_state(7, 0, 0)
    decoded = _with_raw_keys(bytes(builder._build()), 0)
    assert decoded is not None
    return decoded[0]


def _batch_with_a_raw_key(raw_key: bytes) -> bytes:
    """Five records as a Java client may write them: the third has a header key that is not
    UTF-8 (built in Python, as the replicator builds such a batch)."""
    builder = BatchFactory(1 << 20, 0).raw_keys()
    for offset in range(5):
        key = HeaderKey(raw_key.decode("utf-8", "surrogateescape")) if offset == 2 else "h"
        builder.append(timestamp=1_000 + offset, key=b"k%d" % offset, value=b"v",
                       headers=[(key, b"%d" % offset), ("trace", b"t")])  # fmt: skip
    return bytes(builder._build())


async def test_a_header_key_that_is_not_utf8_is_handed_over_as_its_bytes() -> None:
    """aiokafka's C decoder refuses the third record; the fetch path decodes the rest of that
    batch in Python, the key kept as its bytes, and goes on after the batch: no halt."""
    raw_key = b"\xff\xfeid"
    records = PartitionRecords(
        TP, fetcher.MemoryRecords(_batch_with_a_raw_key(raw_key)), [], 0, as_fetched, None,
        True, 0,
    )  # fmt: skip
    subscription = SubscriptionState()
    subscription.assign_from_user({TP})
    assignment = subscription.subscription.assignment
    assignment.state_value(TP).reset_to(0)
    result = FetchResult(TP, assignment=assignment, partition_records=records, backoff=0)
    got = list(result.getall())
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert assignment.state_value(TP).position == 5
    assert take_poisoned(_consumer(assignment)) == []
    key = got[2].headers[0][0]
    assert isinstance(key, HeaderKey) and key.raw == raw_key
    assert [h[0] for r in got for h in r.headers if r.offset != 2] == ["h", "trace"] * 4

    # Copied: the batch that takes the key is built in Python; the key's bytes are unchanged.
    target = Target(0, BatchFactory(1 << 20, 0))
    build(got, 5, Tagger("dc1", "orders_REPLICA", 0), [target], 0)
    copied = [r for b in target.batches for r in _read_back(b.builder)]
    assert len(copied) == 5
    assert [r.key for r in copied] == [b"k%d" % n for n in range(5)]
    copied_key = copied[2].headers[0][0]
    assert isinstance(copied_key, HeaderKey) and copied_key.raw == raw_key
    assert copied[2].headers[-1][0] == "replicator"  # provenance, as on every record
