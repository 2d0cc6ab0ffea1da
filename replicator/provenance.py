"""Provenance headers: where a replicated record came from, and the loop check.

Every record the replicator writes carries four ASCII headers naming its origin cluster, topic,
partition and offset. Applications and the audit job rely on these names. A source record that
already carries any of them was written by a replicator (or forged): it is never mirrored again,
which is what prevents loops in any topology. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

ORIGIN_CLUSTER = "replicator-origin-cluster"
ORIGIN_TOPIC = "replicator-origin-topic"
ORIGIN_PARTITION = "replicator-origin-partition"
ORIGIN_OFFSET = "replicator-origin-offset"

HEADER_NAMES = (ORIGIN_CLUSTER, ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET)
_HEADER_SET = frozenset(HEADER_NAMES)

Headers = Sequence[tuple[str, bytes]]


class ProvenanceError(ValueError):
    """Provenance headers are present but incomplete or unreadable."""


class Marking(StrEnum):
    """What a source record's headers say about its provenance."""

    UNTAGGED = "untagged"
    TAGGED = "already_replicated"
    MALFORMED = "malformed_provenance"


@dataclass(frozen=True, slots=True)
class Provenance:
    """The origin of a record: the source cluster alias and its topic, partition and offset."""

    cluster: str
    topic: str
    partition: int
    offset: int

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            (ORIGIN_CLUSTER, self.cluster.encode("ascii")),
            (ORIGIN_TOPIC, self.topic.encode("ascii")),
            (ORIGIN_PARTITION, str(self.partition).encode("ascii")),
            (ORIGIN_OFFSET, str(self.offset).encode("ascii")),
        ]


class Tagger:
    """Provenance headers for the records of one source partition, built with little work.

    The cluster, topic and partition headers are encoded once; only the offset is per record.
    """

    __slots__ = ("_fixed",)

    def __init__(self, cluster: str, topic: str, partition: int) -> None:
        self._fixed = Provenance(cluster, topic, partition, 0).headers()[:3]

    def tag(
        self, headers: Sequence[tuple[str, bytes | None]], offset: int
    ) -> list[tuple[str, bytes | None]]:
        """``headers`` followed by this partition's provenance for ``offset``."""
        return [*headers, *self._fixed, (ORIGIN_OFFSET, b"%d" % offset)]


def untagged(headers: Sequence[tuple[str, bytes | None]]) -> bool:
    """The fast form of the loop check: ``True`` when no provenance header is present."""
    for key, _ in headers:  # noqa: SIM110 - a plain loop beats all() on the hot path
        if key in _HEADER_SET:
            return False
    return True


def tagged(
    headers: Iterable[tuple[str, bytes | None]], origin: Provenance
) -> list[tuple[str, bytes | None]]:
    """The record's own headers, unchanged and in order, followed by its provenance headers."""
    return [*headers, *origin.headers()]


def marking(headers: Sequence[tuple[str, bytes | None]]) -> Marking:
    """The loop check: is this record untagged, replicated already, or carrying broken headers?"""
    found = [key for key, _ in headers if key in _HEADER_SET]
    if not found:
        return Marking.UNTAGGED
    try:
        parse(headers)
    except ProvenanceError:
        return Marking.MALFORMED
    return Marking.TAGGED


def parse(headers: Iterable[tuple[str, bytes | None]]) -> Provenance | None:
    """Read provenance from headers: ``None`` if untagged, :class:`ProvenanceError` if broken."""
    values: dict[str, str] = {}
    for key, raw in headers:
        if key not in _HEADER_SET:
            continue
        if key in values:
            raise ProvenanceError(f"header {key} appears more than once")
        try:
            values[key] = (raw or b"").decode("ascii")
        except UnicodeDecodeError:
            raise ProvenanceError(f"header {key} is not ASCII") from None
    if not values:
        return None
    missing = [name for name in HEADER_NAMES if name not in values]
    if missing:
        raise ProvenanceError(f"missing {', '.join(missing)}")
    cluster, topic = values[ORIGIN_CLUSTER], values[ORIGIN_TOPIC]
    if not cluster or not topic:
        raise ProvenanceError("empty origin cluster or topic")
    try:
        partition, offset = int(values[ORIGIN_PARTITION]), int(values[ORIGIN_OFFSET])
    except ValueError:
        raise ProvenanceError("origin partition and offset must be integers") from None
    if partition < 0 or offset < 0:
        raise ProvenanceError("origin partition and offset must not be negative")
    return Provenance(cluster, topic, partition, offset)
