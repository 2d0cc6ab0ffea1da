"""The native batch path against the reference, on the same fetched bytes.

Record sets are generated as a source cluster's log may hold them (record batch v2, every codec,
CreateTime and LogAppendTime, transactions committed and aborted with their markers, null keys
and values, header keys that are not UTF-8, provenance of every kind the loop rule knows) and
fetched from any position by aiokafka's fetcher objects. Each fetch is handed over twice: as
aiokafka decodes it (the reference, built into batches by :mod:`replicator.model.batching`'s
Python loops) and as a native record set (built by ``replicator._native``). Both must agree on
everything: the records, the position after them, every batch's source range, count, payload
size and oldest time, the provenance counts, and each batch's bytes once numbered by a producer
(producer id, epoch and sequence stamped, CRC over them).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from aiokafka import TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import CorruptRecordException
from aiokafka.record._crc32c import crc as crc32c
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.kafka.decoding import as_fetched, as_record_sets, use_decoded_records
from replicator.kafka.internals import HeaderKey, _getall
from replicator.kafka.producer import BatchFactory
from replicator.model import native
from replicator.model.batching import OutboundBatch, Placement, Target, build, build_placed
from replicator.model.provenance import Tagger

pytestmark = pytest.mark.skipif(not native.available(), reason=native.reason())

TOPIC = "orders_REPLICA"
TP = TopicPartition(TOPIC, 0)
TAGGER_ARGS = ("dc1", TOPIC, 0, "dc2", ("dc2",))
FETCHED_MS = 1_800_000_000_000
PRODUCER = (4242, 7, 1_000)  # the destination producer's id, epoch and first sequence

# -- generated source logs -------------------------------------------------------------------------

_names = st.sampled_from(["trace", "id", "h", "", "replicatorx", "x" * 20])
_raw_keys = st.sampled_from([b"\xff\xfeid", b"\xc3(", b"ok\x80"])  # not UTF-8
_values = st.one_of(st.none(), st.binary(max_size=40))
_provenance_values = st.sampled_from(
    [
        b"dc2/orders_REPLICA/1/5",  # names the topic it sits in: a loop
        b"dc2/payments/0/17",  # another topic: derived
        b"dc2/REPLICA/0/3",  # the home's renamed copy ("orders_" names no home mark): derived
        b"dc1/orders/3/0",
        b"dc2/orders/3/0",  # home, and "orders_REPLICA" ends with... not "orders": derived
        b"not provenance",
        b"dc2/orders/01/5",  # not canonical
        b"dc2/orders/2147483648/5",  # partition out of range
        b"DC2/orders/1/5",  # cluster not lower-case
    ]
)


@st.composite
def _headers(draw: st.DrawFn) -> list[tuple[Any, bytes | None]]:
    headers: list[tuple[Any, bytes | None]] = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 9)) == 0:
            raw = draw(_raw_keys)
            headers.append((HeaderKey(raw.decode("utf-8", "surrogateescape")), draw(_values)))
        else:
            headers.append((draw(_names), draw(_values)))
    kind = draw(st.integers(0, 9))
    if kind == 0:
        headers.append(("replicator", draw(_provenance_values)))
    elif kind == 1:
        headers.append(("replicator", None))
    elif kind == 2:
        headers.append(("replicator", draw(_provenance_values)))
        headers.append(("replicator", draw(_provenance_values)))
    elif kind == 3:
        headers.append(("replicator-upstream", draw(_provenance_values)))
    return headers


@st.composite
def _record(draw: st.DrawFn) -> tuple[int, bytes | None, bytes | None, list[Any]]:
    timestamp = 1_700_000_000_000 + draw(st.integers(-5_000, 5_000))
    key = draw(st.one_of(st.none(), st.binary(max_size=16)))
    value = draw(st.one_of(st.none(), st.binary(max_size=120)))
    return timestamp, key, value, draw(_headers())


def _finish(data: bytearray, attributes: int | None = None, max_ts: int | None = None) -> bytes:
    """A built batch with its attributes and max timestamp changed as a broker would, the CRC
    computed again."""
    if attributes is not None:
        struct.pack_into(">h", data, 21, attributes)
    if max_ts is not None:
        struct.pack_into(">q", data, 35, max_ts)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def _batch(base: int, records: list[Any], codec: int, log_append: bool, pid: int) -> bytes:
    builder = _DefaultRecordBatchBuilderPy(
        2, codec, pid >= 0, pid, 0 if pid >= 0 else -1, 0, 1 << 24
    )
    gap = 0
    for i, (timestamp, key, value, headers) in enumerate(records):
        gap += 1 if i % 7 == 6 else 0  # a compacted log: offsets with gaps
        builder.append(i + gap, timestamp, key, value, headers)
    data = builder.build()
    struct.pack_into(">q", data, 0, base)
    attributes = struct.unpack_from(">h", data, 21)[0]
    if log_append:
        return _finish(data, attributes | 0x08, 1_750_000_000_000)
    return _finish(data)


def _marker(base: int, pid: int, commit: bool) -> bytes:
    builder = _DefaultRecordBatchBuilderPy(2, 0, 1, pid, 0, 0, 1 << 20)
    builder.append(0, 1_700_000_000_000, b"\x00\x00\x00" + bytes([commit]), b"\x00" * 6, [])
    data = builder.build()
    struct.pack_into(">q", data, 0, base)
    return _finish(data, 0x10 | 0x20)


@st.composite
def source_logs(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int]], int, int]:
    """A fetch answer's bytes, its aborted transactions, a fetch position in it, its log end."""
    parts: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    offset = draw(st.integers(0, 1_000))
    start, first_end = offset, None
    for n in range(draw(st.integers(1, 5))):
        records = draw(st.lists(_record(), min_size=1, max_size=25))
        codec = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
        log_append = draw(st.booleans())
        kind = draw(st.sampled_from(["plain", "plain", "committed", "aborted"]))
        pid = -1 if kind == "plain" else 100 + n
        batch = _batch(offset, records, codec, log_append, pid)
        parts.append(batch)
        last_delta = struct.unpack_from(">i", batch, 23)[0]
        if kind == "aborted":
            aborted.append((pid, offset))
        offset += last_delta + 1
        first_end = first_end or offset
        if kind != "plain":
            parts.append(_marker(offset, pid, kind == "committed"))
            offset += 1
    raw = b"".join(parts)
    if draw(st.booleans()):
        raw += parts[0][: draw(st.integers(1, len(parts[0]) - 1))]  # a partial batch at the end
    # Fetched from inside the first batch, at times (a broker answers from the batch that holds
    # the position: never from one that ends before it).
    position = min(start + draw(st.integers(0, 3)), (first_end or start + 1) - 1)
    return raw, aborted, position, offset


