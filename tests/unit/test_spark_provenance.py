"""The Spark provenance columns agree with replicator.provenance, record by record, and the
audit's comparison works on records in memory.

One local Spark session (no Kafka): each case is a source record's headers; the columns
(``origin_columns``, ``marking``, ``with_provenance``) must give what ``provenance.parse``,
``provenance.marking`` and ``Tagger.retag`` give for the same headers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from replicator import provenance
from replicator.provenance import ORIGIN, UPSTREAM, Header, Marking, Provenance, Tagger

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import Row, SparkSession  # noqa: E402

from replicator.spark.audit import COUNTS, compare, narrowed  # noqa: E402
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
}


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
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
    try:
        found = provenance.parse(headers)
    except provenance.ProvenanceError:
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
    frame = spark.createDataFrame(
        [
            (cluster, topic, partition, offset, b"k", value, headers)
            for cluster, records in (("dc1", dc1), ("dc2", dc2))
            for topic, partition, offset, value, headers in records
        ],
        "cluster string, topic string, partition int, offset long, key binary, value binary, "
        "headers array<struct<key: string, value: binary>>",
    )
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
