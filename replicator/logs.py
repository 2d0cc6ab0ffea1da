"""Logging set-up: structlog for the replicator, with aiokafka's stdlib logs routed through it.

JSON lines when the output is not a terminal (containers, CI), a readable console format when it
is, unless ``REPLICATOR_LOG_FORMAT`` says otherwise. Everything goes to stderr: stdout is for data.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

Format = Literal["json", "console", "auto"]


def configure_logging(level: str = "INFO", fmt: Format = "auto") -> None:
    """Configure structlog and the stdlib root logger once, before the service starts."""
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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiokafka logs every retry of a down cluster at WARNING/ERROR; the replicator reports those
    # itself, once per state change, so keep aiokafka to its own warnings and worse.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