# -- the two fetch paths ---------------------------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _fetch_path() -> Iterator[None]:
    assert use_decoded_records(record_sets=True)
    yield
    # Process-wide: the tests after these in this worker (the integration tests' source
    # consumers among them) get decoded records again, not record sets.
    assert use_decoded_records(record_sets=False)
    _LOOP.close()


_LOOP = asyncio.new_event_loop()  # the subscriptions' futures' loop (never run)


def _fetch(raw: bytes, aborted: list[Any], position: int, marker: Any) -> tuple[Any, int]:
    """The records aiokafka's fetcher hands over for ``raw``, fetched at ``position`` by a
    consumer marked with ``marker``, and the consumer's position after them."""
    return _LOOP.run_until_complete(_fetched(raw, aborted, position, marker))


def _fetch_all(raw: bytes, aborted: list[Any], position: int, marker: Any) -> tuple[Any, int]:
    """:func:`_fetch` again from each position until it moves no more: the reference ends a
    fetch after a batch with a header key that is not UTF-8 (decoded in Python), the native
    path goes on, so their records compare over the whole answer."""
    handed, moved = _fetch(raw, aborted, position, marker)
    if native.is_record_set(handed):
        return handed, moved
    records = list(handed)
    while moved != position:
        position = moved
        more, moved = _fetch(_from(raw, position), aborted, position, marker)
        records.extend(more)
    return records, moved


def _from(raw: bytes, position: int) -> bytes:
    """What a broker answers a fetch at ``position`` with: the batches from the one holding it."""
    at = 0
    while at + 61 <= len(raw):
        base, length = struct.unpack_from(">qi", raw, at)
        if base + struct.unpack_from(">i", raw, at + 23)[0] >= position:
            break
        at += 12 + length
    return raw[at:]


async def _fetched(raw: bytes, aborted: list[Any], position: int, marker: Any) -> tuple[Any, int]:
    records = PartitionRecords(
        TP, fetcher.MemoryRecords(raw), list(aborted), position, marker, None, True, 1
    )
    subscription = SubscriptionState()
    subscription.assign_from_user({TP})
    assignment = subscription.subscription.assignment
    assignment.state_value(TP).reset_to(position)
    result = FetchResult(TP, assignment=assignment, partition_records=records, backoff=0)
    handed = _getall(result)
    return handed, assignment.state_value(TP).position


def _as_tuples(records: Any) -> list[Any]:
    if native.is_record_set(records):
        return records.records()
    return [
        (
            r.offset,
            r.timestamp,
            r.timestamp_type,
            r.key,
            r.value,
            [(k.encode("utf-8") if isinstance(k, str) else k, v) for k, v in r.headers],
        )
        for r in records
    ]


