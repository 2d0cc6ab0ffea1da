"""Source records as the data path sees them, and the fast path that hands them over unwrapped.

The data path needs six attributes of a fetched record: offset, timestamp and its type, key, value,
headers. aiokafka wraps every decoded record in a ``ConsumerRecord`` dataclass, which measured at
about a quarter of the replicator's CPU time at 100-byte records. :func:`use_decoded_records` makes
the data path's consumers (those made with ``key_deserializer=`` :func:`as_fetched`: the source
feed, the catch-up fetch, the resume reader) hand over aiokafka's decoded records as they are;
every other consumer of the process (checkpoints, group sync, failover, heartbeats, readers of a
whole topic) gets aiokafka's ``ConsumerRecord`` unchanged. It is installed only by ``replicator
run`` (and the MirrorMaker commands) and only on the aiokafka version it was written and tested
against; with any other version the wrapped records are used, which satisfy the same
:class:`SourceRecord`.

**Records the client cannot decode.** The wire format allows what aiokafka cannot decode (a header
key that is not UTF-8, which Java clients write and read): aiokafka raises while it iterates a
fetched batch, on every fetch, and hands over nothing of the partition, not even the records
before it. Installed with the fast path, :func:`use_decoded_records` also makes a fetch hand over
the records before such a record, stop there (the consumer's position is the record's offset)
and note it as a :class:`Poison` of that consumer, which its owner takes
(:func:`take_poisoned`) and halts the partition at that offset, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiokafka
import structlog
from aiokafka import TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.errors import KafkaError

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


def as_fetched(data: bytes) -> bytes:
    """The key deserializer of a consumer whose records skip aiokafka's wrapper (the marker
    :func:`use_decoded_records` looks for; as a deserializer, it returns the key unchanged)."""
    return data


def _decoded(tp: Any, record: Any) -> Any:
    return record


_wrapped_init = fetcher.PartitionRecords.__init__
_wrapped_getall = fetcher.FetchResult.getall


def _init(
    self: Any, tp: Any, records: Any, aborted: Any, offset: int, key_decoder: Any, *rest: Any
) -> None:
    """aiokafka's ``PartitionRecords.__init__``; the records of a fetch by a consumer marked
    with :func:`as_fetched` are handed over as decoded (one instance attribute, no cost per
    record)."""
    _wrapped_init(self, tp, records, aborted, offset, key_decoder, *rest)
    if key_decoder is as_fetched:
        self._consumer_record = _decoded


@dataclass(frozen=True, slots=True)
class Poison:
    """A record of ``tp`` that the client cannot decode, at ``offset`` (the first record at or
    after it: the records before it were handed over)."""

    tp: TopicPartition
    offset: int
    error: str


# (the consumer's assignment, the record): noted by fetches, taken by the consumers' owners.
_poisoned: list[tuple[Any, Poison]] = []


def _getall(self: Any, max_records: int | None = None) -> list[Any]:
    """aiokafka's ``FetchResult.getall``, stopping before a record it cannot decode (for the
    consumers marked with :func:`as_fetched`; the others get aiokafka's own)."""
    if self._partition_records is None or "_consumer_record" not in vars(self._partition_records):
        return list(_wrapped_getall(self, max_records))
    tp = self._topic_partition
    if not self.check_assignment(tp) or not self.has_more():
        return []
    records = self._partition_records
    taken: list[Any] = []
    try:
        for record in records:
            taken.append(record)
            if max_records is not None and len(taken) >= max_records:
                self._update_position()
                break
        else:
            self._update_position()
            self._partition_records = None
    except KafkaError:
        raise  # a corrupt batch (CRC) is fetched again, as aiokafka does
    except Exception as exc:  # undecodable: the position stays on it
        self._update_position()
        self._partition_records = None
        poison = Poison(tp, records.next_fetch_offset, f"{type(exc).__name__}: {exc}")
        _poisoned.append((self._assignment, poison))
    return taken


def undecodable_reason(poison: Poison) -> str:
    """What ``/status`` and the log say of a partition halted at ``poison``."""
    tp = poison.tp
    return (
        f"the record at offset {poison.offset} of {tp.topic}/{tp.partition} cannot be decoded "
        f"({poison.error}): halted there, every record before it replicated; skip it by "
        "moving the leg's committed offset past it, or remove it at the source"
    )


def take_poisoned(consumer: Any) -> list[Poison]:
    """The undecodable records ``consumer``'s fetches stopped at since the last call."""
    if not _poisoned:
        return []
    assignment = consumer._subscription.subscription
    assignment = assignment.assignment if assignment is not None else None
    mine = [poison for owner, poison in _poisoned if owner is assignment]
    # Kept: other consumers' records; dropped: those of assignments no longer in use.
    _poisoned[:] = [(o, p) for o, p in _poisoned if o is not assignment and o.active]
    return mine


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
    fetcher.PartitionRecords.__init__ = _init
    fetcher.FetchResult.getall = _getall
    return True
