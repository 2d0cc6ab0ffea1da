"""The native batch path: which data path this process runs, and the calls into it.

``replicator._native`` (``native/``, Rust with PyO3, built by ``pip install``) takes a fetched
partition's record-set bytes and builds every destination's batches from them without making a
Python object per record: :func:`decode` gives a :class:`RecordSet` (spans over the fetched
bytes), :func:`build` and :func:`build_placed` the closed batches, each ready for the producer
(its producer id, epoch and sequence stamped at send time, the CRC computed again). The
pure-Python path (:mod:`replicator.model.batching` over aiokafka's decoded records) is the
reference and the fallback: the differential tests hold both to the same bytes and decisions.

Which one runs is chosen once per process (:func:`choose`, ``REPLICATOR_DATA_PATH``): ``auto``
takes the native path when the extension imports and matches this version's interface, else the
Python path, and says so (:func:`reason`); ``native`` makes a missing extension an error;
``python`` keeps the reference. Codecs stay aiokafka's (its functions are called once per
batch, from the native code), so a batch compresses as aiokafka's producer would compress it.
Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol, TypeGuard

from aiokafka import codec

from replicator.errors import ConfigError

INTERFACE = 1
"""The interface version of ``replicator._native`` this code calls (an older build is unused)."""


class RecordSet(Protocol):
    """A partition's fetched records kept as bytes (``replicator._native.RecordSet``)."""

    @property
    def end(self) -> int:
        """The offset after its last record."""
        ...

    @property
    def first(self) -> int:
        """Its first record's offset."""
        ...

    @property
    def payload_size(self) -> int:
        """Key and value bytes of its records."""
        ...

    def __len__(self) -> int: ...

    def records(self) -> list[tuple[int, int, int, bytes | None, bytes | None, list[Any]]]:
        """Every record as ``(offset, timestamp, timestamp_type, key, value, headers)``."""
        ...


def _load() -> tuple[ModuleType | None, str]:
    try:
        from replicator import _native  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"the native extension cannot be imported ({exc})"
    found = getattr(_native, "INTERFACE", None)
    if found != INTERFACE:
        return None, f"the native extension is interface {found}, this version needs {INTERFACE}"
    return _native, "the native extension is loaded"


_module, _reason = _load()


NATIVE, PYTHON = "native", "python"  # the data paths (``REPLICATOR_DATA_PATH``, and ``auto``)


class _Choice:
    """The data path this process runs (one per process: :func:`choose` sets it)."""

    path = NATIVE if _module is not None else PYTHON


_choice = _Choice()


def available() -> bool:
    """Whether the native extension can be used in this process."""
    return _module is not None


def reason() -> str:
    """Why the native path is, or is not, available (for the start-up log and ``/status``)."""
    return _reason


def choose(wanted: str) -> str:
    """Make ``wanted`` (``auto``, ``native`` or ``python``) this process's data path and say
    which it is; ``native`` without the extension is a :class:`ConfigError` naming
    ``REPLICATOR_DATA_PATH``."""
    if wanted == NATIVE and _module is None:
        raise ConfigError("REPLICATOR_DATA_PATH", f"native, but {_reason}")
    _choice.path = PYTHON if wanted == PYTHON or _module is None else NATIVE
    return _choice.path


def active() -> str:
    """The data path of this process: ``native`` or ``python``."""
    return _choice.path


def native() -> ModuleType:
    """The extension module (only called on the native path)."""
    assert _module is not None, "the native path is not available"
    return _module


def is_record_set(records: object) -> TypeGuard[RecordSet]:
    """Whether ``records`` were fetched by the native path."""
    return _module is not None and type(records) is _module.RecordSet


_DECODE: dict[int, Callable[[Any], bytes]] = {
    1: codec.gzip_decode,
    2: codec.snappy_decode,
    3: codec.lz4_decode,
    4: codec.zstd_decode,
}
_ENCODE: dict[int, Callable[[Any], bytes]] = {
    1: codec.gzip_encode,
    2: codec.snappy_encode,
    3: codec.lz4_encode,
    4: codec.zstd_encode,
}


def decompressor(unknown: Callable[[int], Exception]) -> Callable[[int, bytes], bytes]:
    """What uncompresses a batch's records as aiokafka's decoder does; a codec it does not know
    raises ``unknown(codec)``."""

    def decompress(codec_id: int, data: bytes) -> bytes:
        found = _DECODE.get(codec_id)
        if found is None:
            raise unknown(codec_id)
        return bytes(found(data))

    return decompress


def compress(codec_id: int, data: bytes) -> bytes:
    """A batch's records compressed, as aiokafka's ``DefaultRecordBatchBuilder`` compresses them."""
    return bytes(_ENCODE[codec_id](data))


def decode(
    raw: bytes,
    fetch_offset: int,
    aborted: list[tuple[int, int]],
    read_committed: bool,
    check_crcs: bool,
    decompress: Callable[[int, bytes], bytes],
) -> Any:
    """A partition's fetched bytes as a ``Decoded`` (records, next offset, where it stopped
    and why); ``None`` when they hold a batch of a format before v2. A corrupt batch raises
    ``replicator._native.CorruptBatch``."""
    return native().decode(raw, fetch_offset, aborted, read_committed, check_crcs, decompress)
