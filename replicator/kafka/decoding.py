"""How fetched records are decoded: handed to the data path unwrapped, and stopped at a record the
client cannot decode.

The data path needs six attributes of a fetched record: offset, timestamp and its type, key, value,
headers. aiokafka wraps every decoded record in a ``ConsumerRecord`` dataclass, which measured at
about a quarter of the replicator's CPU time at 100-byte records. :func:`use_decoded_records` makes
the data path's consumers (those made with ``key_deserializer=`` :func:`as_fetched`: the source
feed, the catch-up fetch, the resume reader) hand over aiokafka's decoded records as they are;
every other consumer of the process (checkpoints, group sync, failover, heartbeats, readers of a
whole topic) gets aiokafka's ``ConsumerRecord`` unchanged. It is installed only by ``replicator
run`` (and the MirrorMaker commands) and only on the aiokafka version it was written and tested
against; with any other version the wrapped records are used, which satisfy the same
:class:`~replicator.model.records.SourceRecord`.

**Header keys that are not UTF-8.** The wire format allows any bytes in a header key, and Java
clients write and read such keys; aiokafka's decoder raises on them, on every fetch, and hands
over nothing of the partition. Installed with the fast path, :func:`use_decoded_records` makes a
fetch decode the rest of that batch in Python, the key kept as its bytes
(:class:`~replicator.kafka.internals.HeaderKey`, a ``str`` whose ``encode`` gives the bytes back),
and the batch that copies it is built in Python (``BatchFactory.raw_keys``): the copy carries the
key byte for byte, and the partition goes on.

**Records the client cannot decode.** Anything else aiokafka cannot decode (nor the Python
decoder) makes a fetch hand over the records before it, stop there (the consumer's position is
the record's offset) and note it as a :class:`Poison` of that consumer, which its owner takes
(:func:`take_poisoned`) and halts the partition at that offset, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiokafka
import structlog
from aiokafka import TopicPartition

from replicator.kafka import internals

log = structlog.get_logger(__name__)


def as_fetched(data: bytes) -> bytes:
    """The key deserializer of a consumer whose records skip aiokafka's wrapper (the marker
    :func:`use_decoded_records` looks for; as a deserializer, it returns the key unchanged)."""
    return data


def as_record_sets(data: bytes) -> bytes:
    """The key deserializer of a source consumer on the native path, whose fetched records stay
    bytes: one :class:`~replicator.model.native.RecordSet` per partition and fetch."""
    return data


_source_marker: list[Callable[[bytes], bytes]] = [as_fetched]  # set by use_decoded_records


def source_marker() -> Callable[[bytes], bytes]:
    """The key deserializer of the data path's source consumers: :func:`as_record_sets` on the
    native path, else :func:`as_fetched`."""
    return _source_marker[0]


@dataclass(frozen=True, slots=True)
class Poison:
    """A record of ``tp`` that the client cannot decode, at ``offset`` (the first record at or
    after it: the records before it were handed over)."""

    tp: TopicPartition
    offset: int
    error: str


# (the consumer's assignment, the record): noted by fetches, taken by the consumers' owners.
_poisoned: list[tuple[Any, Poison]] = []


def _note(assignment: Any, tp: TopicPartition, offset: int, error: str) -> None:
    """A marked consumer's fetch stopped at an undecodable record (called by the fetch path)."""
    _poisoned.append((assignment, Poison(tp, offset, error)))


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
    assignment = internals.assignment_of(consumer)
    mine = [poison for owner, poison in _poisoned if owner is assignment]
    # Kept: other consumers' records; dropped: those of assignments no longer in use.
    _poisoned[:] = [
        (o, p) for o, p in _poisoned if o is not assignment and internals.assignment_active(o)
    ]
    return mine


def use_decoded_records(record_sets: bool = False) -> bool:
    """Skip aiokafka's per-record wrapper in this process, and with ``record_sets`` (the native
    path) keep the source consumers' records as bytes; ``False`` if it cannot be done."""
    marker = as_record_sets if record_sets else None
    if not internals.install_fetch_path(as_fetched, _note, marker):
        log.warning(
            "aiokafka version not supported by the fast fetch path; using wrapped records",
            aiokafka=aiokafka.__version__,
        )
        return False
    _source_marker[0] = as_record_sets if record_sets else as_fetched
    return True
