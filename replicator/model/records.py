"""A source record as the data path sees it: the six attributes it reads of a fetched record
(aiokafka's decoded record or its ``ConsumerRecord`` both satisfy :class:`SourceRecord`), and their
payload size. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


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


def payload_size(records: Sequence[SourceRecord]) -> int:
    """Key and value bytes of ``records``."""
    return sum(len(r.key or b"") + len(r.value or b"") for r in records)
