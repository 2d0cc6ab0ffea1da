"""The Spark provenance columns agree with replicator.model.provenance, record by record, and the
audit's comparison works on records in memory.

One local Spark session (no Kafka): each case is a source record's headers; the columns
(``origin_columns``, ``marking``, ``with_provenance``) must give what ``provenance.parse``,
``provenance.marking`` and ``Tagger.retag`` give for the same headers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence

import pytest

from replicator.errors import ProvenanceError
from replicator.model import provenance
from replicator.model.provenance import (
    LEGACY_HEADERS,
    ORIGIN,
    UPSTREAM,
    Header,
    Marking,
    Provenance,
    Tagger,
)

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, Row, SparkSession  # noqa: E402

from replicator.spark.audit import COUNTS, Route, compare, narrowed, narrowed_flows  # noqa: E402
from replicator.spark.frames import (  # noqa: E402
    REPLICATED,
    marking,
    origin_columns,
    parsed,
    with_provenance,
)

TOPIC = "orders_REPLICA"
_SCHEMA = (
    "topic string, partition int, offset long, headers array<struct<key: string, value: binary>>"
)
PARTITION, OFFSET = 2, 41
_Stored = tuple[str, int, int, bytes, Sequence[Header]]


def _legacy(cluster: str, topic: str, partition: int, offset: int) -> list[Header]:
    values = (cluster, topic, str(partition), str(offset))
    return [(k, v.encode()) for k, v in zip(LEGACY_HEADERS, values, strict=True)]


CASES: dict[str, Sequence[Header]] = {
    "untagged": [("trace-id", b"t1"), ("app", b"orders-service")],
    "no headers": [],
    "loop, same cluster": [("a", b"1"), *Provenance("dc1", TOPIC, 0, 7).headers()],
    "loop, other cluster": Provenance("dc2", TOPIC, 3, 9).headers(),
    "derived": [
        ("a", b"1"),
        *Provenance("dc2", "payments_REPLICA", 1, 5).headers(),
        ("b", None),
    ],
    "derived, carrying an upstream": [
        (UPSTREAM, b"dc3/x_REPLICA/0/0"),
        (ORIGIN, b"dc2/enriched_REPLICA/0/12"),
        ("a", b"1"),
    ],
    "only an upstream header": [("a", b"1"), (UPSTREAM, b"dc2/orders_REPLICA/0/5")],
    "topic that merely starts like ours": Provenance("dc2", TOPIC + "_2", 0, 1).headers(),
    "largest partition and offset": Provenance("dc2", "t", 2**31 - 1, 2**63 - 1).headers(),
    "repeated": [*Provenance("dc2", "t", 0, 1).headers(), *Provenance("dc2", "t", 0, 1).headers()],
    "garbage": [(ORIGIN, b"not provenance")],
    "empty value": [(ORIGIN, b"")],
    "null value": [(ORIGIN, None)],
    "trailing newline": [(ORIGIN, b"dc2/t/0/1\n")],
    "leading zero": [(ORIGIN, b"dc2/t/01/1")],
    "upper-case cluster": [(ORIGIN, b"DC2/t/0/1")],
    "partition out of range": [(ORIGIN, b"dc2/t/2147483648/1")],
    "offset out of range": [(ORIGIN, b"dc2/t/0/9223372036854775808")],
    "non-ASCII": [(ORIGIN, "dc2/tö/0/1".encode())],
    "five fields": [(ORIGIN, b"dc2/t/0/1/2")],
    "a pre-0.1.0 build's four headers": [("a", b"1"), *_legacy("dc2", TOPIC, 4, 77)],
    "a pre-0.1.0 build's headers, one missing": _legacy("dc2", TOPIC, 4, 77)[1:],
    "a pre-0.1.0 build's headers, beside today's": [
        *_legacy("dc2", TOPIC, 4, 77),
        *Provenance("dc2", "t", 0, 1).headers(),
    ],
}


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # The workers run this interpreter, as replicator.spark.session sets it for the jobs: the
    # first python3 on the PATH may be another minor version, which PySpark refuses.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[1]")
        .appName("test-spark-provenance")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _expected_origin(headers: Sequence[Header]) -> tuple[str, str, int, int] | None:
    """What the audit takes a record to be a copy of: its provenance, or else the four headers
    of a pre-0.1.0 build."""
    try:
        found = provenance.parse(headers) or provenance.legacy_origin(headers)
    except ProvenanceError:
        return None
    return None if found is None else (found.cluster, found.topic, found.partition, found.offset)


def _headers(column: list[Row]) -> list[Header]:
    return [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in column]


def test_columns_agree_with_the_provenance_module(spark: SparkSession) -> None:
    names = list(CASES)
    frame = spark.createDataFrame(
        [(name, TOPIC, PARTITION, OFFSET, CASES[name]) for name in names],
        "name string, " + _SCHEMA,
    )
    rows = {
        r["name"]: r
        for r in parsed(frame)
        .select(
            "name",
            *origin_columns(),
            marking().alias("marking"),
            with_provenance("dc1").alias("written"),
        )
        .collect()
    }
    tagger = Tagger("dc1", TOPIC, PARTITION)
    marks = set()
    for name in names:
        headers, row = CASES[name], rows[name]
        origin = (row["o_cluster"], row["o_topic"], row["o_partition"], row["o_offset"])
        expected = _expected_origin(headers)
        assert origin == (expected or (None, None, None, None)), name
        mark, written = tagger.retag(headers, OFFSET)
        assert row["marking"] == mark.value == provenance.marking(headers, TOPIC).value, name
        marks.add(mark)
        assert (row["marking"] in REPLICATED) == mark.replicated, name
        if written is not None:
            assert _headers(row["written"]) == written, name
    assert marks == set(Marking)


def test_an_untagged_record_gets_exactly_the_live_replicators_headers(spark: SparkSession) -> None:
    headers: list[Header] = [("trace-id", b"t1"), ("app", None)]
    frame = spark.createDataFrame(
        [(TOPIC, 0, 1042, headers)],
        _SCHEMA,
    )
    (row,) = frame.select(with_provenance("dc1").alias("h")).collect()
    written = _headers(row["h"])
    assert written == Tagger("dc1", TOPIC, 0).tag(headers, 1042)
    assert written[-1] == (ORIGIN, b"dc1/orders_REPLICA/0/1042")


def _stored(spark: SparkSession, clusters: dict[str, Iterable[_Stored]]) -> DataFrame:
    """The records each cluster holds, as the audit reads them (key ``k``)."""
    return spark.createDataFrame(
        [
            (cluster, topic, partition, offset, b"k", value, headers)
            for cluster, records in clusters.items()
            for topic, partition, offset, value, headers in records
        ],
        "cluster string, topic string, partition int, offset long, key binary, value binary, "
        "headers array<struct<key: string, value: binary>>",
    )


def test_the_audit_compares_by_the_replica_topics_it_was_given(spark: SparkSession) -> None:
    """The audit's comparison on records in memory (no Kafka): a real topic whose own name ends
    with the suffix (``x_REPLICA``, fed by ``x_REPLICA_REPLICA``) is audited as a real topic;
    dc2 misses the last source record (lag) and holds one copy twice."""
    replica, real = "x_REPLICA_REPLICA", "x_REPLICA"

    def copy(offset: int) -> tuple[str, int, int, bytes, Sequence[Header]]:
        tag = Provenance("dc1", replica, 0, offset).headers()
        return real, 0, offset, b"v%d" % offset, [("trace-id", b"t"), *tag]

    sources = [(replica, 0, o, b"v%d" % o, [("trace-id", b"t")]) for o in range(3)]
    dc1 = [*sources, *(copy(o) for o in range(3))]
    dc2 = [copy(0), copy(0), copy(1)]
    frame = _stored(spark, {"dc1": dc1, "dc2": dc2})
    report = compare(spark, narrowed(frame, [real], "_REPLICA", 2), ["dc1", "dc2"])
    counts = {
        (r.cluster, r.topic, r.origin): {c: getattr(r, c) for c in COUNTS if getattr(r, c)}
        for r in report
    }
    assert counts == {
        ("dc1", real, "dc1"): {"expected": 3, "delivered": 3},
        ("dc2", real, "dc1"): {
            "expected": 3,
            "delivered": 2,
            "missing": 1,
            "lag": 1,
            "duplicates": 1,
        },
    }


def test_copies_a_pre_0_1_build_wrote_are_audited_as_copies(spark: SparkSession) -> None:
    """dc2 holds records 0 and 1 as a pre-0.1.0 build wrote them (four headers) and 2 as this
    version writes it: all three delivered, none untagged; 1's value altered is found."""
    sources = [("x_REPLICA", 0, o, b"v%d" % o, [("trace-id", b"t")]) for o in range(3)]

    def old(offset: int, value: bytes) -> _Stored:
        return "x", 0, offset, value, [("trace-id", b"t"), *_legacy("dc1", "x_REPLICA", 0, offset)]

    new = Provenance("dc1", "x_REPLICA", 0, 2).headers()
    dc2 = [old(0, b"v0"), old(1, b"v1"), ("x", 0, 2, b"v2", [("trace-id", b"t"), *new])]
    for held, faults in ((dc2, {}), ([old(0, b"v0"), old(1, b"bad"), dc2[2]], {"mismatched": 1})):
        frame = _stored(spark, {"dc1": sources, "dc2": held})
        report = compare(spark, narrowed(frame, ["x"], "_REPLICA", 2), ["dc2"])
        found = [r for r in report if r.cluster == "dc2"]
        counts = [{c: getattr(r, c) for c in COUNTS if getattr(r, c)} for r in found]
        assert counts == [{"expected": 3, "delivered": 3, **faults}], counts


