"""Provenance: the one header naming where a replicated record came from, and the loop rule.

Every record the replicator writes carries one ASCII header::

    replicator: <cluster>/<topic>/<partition>/<offset>     (e.g. dc1/orders_REPLICA/3/1042)

naming the cluster alias, the source topic, partition and offset the record was first published
at. ``/`` cannot appear in a cluster alias or a Kafka topic name, so the value splits without
escaping; partition and offset are canonical non-negative decimals. For typical names the header
costs under 40 bytes (name included), against about 130 for four long-named headers.

**The loop rule** (contract point 2) decides what a source record with provenance is:

- no provenance header: new data, tagged with its own provenance (``untagged``);
- provenance naming the very topic it sits in (any cluster): a replicated record published again
  into the replica flow it came through, so mirroring it would loop: skipped (``loop``);
- provenance naming another topic: new data derived from a replicated record (a stream processor
  forwarded the headers of its input): replicated with its own provenance; the provenance it
  carried moves to the ``replicator-upstream`` header, for lineage (``derived``);
- a provenance header that does not parse, or appears twice: refused, never guessed
  (``malformed_provenance``).

A MirrorMaker-style flow applies the same rule to the topics it copies (a same-name copy names
the topic it sits in, so identity flows in both directions copy only what originated on their
source: no loop, no duplicate, in any number of datacenters), plus one, because a copy made under
another name (``dc2_orders``, ``dc2.orders``) does not name its own topic:

- a *renamed copy* of the flow's target cluster (its *home*) came from there, and copying it
  back would loop, so it is skipped (``loop``): its provenance names the home cluster and topic
  ``t``, and it sits in a topic named ``<p>t`` where ``<p>`` names the home cluster (``dc2_``,
  ``dc2.``: the home's alias or topic alias appears in it, or it is the prefix of a configured
  flow from home). Other renamed copies travel on, as MirrorMaker chains do; a record whose topic
  merely ends with its provenance topic (``enriched_orders`` derived from ``orders``) is derived
  data.

Pure, no I/O; every reader of provenance (data path, Spark jobs, examples) goes through here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from replicator.errors import ProvenanceError

ORIGIN = "replicator"
"""The provenance header: ``<cluster>/<topic>/<partition>/<offset>`` in ASCII."""
UPSTREAM = "replicator-upstream"
"""On a derived record: the provenance value it carried when it was published (lineage)."""
HEADER_NAMES = (ORIGIN, UPSTREAM)
_HEADER_SET = frozenset(HEADER_NAMES)

LEGACY_HEADERS = (
    "replicator-origin-cluster",
    "replicator-origin-topic",
    "replicator-origin-partition",
    "replicator-origin-offset",
)
"""The four headers development builds before 0.1.0 wrote instead of :data:`ORIGIN` (one value
each, in this order). Read, never written: only to resume after the records such a build left in
a destination (:func:`legacy_origin`); the loop rule treats them as application headers."""
_LEGACY_SET = frozenset(LEGACY_HEADERS)

#: The value's grammar, shared with the Spark jobs (which parse it as a column).
VALUE_PATTERN = r"([a-z0-9-]+)/([A-Za-z0-9._-]+)/(0|[1-9][0-9]{0,9})/(0|[1-9][0-9]{0,18})"
_VALUE = re.compile(VALUE_PATTERN.encode("ascii"))
_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1

Header = tuple[str, bytes | None]


class Marking(StrEnum):
    """What the loop rule makes of a source record (also the metric label of the outcome)."""

    UNTAGGED = "untagged"
    DERIVED = "derived"
    LOOP = "loop"
    MALFORMED = "malformed_provenance"

    @property
    def replicated(self) -> bool:
        return self in (Marking.UNTAGGED, Marking.DERIVED)


@dataclass(frozen=True, slots=True)
class Provenance:
    """The origin of a record: the source cluster alias and its topic, partition and offset."""

    cluster: str
    topic: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        return b"%s/%s/%d/%d" % (
            self.cluster.encode("ascii"),
            self.topic.encode("ascii"),
            self.partition,
            self.offset,
        )

    def headers(self) -> list[tuple[str, bytes]]:
        return [(ORIGIN, self.encode())]

    def __str__(self) -> str:
        return self.encode().decode("ascii")


def decode(raw: bytes | None) -> Provenance:
    """The provenance in one header value; :class:`ProvenanceError` if it is not one."""
    if raw is None:
        raise ProvenanceError(f"header {ORIGIN} has no value")
    found = _VALUE.fullmatch(raw)
    if found is None:
        shown = raw[:80].decode("ascii", "backslashreplace")
        raise ProvenanceError(
            f"header {ORIGIN} is not <cluster>/<topic>/<partition>/<offset>: {shown!r}"
        )
    cluster, topic, partition, offset = found.groups()
    origin = Provenance(cluster.decode(), topic.decode(), int(partition), int(offset))
    if origin.partition > _MAX_PARTITION or origin.offset > _MAX_OFFSET:
        raise ProvenanceError(f"header {ORIGIN} has a partition or offset out of range")
    return origin


def parse(headers: Iterable[Header]) -> Provenance | None:
    """The record's provenance: ``None`` if untagged, :class:`ProvenanceError` if broken."""
    values = [raw for key, raw in headers if key == ORIGIN]
    if not values:
        return None
    if len(values) > 1:
        raise ProvenanceError(f"header {ORIGIN} appears {len(values)} times")
    return decode(values[0])


