"""The scale benchmark's comparisons and options: the replicator against MirrorMaker 2 per
record written, and which contenders and modes a command line runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import brokers
from benchmarks.drain import ScaleResult
from benchmarks.scale import parse, ratios, versus


def drained(contender: str, partitions: int, rate: float, cpu: float) -> ScaleResult:
    """A verified drain of 120,000 records: ``cpu`` CPU seconds, ``rate`` records read/s."""
    destinations = ["dc1", "dc2"] if contender == "replicator" else ["dc2"]
    result = ScaleResult(f"{partitions // 6} x 6", partitions // 6, partitions, 1, 120_000)
    result.contender, result.destinations, result.verified = contender, destinations, "exact"
    result.records_per_second = rate
    result.cpu_seconds_per_million = round(cpu / 120_000 * 1e6, 2)
    result.cpu_seconds_per_million_written = round(cpu / (120_000 * len(destinations)) * 1e6, 2)
    return result


def test_the_replicator_is_compared_with_mm2_per_record_written() -> None:
    sizes = [
        drained("replicator", 24, 30_000, 3.0),  # 25 s/M read, 12.5 s/M written
        drained("mm2", 24, 20_000, 1.8),  # 15 s/M read and written
    ]
    assert versus(sizes) == {
        "rate 24 replicator/mm2": 1.5,
        "cpu per record written 24 replicator/mm2": round(12.5 / 15, 2),
    }


def test_a_failed_run_is_not_compared() -> None:
    failed = drained("mm2", 24, 20_000, 1.8)
    failed.failure = "timed out"
    assert versus([drained("replicator", 24, 30_000, 3.0), failed]) == {}


def test_ratios_against_the_smallest_layout_per_contender() -> None:
    sizes = [
        drained("replicator", 24, 30_000, 3.0),
        drained("mm2", 24, 20_000, 1.8),
        drained("replicator", 240, 15_000, 6.0),
        drained("mm2", 240, 10_000, 3.6),
    ]
    assert ratios(sizes) == {
        "rate 240/24": 0.5,
        "cpu per record 240/24": 2.0,
        "mm2 rate 240/24": 0.5,
        "mm2 cpu per record 240/24": 2.0,
    }


@pytest.mark.usefixtures("chosen_broker")
def test_both_contenders_and_both_modes_by_default() -> None:
    args = parse([])
    assert args.contenders == ["replicator", "mm2"]
    assert args.drain and args.steady
    assert args.rate is None  # one record per partition per second, capped


@pytest.mark.usefixtures("chosen_broker")
def test_either_contender_and_either_mode_alone() -> None:
    args = parse(["--contenders", "mm2", "--steady", "--rate", "200", "--steady-seconds", "20"])
    assert args.contenders == ["mm2"]
    assert not args.drain and args.steady
    assert (args.rate, args.steady_seconds) == (200, 20)
    args = parse(["--contenders", "replicator", "--no-steady", "--quick"])
    assert args.contenders == ["replicator"]
    assert args.drain and not args.steady
    assert (args.sizes, args.instances) == ("24,240", "")


@pytest.mark.usefixtures("chosen_broker")
@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--broker", "embedded"], "MirrorMaker 2 runs on Apache Kafka only"),
        (["--contenders", "mm1"], "--contenders: mm1"),
        (["--steady", "--no-steady"], "not allowed with"),
        (["--rate", "0"], "--rate"),
    ],
)
def test_a_bad_command_line_is_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.usefixtures("chosen_broker")
def test_the_embedded_broker_runs_the_replicator_alone() -> None:
    assert parse(["--broker", "embedded", "--contenders", "replicator"]).contenders == [
        "replicator"
    ]


@pytest.mark.usefixtures("chosen_broker")
def test_the_scale_benchmark_keeps_broker_logs_in_memory_unless_told_and_says_where() -> None:
    """Apache Kafka's index pages, allocated on a slow disk, would be measured instead of the
    contenders (see :mod:`benchmarks.brokers`): the scale benchmark asks for tmpfs, the other
    benchmarks keep the disk, and every figure names where the logs were."""
    from benchmarks import run

    assert parse([]).broker_storage == "memory"
    assert brokers.broker_name().endswith("logs in memory (tmpfs))")
    assert parse(["--broker-storage", "disk"]).broker_storage == "disk"
    assert brokers.broker_name().endswith("logs on disk)")
    assert run.parse([]).broker_storage == "disk"


@pytest.mark.usefixtures("chosen_broker")
def test_memory_storage_is_refused_where_there_is_no_tmpfs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(brokers, "MEMORY", tmp_path / "absent")
    with pytest.raises(SystemExit, match="no tmpfs at"):
        parse([])
    assert parse(["--broker-storage", "disk"]).broker_storage == "disk"
