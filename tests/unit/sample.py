"""A source record for unit tests: the six attributes the data path reads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int = 1_700_000_000_000
    timestamp_type: int = 0  # CreateTime
    key: bytes | None = b"k"
    value: bytes | None = b"v" * 10
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