def legacy_origin(headers: Iterable[Header]) -> Provenance | None:
    """The provenance in the four headers of a pre-0.1.0 development build, or ``None`` when
    the record lacks one of them or one does not parse (never guessed)."""
    found: dict[str, bytes | None] = {k: v for k, v in headers if k in _LEGACY_SET}
    if len(found) != len(LEGACY_HEADERS):
        return None
    values = [found[name] or b"" for name in LEGACY_HEADERS]
    try:
        return decode(b"/".join(values))
    except ProvenanceError:
        return None


def untagged(headers: Sequence[Header]) -> bool:
    """The fast form of the loop check: ``True`` when no provenance header is present."""
    for key, _ in headers:  # noqa: SIM110 - a plain loop beats all() on the hot path
        if key in _HEADER_SET:
            return False
    return True


def own_headers(headers: Iterable[Header]) -> list[Header]:
    """The application's headers: everything but provenance, in order."""
    return [(key, value) for key, value in headers if key not in _HEADER_SET]


def marking(
    headers: Sequence[Header],
    source_topic: str,
    home: str | None = None,
    home_marks: tuple[str, ...] = (),
) -> Marking:
    """The loop rule for a record read from ``source_topic`` (by a flow into ``home``, whose
    renamed copies carry one of ``home_marks``, lower-case, in the part of their name before
    the original topic)."""
    values = [raw for key, raw in headers if key == ORIGIN]
    if not values:
        return Marking.DERIVED if not untagged(headers) else Marking.UNTAGGED
    try:
        origin = parse(headers)
    except ProvenanceError:
        return Marking.MALFORMED
    assert origin is not None
    if origin.topic == source_topic:
        return Marking.LOOP
    if home is not None and origin.cluster == home and source_topic.endswith(origin.topic):
        renamed_by = source_topic[: -len(origin.topic)].lower()
        if any(mark in renamed_by for mark in home_marks):
            return Marking.LOOP  # a renamed copy of the target's own data
    return Marking.DERIVED


class Tagger:
    """Provenance for the records of one source partition, built with little work.

    The ``<cluster>/<topic>/<partition>/`` prefix is encoded once; only the offset is per record.
    """

    __slots__ = ("_home", "_home_marks", "_legacy", "_prefix", "compiled", "topic")

    def __init__(
        self,
        cluster: str,
        topic: str,
        partition: int,
        home: str | None = None,
        home_marks: tuple[str, ...] = (),
    ) -> None:
        self.topic = topic
        self._home = home  # a flow's target cluster: renamed copies from there are loops
        self._home_marks = home_marks
        self._prefix = b"%s/%s/%d/" % (cluster.encode("ascii"), topic.encode("ascii"), partition)
        self._legacy = (cluster, topic, partition)
        self.compiled: object | None = None  # its native form, made by the first native build

    def spec(self) -> tuple[bytes, str, str | None, list[str]]:
        """What its native form is made of: the value prefix, topic, home and home marks."""
        return self._prefix, self.topic, self._home, list(self._home_marks)

    def _legacy_offset(self, headers: Iterable[Header]) -> int | None:
        origin = legacy_origin(headers)
        if origin is None or (origin.cluster, origin.topic, origin.partition) != self._legacy:
            return None
        return origin.offset

    def origin_offset(self, headers: Iterable[Header]) -> int | None:
        """The source offset of a record this partition's provenance names; ``None`` for any
        other record (another origin, no provenance, or a value that is not an offset).

        Also read from the four headers of a pre-0.1.0 build (:data:`LEGACY_HEADERS`), so that a
        destination written by one resumes exactly after an upgrade: only the destination tails
        are read this way, never the data path's records.
        """
        prefix = self._prefix
        legacy = False
        for key, raw in headers:
            if key == ORIGIN and raw is not None and raw.startswith(prefix):
                digits = raw[len(prefix) :]
                return int(digits) if digits.isdigit() else None
            legacy = legacy or key in _LEGACY_SET
        return self._legacy_offset(headers) if legacy else None

    def tag(self, headers: Sequence[Header], offset: int) -> list[Header]:
        """``headers`` (untagged) followed by this partition's provenance for ``offset``."""
        return [*headers, (ORIGIN, self._prefix + b"%d" % offset)]

    def retag(self, headers: Sequence[Header], offset: int) -> tuple[Marking, list[Header] | None]:
        """The loop rule for a record carrying provenance headers, and the headers to write.

        ``None`` headers: the record is not replicated (a loop, or broken provenance). A derived
        record keeps its own headers, gains its provenance, and keeps the one it carried as
        ``replicator-upstream``.
        """
        mark = marking(headers, self.topic, self._home, self._home_marks)
        if not mark.replicated:
            return mark, None
        own = own_headers(headers)
        upstream = [(UPSTREAM, raw) for key, raw in headers if key == ORIGIN]
        return mark, [*own, *upstream, (ORIGIN, self._prefix + b"%d" % offset)]


def tagged(headers: Iterable[Header], origin: Provenance) -> list[Header]:
    """The record's own headers, unchanged and in order, followed by its provenance header."""
    return [*headers, *origin.headers()]