@contextmanager
def _gzip_at_a_fixed_time() -> Iterator[None]:
    """gzip writes the time into its header: fixed, so that two compressions compare."""
    with mock.patch("gzip.time.time", return_value=1_700_000_000.0):
        yield


def _numbered(batch: OutboundBatch) -> tuple[Any, ...]:
    """A batch as compared: its range, counts and, when it has records, its bytes once numbered
    by the destination's producer."""
    data = None
    if batch.builder is not None and batch.count:
        batch.builder._set_producer_state(*PRODUCER)
        data = bytes(batch.builder._build())
    return (batch.first, batch.end, batch.count, batch.size, batch.oldest_ms, batch.partition, data)


_targets = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.sampled_from([90, 300, 1_000, 1 << 20]),
        st.sampled_from([0, 0, 1, 2, 3, 4]),
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source_logs(), _targets)
def test_native_batches_are_the_reference_batches_byte_for_byte(
    log: tuple[bytes, list[tuple[int, int]], int, int], targets: list[tuple[int, int, int]]
) -> None:
    raw, aborted, position, _ = log
    decoded, decoded_position = _fetch_all(raw, aborted, position, as_fetched)
    kept, kept_position = _fetch_all(raw, aborted, position, as_record_sets)
    assert decoded_position == kept_position
    if not decoded:
        assert not kept
        return
    assert native.is_record_set(kept)
    assert _as_tuples(kept) == _as_tuples(decoded)
    assert kept.end == decoded[-1].offset + 1 and len(kept) == len(decoded)
    assert kept.payload_size == sum(len(r.key or b"") + len(r.value or b"") for r in decoded)

    end = kept.end
    with _gzip_at_a_fixed_time():
        results = []
        for records in (decoded, kept):
            made = [
                Target(position + skip, BatchFactory(limit, codec))
                for skip, limit, codec in targets
            ]
            build(records, end, Tagger(*TAGGER_ARGS), made, FETCHED_MS)
            results.append([([_numbered(b) for b in t.batches], dict(t.marked)) for t in made])
    assert results[1] == results[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source_logs(),
    st.integers(1, 7),
    st.sets(st.integers(0, 1_100), max_size=20),
    st.sampled_from([120, 1_000, 1 << 20]),
    st.sampled_from([0, 3, 4]),
)
def test_native_batches_placed_by_key_are_the_reference_batches(
    log: tuple[bytes, list[tuple[int, int]], int, int],
    partitions: int,
    written: set[int],
    limit: int,
    codec: int,
) -> None:
    raw, aborted, position, _ = log
    decoded, _ = _fetch_all(raw, aborted, position, as_fetched)
    kept, _ = _fetch_all(raw, aborted, position, as_record_sets)
    if not decoded:
        return
    placement = Placement(partitions, frozenset(written))
    results = []
    for records in (decoded, kept):
        placed = build_placed(
            records, position, records_end(records), Tagger(*TAGGER_ARGS), placement,
            BatchFactory(limit, codec), FETCHED_MS,
        )  # fmt: skip
        results.append(
            ([_numbered(b) for b in placed.batches], dict(placed.marked), placed.already_written)
        )
    assert results[1] == results[0]


def records_end(records: Any) -> int:
    return records.end if native.is_record_set(records) else records[-1].offset + 1


@given(st.binary(min_size=0, max_size=64))
def test_key_placement_is_kafkas_murmur2(key: bytes) -> None:
    from replicator.model.batching import place

    for partitions in (1, 3, 12, 1000):
        assert native.native().place(key, 5, partitions) == place(key, 5, partitions)
    assert native.native().place(None, 17, 4) == place(None, 17, 4)


def test_a_corrupt_batch_is_fetched_again_on_both_paths() -> None:
    good = _batch(0, [(1_700_000_000_000, b"k", b"v", [])] * 3, 0, False, -1)
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the CRC no longer holds
    for marker in (as_fetched, as_record_sets):
        with pytest.raises(CorruptRecordException):
            _fetch(bytes(bad), [], 0, marker)


def test_a_batch_that_cannot_be_decompressed_halts_both_paths_at_it() -> None:
    first = _batch(0, [(1_700_000_000_000, b"k", b"v", [])] * 3, 0, False, -1)
    broken = bytearray(_batch(3, [(1_700_000_000_000, b"k", b"v" * 50, [])] * 3, 4, False, -1))
    broken[61:70] = b"\x00" * 9  # not zstd any more
    raw = first + _finish(broken)
    decoded, decoded_position = _fetch(raw, [], 0, as_fetched)
    kept, kept_position = _fetch(raw, [], 0, as_record_sets)
    assert [r.offset for r in decoded] == [0, 1, 2] and decoded_position == 3
    assert _as_tuples(kept) == _as_tuples(decoded) and kept_position == 3
