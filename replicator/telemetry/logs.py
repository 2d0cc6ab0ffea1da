"""Logging set-up: structlog for the replicator, with aiokafka's stdlib logs routed through it;
and :func:`print_table`, how the commands print their tables on a console.

JSON lines when the output is not a terminal (containers, CI), a readable console format when it
is, unless ``REPLICATOR_LOG_FORMAT`` says otherwise. Everything goes to stderr: stdout is for data.

aiokafka logs every failed attempt while a cluster is down (about 20 lines a second, measured);
:class:`RepeatFilter` lets the first of each kind through at once and then one per 30 s, saying how
many it held back.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table

Format = Literal["json", "console", "auto"]

REPEAT_INTERVAL_S = 30.0


@dataclass
class _Seen:
    passed_at: float  # when a record of this kind was last let through
    suppressed: int = 0  # how many were held back since


class RepeatFilter(logging.Filter):
    """Rate-limits repeated records of the loggers under ``scope``; others pass untouched.

    Records are alike when they come from the same logger with the same template
    (``record.msg``, before its arguments are filled in: "Unable connect to node with id %s"
    is one kind whatever the node). The first of a kind passes at once; then at most one per
    ``interval`` seconds, which says how many were held back since the last one.

    A filter on a logger sees only that logger's own records, not its children's, so this one
    goes on the handler, and ``scope`` picks the hierarchy. Templates are constants in the
    logging code, so the kinds remembered stay few.
    """

    def __init__(
        self,
        scope: str = "aiokafka",
        interval: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._scope = scope
        self._interval = interval
        self._clock = clock
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()  # handlers may be called from threads (executors)

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if name != self._scope and not name.startswith(f"{self._scope}."):
            return True
        key = (name, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.passed_at < self._interval:
                seen.suppressed += 1
                return False
            self._seen[key] = _Seen(now)
        if seen is not None and seen.suppressed:
            elapsed = now - seen.passed_at
            record.msg = (
                f"{record.msg} ({seen.suppressed} similar messages suppressed "
                f"in the last {elapsed:.0f}s)"
            )
        return True


def configure_logging(level: str = "INFO", fmt: Format = "auto") -> None:
    """Configure structlog and the stdlib root logger once, before the service starts.
    ``level`` in any case (``debug`` is ``DEBUG``)."""
    level = level.upper()
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if use_console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(RepeatFilter("aiokafka"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiokafka logs every retry of a down cluster at WARNING/ERROR; the replicator reports those
    # itself, once per state change, so keep aiokafka to its own warnings and worse.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` whole: no header and no cell is ever cut short with an ellipsis.

    Each column is at least as wide as its header. A table that fits the console once its
    cells wrap at spaces is printed so; one that cannot (many columns on 80) is printed at the
    width it needs, its lines longer than the console's: a terminal folds them, a file or a
    pipe keeps them as they are.
    """
    for column in table.columns:
        if isinstance(column.header, str):
            column.min_width = max(column.min_width or 0, cell_len(column.header))
    unbounded = console.options.update_width(1_000_000)
    needed = Measurement.get(console, unbounded, table).minimum
    if needed <= console.width:
        console.print(table)
        return
    # Rendered at the width it needs; printed as rendered (console.print would squeeze it back).
    lines = console.render_lines(table, console.options.update_width(needed), new_lines=True)
    console.print(Segments(segment for line in lines for segment in line), crop=False, end="")
