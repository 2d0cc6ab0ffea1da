"""What the scale benchmark's contenders are charged: CPU per million records read and per
million written (the replicator writes each record to two clusters, MirrorMaker 2 to one)."""

from __future__ import annotations

from benchmarks.contenders import per_million, written


def test_records_written_count_every_destination() -> None:
    assert written(120_000, 2) == 240_000  # the replicator: dc1 and dc2
    assert written(120_000, 1) == 120_000  # MirrorMaker 2: dc2


def test_cpu_per_million_written_is_half_per_million_read_for_two_destinations() -> None:
    cpu, read = 3.0, 120_000
    assert per_million(cpu, read) == 25.0
    assert per_million(cpu, written(read, 2)) == 12.5
    assert per_million(cpu, written(read, 1)) == 25.0


def test_no_records_no_figure() -> None:
    assert per_million(1.0, 0) is None
