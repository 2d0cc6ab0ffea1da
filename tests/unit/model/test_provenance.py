"""The provenance header: encoding, parsing, the loop rule and re-tagging of derived records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicator.errors import ProvenanceError
from replicator.model import provenance
from replicator.model.provenance import Marking, Provenance, Tagger

ORIGIN = Provenance("dc1", "orders_REPLICA", 7, 123456789012)

aliases = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")
topics = st.from_regex(r"\A[A-Za-z0-9._-]{1,40}\Z")
origins = st.builds(
    Provenance,
    aliases,
    topics,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
)
own_headers = st.lists(
    st.tuples(
        st.text(max_size=12).filter(lambda k: k not in provenance.HEADER_NAMES),
        st.none() | st.binary(max_size=20),
    ),
    max_size=4,
)


def test_one_ascii_header_of_at_most_40_bytes_for_typical_names() -> None:
    ((name, value),) = ORIGIN.headers()
    assert (name, value) == ("replicator", b"dc1/orders_REPLICA/7/123456789012")
    typical = Provenance("dc1", "orders_REPLICA", 11, 10_000_000).headers()
    assert sum(len(k) + len(v) for k, v in typical) <= 40
    assert provenance.parse(ORIGIN.headers()) == ORIGIN
    assert str(ORIGIN) == "dc1/orders_REPLICA/7/123456789012"


@given(origins, own_headers)
def test_every_provenance_round_trips_behind_any_own_headers(
    origin: Provenance, own: list[tuple[str, bytes | None]]
) -> None:
    tagged = provenance.tagged(own, origin)
    assert tagged[: len(own)] == own
    assert provenance.parse(tagged) == origin
    assert provenance.own_headers(tagged) == own
    tagger = Tagger(origin.cluster, origin.topic, origin.partition)
    assert tagger.tag(own, origin.offset) == tagged


@given(st.binary(max_size=60) | st.text(max_size=60).map(str.encode))
def test_any_header_value_parses_or_is_refused_never_crashes(raw: bytes) -> None:
    headers = [(provenance.ORIGIN, raw)]
    try:
        origin = provenance.parse(headers)
    except ProvenanceError:
        assert provenance.marking(headers, "x_REPLICA") is Marking.MALFORMED
        return
    assert origin is not None and origin.encode() == raw  # only canonical values parse


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"dc1/orders_REPLICA/7",  # a field missing
        b"dc1/orders_REPLICA/7/12/3",  # one too many
        b"dc1/orders_REPLICA/-1/12",
        b"dc1/orders_REPLICA/07/12",  # not canonical
        b"dc1/orders_REPLICA/7/ 12",
        b"dc1/orders_REPLICA/7/+12",
        b"dc1/orders_REPLICA/7/1_000",
        b"DC1/orders_REPLICA/7/12",  # not an alias
        b"dc1//7/12",
        b"dc1/orders REPLICA/7/12",
        b"dc1/orders_REPLICA/7/99999999999999999999",  # beyond a Kafka offset
        b"dc1/orders_REPLICA/7/12\n",
        b"\xff\xfe/orders/7/12",
    ],
)
def test_malformed_values_are_refused(raw: bytes | None) -> None:
    headers = [("trace", b"x"), (provenance.ORIGIN, raw)]
    assert provenance.marking(headers, "orders_REPLICA") is Marking.MALFORMED
    with pytest.raises(ProvenanceError):
        provenance.parse(headers)
    assert Tagger("dc1", "orders_REPLICA", 0).retag(headers, 5) == (Marking.MALFORMED, None)


def test_a_repeated_provenance_header_is_refused() -> None:
    headers = [*ORIGIN.headers(), *Provenance("dc2", "a_REPLICA", 0, 1).headers()]
    assert provenance.marking(headers, "b_REPLICA") is Marking.MALFORMED


def test_untagged_record_is_new_data() -> None:
    assert provenance.marking([("trace", b"x")], "orders_REPLICA") is Marking.UNTAGGED
    assert provenance.marking([], "orders_REPLICA") is Marking.UNTAGGED
    assert provenance.parse([]) is None


def test_provenance_naming_the_topic_it_sits_in_is_a_loop_from_any_cluster() -> None:
    for cluster in ("dc1", "dc2", "dc9"):
        headers = [("a", b"b"), *Provenance(cluster, "orders_REPLICA", 0, 1).headers()]
        assert provenance.marking(headers, "orders_REPLICA") is Marking.LOOP
        assert Tagger("dc1", "orders_REPLICA", 0).retag(headers, 9) == (Marking.LOOP, None)


@given(origins, own_headers, aliases, topics, st.integers(0, 1000), st.integers(0, 10**9))
def test_derived_records_get_their_own_provenance_and_keep_the_carried_one_upstream(
    upstream: Provenance,
    own: list[tuple[str, bytes | None]],
    cluster: str,
    topic: str,
    partition: int,
    offset: int,
) -> None:
    headers = [*own, *upstream.headers()]
    mark, retagged = Tagger(cluster, topic, partition).retag(headers, offset)
    if upstream.topic == topic:
        assert (mark, retagged) == (Marking.LOOP, None)
        return
    assert mark is Marking.DERIVED and retagged is not None
    assert provenance.parse(retagged) == Provenance(cluster, topic, partition, offset)
    assert provenance.own_headers(retagged) == own
    assert (provenance.UPSTREAM, upstream.encode()) in retagged
    # A derived record of a derived record: the older lineage is replaced, never accumulated.
    mark, again = Tagger("dc9", "z_REPLICA", 0).retag(retagged, 1)
    assert mark is Marking.DERIVED and again is not None
    assert [k for k, _ in again if k in provenance.HEADER_NAMES] == [
        provenance.UPSTREAM,
        provenance.ORIGIN,
    ]


def test_a_stray_upstream_header_alone_is_dropped_as_derived() -> None:
    headers = [("a", b"b"), (provenance.UPSTREAM, b"dc2/x_REPLICA/0/1")]
    mark, retagged = Tagger("dc1", "orders_REPLICA", 0).retag(headers, 4)
    assert mark is Marking.DERIVED
    assert retagged == [("a", b"b"), (provenance.ORIGIN, b"dc1/orders_REPLICA/0/4")]


@given(st.lists(st.tuples(st.sampled_from(["a", *provenance.HEADER_NAMES]), st.just(b"v"))))
def test_fast_loop_check_agrees_with_the_rule(headers: list[tuple[str, bytes | None]]) -> None:
    marked = provenance.marking(headers, "orders_REPLICA")
    assert provenance.untagged(headers) == (marked is Marking.UNTAGGED)


@pytest.mark.parametrize(
    ("renamed", "marks"),
    [
        ("dc2_orders", ("dc2",)),  # the Go mirror maker's --prefix dc2_
        ("dc2.orders", ("dc2",)),  # MM2's names
        ("DC2.orders", ("dc2",)),  # an MM2 alias written in capitals
        ("east_orders", ("dc2", "east_")),  # the prefix of a configured flow from dc2
    ],
)
def test_a_flow_never_sends_a_renamed_copy_back_to_the_cluster_it_came_from(
    renamed: str, marks: tuple[str, ...]
) -> None:
    copy = Provenance("dc2", "orders", 1, 7).headers()
    # Read by the flow dc1 -> dc2: the record came from dc2, so it would loop.
    assert provenance.marking(copy, renamed, "dc2", marks) is Marking.LOOP
    assert Tagger("dc1", renamed, 1, "dc2", marks).retag(copy, 3) == (Marking.LOOP, None)
    # Read by a flow to a third cluster: it travels on with fresh provenance (a chain).
    mark, headers = Tagger("dc1", renamed, 1, "dc3", ("dc3",)).retag(copy, 3)
    assert mark is Marking.DERIVED and headers is not None
    assert provenance.parse(headers) == Provenance("dc1", renamed, 1, 3)


@pytest.mark.parametrize("topic", ["enriched", "enriched_orders", "big_orders", "xorders"])
def test_derived_data_under_another_name_goes_home_too(topic: str) -> None:
    """A processor in dc1 read dc2's copy of ``orders`` and wrote ``topic`` with the headers:
    new data, which dc2 has not seen, so the flow to dc2 copies it."""
    carried = Provenance("dc2", "orders", 0, 5).headers()
    assert provenance.marking(carried, topic, "dc2", ("dc2",)) is Marking.DERIVED
