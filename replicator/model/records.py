"""A source record as the data path sees it: the six attributes it reads of a fetched record
(aiokafka's decoded record or its ``ConsumerRecord`` both satisfy :class:`SourceRecord`); a
fetched :data:`Chunk` of them (decoded records, or on the native path a record set kept as
bytes), where it ends and its payload size. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from replicator.model.native import RecordSet


class SourceRecord(Protocol):
    """What the replicator reads of a fetched record."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def timestamp_type(self) -> int: ...  # 0: CreateTime (the producer's), 1: LogAppendTime

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


Chunk: TypeAlias = "Sequence[SourceRecord] | RecordSet"
"""The records of one partition a fetch handed over, in offset order (never empty)."""


def chunk_end(records: Chunk) -> int:
    """The offset after the last record of ``records``."""
    if isinstance(records, Sequence):
        return records[-1].offset + 1
    return records.end


def payload_size(records: Chunk) -> int:
    """Key and value bytes of ``records``."""
    if isinstance(records, Sequence):
        return sum(len(r.key or b"") + len(r.value or b"") for r in records)
    return records.payload_size