def test_the_flow_audit_matches_copies_to_their_flow_and_finds_the_faults(
    spark: SparkSession,
) -> None:
    """Flows on records in memory: dc1 -> dc2 and dc2 -> dc1 by the same name (identity, both
    ways), and dc1 -> dc2 renamed (``dc1.inventory``). Each side's copies of the other are not
    expected back (nothing counted for them); a renamed copy of dc2's own data in dc1 is not
    sent back to dc2 (the flow's home rule). dc2 misses one record, holds one twice and one
    altered; an application's own record in a target topic that is no flow's source is
    counted untagged."""

    def record(topic: str, offset: int, value: bytes, tag: Provenance | None = None) -> _Stored:
        return topic, 0, offset, value, [("trace", b"t"), *(tag.headers() if tag else [])]

    def copy(source: str, topic: str, at: int, offset: int, value: bytes, into: str) -> _Stored:
        return record(into, at, value, Provenance(source, topic, 0, offset))

    dc1 = [
        *(record("orders", o, b"o%d" % o) for o in range(4)),
        copy("dc2", "orders", 4, 0, b"x0", "orders"),  # dc2's record, copied here
        *(record("inventory", o, b"i%d" % o) for o in range(3)),
        copy("dc2", "stock", 3, 7, b"s7", "inventory"),  # not dc1's data (derived, sent on)
        copy("dc2", "inventory", 4, 9, b"s9", "dc2.inventory"),  # dc2's, renamed: never back
    ]
    dc2 = [
        record("orders", 0, b"x0"),
        copy("dc1", "orders", 1, 0, b"o0", "orders"),
        copy("dc1", "orders", 2, 2, b"o2", "orders"),  # 1 missing
        copy("dc1", "orders", 3, 2, b"o2", "orders"),  # a duplicate
        copy("dc1", "orders", 4, 3, b"tampered", "orders"),  # altered
        copy("dc1", "inventory", 0, 0, b"i0", "dc1.inventory"),
        copy("dc1", "inventory", 1, 1, b"i1", "dc1.inventory"),
        copy("dc1", "inventory", 2, 2, b"i2", "dc1.inventory"),
        copy("dc1", "inventory", 3, 3, b"s7", "dc1.inventory"),
        record("dc1.inventory", 4, b"written here directly"),
    ]
    frame = _stored(spark, {"dc1": dc1, "dc2": dc2})
    routes = [
        Route("dc1", "orders", "dc2", "orders", ("dc2",)),
        Route("dc2", "orders", "dc1", "orders", ("dc1",)),
        Route("dc1", "inventory", "dc2", "dc1.inventory", ("dc2",)),
        # The flow also selects dc1's renamed copies of dc2's data: they never go back.
        Route("dc1", "dc2.inventory", "dc2", "dc1.dc2.inventory", ("dc2",)),
    ]
    report = compare(spark, narrowed_flows(spark, frame, routes, 2), None)
    counts = {
        (r.cluster, r.topic, r.origin): {c: getattr(r, c) for c in COUNTS if getattr(r, c)}
        for r in report
    }
    assert counts == {
        ("dc1", "orders", "dc2"): {"expected": 1, "delivered": 1},
        ("dc2", "orders", "dc1"): {
            "expected": 4,
            "delivered": 3,
            "missing": 1,
            "duplicates": 1,
            "mismatched": 1,
        },
        ("dc2", "inventory", "dc1"): {"expected": 4, "delivered": 4},
        ("dc2", "dc1.inventory", ""): {"untagged": 1},
    }, counts
