"""aiokafka's repeated log lines are rate-limited per (logger, template), never hiding the first."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console
from rich.table import Table

from replicator.telemetry.logs import RepeatFilter, configure_logging, print_table


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


UNREACHABLE = "Unable connect to node with id %s: %s"


def test_the_first_passes_and_repeats_within_the_interval_are_held_back() -> None:
    clock = Clock()
    limit = RepeatFilter(interval=30.0, clock=clock)
    assert limit.filter(record("aiokafka.client", UNREACHABLE, 1, "refused"))
    for node in range(20):
        clock.now += 1
        assert not limit.filter(record("aiokafka.client", UNREACHABLE, node, "refused"))


def test_after_the_interval_one_passes_saying_how_many_were_held_back() -> None:
    clock = Clock()
    limit = RepeatFilter(interval=30.0, clock=clock)
    assert limit.filter(record("aiokafka.client", UNREACHABLE, 1, "refused"))
    for _ in range(7):
        clock.now += 2
        assert not limit.filter(record("aiokafka.client", UNREACHABLE, 2, "refused"))
    clock.now = 1030.0
    again = record("aiokafka.client", UNREACHABLE, 3, "timed out")
    assert limit.filter(again)
    assert again.getMessage() == (
        "Unable connect to node with id 3: timed out "
        "(7 similar messages suppressed in the last 30s)"
    )
    # The count starts again: the next one through after a quiet spell carries no note.
    clock.now += 30
    quiet = record("aiokafka.client", UNREACHABLE, 1, "refused")
    assert limit.filter(quiet)
    assert quiet.getMessage() == "Unable connect to node with id 1: refused"


def test_templates_and_loggers_are_limited_independently() -> None:
    clock = Clock()
    limit = RepeatFilter(clock=clock)
    assert limit.filter(record("aiokafka.client", UNREACHABLE, 1, "x"))
    assert limit.filter(record("aiokafka.client", "Unable to request metadata from node %s", 1))
    assert limit.filter(record("aiokafka.producer.sender", UNREACHABLE, 1, "x"))
    assert not limit.filter(record("aiokafka.client", UNREACHABLE, 2, "y"))
    assert not limit.filter(record("aiokafka.client", "Unable to request metadata from node %s", 2))


def test_records_outside_the_scope_are_never_limited() -> None:
    limit = RepeatFilter("aiokafka", clock=Clock())
    for name in ("replicator.replication.leg", "aiokafkaesque", "root"):
        assert all(limit.filter(record(name, "same line")) for _ in range(5))


@pytest.mark.usefixtures("restored_logging")
def test_configure_logging_limits_the_whole_aiokafka_hierarchy() -> None:
    configure_logging("INFO", "json")
    (handler,) = logging.getLogger().handlers
    assert any(isinstance(f, RepeatFilter) for f in handler.filters)
    assert isinstance(handler, logging.StreamHandler)
    out = io.StringIO()
    handler.setStream(out)
    # A child logger: a filter on the "aiokafka" logger itself would not see its records.
    child = logging.getLogger("aiokafka.conn")
    for node in range(50):
        child.error(UNREACHABLE, node, "refused")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "Unable connect to node with id 0: refused" in lines[0]


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize("level", ["debug", "DEBUG", "Debug"])
def test_configure_logging_takes_a_level_in_any_case(level: str) -> None:
    configure_logging(level, "json")
    assert logging.getLogger().level == logging.DEBUG


def printed(table: Table, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    print_table(console, table)
    return console.export_text().splitlines()


def test_print_table_never_cuts_a_header_or_a_cell() -> None:
    table = Table(title="many columns")
    names = [f"column-{n}" for n in range(10)]
    for name in names:
        table.add_column(name, justify="right")
    table.add_row(*(f"value-{n:04}" for n in range(10)))
    lines = printed(table, 80)
    text = "\n".join(lines)
    assert "…" not in text
    assert all(name in text for name in names)
    assert all(f"value-{n:04}" in text for n in range(10))
    assert max(map(len, lines)) > 80  # printed at the width it needs, not squeezed


def test_print_table_wraps_cells_at_spaces_to_fit_when_it_can() -> None:
    table = Table()
    table.add_column("cluster")
    table.add_column("detail")
    table.add_row("dc1", "has 3 partitions, the pair needs 6; " * 4)
    lines = printed(table, 80)
    assert max(map(len, lines)) <= 80
    assert "cluster" in lines[1] and "detail" in lines[1]
