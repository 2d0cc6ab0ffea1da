"""Source records as the data path sees them, and the fast path that hands them over unwrapped.

The data path needs six attributes of a fetched record: offset, timestamp and its type, key, value,
headers. aiokafka wraps every decoded record in a ``ConsumerRecord`` dataclass, which measured at
about a quarter of the replicator's CPU time at 100-byte records. :func:`use_decoded_records` makes
the consumers of this process hand over aiokafka's decoded records as they are. It is installed only
by ``replicator run`` and only on the aiokafka version it was written and tested against; with any
other version the wrapped records are used, which satisfy the same :class:`SourceRecord`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import aiokafka
import structlog
from aiokafka.consumer import fetcher

log = structlog.get_logger(__name__)

SUPPORTED_AIOKAFKA = "0.14.0"


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


def _decoded(self: Any, tp: Any, record: Any) -> Any:
    return record


def use_decoded_records() -> bool:
    """Skip aiokafka's per-record wrapper in this process; ``False`` if it cannot be done."""
    if aiokafka.__version__ != SUPPORTED_AIOKAFKA or not hasattr(
        fetcher.PartitionRecords, "_consumer_record"
    ):
        log.warning(
            "aiokafka version not supported by the fast fetch path; using wrapped records",
            aiokafka=aiokafka.__version__,
        )
        return False
    fetcher.PartitionRecords._consumer_record = _decoded
    return True
