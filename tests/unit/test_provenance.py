"""Provenance headers: encoding, parsing and the loop check."""

from __future__ import annotations

import pytest

from replicator import provenance
from replicator.provenance import Marking, Provenance, ProvenanceError

ORIGIN = Provenance("dc1", "orders_REPLICA", 7, 123456789012)


def test_headers_are_ascii_and_round_trip() -> None:
    headers = ORIGIN.headers()
    assert [k for k, _ in headers] == list(provenance.HEADER_NAMES)
    assert dict(headers)[provenance.ORIGIN_OFFSET] == b"123456789012"
    assert provenance.parse(headers) == ORIGIN


def test_tagging_keeps_own_headers_in_order_including_null_values() -> None:
    own = [("trace", b"abc"), ("empty", None), ("trace", b"def")]
    tagged = provenance.tagged(own, ORIGIN)
    assert tagged[:3] == own
    assert provenance.parse(tagged) == ORIGIN


def test_untagged_record_is_replicated() -> None:
    assert provenance.marking([("trace", b"x")]) is Marking.UNTAGGED
    assert provenance.marking([]) is Marking.UNTAGGED
    assert provenance.parse([]) is None


def test_tagged_record_is_recognised() -> None:
    assert provenance.marking(provenance.tagged([("a", b"b")], ORIGIN)) is Marking.TAGGED


@pytest.mark.parametrize(
    "headers",
    [
        [(provenance.ORIGIN_CLUSTER, b"dc1")],  # partial set
        [*ORIGIN.headers()[:3], (provenance.ORIGIN_OFFSET, b"twelve")],
        [*ORIGIN.headers()[:2], (provenance.ORIGIN_PARTITION, b"-1"), ORIGIN.headers()[3]],
        [*ORIGIN.headers()[1:], (provenance.ORIGIN_CLUSTER, b"\xff\xfe")],
        [*ORIGIN.headers(), (provenance.ORIGIN_CLUSTER, b"dc2")],  # duplicated
        [*ORIGIN.headers()[1:], (provenance.ORIGIN_CLUSTER, None)],
        [*ORIGIN.headers()[1:], (provenance.ORIGIN_CLUSTER, b"")],
    ],
)
def test_malformed_provenance_is_detected_not_trusted(
    headers: list[tuple[str, bytes | None]],
) -> None:
    assert provenance.marking(headers) is Marking.MALFORMED
    with pytest.raises(ProvenanceError):
        provenance.parse(headers)


def test_tagger_matches_the_reference_encoding() -> None:
    tagger = provenance.Tagger("dc1", "orders_REPLICA", 7)
    own = [("trace", b"abc"), ("empty", None)]
    assert tagger.tag(own, 123456789012) == provenance.tagged(own, ORIGIN)
    assert own == [("trace", b"abc"), ("empty", None)], "the record's own headers were modified"


@pytest.mark.parametrize(
    "headers",
    [[], [("a", b"b")], ORIGIN.headers(), [(provenance.ORIGIN_OFFSET, b"1")], [("x", None)]],
)
def test_fast_loop_check_agrees_with_marking(headers: list[tuple[str, bytes | None]]) -> None:
    assert provenance.untagged(headers) == (provenance.marking(headers) is Marking.UNTAGGED)
